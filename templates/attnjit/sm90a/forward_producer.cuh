// The producer of the sm90a forward (sm90a/forward.cuh): one warp walks the key blocks the
// query block of each work visits (WarpKeyBlockWalk: last block first, skipped blocks never
// loaded) and feeds the two rings of the consumers with TMA copies:
//   Q                   once per work, onto its own barrier; a persistent CTA's next Q once
//                       the consumers have freed the tile (Q empty), after it decoded the
//                       next work, classified its first blocks and published it (the work
//                       slot), so that the work's first loads run while the consumers end
//                       the work before;
//   K ring, stage s     K of a block and, with FlashMask vectors, their values for the
//                       block's keys (cp.async by the warp's lanes, arriving through .noinc);
//   V ring              V of the block before, so the consumers find K of block j + 1 ahead
//                       of V of block j, the order in which they use them.
// Over a paged KV cache a block's rows are boxes of up to a page's rows (kPageBoxRows at most,
// the largest power of two that divides kBlockN), one box per lane, each at the page its
// first key lives in through the block table (read a block ahead); boxes past the sequence's
// pages read as zeros. Under masks by index, pages of less than half a block are walked by two
// or four warps that share the boxes (kWarps). Over any KV cache the V block that holds
// the sequence's end lands on a barrier of the producer's, which zeroes its rows past the end
// before it hands the stage on. Under masks with tables each K stage carries its block, the block's
// classification and whether another block follows (Kernel::kFedWalk; a work that visits no block
// gets one stage that says so), and with e4m3 each V stage its block and whether another follows
// for the transposer warps; under masks by index the consumers walk the same blocks themselves.
#pragma once

#include "attnjit/common/key_block_walk.cuh"
#include "attnjit/common/kv_cache.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// Over a KV cache: the keys of the CTA's sequence (ForwardSm90a::sequence_keys), its new
/// tokens (the query rows) and the packed row of the first with ragged new tokens
/// (ForwardSm90a::sequence_rows), and the barrier on which the producer waits for the V block
/// that holds the sequence's end.
__shared__ int kv_cache_keys_slot;
__shared__ NewTokens kv_cache_rows_slot;
__shared__ unsigned long long kv_cache_tail_barrier;

/// How the sm90a forward (forward.cuh) reads K and V: from the call's tensors, or from a KV cache.
enum KvLayout { kKvTensors = 0, kKvContiguous = 1, kKvPaged = 2 };

/// The producer warp of Kernel (sm90a/forward.cuh), which gives the mask policy, the tiles and
/// the shared-memory layout: byte offsets from the 1024-byte aligned base of the Q tile
/// (0), the K and V stages, the FlashMask values of the K stages, and the barriers (Q's, the
/// K ring's, the V ring's).
template <class Kernel>
struct ForwardProducer {
  typedef typename Kernel::MaskType Mask;
  typedef typename Kernel::QTile QTile;
  typedef typename Kernel::KTile KTile;
  typedef typename Kernel::VTile VTile;
  static constexpr int kBlockM = Kernel::kBlockM;
  static constexpr int kBlockN = Kernel::kBlockN;
  static constexpr int kStages = Kernel::kStages;
  static constexpr int kColumns = Mask::kColumns;
  static constexpr int kVectorStageBytes = Kernel::kVectorStageBytes;
  static constexpr bool kKvCache = Kernel::kKvCache != kKvTensors;
  static constexpr bool kPaged = Kernel::kPaged;
  /// Paged: the most rows of a box (a page's rows, where fewer), the largest power of two that
  /// divides kBlockN, so that boxes tile a block and start 1024-byte aligned (whole swizzle
  /// atoms: pages hold at least 8 rows); one lane issues each box of a block.
  static constexpr int kPageBoxRows = kBlockN & -kBlockN;
  static_assert(!kPaged || kBlockN / 8 <= 32, "a box of at least 8 rows per lane");
  /// The panels of Tile that a warp copies: every one (kHalf -1), the even ones (0) or the odd
  /// ones (1), and their bytes.
  template <class Tile, int kHalf>
  struct PanelShare {
    static constexpr int kPanels = Tile::kBytes / Tile::kPanelBytes;
    __device__ static constexpr bool has(int panel) { return kHalf < 0 || panel % 2 == kHalf; }
    static constexpr int kBytes = (kHalf < 0    ? kPanels
                                   : kHalf == 0 ? (kPanels + 1) / 2
                                                : kPanels / 2) *
                                  Tile::kPanelBytes;
  };
  /// Paged, masks by index: where pages hold less than half a block, the producer warpgroup's
  /// warps walk the same blocks and share the boxes: two, the first copying K (and Q), the
  /// second V, or where K and V have two panels or more four, K's even and odd panels and V's
  /// (one warp issuing a box per page and panel held back the products of pages of 8 and 16
  /// keys); each warp of a ring arrives on its stages with its own bytes. Larger pages keep
  /// one warp (two were slower there).
  static constexpr int kWarps =
      !kPaged || Kernel::kFedWalk || Kernel::kPersistent                           ? 1
      : PanelShare<KTile, -1>::kPanels >= 2 && PanelShare<VTile, -1>::kPanels >= 2 ? 4
                                                                                   : 2;

