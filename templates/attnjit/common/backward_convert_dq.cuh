// The backward's dQ conversion, one warp per query row (row_kernels.cuh): dQ = softmax_scale *
// the fp32 accumulator, in the input dtype.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/row_kernels.cuh"

namespace attnjit {

/// The body of a generated dQ conversion kernel.
template <class Element, int kHeadDim>
__device__ __forceinline__ void backward_convert_dq(const BwdParams& p) {
  const auto [row, lane, head, batch] = warp_row();
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

}  // namespace attnjit
