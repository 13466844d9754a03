// Loading one key block of the CTA's (batch, kv head) into shared memory: K, then V, then the
// block's FlashMask values; shared by the forward and the backward kernels.
#pragma once

#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/masks/mask.cuh"

namespace attnjit {

/// Issues the cp.async copies of key block n (keys past Sk zero-filled): K (kHeadDimQK columns)
/// to smem_stage, V (kHeadDimV columns) right after it, kColumns vector values per key to
/// smem_vectors. `Params` is FwdParams or
/// BwdParams. The K/V bases are re-formed from the CTA's work (schedule.cuh) on every call (opaque,
/// so not hoisted): two 64-bit bases held across a key loop would take registers that the
/// accumulators need.
template <int kBlockN, int kHeadDimQK, int kHeadDimV, int kThreads, int kColumns, bool kOrderedCtas,
          class Params>
__device__ __forceinline__ void load_key_value_block(const Params& p, const MaskState& ms, int n,
                                                     u32 smem_stage, u32 smem_vectors, int thread) {
  typedef SmemTile<kBlockN, kHeadDimQK> KTile;
  const CtaWork work =
      cta_work<true>(cta_order_of<kOrderedCtas>(p));  // head and batch do not depend on the flag
  const int batch = static_cast<int>(opaque(static_cast<u32>(work.batch)));
  const int kv_head =
      static_cast<int>(opaque(static_cast<u32>(work.head))) / (p.heads / p.kv_heads);
  const u16* k_base =
      static_cast<const u16*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const u16* v_base =
      static_cast<const u16*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;
  const int key0 = n * kBlockN;
  const int valid = min(kBlockN, ms.seqlen_k - key0);
  load_tile_async<kBlockN, kHeadDimQK, kThreads>(smem_stage, k_base + key0 * p.k_row_stride,
                                                 p.k_row_stride, valid, thread);
  load_tile_async<kBlockN, kHeadDimV, kThreads>(
      smem_stage + KTile::kBytes, v_base + key0 * p.v_row_stride, p.v_row_stride, valid, thread);
  if (kColumns > 0) {
    const int* src = interval_values<kColumns>(p.intervals, ms, key0);
    for (int i = thread; i < kBlockN * kColumns; i += kThreads) {
      const bool in_range = i < valid * kColumns;
      cp_async_4(smem_vectors + i * 4, in_range ? src + i : p.intervals, in_range ? 4 : 0);
    }
  }
}

}  // namespace attnjit
