// The backward main kernel of the sm90a family for head dims above 128 (192, 256): the layout of
// bwd_sm90a.cuh (a TMA producer, an mbarrier ring of Q, dO, LSE2 and D, wgmma consumers, dQ by
// TMA reductions of writer warps) with the work of the two consumers split differently. With
// 64 keys per consumer, dK and dV alone would take 256 fp32 registers a thread at head dim
// 256, so one CTA owns kBlockN = 64 keys, and per query block of kBlockM = 64 rows consumer c
// computes
//   S^T_c  = K Q_c^T, dP^T_c = V dO_c^T   its 32 queries Q_c of the block, over all 64 keys
//                                         (m64 x n32, K-major from shared memory)
//   P^T_c, dS^T_c                         registers, then the [key][query] P^T and dS^T tiles
//   dV_c  += P^T dO_c', dK_c += dS^T Q_c'  its half c' of the head dim's columns, over all the
//                                         block's queries (SS: A K-major from the tiles)
//   dQ_c   = dS K_c'                      its half of dQ's columns over all the keys
// so that each consumer holds half of dK and dV (2 x 64 registers at 256) and a dQ half.
// After the consumers' barrier on P^T and dS^T, consumer c reads only the Q and dO panels of
// its columns: its fp32 dQ half goes back into those panels of the stage (at 256 four boxes of
// 64 rows x 32 columns, the size of its two Q and two dO panels of 64 columns; at 192, whose
// halves of 96 columns are three panels of 32, six boxes of 16 columns in the 64-byte
// swizzle), and its writer warp (warps 1, 2 of the producer warpgroup), met on the stage's
// hand-over barrier, adds them to the accumulator by TMA reductions and then releases the
// stage to the producer: the ring's empty barriers take the consumers' arrivals (after their
// last access to the stage) and one per writer (after its reductions have read the boxes).
// The P^T and dS^T tiles are single: before writing a block's, the consumers meet once more
// (all of both consumers' products of the last block have completed). In the
// deterministic mode the writers take turns per query block and consumer (lane), as in
// bwd_sm90a.cuh. dK is scaled by softmax_scale at the end; dQ in backward_convert_dq. Masks,
// predicates (the block table's key-row bits, the consumer's word of each row) and score
// modifiers as in bwd_sm90a.cuh.
//
// Config: as bwd_sm90a.cuh's. 384 threads, __launch_bounds__(384, 1).
#pragma once

#include "attnjit/sm90a/barrier.cuh"
#include "attnjit/common/bwd_common.cuh"
#include "attnjit/sm90a/bwd_sm90a_dq.cuh"
#include "attnjit/sm90a/bwd_sm90a_producer.cuh"
#include "attnjit/common/fragment.cuh"
#include "attnjit/masks/mask.cuh"
#include "attnjit/sm90a/mbarrier.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/sm90a/pipeline.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/common/score_mod.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/sm90a/tma.cuh"
#include "attnjit/sm90a/wgmma.cuh"

