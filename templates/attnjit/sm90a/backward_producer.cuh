// The producer of the sm90a backward (sm90a/backward.cuh): one warp loads the CTA's key block
// once and streams the query blocks that can see it through the consumers' ring:
//   K, V         by TMA onto the key block's barrier, with the block's FlashMask values
//                (cp.async by the warp's lanes, arriving through .noinc);
//   ring stage   Q and dO of one visited query block by TMA, its LSE2 and D rows by cp.async
//                of the lanes (zeros past Sq), and the block's index, classification and query
//                head, which the consumers read from the stage instead of walking the blocks
//                themselves; after the last block a stage with index -1 ends their loop.
// The blocks come in the order of the CTA's walk (backward_walk.cuh: each query head of its
// group in turn). Skipped query blocks (mask.cuh: index ranges, FlashMask min/max tables) are
// never loaded.
#pragma once

#include "attnjit/sm90a/backward_walk.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The producer warp of Kernel (sm90a/backward.cuh), which gives the mask policy, the tiles and
/// the shared-memory layout (byte offsets from the 1024-byte aligned base).
template <class Kernel>
struct BackwardProducer {
  typedef typename Kernel::MaskType Mask;
  typedef typename Kernel::QTile QTile;
  typedef typename Kernel::DoTile DoTile;
  typedef typename Kernel::KTile KTile;
  typedef typename Kernel::VTile VTile;
  typedef typename Kernel::Ring Ring;
  static constexpr int kBlockM = Kernel::kBlockM;
  static constexpr int kBlockN = Kernel::kBlockN;
  static constexpr int kColumns = Mask::kColumns;
  /// The row statistics are loaded by a warp of their own (run_statistics) instead of the
  /// producer's lanes: with 80-row blocks the producer warpgroup has 24 registers (the
  /// consumers need 240) and the producer spilled with them.
  static constexpr bool kStatisticsWarp = Kernel::kStatisticsWarp;

  /// Runs the whole walk; every lane of the warp calls it.
  __device__ __forceinline__ static void run(const BwdParams& p, const BwdTensorMaps& maps,
                                             u32 base) {
    const int lane = threadIdx.x % 32;
    const CtaWork work = Kernel::work_of(p);
    const int n_block = work.block;
    if (lane == 0) {
      tma_prefetch_map(maps.q);
      tma_prefetch_map(maps.d_o);
      tma_prefetch_map(maps.k);
      tma_prefetch_map(maps.v);
      const u32 kv_full = base + Kernel::kKvBarrierOffset;
      mbarrier_arrive_expect_tx(kv_full, KTile::kBytes + VTile::kBytes);
      const int kv_head = cta_kv_head();
      tma_load_tile<KTile>(base + Kernel::kKOffset, maps.k, kv_full, n_block * kBlockN, kv_head,
                           work.batch);
      tma_load_tile<VTile>(base + Kernel::kVOffset, maps.v, kv_full, n_block * kBlockN, kv_head,
                           work.batch);
    }
    if constexpr (kColumns > 0) {
      load_vectors(p, Kernel::key_mask_state(p), n_block, base + Kernel::kVectorOffset);
      mbarrier_arrive_after_cp_async(base + Kernel::kKvBarrierOffset);
    }

    const Ring ring{base + Kernel::kRingOffset};
    typename Kernel::RingState state;
    BackwardWalk<Kernel> walk;
    walk.begin(p, n_block);
    for (;;) {
      ring.producer_acquire(state);
      const u32 stage = Kernel::stage_address(base, state.index);
      const u32 full = ring.full(state.index);
      if (walk.done()) {
        // The end of the walk: a stage that carries no data, block -1. It completes with the
        // same arrivals as a loaded one and no transaction bytes.
        if (lane == 0) {
          store_shared_u32(Kernel::info_address(base, stage, state.index), static_cast<u32>(-1));
          mbarrier_arrive(full);
        }
        if constexpr (!kStatisticsWarp) mbarrier_arrive(full);
        break;
      }
      walk.set_rows(p);
      const int tile = Mask::template classify<kBlockN>(walk.ms, p.minmax, n_block);
      if (lane == 0) {
        const u32 info = Kernel::info_address(base, stage, state.index);
        store_shared_u32(info, static_cast<u32>(walk.block));
        store_shared_u32(info + 4, static_cast<u32>(tile));
        store_shared_u32(info + 8, static_cast<u32>(walk.head()));
        ring.producer_commit(state, QTile::kBytes + DoTile::kBytes);
        const int batch = Kernel::work_of(p).batch;
        tma_load_tile<QTile>(stage, maps.q, full, walk.ms.row_begin, walk.head(), batch);
        tma_load_tile<DoTile>(stage + Kernel::kDoStageOffset, maps.d_o, full, walk.ms.row_begin,
                              walk.head(), batch);
      }
      if constexpr (!kStatisticsWarp) {
        load_row_statistics(p, walk.block, walk.head(),
                            Kernel::stats_address(base, stage, state.index));
        ring.producer_commit_cp_async(state);
      }
      state.advance();
      walk.advance(p, n_block);
    }
    // The lanes' last copies land before the warp exits.
    cp_async_wait<0>();
  }

