// The epilogue of a consumer warpgroup of the sm90a backward (sm90a/backward.cuh): its dK
// (scaled by softmax_scale) and dV, stored through shared memory by TMA, or under GQA added to
// the fp32 sums of the K/V head by TMA reductions.
#pragma once

#include "attnjit/sm90a/backward_reductions.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The epilogue of Kernel's consumers (its shared-memory layout, barriers and split).
template <class Kernel>
struct BackwardEpilogue {
  typedef WarpgroupAccumulator<Kernel::kCols> Accumulator;

  /// dK (scaled by softmax_scale) and dV of the consumer, written into its rows (its keys) or
  /// panels (its columns) of the K and V tiles and stored by TMA, which drops the keys past Sk
  /// (issue_copies): stored from registers, the fragments' 4-byte stores stall the warps on
  /// the store queue.
  __device__ __forceinline__ static void store(const BwdParams& p, const BwdTensorMaps& maps,
                                               u32 base, const CtaWork& work,
                                               const Accumulator& acc_dk,
                                               const Accumulator& acc_dv) {
    const int consumer = Kernel::consumer_index();
    const int lane = read_tid_x() % 32;
    const int row = Kernel::consumer_key0(consumer) + 16 * ((read_tid_x() / 32) % 4) + lane / 4;
    const int col = Kernel::consumer_col0(consumer) + 2 * (lane % 4);
    // Split keys: no product reads K or V once both consumers have met (dQ = dS K reads every
    // key of K). Split head dim: the other consumer reads only its own panels of K from its
    // last block's barrier on.
    if constexpr (!Kernel::kSplitHeadDim) {
      named_barrier_sync(Kernel::kDsBarrier, 128 * Kernel::kConsumers);
    }
#pragma unroll
    for (int dt = 0; dt < Kernel::kCols / 8; ++dt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int offset = Kernel::KvTile::element_offset(row + 8 * r, 8 * dt + col);
        store_shared_u32(
            base + Kernel::kKOffset + offset,
            pack2<typename Kernel::Element>(acc_dk.v[0][dt][2 * r] * p.softmax_scale,
                                            acc_dk.v[0][dt][2 * r + 1] * p.softmax_scale));
        store_shared_u32(
            base + Kernel::kVOffset + offset,
            pack2<typename Kernel::Element>(acc_dv.v[0][dt][2 * r], acc_dv.v[0][dt][2 * r + 1]));
      }
    }
    issue_copies(work, consumer, [&](int key0, int kv_head) {
      const int panel0 = Kernel::consumer_panel0(consumer);
#pragma unroll
      for (int panel = panel0; panel < panel0 + Kernel::kColPanels; ++panel) {
        const u32 rows = panel * Kernel::KvTile::kPanelBytes +
                         Kernel::consumer_key0(consumer) * Kernel::KvTile::kPanelCols * 2;
        tma_store(maps.d_k, base + Kernel::kKOffset + rows, panel * Kernel::KvTile::kPanelCols,
                  key0, kv_head, work.batch);
        tma_store(maps.d_v, base + Kernel::kVOffset + rows, panel * Kernel::KvTile::kPanelCols,
                  key0, kv_head, work.batch);
      }
    });
  }

  /// GQA, atomic mode: dK (scaled by softmax_scale) and dV of the consumer added into the fp32
  /// sums of the K/V head (dk_partial / dv_partial, zeroed; backward_reduce_dkdv converts them)
  /// by TMA reductions from fp32 boxes of 32 columns: dK's in the K tile (consumer 0) or the V
  /// tile (consumer 1), free once both consumers have met; dV's in ring stage `consumer` (dQ
  /// buffers: the consumers have passed the last stage; the tile ends before the stage's block
  /// index), or in the end's stage `end_stage`, both consumers' (dQ in the stage: the others
  /// may still hold dQ boxes).
  static constexpr int kSumTileBytes = Kernel::kCols / 32 * kSumBoxBytes;
  static_assert(kSumTileBytes == Kernel::KvTile::kBytes,
                "a consumer's fp32 dK fills a K or V tile");
  static_assert(Kernel::kDqInStage
                    ? Kernel::kConsumers * kSumTileBytes <= 2 * Kernel::QTile::kBytes
                    : kSumTileBytes <= Kernel::kStageBytes && Kernel::kConsumers <= Kernel::kStages,
                "the fp32 dV tiles fit the stages");

  __device__ __forceinline__ static void add(const BwdParams& p, const BwdTensorMaps& maps,
                                             u32 base, u32 end_stage, const CtaWork& work,
                                             Accumulator& acc_dk, Accumulator& acc_dv) {
    const int consumer = Kernel::consumer_index();
    const u32 dk_tile = base + Kernel::kKOffset + consumer * kSumTileBytes;
    const u32 dv_tile = Kernel::kDqInStage ? end_stage + consumer * kSumTileBytes
                                           : Kernel::stage_address(base, consumer);
    named_barrier_sync(Kernel::kDsBarrier, 128 * Kernel::kConsumers);
    store_fp32_tile<Kernel::kCols>(dk_tile, 0, acc_dk.tiles(), p.softmax_scale);
    store_fp32_tile<Kernel::kCols>(dv_tile, 0, acc_dv.tiles(), 1.f);
    issue_copies(work, consumer, [&](int key0, int kv_head) {
#pragma unroll
      for (int box = 0; box < Kernel::kCols / 32; ++box) {
        const int col = Kernel::consumer_col0(consumer) + 32 * box;
        tma_reduce_add(maps.dk_sum, dk_tile + box * kSumBoxBytes, col, key0, kv_head, work.batch);
        tma_reduce_add(maps.dv_sum, dv_tile + box * kSumBoxBytes, col, key0, kv_head, work.batch);
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
