// The backward's preprocess, one warp per query row (row_kernels.cuh): D = rowsum(dO * O) in
// fp32 over head_dim_v, LSE in log2 units (+inf where a row sees no key, so its P is 0), and the
// fp32 dQ accumulator zeroed.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/row_kernels.cuh"

namespace attnjit {

/// The body of a generated preprocess kernel; kZeroDqAccum: the dQ accumulator (kHeadDimQK
/// columns) is zeroed.
template <class Element, int kHeadDimQK, int kHeadDimV, bool kZeroDqAccum>
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
  for (int d = 2 * lane; d < kHeadDimV; d += 64) {
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
    float* accum = p.dq_accum + bhr * kHeadDimQK;
#pragma unroll
    for (int d = lane; d < kHeadDimQK; d += 32) accum[d] = 0.f;
  }
}

}  // namespace attnjit