  /// kStatisticsWarp: the LSE2 and D rows of each stage that run() fills, by cp.async of this
  /// warp's lanes, which are the stage's 32 arrivals besides the TMA thread's (also on the
  /// last stage, which carries no data). Every lane of the warp calls it.
  __device__ __forceinline__ static void run_statistics(const BwdParams& p, u32 base) {
    const Ring ring{base + Kernel::kRingOffset};
    typename Kernel::RingState state;
    const CtaWork work = Kernel::work_of(p);
    const int n_block = work.block;
    BackwardWalk<Kernel> walk;
    walk.begin(p, n_block);
    // Lane l copies rows l + 32 j from one pointer per vector, set at each head (24 registers).
    const int lane = threadIdx.x % 32;
    int head = -1;
    const float* lse = nullptr;
    const float* dot = nullptr;
    // Not unrolled by stage (the copies' registers twice).
#pragma unroll 1
    for (;;) {
      ring.producer_acquire(state);
      if (walk.done()) {
        mbarrier_arrive(ring.full(state.index));
        break;
      }
      if (walk.head() != head) {
        head = walk.head();
        const long long bh_lane =
            (static_cast<long long>(work.batch) * p.heads + head) * p.seqlen_q + lane;
        lse = p.lse_log2 + bh_lane;
        dot = p.row_dot + bh_lane;
      }
      walk.set_rows(p);
      const MaskState& ms = walk.ms;
      // Past Sq: zeros, the copies reading nothing from the block's first row (lane 0's).
      const int rows = ms.row_end - ms.row_begin - lane;
      const u32 dst =
          Kernel::stats_address(base, Kernel::stage_address(base, state.index), state.index) +
          4 * lane;
#pragma unroll
      for (int j = 0; j < (kBlockM + 31) / 32; ++j) {
        if (32 * j + lane < kBlockM) {
          const bool in = 32 * j < rows;
          const int row = ms.row_begin + (in ? 32 * j : -lane);
          cp_async_4(dst + 128 * j, lse + row, in ? 4 : 0);
          cp_async_4(dst + 4 * kBlockM + 128 * j, dot + row, in ? 4 : 0);
        }
      }
      ring.producer_commit_cp_async(state);
      state.advance();
      walk.advance(p, n_block);
    }
    cp_async_wait<0>();
  }

  /// cp.async of LSE2 then D of query block `block` of query head `head` (kBlockM floats each,
  /// zeros past Sq) by the warp's lanes.
  __device__ __forceinline__ static void load_row_statistics(const BwdParams& p, int block,
                                                             int head, u32 dst) {
    const CtaWork work = Kernel::work_of(p);
    const int row0 = block * kBlockM;
    const int valid = min(kBlockM, p.seqlen_q - row0);
    const long long bh_row =
        (static_cast<long long>(work.batch) * p.heads + head) * p.seqlen_q + row0;
#pragma unroll
    for (int i = threadIdx.x % 32; i < 2 * kBlockM; i += 32) {
      const int r = i % kBlockM;
      const float* src = (i < kBlockM ? p.lse_log2 : p.row_dot) + bh_row + r;
      cp_async_4(dst + i * 4, r < valid ? src : p.row_dot, r < valid ? 4 : 0);
    }
  }

  /// cp.async of the key block's FlashMask values by the warp's lanes (zeros past Sk).
  __device__ __forceinline__ static void load_vectors(const BwdParams& p, const MaskState& ms,
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