  /// The warps that copy K and V for this call's pages: kWarps below half a block, else one.
  __device__ __forceinline__ static int copy_warps(const FwdParams& p) {
    if constexpr (kWarps == 1) {
      return 1;
    } else {
      return (1 << p.kv_cache.page_shift) < kBlockN / 2 ? kWarps : 1;
    }
  }

  /// The arrivals that fill a K or V stage (and the V tail's barrier): one per warp of a ring.
  __device__ __forceinline__ static int ring_arrivals(const FwdParams& p) {
    return copy_warps(p) == 4 ? 2 : 1;
  }

  /// Runs the walks of the CTA's works; every lane of the warp calls it. The shared addresses
  /// are formed from `base` where used: the producer has few registers.
  __device__ __forceinline__ static void run(const FwdParams& p, const FwdTensorMaps& maps,
                                             u32 base) {
    const int lane = threadIdx.x % 32;
    if (lane == 0) {
      tma_prefetch_map(maps.q);
      tma_prefetch_map(maps.k);
      tma_prefetch_map(maps.v);
    }
    const Pipeline<kStages> k_ring{base + Kernel::kKRingOffset};
    const Pipeline<kStages> v_ring{base + Kernel::kVRingOffset};
    PipelineState<kStages> k_state, v_state;
    if constexpr (!Kernel::kPersistent) {
      // kWarps: the first warp copies Q and K, and V too unless the pages are small; two warps
      // split K and V, four each ring's even and odd panels.
      int warp = 0;
      bool split = false;
      if constexpr (kWarps > 1) {
        warp = static_cast<int>(threadIdx.x / 32);
        split = copy_warps(p) > 1;
        if (warp > 0 && !split) return;
      }
      if (warp == 0 && lane == 0) {
        load_q(p, maps, base, cta_work<false>(cta_order_of<Kernel::kCtaOrder>(p)));
      }
      // The mask state and the CTA's work are formed again where used (Kernel::
      // block_mask_state), not held: the loop then fits the producer's few registers.
      WarpKeyBlockWalk<Mask, kBlockN> walk;
      walk.begin(Kernel::block_mask_state(p, 0), p.minmax, p.varlen);
      if (!split) {
        run_walk<true, true>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, 0);
      } else if constexpr (kWarps == 2) {
        if (warp == 0) {
          run_walk<true, false>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, 0);
        } else {
          run_walk<false, true>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, 0);
        }
      } else if constexpr (kWarps == 4) {
        if (warp == 0) {
          run_walk<true, false, 0>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, 0);
        } else if (warp == 1) {
          run_walk<true, false, 1>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, 0);
        } else if (warp == 2) {
          run_walk<false, true, 0>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, 0);
        } else {
          run_walk<false, true, 1>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, 0);
        }
      }
    } else {
      // Works after each CTA's first are drawn from the counter, one ahead: the draw and the
      // order's entry of the next work load while this one's blocks are walked.
      const unsigned works = grid_x(p) * grid_y(p) * static_cast<unsigned>(p.batch);
      unsigned launched = blockIdx.x;
      unsigned natural = natural_index(p, launched, works);
      u32 parity = 0;
      while (launched < works) {
        const unsigned next = draw_work(p);
        const unsigned next_natural = natural_index(p, next, works);
        const CtaWork work = natural_cta_work_at<false>(natural, grid_x(p), grid_y(p));
        // The missing half of the last pair of an odd head count is no work.
        if (work.head < p.heads) {
          const CtaHeads heads = cta_heads_of<Mask>(p, work);
          // The first blocks are classified (the walk's table reads) before the wait.
          MaskState ms = make_mask_state_at_row<kBlockN>(p, heads.mask_row, work.head, work.batch);
          ms.row_begin = work.block * kBlockM;
          ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
          WarpKeyBlockWalk<Mask, kBlockN> walk;
          walk.begin(ms, p.minmax, p.varlen);
          // The Q tile and the work's slot are free once the consumers' last Q K^T products
          // of the work before have completed (the first work passes on the fresh barrier).
          mbarrier_wait(base + Kernel::kQEmptyOffset, parity ^ 1);
          if (lane == 0) {
            const int words[] = {work.block, work.head, work.batch, heads.kv_head, heads.mask_row};
#pragma unroll
            for (int w = 0; w < 5; ++w) {
              store_shared_u32(Kernel::work_slot_address(parity, w), static_cast<u32>(words[w]));
            }
            // The Q full arrival publishes the slot.
            load_q(p, maps, base, work);
          }
          __syncwarp();
          run_walk<true, true>(p, maps, base, k_ring, v_ring, k_state, v_state, walk, parity);
          parity ^= 1;
        }
        launched = next;
        natural = next_natural;
      }
      // None left: a slot without a work, once the consumers no longer read the slot.
      mbarrier_wait(base + Kernel::kQEmptyOffset, parity ^ 1);
      if (lane == 0) {
        store_shared_u32(Kernel::work_slot_address(parity, 0), ~0u);
        mbarrier_arrive(base + Kernel::kBarrierOffset);
      }
    }
  }

  /// The grid of works, (2 * query blocks, ceil(H / 2), B) as schedule.cuh orders it.
  __device__ __forceinline__ static unsigned grid_x(const FwdParams& p) {
    return 2 * static_cast<unsigned>((p.seqlen_q + kBlockM - 1) / kBlockM);
  }
  __device__ __forceinline__ static unsigned grid_y(const FwdParams& p) {
    return static_cast<unsigned>((p.heads + 1) / 2);
  }

  /// The launch index of the CTA's next work (every lane gets lane 0's draw): the works after
  /// each CTA's first go out in order, to whichever producer draws first, as the hardware
  /// hands out CTAs, so that the works running at once stay neighbours in the CTA order and
  /// share their operands in L2 (cta_order.cuh; dealt out in a fixed pattern, the CTAs drift
  /// apart and miss in L2).
  __device__ __forceinline__ static unsigned draw_work(const FwdParams& p) {
    unsigned next = 0;
    if (threadIdx.x % 32 == 0) next = atomicAdd(p.work_counter, 1u) + gridDim.x;
    return __shfl_sync(0xffffffffu, next, 0);
  }

  /// The natural index (schedule.cuh) of the work at launch index `launched` of the CTA order,
  /// or 0 past the last work.
  __device__ __forceinline__ static unsigned natural_index(const FwdParams& p, unsigned launched,
                                                           unsigned works) {
    return launched < works ? static_cast<unsigned>(p.cta_order[launched]) : 0u;
  }

  /// Q of `work`, onto the Q tile's full barrier (lane 0).
  __device__ __forceinline__ static void load_q(const FwdParams& p, const FwdTensorMaps& maps,
                                                u32 base, const CtaWork& work) {
    const u32 q_full = base + Kernel::kBarrierOffset;
    mbarrier_arrive_expect_tx(q_full, QTile::kBytes);
    if constexpr (kKvCache) {
      // Ragged new tokens: the sequence's rows of q packed as one sequence of total_q rows
      // (those past its count, another sequence's, are computed and never stored).
      if (p.kv_cache.cu_seqlens_q != nullptr) {
        const NewTokens rows = Kernel::sequence_rows();
        tma_load_tile<QTile>(base, maps.q, q_full, rows.first + work.block * kBlockM, work.head, 0);
        return;
      }
    }
    tma_load_tile<QTile>(base, maps.q, q_full, work.block * kBlockM, work.head, work.batch);
  }

  /// The K copies (kCopyK) and the V copies (kCopyV) of the work of parity `parity`, its walk
  /// begun. The walk runs a block ahead of the K copies: a stage's slot (kFedWalk) says
  /// whether another follows.
  template <bool kCopyK, bool kCopyV, int kHalf = -1>
  __device__ __forceinline__ static void run_walk(
      const FwdParams& p, const FwdTensorMaps& maps, u32 base, const Pipeline<kStages>& k_ring,
      const Pipeline<kStages>& v_ring, PipelineState<kStages>& k_state,
      PipelineState<kStages>& v_state, WarpKeyBlockWalk<Mask, kBlockN>& walk, u32 parity) {
    static_assert(kCopyK || !Kernel::kFedWalk, "a fed walk's K stages carry its blocks");
    const int lane = threadIdx.x % 32;
    int previous = -1;
    // Paged: the page of this lane's box of the block and of the previous block. Each block's
    // is read a block ahead, so that the block table's latency is spent under the copies and
    // products of the block before.
    int page = kPaged && walk.more() ? box_page(p, walk.block) : 0;
    int previous_page = 0;
    for (;;) {
      const int block = walk.more() ? walk.block : -1;
      if (kCopyK && block >= 0) {
        int tile = 0;
        if constexpr (Kernel::kFedWalk) {
          tile = walk.tile(Kernel::block_mask_state(p, parity), p.minmax);
          walk.next(Kernel::block_mask_state(p, parity), p.minmax);
        }
        k_ring.producer_acquire(k_state);
        const u32 k_stage = base + Kernel::kKOffset + k_state.index * KTile::kBytes;
        if (lane == 0) {
          if constexpr (Kernel::kFedWalk)
            write_block_slot(base, k_state.index, block, tile, walk.more());
          k_ring.producer_commit(k_state, PanelShare<KTile, kHalf>::kBytes);
          if constexpr (!kPaged) {
            load_panels<KTile>(p, maps.k, k_stage, k_ring.full(k_state.index), block, parity);
          }
        }
        if constexpr (kPaged) {
          __syncwarp();  // the expected bytes before any box's completion
          load_page_boxes<KTile, kHalf>(p, maps.k, k_stage, k_ring.full(k_state.index), block, page,
                                        parity);
        }
        if constexpr (kColumns > 0) {
          load_vectors(p, Kernel::block_mask_state(p, parity), block,
                       base + Kernel::kVectorOffset + k_state.index * kVectorStageBytes);
          k_ring.producer_commit_cp_async(k_state);
        }
        k_state.advance();
      } else if (Kernel::kFedWalk && previous < 0) {
        // No block: one stage that says so, its arrivals without copies (and kFp8 a V stage
        // that says so to the transposer warps).
        k_ring.producer_acquire(k_state);
        if (lane == 0) {
          write_block_slot(base, k_state.index, -1, 0, false);
          mbarrier_arrive(k_ring.full(k_state.index));
        }
        if constexpr (kColumns > 0) mbarrier_arrive(k_ring.full(k_state.index));
        k_state.advance();
        if constexpr (Kernel::kFp8) {
          v_ring.producer_acquire(v_state);
          if (lane == 0) {
            write_v_slot(base, v_state.index, -1, false);
            mbarrier_arrive(v_ring.full(v_state.index));
          }
          v_state.advance();
        }
      }
      if (kCopyV && previous >= 0) {
        v_ring.producer_acquire(v_state);
        const u32 v_stage = base + Kernel::kVOffset + v_state.index * VTile::kBytes;
        const u32 v_full = v_ring.full(v_state.index);
        // kFp8 under a fed walk: the transposer warps' slot (published by the full arrival).
        if (Kernel::kFp8 && Kernel::kFedWalk && lane == 0) {
          write_v_slot(base, v_state.index, previous, block >= 0);
        }
        // Over a KV cache: the block's row at the sequence's end (kBlockN or more: none).
        const int end_row = kKvCache ? Kernel::sequence_keys() - previous * kBlockN : kBlockN;
        if constexpr (kKvCache) {
          if (end_row < kBlockN) {
            load_zeroed_tail<kHalf>(p, maps.v, v_stage, v_full, previous, previous_page, end_row,
                                    parity);
          }
        }
        if (end_row >= kBlockN) {
          if (lane == 0) {
            v_ring.producer_commit(v_state, PanelShare<VTile, kHalf>::kBytes);
            if constexpr (!kPaged) load_panels<VTile>(p, maps.v, v_stage, v_full, previous, parity);
          }
          if constexpr (kPaged) {
            __syncwarp();
            load_page_boxes<VTile, kHalf>(p, maps.v, v_stage, v_full, previous, previous_page,
                                          parity);
          }
        }
        v_state.advance();
      }
      if (block < 0) break;
      previous = block;
      previous_page = page;
      if constexpr (!Kernel::kFedWalk) walk.next(Kernel::block_mask_state(p, parity), p.minmax);
      if constexpr (kPaged) page = walk.more() ? box_page(p, walk.block) : 0;
    }
  }

  /// kFedWalk: the slot of K stage `stage` (lane 0, before the stage's full arrival, which
  /// publishes it).
  __device__ __forceinline__ static void write_block_slot(u32 base, int stage, int block, int tile,
                                                          bool more) {
    store_shared_u32(Kernel::block_slot_address(base, stage, Kernel::kSlotKeyBlock),
                     static_cast<u32>(block));
    store_shared_u32(Kernel::block_slot_address(base, stage, Kernel::kSlotTile),
                     static_cast<u32>(tile));
    store_shared_u32(Kernel::block_slot_address(base, stage, Kernel::kSlotMore), more ? 1u : 0u);
  }

  /// kFp8 under a fed walk: the slot of V stage `stage` (lane 0, before the stage's full
  /// arrival, which publishes it): its block (-1: none) and whether another V stage follows.
  __device__ __forceinline__ static void write_v_slot(u32 base, int stage, int block, bool more) {
    store_shared_u32(Kernel::v_slot_address(base, stage, Kernel::kSlotKeyBlock),
                     static_cast<u32>(block));
    store_shared_u32(Kernel::v_slot_address(base, stage, Kernel::kSlotMore), more ? 1u : 0u);
  }

  /// The panels of K or V block `block` (Tile: KTile or VTile) of the current work's (kv head,
  /// batch), keys past Sk read as zeros.
  template <class Tile>
  __device__ __forceinline__ static void load_panels(const FwdParams& p, const TensorMap& map,
                                                     u32 dst, u32 bar, int block, u32 parity) {
    const CtaWork work = Kernel::current_work(p, parity);
    const int kv_head = Kernel::current_kv_head(parity);
    tma_load_tile<Tile>(dst, map, bar, block * kBlockN, kv_head,
                        static_cast<int>(opaque(u32(work.batch))));
  }

  /// Paged: the first row in its block of this lane's box (kBlockN and more: the lane has none).
  __device__ __forceinline__ static int box_row(const FwdParams& p) {
    return static_cast<int>(threadIdx.x % 32) * min(1 << p.kv_cache.page_shift, kPageBoxRows);
  }

  /// Paged: the page of this lane's box of block `block` (lanes past the block's boxes: 0),
  /// -1 (a box read as zeros) past the sequence's pages, whose block-table entries are not
  /// read.
  __device__ __forceinline__ static int box_page(const FwdParams& p, int block) {
    const int key = block * kBlockN + box_row(p);
    if (key >= block * kBlockN + kBlockN) return 0;
    if (key >= Kernel::sequence_keys()) return -1;
    const int batch = Kernel::current_work(p, 0).batch;
    return p.kv_cache
        .block_table[batch * p.kv_cache.block_table_stride + (key >> p.kv_cache.page_shift)];
  }

  /// Paged: this lane's box of every panel of K or V block `block` (Tile: KTile or VTile), at
  /// page `page` (box_page's), completing on `bar`.
  template <class Tile, int kHalf = -1>
  __device__ __forceinline__ static void load_page_boxes(const FwdParams& p, const TensorMap& map,
                                                         u32 dst, u32 bar, int block, int page,
                                                         u32 parity) {
    const int row = box_row(p);
    if (row >= kBlockN) return;
    const int within = (block * kBlockN + row) & ((1 << p.kv_cache.page_shift) - 1);
    const int kv_head = Kernel::current_kv_head(parity);
#pragma unroll
    for (int panel = 0; panel < Tile::kBytes / Tile::kPanelBytes; ++panel) {
      if (!PanelShare<Tile, kHalf>::has(panel)) continue;
      tma_load(dst + panel * Tile::kPanelBytes + row * (Tile::kPanelCols * 2), map, bar,
               panel * Tile::kPanelCols, within, kv_head, page);
    }
  }

  /// Over a KV cache: V block `block`, which holds the sequence's end (its rows from `end_row`
  /// on are past it), copied onto the producer's barrier, its rows past the end zeroed once
  /// landed, then handed to the consumers on `full` (a plain arrival, after a proxy fence: the
  /// products read the stage through the async proxy).
  template <int kHalf = -1>
  __device__ __forceinline__ static void load_zeroed_tail(const FwdParams& p, const TensorMap& map,
                                                          u32 dst, u32 full, int block, int page,
                                                          int end_row, u32 parity) {
    const int lane = threadIdx.x % 32;
    const u32 tail = smem_address(&kv_cache_tail_barrier);
    if (lane == 0) {
      mbarrier_arrive_expect_tx(tail, PanelShare<VTile, kHalf>::kBytes);
      if constexpr (!kPaged) load_panels<VTile>(p, map, dst, tail, block, parity);
    }
    if constexpr (kPaged) {
      __syncwarp();
      load_page_boxes<VTile, kHalf>(p, map, dst, tail, block, page, parity);
    }
    if constexpr (kHalf == 1) {
      // The even panels' warp zeroes every panel once the tail's barrier has both halves.
      if (lane == 0) mbarrier_arrive(full);
      return;
    }
    // One tail per work, one work per CTA: the barrier's first phase.
    mbarrier_wait(tail, 0);
    constexpr int kRowChunks = VTile::kPanelCols / 8;  // 16-byte chunks of a panel's row
    constexpr int kPanels = VTile::kBytes / VTile::kPanelBytes;
    const int chunks = (kBlockN - end_row) * kRowChunks;
    const u32 first = dst + end_row * (VTile::kPanelCols * 2);
    // A whole row's chunks are zeroed, so the swizzle's order within the row is moot. The
    // panels as an unrolled loop: the producer has no registers for a division.
#pragma unroll
    for (int panel = 0; panel < kPanels; ++panel) {
      for (int chunk = lane; chunk < chunks; chunk += 32) {
        store_shared_zero16(first + panel * VTile::kPanelBytes + 16 * chunk);
      }
    }
    fence_async_shared();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(full);
  }

  /// cp.async of the block's FlashMask values by the warp's lanes (zeros past Sk): 16 bytes a
  /// copy where the block's values start 16-byte aligned (the stage does: kVectorStageBytes
  /// and the tiles before it are multiples of 16), which they do unless the vectors' tensor
  /// starts off 16 bytes or, with one or two columns, Sk is not a multiple of 4 or 2; else 4.
  __device__ __forceinline__ static void load_vectors(const FwdParams& p, const MaskState& ms,
                                                      int block, u32 dst) {
    static_assert(kVectorStageBytes % 16 == 0, "a stage of whole 16-byte copies");
    const int key0 = block * kBlockN;
    const int valid = min(kBlockN, ms.seqlen_k - key0) * kColumns;
    const int* src = interval_values<kColumns>(p.intervals, ms, key0);
    const int lane = threadIdx.x % 32;
    if ((reinterpret_cast<unsigned long long>(src) & 15) == 0) {
#pragma unroll
      for (int i = 4 * lane; i < kBlockN * kColumns; i += 4 * 32) {
        if (i + 4 <= valid) {
          cp_async_16(dst + 4 * i, src + i, 16);
        } else {
          // Where Sk ends in or before the 16 bytes: 4 at a time (a 16-byte copy filled from
          // fewer bytes was reported by compute-sanitizer as a 16-byte read past the tensor).
#pragma unroll
          for (int j = i; j < i + 4; ++j) {
            cp_async_4(dst + 4 * j, j < valid ? src + j : p.intervals, j < valid ? 4 : 0);
          }
        }
      }
    } else {
      for (int i = lane; i < kBlockN * kColumns; i += 32) {
        cp_async_4(dst + 4 * i, i < valid ? src + i : p.intervals, i < valid ? 4 : 0);
      }
    }
  }
};

