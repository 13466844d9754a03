// The epilogue of a consumer warpgroup of the sm90a backward (sm90a/backward.cuh): its dK
// (scaled by softmax_scale, head_dim_qk wide) and dV (head_dim_v wide), stored through shared
// memory by TMA, or under GQA added to the fp32 sums of the K/V head by TMA reductions.
#pragma once

#include "attnjit/sm90a/backward_reductions.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The epilogue of Kernel's consumers (its shared-memory layout, barriers and split).
template <class Kernel>
struct BackwardEpilogue {
  typedef typename Kernel::KTile KTile;
  typedef typename Kernel::VTile VTile;
  typedef WarpgroupAccumulator<Kernel::kColsQK> DkAccumulator;
  typedef WarpgroupAccumulator<Kernel::kColsV> DvAccumulator;

  /// dK (scaled by softmax_scale) and dV of the consumer, written into its rows (its keys) or
  /// panels (its columns) of the K and V tiles and stored by TMA, which drops the keys past Sk
  /// (issue_copies): stored from registers, the fragments' 4-byte stores stall the warps on
  /// the store queue.
  __device__ __forceinline__ static void store(const BwdParams& p, const BwdTensorMaps& maps,
                                               u32 base, const CtaWork& work,
                                               const DkAccumulator& acc_dk,
                                               const DvAccumulator& acc_dv) {
    const int consumer = Kernel::consumer_index();
    const int lane = read_tid_x() % 32;
    const int row = Kernel::consumer_key0(consumer) + 16 * ((read_tid_x() / 32) % 4) + lane / 4;
    // Split keys: no product reads K or V once both consumers have met (dQ = dS K reads every
    // key of K). Split head dim: the other consumer reads only its own panels of K from its
    // last block's barrier on.
    if constexpr (!Kernel::kSplitHeadDim) {
      named_barrier_sync(Kernel::kDsBarrier, 128 * Kernel::kConsumers);
    }
    stage_tile<KTile, Kernel::kColsQK>(base + Kernel::kKOffset, acc_dk, row,
                                       Kernel::consumer_col0_qk(consumer) + 2 * (lane % 4),
                                       p.softmax_scale);
    stage_tile<VTile, Kernel::kColsV>(base + Kernel::kVOffset, acc_dv, row,
                                      Kernel::consumer_col0_v(consumer) + 2 * (lane % 4), 1.f);
    issue_copies(work, consumer, [&](int key0, int kv_head) {
      const int key_bytes = Kernel::consumer_key0(consumer) * 2;
      store_panels<KTile, Kernel::kColPanelsQK>(maps.d_k, base + Kernel::kKOffset, key_bytes,
                                                Kernel::consumer_panel0_qk(consumer), key0,
                                                kv_head, work.batch);
      store_panels<VTile, Kernel::kColPanelsV>(maps.d_v, base + Kernel::kVOffset, key_bytes,
                                               Kernel::consumer_panel0_v(consumer), key0,
                                               kv_head, work.batch);
    });
  }