namespace attnjit {

template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct BackwardSm90aWide {
  typedef typename Config::Element Element;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kBlockM = Config::kBlockM;  // queries per stage
  static constexpr int kBlockN = Config::kBlockN;  // keys of the CTA
  static constexpr int kStages = Config::kStages;
  static constexpr int kConsumers = 2;
  /// Each consumer's columns of dK, dV and dQ, and its queries of S^T and dP^T.
  static constexpr int kHalf = kHeadDim / kConsumers;
  static constexpr int kQueries = kBlockM / kConsumers;
  /// The tiles' panels: 64 columns where a half is whole 64-column panels (256), else 32 (192:
  /// halves of three 32-column panels).
  static constexpr int kPanelCols = kHalf % 64 == 0 ? 64 : 32;
  static constexpr int kHalfPanels = kHalf / kPanelCols;
  /// The fp32 dQ boxes: 64 rows of one Q panel's bytes (32 columns, or 16 at 32-column panels).
  static constexpr int kDqBoxCols = kPanelCols / 2;
  static constexpr int kSTiles = kQueries / 8;    // n8 tiles of the consumer's S^T, dP^T
  static constexpr int kDSteps = kHeadDim / 16;   // k16 steps over the head dim
  static constexpr int kQSteps = kBlockM / 16;    // over the block's queries
  static constexpr int kKeySteps = kBlockN / 16;  // over the keys
  static constexpr int kColumns = Mask::kColumns;
  static constexpr bool kOrderedDq = !Config::kAtomicDq;
  static constexpr bool kOrderedCtas = Mask::kOrderedCtas && !kOrderedDq;
  static constexpr bool kLowBlocksFirst = !kOrderedDq;
  /// Named barriers: both consumers (P^T and dS^T written; the tiles free again), each
  /// consumer and its writer warp per stage (its dQ boxes written: dq_barrier), each
  /// consumer's own (its gradients staged).
  static constexpr int kDsBarrier = 1;
  static constexpr int kTilesFreeBarrier = 2;
  static constexpr int kDqBarrier = 3;
  static constexpr int kGradientBarrier = kDqBarrier + kConsumers * kStages;
  static constexpr int kWriterThreads = 128 + 32;

  static_assert(kBlockM == 64 && kBlockN == 64, "64 queries per stage, 64 keys per CTA");
  static_assert(kHalf % 32 == 0, "whole panels per consumer");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(kGradientBarrier + kConsumers <= 16, "16 named barriers");

  typedef Mask MaskType;
  typedef SmemTile<kBlockN, kHeadDim, kPanelCols> KvTile;
  typedef SmemTile<kBlockM, kHeadDim, kPanelCols> QTile;  // Q and dO
  typedef SmemTile<kBlockN, kBlockM> PTile;               // P^T and dS^T: [key][query]
  typedef Pipeline<kStages> Ring;
  typedef PipelineState<kStages> RingState;

  /// A consumer's fp32 dQ half: kHalf / kDqBoxCols boxes, one per Q then dO panel of its
  /// columns.
  static constexpr int kDqBoxes = kHalf / kDqBoxCols;
  static_assert(QTile::kPanelBytes == 64 * kDqBoxCols * 4 && kDqBoxes == 2 * kHalfPanels,
                "a consumer's dQ boxes fill its Q and dO panels");

  // A stage: Q, dO, then LSE2 and D (kBlockM floats each) and the block's index and
  // classification, padded so that the next stage's tiles stay 1024-byte aligned.
  static constexpr int kRowStatsOffset = 2 * QTile::kBytes;
  static constexpr int kInfoOffset = 2 * kBlockM * 4;  // in the statistics
  static constexpr bool kStatisticsWarp = false;       // the producer's lanes load them
  static constexpr int kStageBytes = kRowStatsOffset + (2 * kBlockM * 4 + 8 + 1023) / 1024 * 1024;

  // Shared memory from a 1024-byte aligned base: K, V, the stages, the P^T and dS^T tiles, the
  // key block's FlashMask values, the K/V barrier, the ring's barriers.
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = KvTile::kBytes;
  static constexpr int kStagesOffset = 2 * KvTile::kBytes;
  static constexpr int kPOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kDsOffset = kPOffset + PTile::kBytes;
  static constexpr int kVectorOffset = kDsOffset + PTile::kBytes;
  static constexpr int kKvBarrierOffset = kVectorOffset + (kBlockN * kColumns * 4 + 7) / 8 * 8;
  static constexpr int kRingOffset = kKvBarrierOffset + 8;
  /// Dynamic shared memory, alignment slack included.
  static constexpr int kSmemBytes = 1024 + kRingOffset + Ring::kBytes;

  WarpgroupAccumulator<kHalf> acc_dk;
  WarpgroupAccumulator<kHalf> acc_dv;

  /// The LSE2 then D of stage `index` at `stage`, then its block's index and classification
  /// (kInfoOffset): after the tiles.
  __device__ __forceinline__ static u32 stats_address(u32, u32 stage, int) {
    return stage + kRowStatsOffset;
  }

  /// stats_address + kInfoOffset.
  __device__ __forceinline__ static u32 info_address(u32, u32 stage, int) {
    return stage + (kRowStatsOffset + kInfoOffset);
  }

  __device__ __forceinline__ static u32 stage_address(u32 base, int index) {
    return base + kStagesOffset + index * kStageBytes;
  }

  /// Box `box` of consumer `consumer`'s dQ half in `stage`: its Q panels, then its dO panels.
  __device__ __forceinline__ static u32 dq_box(u32 stage, int consumer, int box) {
    return stage + (box / kHalfPanels) * QTile::kBytes +
           (consumer * kHalfPanels + box % kHalfPanels) * QTile::kPanelBytes;
  }

  __device__ __forceinline__ static CtaWork work_of(const BwdParams& p) {
    return cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
  }

  /// The mask state of the CTA's (head, batch), no rows yet (bwd_sm90a.cuh's).
  __device__ __forceinline__ static MaskState key_mask_state(const BwdParams& p) {
    const CtaWork work = work_of(p);
    return make_mask_state_at_row<kBlockN>(p, cta_mask_row<Mask>(), work.head, work.batch);
  }

  __device__ __forceinline__ static MaskState query_block_mask_state(const BwdParams& p,
                                                                     int block) {
    MaskState ms = key_mask_state(p);
    ms.row_begin = block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
    return ms;
  }

  __device__ __forceinline__ static int consumer_index() { return warpgroup_index() - 1; }

  /// The named barrier on which `consumer` hands the dQ boxes of ring stage `index` to its
  /// writer warp: one per stage, because the consumer arrives without waiting and may finish
  /// the next stage's block before the writer, held by a turn or by its reductions, has met it
  /// on this one; a single barrier would then count both arrivals in one round. A stage's
  /// barrier is used again only after the writer has released the stage, i.e. met its
  /// barrier.
  __device__ __forceinline__ static int dq_barrier(int consumer, int index) {
    return kDqBarrier + consumer * kStages + index;
  }

  __device__ __forceinline__ void run(const BwdParams& p, const BwdTensorMaps& maps,
                                      unsigned char* smem_raw) {
    start_cta<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
    // The missing half of the last head pair (schedule.cuh).
    if (work_of(p).head >= p.heads) return;

    const u32 base = (smem_address(smem_raw) + 1023) & ~1023u;
    if (threadIdx.x == 0) {
      store_cta_heads<Mask>(p, work_of(p));
      mbarrier_init(base + kKvBarrierOffset, 1 + (kColumns > 0 ? 32 : 0));
      // Full: the TMA thread and the lanes' cp.async of LSE2 and D; empty: each consumer
      // thread once it has written its dQ boxes (its last access to the stage), and each
      // writer warp once its reductions have read them.
      Ring{base + kRingOffset}.init(1 + 32, 128 * kConsumers + kConsumers);
      mbarrier_init_fence();
    }
    __syncthreads();

    if (warpgroup_index() == 0) {
      warpgroup_registers_decrease<Config::kProducerRegisters>();
      if (threadIdx.x < 32) {
        BackwardProducer<BackwardSm90aWide>::run(p, maps, base);
      } else if (threadIdx.x < 32 * (1 + kConsumers)) {
        write_dq(p, maps, base, threadIdx.x / 32 - 1);
      }
      return;
    }
    warpgroup_registers_increase<Config::kConsumerRegisters>();
    consume(p, maps, base);
  }

  __device__ __forceinline__ void consume(const BwdParams& p, const BwdTensorMaps& maps, u32 base) {
    const Ring ring{base + kRingOffset};
    RingState state;
    acc_dk.fill(0.f);
    acc_dv.fill(0.f);
    mbarrier_wait(base + kKvBarrierOffset, 0);
    for (;;) {
      ring.consumer_wait(state);
      const u32 stage = stage_address(base, state.index);
      const int block = load_shared_s32(info_address(base, stage, state.index));
      if (block < 0) break;
      const int tile = load_shared_s32(info_address(base, stage, state.index) + 4);
      iterate(p, base, stage, state.index, block, tile);
      ring.consumer_release(state);
      state.advance();
    }
    const CtaWork work = work_of(p);
    if (p.dk_partial == nullptr) {
      store_gradients(p, maps, base, work);
      return;
    }
    if constexpr (!kOrderedDq) {
      // The end's stage carries no data: its tiles hold the fp32 dV halves.
      add_gradients(p, maps, base, stage_address(base, state.index), work);
      return;
    }
    // GQA, deterministic mode: fp32 dK and dV of this query head (backward_reduce_dkdv).
    store_dkdv_tile<Element, kHeadDim>(p, work.head, work.batch,
                                       work.block * kBlockN + 16 * ((read_tid_x() / 32) % 4),
                                       kHalf * consumer_index(), acc_dk.tiles(), acc_dv.tiles());
  }

  /// One query block, in ring stage `index` (at `stage`). Element (nt, e) of the consumer's
  /// m64 x kQueries S^T is key row key_row0 + g + 8 (e / 2), query column q0 + 8 nt + 2 t +
  /// e % 2.
  __device__ __forceinline__ void iterate(const BwdParams& p, u32 base, u32 stage, int index,
                                          int block, int tile) {
    const int consumer = consumer_index();
    const int lane = read_tid_x() % 32;
    const int key_row0 = 16 * ((read_tid_x() / 32) % 4);
    const int q0 = kQueries * consumer;
    const int g = lane / 4;
    const int t = lane % 4;
    const u32 smem_k = base + kKOffset;
    const u32 smem_v = base + kVOffset;
    const u32 smem_q = stage;
    const u32 smem_do = stage + QTile::kBytes;
    const u32 lse_log2 = stage + kRowStatsOffset;
    const u32 row_dot = lse_log2 + kBlockM * 4;

    // S^T = K Q_c^T and dP^T = V dO_c^T, issued together (P^T is computed while dP^T runs,
    // except under soft-capping: bwd_sm90a.cuh).
    WarpgroupAccumulator<kQueries> acc_s;
    WarpgroupAccumulator<kQueries> acc_dp;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      wgmma_ss<Element, kQueries, 0, 0>(acc_s.tiles(), k_major_descriptor<KvTile>(smem_k, 0, kk),
                                        k_major_descriptor<QTile>(smem_q, q0, kk), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      wgmma_ss<Element, kQueries, 0, 0>(acc_dp.tiles(), k_major_descriptor<KvTile>(smem_v, 0, kk),
                                        k_major_descriptor<QTile>(smem_do, q0, kk), kk > 0);
    }
    wgmma_commit();
    // A predicate's partial tile: one bit per element of the thread's fragment of S^T, read
    // while the products run.
    unsigned long long hidden = 0;
    if constexpr (Mask::kElementBits) {
      if (tile_kind(tile) == kTilePartial) hidden = element_bits(p, block, tile, key_row0 + g, t);
    }
    if constexpr (Score::kSoftcap) {
      wgmma_wait<0>();
      fence_accumulators(acc_dp.tiles());
    } else {
      wgmma_wait<1>();
    }
    fence_accumulators(acc_s.tiles());

    const MaskState ms = query_block_mask_state(p, block);
    const int key0 = work_of(p).block * kBlockN;
    if (tile_kind(tile) == kTilePartial) {
      if constexpr (Mask::kElementBits) {
        mask_by_bits(acc_s, 0, hidden);
      } else {
        mask_scores_by_key<Mask>(p, ms, acc_s, base + kVectorOffset, key0, key_row0, q0, lane);
      }
    }

    // P^T = 2^(S^T c - LSE2) and dS^T = P^T (dP^T - D), packed pairs of queries.
    u32 p_pairs[kSTiles][2];
    u32 ds_pairs[kSTiles][2];
    const Score score = Score::template make<kOrderedCtas>(p);
    const int distance0 = key0 + key_row0 + g - (ms.row_begin + q0 + 2 * t + ms.diagonal);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      float lse[2];
      load_lse_pair<Score>(lse_log2, q0 + nt * 8 + 2 * t, ms, lse);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float value[2];
        float grad[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          value[c] = backward_probability(p, score, acc_s.v[0][nt][2 * r + c],
                                          distance0 + 8 * r - 8 * nt - c, lse[c], grad[c]);
        }
        p_pairs[nt][r] = pack2<Element>(value[0], value[1]);
        if constexpr (Score::kSoftcap) {
          float d[2];
          load_shared_v2_f32(row_dot + (q0 + nt * 8 + 2 * t) * 4, d[0], d[1]);
          ds_pairs[nt][r] =
              pack2<Element>(value[0] * grad[0] * (acc_dp.v[0][nt][2 * r] - d[0]),
                             value[1] * grad[1] * (acc_dp.v[0][nt][2 * r + 1] - d[1]));
        }
      }
    }
    if constexpr (!Score::kSoftcap) {
      wgmma_wait<0>();
      fence_accumulators(acc_dp.tiles());
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        float d[2];
        load_shared_v2_f32(row_dot + (q0 + nt * 8 + 2 * t) * 4, d[0], d[1]);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          ds_pairs[nt][r] = pack2<Element>(
              unpack_lo<Element>(p_pairs[nt][r]) * (acc_dp.v[0][nt][2 * r] - d[0]),
              unpack_hi<Element>(p_pairs[nt][r]) * (acc_dp.v[0][nt][2 * r + 1] - d[1]));
        }
      }
    }

    // Both consumers' products of the last block have completed: the tiles are free.
    named_barrier_sync(kTilesFreeBarrier, 128 * kConsumers);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int offset = PTile::element_offset(key_row0 + g + 8 * r, q0 + nt * 8 + 2 * t);
        store_shared_u32(base + kPOffset + offset, p_pairs[nt][r]);
        store_shared_u32(base + kDsOffset + offset, ds_pairs[nt][r]);
      }
    }
    fence_async_shared();
    named_barrier_sync(kDsBarrier, 128 * kConsumers);

    // dV_c += P^T dO_c', dK_c += dS^T Q_c', then dQ_c = dS K_c'.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      wgmma_ss<Element, kHalf, 0, 1>(
          acc_dv.tiles(), k_major_descriptor<PTile>(base + kPOffset, 0, kk),
          mn_major_descriptor<QTile>(smem_do, consumer * kHalfPanels, kk), 1);
    }
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      wgmma_ss<Element, kHalf, 0, 1>(
          acc_dk.tiles(), k_major_descriptor<PTile>(base + kDsOffset, 0, kk),
          mn_major_descriptor<QTile>(smem_q, consumer * kHalfPanels, kk), 1);
    }
    wgmma_commit();
    WarpgroupAccumulator<kHalf> acc_dq;
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      wgmma_ss<Element, kHalf, 1, 1>(
          acc_dq.tiles(), mn_major_descriptor<PTile>(base + kDsOffset, 0, kk),
          mn_major_descriptor<KvTile>(smem_k, consumer * kHalfPanels, kk), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(acc_dk.tiles());
    fence_accumulators(acc_dv.tiles());
    fence_accumulators(acc_dq.tiles());

    // The dQ half into the consumer's Q and dO panels (read by nothing else now), then to its
    // writer.
    store_fp32_boxes<kHalf, kDqBoxCols>(
        [stage, consumer](int box) { return dq_box(stage, consumer, box); }, 0, acc_dq.tiles(),
        1.f);
    fence_async_shared();
    named_barrier_arrive(dq_barrier(consumer, index), kWriterThreads);
  }

  /// A predicate's hidden elements of the thread's S^T fragment (key rows `key_row`, + 8, and
  /// the consumer's query columns q0 + 2 t (+ 1) + 8 nt of query block `block`) in partial tile
  /// `tile`: the word of the consumer's queries in the tile's stored bits (rows are keys), or
  /// the element rule where the tile has no slot of bits.
  __device__ __forceinline__ static unsigned long long element_bits(const BwdParams& p, int block,
                                                                    int tile, int key_row, int t) {
    static_assert(kQueries == 32, "one 32-bit word of a key row's bits per consumer");
    const int consumer = consumer_index();
    if (tile_bits_slot(tile) >= 0) {
      const FragmentWords<kBlockM / 32> row =
          Mask::template load_fragment_words<kBlockM / 8, true>(p.predicate_bits, tile, key_row);
      FragmentWords<1> mine;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // A select, not an index by the consumer: the row's words stay in registers.
        mine.words[r][0] = consumer == 0 ? row.words[r][0] : row.words[r][1];
      }
      return Mask::template fragment_bits<kSTiles>(mine, 2 * t);
    }
    const MaskState ms = query_block_mask_state(p, block);
    const int key0 = work_of(p).block * kBlockN;
    return Mask::template evaluate_bits<kSTiles, true>(p, ms, key_row, 2 * t, key0,
                                                       ms.row_begin + kQueries * consumer);
  }

  /// dK (scaled by softmax_scale) and dV halves of the consumer, written into its panels of the
  /// K and V tiles (the other consumer reads only its own panels of K from its last block's
  /// barrier on) and stored by TMA, which drops the keys past Sk.
  __device__ __forceinline__ void store_gradients(const BwdParams& p, const BwdTensorMaps& maps,
                                                  u32 base, const CtaWork& work) {
    const int consumer = consumer_index();
    const int lane = read_tid_x() % 32;
    const int row = 16 * ((read_tid_x() / 32) % 4) + lane / 4;
    const int col = kHalf * consumer + 2 * (lane % 4);
    const float scale = p.softmax_scale;
#pragma unroll
    for (int dt = 0; dt < kHalf / 8; ++dt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int offset = KvTile::element_offset(row + 8 * r, 8 * dt + col);
        store_shared_u32(
            base + kKOffset + offset,
            pack2<Element>(acc_dk.v[0][dt][2 * r] * scale, acc_dk.v[0][dt][2 * r + 1] * scale));
        store_shared_u32(base + kVOffset + offset,
                         pack2<Element>(acc_dv.v[0][dt][2 * r], acc_dv.v[0][dt][2 * r + 1]));
      }
    }
    issue_gradient_copies(work, consumer, [&](int key0, int kv_head) {
#pragma unroll
      for (int panel = consumer * kHalfPanels; panel < (consumer + 1) * kHalfPanels; ++panel) {
        tma_store(maps.d_k, base + kKOffset + panel * KvTile::kPanelBytes,
                  panel * KvTile::kPanelCols, key0, kv_head, work.batch);
        tma_store(maps.d_v, base + kVOffset + panel * KvTile::kPanelBytes,
                  panel * KvTile::kPanelCols, key0, kv_head, work.batch);
      }
    });
  }

  /// GQA, atomic mode: the fp32 dK half (scaled) into the K tile (consumer 0) or the V tile
  /// (consumer 1), once both consumers have left their last products, the dV half into the
  /// end's stage; both added into the sums per K/V head by TMA reductions.
  __device__ __forceinline__ void add_gradients(const BwdParams& p, const BwdTensorMaps& maps,
                                                u32 base, u32 end_stage, const CtaWork& work) {
    static_assert(kHalf / 32 * kSumBoxBytes <= KvTile::kBytes &&
                      kConsumers * kHalf / 32 * kSumBoxBytes <= kRowStatsOffset,
                  "the fp32 halves fit a K/V tile and the end's stage");
    const int consumer = consumer_index();
    const u32 dk_tile = base + kKOffset + consumer * KvTile::kBytes;
    const u32 dv_tile = end_stage + consumer * (kHalf / 32) * kSumBoxBytes;
    named_barrier_sync(kDsBarrier, 128 * kConsumers);
    store_fp32_tile<kHalf>(dk_tile, 0, acc_dk.tiles(), p.softmax_scale);
    store_fp32_tile<kHalf>(dv_tile, 0, acc_dv.tiles(), 1.f);
    issue_gradient_copies(work, consumer, [&](int key0, int kv_head) {
#pragma unroll
      for (int box = 0; box < kHalf / 32; ++box) {
        const int col = kHalf * consumer + 32 * box;
        tma_reduce_add(maps.dk_sum, dk_tile + box * kSumBoxBytes, col, key0, kv_head, work.batch);
        tma_reduce_add(maps.dv_sum, dv_tile + box * kSumBoxBytes, col, key0, kv_head, work.batch);
      }
    });
  }

  /// The async-proxy fence and the consumer's barrier (its stores are in), then its first
  /// thread issues copies(first key, K/V head) and waits until they have completed.
  template <class Copies>
  __device__ __forceinline__ static void issue_gradient_copies(const CtaWork& work, int consumer,
                                                               Copies copies) {
    fence_async_shared();
    named_barrier_sync(kGradientBarrier + consumer, 128);
    if (warpgroup_thread() != 0) return;
    copies(work.block * kBlockN, cta_kv_head());
    tma_store_commit();
    tma_store_wait<0>();
  }

  /// The writer warp of `consumer`: walks the query blocks as the producer does, and per block,
  /// once the consumer has written its dQ boxes, its first lane adds them to the accumulator
  /// (in the deterministic mode once the block's turn has come) and releases the stage when
  /// they have been read.
  __device__ static void write_dq(const BwdParams& p, const BwdTensorMaps& maps, u32 base,
                                  int consumer) {
    const bool leader = threadIdx.x % 32 == 0;
    const Ring ring{base + kRingOffset};
    RingState state;
    const int n_block = work_of(p).block;
    MaskState ms = key_mask_state(p);
    int block, end;
    Mask::template query_block_range<kBlockM, kBlockN>(ms, n_block, block, end);
    block = Mask::template first_active_query_block<kBlockM, kBlockN>(ms, p.minmax, n_block, block,
                                                                      end);
    while (block < end) {
      ms.row_begin = block * kBlockM;
      ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
      const int turn =
          kOrderedDq ? later_key_visitors<Mask, kBlockM, kBlockN>(p, ms, block, n_block) : 0;
      const int next = Mask::template first_active_query_block<kBlockM, kBlockN>(
          ms, p.minmax, n_block, block + 1, end);
      named_barrier_sync(dq_barrier(consumer, state.index), kWriterThreads);
      if (leader) {
        const CtaWork work = work_of(p);
        int* counter =
            kOrderedDq ? dq_turn_counter<kBlockM, kConsumers>(p, work, block, consumer) : nullptr;
        if constexpr (kOrderedDq) wait_turn(counter, turn);
        const u32 stage = stage_address(base, state.index);
#pragma unroll
        for (int box = 0; box < kDqBoxes; ++box) {
          tma_reduce_add(maps.dq_accum, dq_box(stage, consumer, box),
                         kHalf * consumer + kDqBoxCols * box, block * kBlockM, work.head,
                         work.batch);
        }
        tma_store_commit();
        tma_store_wait_read<0>();
        ring.consumer_release(state);
        if constexpr (kOrderedDq) {
          tma_store_wait<0>();
          pass_turn(counter);
        }
      }
      __syncwarp();
      state.advance();
      block = next;
    }
    // The reductions are complete before the kernel ends (backward_convert_dq reads them).
    if (leader) tma_store_wait<0>();
  }
};

}  // namespace attnjit
