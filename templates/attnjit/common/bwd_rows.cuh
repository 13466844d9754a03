// Row-wise kernels around the backward mainloop, one warp per row:
//   backward_preprocess   D = rowsum(dO * O) in fp32, LSE in log2 units (+inf where a row
//                         sees no key, so its P is 0), and the fp32 dQ accumulator zeroed;
//   backward_convert_dq   dQ = softmax_scale * accumulator, in the input dtype;
//   backward_reduce_dkdv  GQA: dK, dV of a KV head = sum over its query heads' partials, or
//                         the conversion of the sums the main kernel added up.
// Grids: (ceil(rows / kRowsPerBlock), heads, batch) with kRowsPerBlock warps per block.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

constexpr int kRowsPerBlock = 4;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <class Element, int kHeadDim, bool kZeroDqAccum>
__device__ __forceinline__ void backward_preprocess(const BwdParams& p) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const u16* o = static_cast<const u16*>(p.o) + batch * p.o_batch_stride + row * p.o_row_stride +
                 head * p.o_head_stride;
  const u16* d_o = static_cast<const u16*>(p.d_o) + batch * p.do_batch_stride +
                   row * p.do_row_stride + head * p.do_head_stride;
  float dot = 0.f;
#pragma unroll
  for (int d = 2 * lane; d < kHeadDim; d += 64) {
    dot += to_float<Element>(o[d]) * to_float<Element>(d_o[d]) +
           to_float<Element>(o[d + 1]) * to_float<Element>(d_o[d + 1]);
  }
  dot = warp_sum(dot);
  const long long bhr = (static_cast<long long>(batch) * p.heads + head) * p.seqlen_q + row;
  if (lane == 0) {
    p.row_dot[bhr] = dot;
    const float lse = p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + row];
    p.lse_log2[bhr] = lse == negative_infinity() ? -negative_infinity() : lse * 1.4426950408889634f;
  }
  if (kZeroDqAccum) {
    float* accum = p.dq_accum + bhr * kHeadDim;
#pragma unroll
    for (int d = lane; d < kHeadDim; d += 32) accum[d] = 0.f;
  }
}

template <class Element, int kHeadDim>
__device__ __forceinline__ void backward_convert_dq(const BwdParams& p) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const float* accum =
      p.dq_accum + ((static_cast<long long>(batch) * p.heads + head) * p.seqlen_q + row) * kHeadDim;
  u16* d_q = static_cast<u16*>(p.d_q) + batch * p.dq_batch_stride + row * p.dq_row_stride +
             head * p.dq_head_stride;
#pragma unroll
  for (int d = 2 * lane; d < kHeadDim; d += 64) {
    *reinterpret_cast<u32*>(d_q + d) =
        pack2<Element>(accum[d] * p.softmax_scale, accum[d + 1] * p.softmax_scale);
  }
}

/// kSummed: the main kernel added every query head's dK and dV into fp32 sums per K/V head
/// (dk_partial/dv_partial [B, Hkv, Sk, D]): they are only converted.
template <class Element, int kHeadDim, bool kSummed = false>
__device__ __forceinline__ void backward_reduce_dkdv(const BwdParams& p) {
  const int key = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int kv_head = blockIdx.y;
  const int batch = blockIdx.z;
  if (key >= p.seqlen_k) return;
  const int group = kSummed ? 1 : p.heads / p.kv_heads;
  const int heads = kSummed ? p.kv_heads : p.heads;
  u16* d_k = static_cast<u16*>(p.d_k) + batch * p.dk_batch_stride + key * p.dk_row_stride +
             kv_head * p.dk_head_stride;
  u16* d_v = static_cast<u16*>(p.d_v) + batch * p.dv_batch_stride + key * p.dv_row_stride +
             kv_head * p.dv_head_stride;
#pragma unroll
  for (int d = 2 * lane; d < kHeadDim; d += 64) {
    float dk0 = 0.f, dk1 = 0.f, dv0 = 0.f, dv1 = 0.f;
    for (int g = 0; g < group; ++g) {
      const long long row =
          (static_cast<long long>(batch) * heads + kv_head * group + g) * p.seqlen_k + key;
      dk0 += p.dk_partial[row * kHeadDim + d];
      dk1 += p.dk_partial[row * kHeadDim + d + 1];
      dv0 += p.dv_partial[row * kHeadDim + d];
      dv1 += p.dv_partial[row * kHeadDim + d + 1];
    }
    *reinterpret_cast<u32*>(d_k + d) = pack2<Element>(dk0, dk1);
    *reinterpret_cast<u32*>(d_v + d) = pack2<Element>(dv0, dv1);
  }
}

}  // namespace attnjit
