// The backward's sink gradient (sinks=true), one block per query head after the preprocess
// (backward_preprocess.cuh): d t[h] = -sum over the rows i of head h, in every batch, of
// exp(t[h] - L_i) D_i, read from the preprocess's D (row_dot) and LSE (lse_log2, in log2 units:
// +inf where the LSE is -inf, whose term is then 0). Each thread sums a fixed stride of the rows
// and the block adds the threads' sums in a fixed tree, so the gradient has the same bits from
// run to run in both modes; d_sinks[h] is written, never accumulated into.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// The body of a generated sink gradient kernel of kThreads threads (a power of two).
template <int kThreads>
__device__ __forceinline__ void backward_sinks(const BwdParams& p) {
  static_assert(kThreads >= 32 && (kThreads & (kThreads - 1)) == 0, "a power of two threads");
  __shared__ float partial[kThreads];
  const int head = blockIdx.x;
  const float sink_log2 = p.sinks[head] * 1.4426950408889634f;
  float sum = 0.f;
  for (int batch = 0; batch < p.batch; ++batch) {
    const long long first = (static_cast<long long>(batch) * p.heads + head) * p.seqlen_q;
    for (int row = threadIdx.x; row < p.seqlen_q; row += kThreads) {
      sum = fmaf(exp2f(sink_log2 - p.lse_log2[first + row]), p.row_dot[first + row], sum);
    }
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
#pragma unroll
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.d_sinks[head] = -partial[0];
}

}  // namespace attnjit
