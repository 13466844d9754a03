// The device check of user-supplied FlashMask vectors (attnjit::validate_intervals). One
// thread per key column of every (batch, mask head). Vector c of a column is bad when it lies
// outside [0, seqlen_q], or when it is an end (LTE, UTE) below its start (LTS, UTS); the first
// bad element overall, the lowest linear index (column * C + c) of
// startend_row_indices, is kept by a warp minimum and one atomicMin per warp that found one.
#pragma once

#include "attnjit/masks/mask_params.cuh"

namespace attnjit {

__device__ __forceinline__ void check_intervals(const IntervalCheckParams& p) {
  const long long column = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const unsigned long long none = ~0ull;
  unsigned long long bad = none;
  if (column < p.key_columns) {
    const int* v = p.intervals + column * p.columns;
    const bool has_lte = p.columns == 4 || (p.causal != 0 && p.columns == 2);
    for (int c = p.columns - 1; c >= 0; --c) {
      const bool outside = v[c] < 0 || v[c] > p.seqlen_q;
      const bool below_start = (c == 1 && has_lte && v[1] < v[0]) || (c == 3 && v[3] < v[2]);
      if (outside || below_start) bad = static_cast<unsigned long long>(column) * p.columns + c;
    }
  }
  if (!__any_sync(0xffffffffu, bad != none)) return;
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, bad, offset);
    bad = other < bad ? other : bad;
  }
  if (threadIdx.x % 32 == 0) atomicMin(p.first_bad, bad);
}

}  // namespace attnjit