  /// A consumer's gradient `acc` times `scale` into Tile at `tile`: rows `row` and row + 8,
  /// its kCols columns from `col`, as element pairs.
  template <class Tile, int kCols, class Accumulator>
  __device__ __forceinline__ static void stage_tile(u32 tile, const Accumulator& acc, int row,
                                                    int col, float scale) {
#pragma unroll
    for (int dt = 0; dt < kCols / 8; ++dt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        store_shared_u32(tile + Tile::element_offset(row + 8 * r, 8 * dt + col),
                         pack2<typename Kernel::Element>(acc.v[0][dt][2 * r] * scale,
                                                         acc.v[0][dt][2 * r + 1] * scale));
      }
    }
  }

  /// The TMA stores of a consumer's kPanels panels of Tile at `tile` from panel `panel0`, its
  /// keys `key_bytes` into each panel, to keys from key0 of the gradient's map.
  template <class Tile, int kPanels>
  __device__ __forceinline__ static void store_panels(const TensorMap& map, u32 tile,
                                                      int key_bytes, int panel0, int key0,
                                                      int kv_head, int batch) {
#pragma unroll
    for (int panel = panel0; panel < panel0 + kPanels; ++panel) {
      tma_store(map, tile + panel * Tile::kPanelBytes + key_bytes * Tile::kPanelCols,
                panel * Tile::kPanelCols, key0, kv_head, batch);
    }
  }

  /// GQA, atomic mode: dK (scaled by softmax_scale) and dV of the consumer added into the fp32
  /// sums of the K/V head (dk_partial / dv_partial, zeroed; backward_reduce_dkdv converts them)
  /// by TMA reductions from fp32 boxes of 32 columns (sum_box), once both consumers have met (no
  /// product reads K, V or the stages then).
  static constexpr int kDkBoxes = Kernel::kColsQK / 32;
  static constexpr int kDvBoxes = Kernel::kColsV / 32;
  static constexpr bool kEqualDims = Kernel::kHeadDimQK == Kernel::kHeadDimV;
  /// A stage's Q and dO bytes in fp32 boxes (split keys, unequal head dims).
  static constexpr int kStageBoxes =
      (Kernel::QTile::kBytes + Kernel::DoTile::kBytes) / kSumBoxBytes;
  static_assert(kDkBoxes * kSumBoxBytes == KTile::kBytes &&
                    kDvBoxes * kSumBoxBytes == VTile::kBytes,
                "a consumer's fp32 dK fills a K tile, its dV a V tile");
  static_assert(Kernel::kSplitHeadDim ? kDkBoxes * kSumBoxBytes == Kernel::QTile::kBytes &&
                                            kDvBoxes * kSumBoxBytes == Kernel::DoTile::kBytes
                : kEqualDims
                    ? kDvBoxes * kSumBoxBytes <= Kernel::kStageBytes &&
                          Kernel::kConsumers <= Kernel::kStages
                    : (Kernel::QTile::kBytes + Kernel::DoTile::kBytes) % kSumBoxBytes == 0 &&
                          kDkBoxes + kDvBoxes <= Kernel::kStages * kStageBoxes,
                "the fp32 dK and dV boxes fit the tiles and stages");

  /// Box `box` of the consumer's fp32 dK (boxes [0, kDkBoxes)) then dV. Split head dim:
  /// consumer 0's in the K and V tiles, consumer 1's in the end's stage `end_stage`, dK over its
  /// Q tile and dV over its dO tile (the K and V tiles' bytes with 64 queries and 64 keys).
  /// Split keys, equal head dims: dK in the K tile (consumer 0) or the V tile (consumer 1), dV
  /// in ring stage `consumer` (the consumers have passed the last stage; the tile ends before
  /// the stage's block index). Split keys, unequal head dims: consumer 0's in the K and V tiles,
  /// consumer 1's over the Q and dO tiles of the ring's stages (both stages' bytes together are
  /// its dK and dV). `box` is a compile-time index where unrolled.
  __device__ __forceinline__ static u32 sum_box(u32 base, u32 end_stage, int consumer, int box) {
    const bool dk = box < kDkBoxes;
    const int within = (dk ? box : box - kDkBoxes) * kSumBoxBytes;
    if constexpr (!Kernel::kSplitHeadDim && kEqualDims) {
      return dk ? base + Kernel::kKOffset + consumer * KTile::kBytes + within
                : Kernel::stage_address(base, consumer) + within;
    }
    const u32 own = base + (dk ? Kernel::kKOffset : Kernel::kVOffset) + within;
    if constexpr (Kernel::kSplitHeadDim) {
      return consumer == 0 ? own : end_stage + (dk ? 0 : Kernel::kDoStageOffset) + within;
    }
    return consumer == 0 ? own
                         : Kernel::stage_address(base, box / kStageBoxes) +
                               (box % kStageBoxes) * kSumBoxBytes;
  }

  __device__ __forceinline__ static void add(const BwdParams& p, const BwdTensorMaps& maps,
                                             u32 base, u32 end_stage, const CtaWork& work,
                                             DkAccumulator& acc_dk, DvAccumulator& acc_dv) {
    const int consumer = Kernel::consumer_index();
    named_barrier_sync(Kernel::kDsBarrier, 128 * Kernel::kConsumers);
    store_fp32_boxes<Kernel::kColsQK>(
        [=](int box) { return sum_box(base, end_stage, consumer, box); }, 0, acc_dk.tiles(),
        p.softmax_scale);
    store_fp32_boxes<Kernel::kColsV>(
        [=](int box) { return sum_box(base, end_stage, consumer, kDkBoxes + box); }, 0,
        acc_dv.tiles(), 1.f);
    issue_copies(work, consumer, [&](int key0, int kv_head) {
#pragma unroll
      for (int box = 0; box < kDkBoxes; ++box) {
        tma_reduce_add(maps.dk_sum, sum_box(base, end_stage, consumer, box),
                       Kernel::consumer_col0_qk(consumer) + 32 * box, key0, kv_head, work.batch);
      }
#pragma unroll
      for (int box = 0; box < kDvBoxes; ++box) {
        tma_reduce_add(maps.dv_sum, sum_box(base, end_stage, consumer, kDkBoxes + box),
                       Kernel::consumer_col0_v(consumer) + 32 * box, key0, kv_head, work.batch);
      }
    });
  }

  /// After a consumer has staged its dK and dV in shared memory: the async-proxy fence and the
  /// consumer's barrier (all of its stores are in), then its one thread issues copies(first
  /// key, K/V head) and waits for them (the writer warps wait for their dQ reductions),
  /// shared memory staying until the copies have read it.
  template <class Copies>
  __device__ __forceinline__ static void issue_copies(const CtaWork& work, int consumer,
                                                      Copies copies) {
    fence_async_shared();
    named_barrier_sync(Kernel::kOwnBarrier + consumer, 128);
    if (warpgroup_thread() != 0) return;
    copies(work.block * Kernel::kBlockN + Kernel::consumer_key0(consumer), cta_kv_head());
    tma_store_commit();
    tma_store_wait<0>();
  }
};

}  // namespace attnjit