/// dtype=e4m3 (Kernel::kFp8): warps 1 .. 3 of the producer warpgroup turn each V stage, [key]
/// [head_dim_v] bytes, into the V^T stage the consumers' O += P V reads, [head_dim_v][key],
/// K-major, its columns in the order of the packed P (fp8_operand_key: position 4 t + i of
/// each 16-key half of a k32 step holds key 2 t + i % 2 + 8 (i / 2) of it). Under masks by
/// index they walk the blocks the consumers walk (every warp its own walk); under masks with
/// tables (Kernel::kFedWalk) each V stage's slot names its block and whether another follows
/// (a work without a block: one V stage that says so). They pass each stage on as the rings'
/// other members do: V's empty and V^T's full take an arrival per thread.
///
/// A warp moves 16 keys x 32 head-dim bytes at a time (an op): one transposing ldmatrix of four
/// 8 x 8 matrices of byte pairs (keys 16 g + {0 .. 7, 8 .. 15} x head-dim bytes 32 q + {0 .. 15,
/// 16 .. 31}) gives lane (r, t) = (lane / 4, lane % 4) keys 2 t, 2 t + 1 (and + 8) of head-dim
/// bytes 2 r, 2 r + 1 of each half; one byte permute per V^T row word puts keys 2 t, 2 t + 1,
/// 2 t + 8, 2 t + 9 in the order of positions 4 t .. 4 t + 3, and one stmatrix of four matrices
/// writes rows 32 q + 2 r (+ 1, + 16) at positions 16 g .. 16 g + 15. Each stored matrix takes
/// the even rows of lanes r < 4 and the odd rows of the others (or the reverse), so that its
/// eight rows fall in eight different bank groups; the loads' rows are eight consecutive keys.
template <class Kernel>
struct ForwardTransposer {
  typedef typename Kernel::MaskType Mask;
  typedef typename Kernel::VTile VTile;  // V as a 16-bit tile of head_dim_v / 2 columns
  typedef typename Kernel::VtTile::Layout VtLayout;  // V^T as the 16-bit tile of kBlockN / 2
  static constexpr int kStages = Kernel::kStages;
  static constexpr int kBlockN = Kernel::kBlockN;
  static constexpr int kHeadDim = Kernel::kHeadDimV;
  static constexpr int kWarps = Kernel::kTransposerWarps;
  static constexpr int kKeyGroups = kBlockN / 16;          // g: 16 keys
  static constexpr int kOps = kKeyGroups * (kHeadDim / 32);  // (g, q): 16 keys x 32 bytes
  static_assert(kBlockN % 16 == 0, "key blocks of whole 16-key groups");

