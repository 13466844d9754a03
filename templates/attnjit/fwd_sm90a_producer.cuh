// The producer of the sm90a forward (fwd_sm90a.cuh): one warp walks the key blocks the CTA's
// query block visits (the mask's key-block range, last block first, skipped blocks never
// loaded) and feeds the two rings of the consumers with TMA copies:
//   Q                   once, onto its own barrier;
//   K ring, stage s     K of block n, the block's index and classification (KeyBlockInfo)
//                       and, with FlashMask vectors, their values for the block's keys
//                       (cp.async by the warp's lanes, arriving through .noinc);
//   V ring              V of the block before, so the consumers find K of block j + 1 ahead
//                       of V of block j, the order in which they use them.
// After the last block a K stage with block -1 tells the consumers to stop.
#pragma once

#include "attnjit/mask.cuh"
#include "attnjit/params.cuh"
#include "attnjit/pipeline.cuh"
#include "attnjit/schedule.cuh"
#include "attnjit/tma.cuh"

namespace attnjit {

/// What the consumers learn about the block of a K stage: its index (-1: no more blocks) and
/// Mask::classify's value for the CTA's rows.
struct KeyBlockInfo {
  int block;
  int tile;
};

/// Stores a KeyBlockInfo at shared address `address`.
__device__ __forceinline__ void store_key_block_info(u32 address, const KeyBlockInfo& info) {
  asm volatile("st.shared.v2.s32 [%0], {%1, %2};" ::"r"(address), "r"(info.block), "r"(info.tile)
               : "memory");
}

/// Loads the KeyBlockInfo at shared address `address`.
__device__ __forceinline__ KeyBlockInfo load_key_block_info(u32 address) {
  KeyBlockInfo info;
  asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];"
               : "=r"(info.block), "=r"(info.tile)
               : "r"(address)
               : "memory");
  return info;
}

/// The producer warp of Kernel (fwd_sm90a.cuh), which gives the mask policy, the tiles and
/// the shared-memory layout: byte offsets from the 1024-byte aligned base of the Q tile
/// (0), the K and V stages, the FlashMask values and KeyBlockInfo of the K stages, and the
/// barriers (Q's, the K ring's, the V ring's).
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
    const CtaWork work = cta_work<false>(cta_order_of<Mask::kOrderedCtas>(p));
    MaskState ms = make_mask_state<kBlockN, Mask>(p, work.head, work.batch);
    ms.row_begin = work.block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
    const int kv_head = work.head / (p.heads / p.kv_heads);

    if (lane == 0) {
      tma_prefetch_map(maps.q);
      tma_prefetch_map(maps.k);
      tma_prefetch_map(maps.v);
      const u32 q_full = base + Kernel::kBarrierOffset;
      mbarrier_arrive_expect_tx(q_full, QTile::kBytes);
#pragma unroll
      for (int panel = 0; panel < kHeadDim / QTile::kPanelCols; ++panel) {
        tma_load(base + panel * QTile::kPanelBytes, maps.q, q_full, panel * QTile::kPanelCols,
                 ms.row_begin, work.head, work.batch);
      }
    }

    const Pipeline<kStages> k_ring{base + Kernel::kKRingOffset};
    const Pipeline<kStages> v_ring{base + Kernel::kVRingOffset};
    PipelineState<kStages> k_state, v_state;
    int n_begin, n_end;
    Mask::template key_block_range<kBlockN>(ms, n_begin, n_end);
    int block = Mask::template last_active_key_block<kBlockN>(ms, p.minmax, n_end - 1, n_begin);
    int previous = n_begin - 1;
    for (;;) {
      const bool more = block >= n_begin;
      k_ring.producer_acquire(k_state);
      if (lane == 0) {
        KeyBlockInfo info;
        info.block = more ? block : -1;
        info.tile = more ? Mask::template classify<kBlockN>(ms, p.minmax, block) : 0;
        store_key_block_info(base + Kernel::kInfoOffset + 8 * k_state.index, info);
        if (more) {
          k_ring.producer_commit(k_state, Tile::kBytes);
          load_panels(maps.k, base + Kernel::kKOffset + k_state.index * Tile::kBytes,
                      k_ring.full(k_state.index), block * kBlockN, kv_head, work.batch);
        } else {
          mbarrier_arrive(k_ring.full(k_state.index));
        }
      }
      if constexpr (kColumns > 0) {
        if (more) {
          load_vectors(p, ms, block,
                       base + Kernel::kVectorOffset + k_state.index * kVectorStageBytes);
        }
        k_ring.producer_commit_cp_async(k_state);
      }
      k_state.advance();
      if (previous >= n_begin) {
        v_ring.producer_acquire(v_state);
        if (lane == 0) {
          v_ring.producer_commit(v_state, Tile::kBytes);
          load_panels(maps.v, base + Kernel::kVOffset + v_state.index * Tile::kBytes,
                      v_ring.full(v_state.index), previous * kBlockN, kv_head, work.batch);
        }
        v_state.advance();
      }
      if (!more) break;
      previous = block;
      block = Mask::template last_active_key_block<kBlockN>(ms, p.minmax, block - 1, n_begin);
    }
  }

  /// The panels of one K or V block (keys past Sk read as zeros).
  __device__ __forceinline__ static void load_panels(const TensorMap& map, u32 dst, u32 bar,
                                                     int key0, int kv_head, int batch) {
#pragma unroll
    for (int panel = 0; panel < kHeadDim / Tile::kPanelCols; ++panel) {
      tma_load(dst + panel * Tile::kPanelBytes, map, bar, panel * Tile::kPanelCols, key0, kv_head,
               batch);
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
