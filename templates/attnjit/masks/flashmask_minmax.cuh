// FlashMask preprocessing: min and max of every interval vector over each key block of
// kBlockN columns (the forward kernel's own key-block size). One warp per (batch, mask
// head, key block); O(N) work. The forward kernel classifies whole tiles from these.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

template <int kColumns, int kBlockN>
__device__ __forceinline__ void flashmask_minmax(const MinMaxParams& p) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int total = p.batch * p.mask_heads * p.num_key_blocks;
  if (warp >= total) return;
  const int bh = warp / p.num_key_blocks;
  const int block = warp % p.num_key_blocks;
  const int key0 = block * kBlockN;
  const int keys = min(kBlockN, p.seqlen_k - key0);
  const int* src = p.intervals + (static_cast<long long>(bh) * p.seqlen_k + key0) * kColumns;

  int lo[kColumns], hi[kColumns];
#pragma unroll
  for (int c = 0; c < kColumns; ++c) {
    lo[c] = 0x7fffffff;
    hi[c] = -0x7fffffff - 1;
  }
  for (int key = lane; key < keys; key += 32) {
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      const int value = src[key * kColumns + c];
      lo[c] = min(lo[c], value);
      hi[c] = max(hi[c], value);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      lo[c] = min(lo[c], __shfl_xor_sync(0xffffffffu, lo[c], offset));
      hi[c] = max(hi[c], __shfl_xor_sync(0xffffffffu, hi[c], offset));
    }
  }
  if (lane == 0) {
    int* dst = p.minmax + static_cast<long long>(warp) * 2 * kColumns;
#pragma unroll
    for (int c = 0; c < kColumns; ++c) {
      dst[2 * c] = lo[c];
      dst[2 * c + 1] = hi[c];
    }
  }
}

}  // namespace attnjit