  __device__ __forceinline__ static void run(const FwdParams& p, u32 base, int thread) {
    const Pipeline<kStages> v_ring{base + Kernel::kVRingOffset};
    const Pipeline<kStages> vt_ring{base + Kernel::kVtRingOffset};
    const int lane = thread % 32;
    const int matrix = lane / 8;
    const int row = lane % 8;
    // The lane's addresses: row `row` of matrix `matrix` of the load and of the store.
    const u32 load_lane = VTile::lane_offset(8 * (matrix % 2) + row, matrix / 2);
    const u32 store_lane =
        VtLayout::lane_offset(16 * (matrix / 2) + 2 * row + ((matrix % 2) ^ (row >= 4)), 0);
    // The permutes that give the word of the lane's even head-dim byte and of its odd one,
    // swapped for lanes r >= 4 (their stored matrices 0 and 2 hold odd rows).
    const bool low = lane / 4 < 4;
    const u32 even = low ? 0x6420 : 0x7531;
    const u32 odd = low ? 0x7531 : 0x6420;
    PipelineState<kStages> state;
    if constexpr (Kernel::kFedWalk) {
      // Masks with tables: the V stages' slots say which block each holds and whether another
      // follows (a work without a block: one stage that says so, released untransposed).
      for (;;) {
        v_ring.consumer_wait(state);
        const int block =
            load_shared_s32(Kernel::v_slot_address(base, state.index, Kernel::kSlotKeyBlock));
        const bool more =
            load_shared_s32(Kernel::v_slot_address(base, state.index, Kernel::kSlotMore)) != 0;
        if (block < 0) {
          v_ring.consumer_release(state);
          break;
        }
        transpose_stage(v_ring, vt_ring, state, base, thread, load_lane, store_lane, even, odd);
        if (!more) break;
      }
    } else {
      WarpKeyBlockWalk<Mask, kBlockN> walk;
      walk.begin(Kernel::block_mask_state(p, 0), p.minmax, p.varlen);
      while (walk.more()) {
        v_ring.consumer_wait(state);
        transpose_stage(v_ring, vt_ring, state, base, thread, load_lane, store_lane, even, odd);
        walk.next(Kernel::block_mask_state(p, 0), p.minmax);
      }
    }
  }

