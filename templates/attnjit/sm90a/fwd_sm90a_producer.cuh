// The producer of the sm90a forward (fwd_sm90a.cuh): one warp walks the key blocks the
// CTA's query block visits (WarpKeyBlockWalk: last block first, skipped blocks never loaded)
// and feeds the two rings of the consumers with TMA copies:
//   Q                   once, onto its own barrier;
//   K ring, stage s     K of a block and, with FlashMask vectors, their values for the
//                       block's keys (cp.async by the warp's lanes, arriving through .noinc);
//   V ring              V of the block before, so the consumers find K of block j + 1 ahead
//                       of V of block j, the order in which they use them.
// The consumers walk the same blocks themselves.
#pragma once

#include "attnjit/common/key_block_walk.cuh"
#include "attnjit/masks/mask.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/sm90a/pipeline.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/sm90a/tma.cuh"

namespace attnjit {

/// The producer warp of Kernel (fwd_sm90a.cuh), which gives the mask policy, the tiles and
/// the shared-memory layout: byte offsets from the 1024-byte aligned base of the Q tile
/// (0), the K and V stages, the FlashMask values of the K stages, and the barriers (Q's, the
/// K ring's, the V ring's).
template <class Kernel>
struct ForwardProducer {
  typedef typename Kernel::MaskType Mask;
  typedef typename Kernel::QTile QTile;
  typedef typename Kernel::KvTile Tile;
  static constexpr int kBlockM = Kernel::kBlockM;
  static constexpr int kBlockN = Kernel::kBlockN;
  static constexpr int kHeadDim = Kernel::kHeadDim;
  static constexpr int kStages = Kernel::kStages;
  static constexpr int kColumns = Mask::kColumns;
  static constexpr int kVectorStageBytes = Kernel::kVectorStageBytes;

  /// Runs the whole walk; every lane of the warp calls it. The shared addresses are formed
  /// from `base` where used: the producer has few registers.
  __device__ __forceinline__ static void run(const FwdParams& p, const FwdTensorMaps& maps,
                                             u32 base) {
    const int lane = threadIdx.x % 32;
    if (lane == 0) {
      const CtaWork work = cta_work<false>(cta_order_of<Mask::kOrderedCtas>(p));
      tma_prefetch_map(maps.q);
      tma_prefetch_map(maps.k);
      tma_prefetch_map(maps.v);
      const u32 q_full = base + Kernel::kBarrierOffset;
      mbarrier_arrive_expect_tx(q_full, QTile::kBytes);
#pragma unroll
      for (int panel = 0; panel < kHeadDim / QTile::kPanelCols; ++panel) {
        tma_load(base + panel * QTile::kPanelBytes, maps.q, q_full, panel * QTile::kPanelCols,
                 work.block * kBlockM, work.head, work.batch);
      }
    }

    // The mask state and the CTA's work are formed again where used (Kernel::
    // block_mask_state), not held: the loop then fits the producer's few registers.
    const Pipeline<kStages> k_ring{base + Kernel::kKRingOffset};
    const Pipeline<kStages> v_ring{base + Kernel::kVRingOffset};
    PipelineState<kStages> k_state, v_state;
    WarpKeyBlockWalk<Mask, kBlockN> walk;
    walk.begin(Kernel::block_mask_state(p), p.minmax);
    int previous = -1;
    for (;;) {
      const bool more = walk.more();
      if (more) {
        k_ring.producer_acquire(k_state);
        if (lane == 0) {
          k_ring.producer_commit(k_state, Tile::kBytes);
          load_panels(p, maps.k, base + Kernel::kKOffset + k_state.index * Tile::kBytes,
                      k_ring.full(k_state.index), walk.block);
        }
        if constexpr (kColumns > 0) {
          load_vectors(p, Kernel::block_mask_state(p), walk.block,
                       base + Kernel::kVectorOffset + k_state.index * kVectorStageBytes);
          k_ring.producer_commit_cp_async(k_state);
        }
        k_state.advance();
      }
      if (previous >= 0) {
        v_ring.producer_acquire(v_state);
        if (lane == 0) {
          v_ring.producer_commit(v_state, Tile::kBytes);
          load_panels(p, maps.v, base + Kernel::kVOffset + v_state.index * Tile::kBytes,
                      v_ring.full(v_state.index), previous);
        }
        v_state.advance();
      }
      if (!more) break;
      previous = walk.block;
      walk.next(Kernel::block_mask_state(p), p.minmax);
    }
  }

  /// The panels of K or V block `block` of the CTA's (kv head, batch), keys past Sk read as
  /// zeros.
  __device__ __forceinline__ static void load_panels(const FwdParams& p, const TensorMap& map,
                                                     u32 dst, u32 bar, int block) {
    const CtaWork work = cta_work<false>(cta_order_of<Mask::kOrderedCtas>(p));
    const int kv_head = cta_kv_head();
#pragma unroll
    for (int panel = 0; panel < kHeadDim / Tile::kPanelCols; ++panel) {
      tma_load(dst + panel * Tile::kPanelBytes, map, bar, panel * Tile::kPanelCols, block * kBlockN,
               kv_head, static_cast<int>(opaque(u32(work.batch))));
    }
  }

  /// cp.async of the block's FlashMask values by the warp's lanes (zeros past Sk).
  __device__ __forceinline__ static void load_vectors(const FwdParams& p, const MaskState& ms,
                                                      int block, u32 dst) {
    const int key0 = block * kBlockN;
    const int valid = min(kBlockN, ms.seqlen_k - key0) * kColumns;
    const int* src = interval_values<kColumns>(p.intervals, ms, key0);
    for (int i = threadIdx.x % 32; i < kBlockN * kColumns; i += 32) {
      cp_async_4(dst + 4 * i, i < valid ? src + i : p.intervals, i < valid ? 4 : 0);
    }
  }
};

}  // namespace attnjit