  /// The V stage `state` (waited for) into its V^T stage, which it hands to the consumers; the
  /// V stage is released and `state` advanced.
  __device__ __forceinline__ static void transpose_stage(const Pipeline<kStages>& v_ring,
                                                         const Pipeline<kStages>& vt_ring,
                                                         PipelineState<kStages>& state, u32 base,
                                                         int thread, u32 load_lane, u32 store_lane,
                                                         u32 even, u32 odd) {
    vt_ring.producer_acquire(state);
    const u32 v = base + Kernel::kVOffset + state.index * VTile::kBytes;
    const u32 vt = base + Kernel::kVtOffset + state.index * VtLayout::kBytes;
#pragma unroll 1
    for (int k = 0; k < (kOps + kWarps - 1) / kWarps; ++k) {
      const int op = thread / 32 + kWarps * k;
      if (kOps % kWarps == 0 || op < kOps) {
        const int g = op % kKeyGroups;
        const int q = op / kKeyGroups;
        u32 m[4];
        ldmatrix_x4_trans(m, VTile::matrix_address(v, load_lane, 16 * g, 2 * q));
        const u32 w[4] = {__byte_perm(m[0], m[1], even), __byte_perm(m[0], m[1], odd),
                          __byte_perm(m[2], m[3], even), __byte_perm(m[2], m[3], odd)};
        stmatrix_x4(VtLayout::matrix_address(vt, store_lane, 32 * q, g), w);
      }
    }
    // The stores reach the consumers' wgmma reads (the async proxy) through the fence.
    fence_async_shared();
    v_ring.consumer_release(state);
    mbarrier_arrive(vt_ring.full(state.index));
    state.advance();
  }
};

}  // namespace attnjit
