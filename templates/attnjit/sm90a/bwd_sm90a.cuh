// The backward main kernel of the sm90a family (FA3 structure: TMA, an mbarrier ring, warp
// specialization, wgmma).
//
// One CTA of three warpgroups owns kBlockN = 128 keys of one (head, batch) and walks query
// blocks of kBlockM = 64 rows (80 at head dim 128 without a mask or soft-capping: dQ^T =
// K^T dS^T from a [query][key] dS tile, bwd_wgmma_products.cuh, the row statistics loaded by
// warp 3 of the producer warpgroup, which keeps 24 registers for the consumers' 240):
//   producer   warpgroup 0 gives its registers away (setmaxnreg); one warp of it loads K and
//              V once by TMA and streams Q, dO, LSE2 and D of the query blocks that can see
//              the keys through a ring of kStages stages (bwd_sm90a_producer.cuh);
//   consumers  warpgroups 1 and 2 take the registers and 64 keys each, and per query block
//              of kBlockM rows compute (bwd_wgmma_products.cuh):
//                S^T  = K_c Q^T, dP^T = V_c dO^T   wgmma SS, K-major from shared memory
//                P^T  = 2^(S^T c - LSE2)           registers, the A operand of dV
//                dS^T = P^T (dP^T - D)             registers (A of dK) and shared memory
//                dV  += P^T dO, dK += dS^T Q       wgmma RS, fp32 accumulators in registers
//                dQ  += dS K                       wgmma SS after the consumers' barrier, stored
//                                                  to the consumer's shared fp32 dQ buffer while
//                                                  the next block's S^T runs (at d128 without a
//                                                  mask or causal the backward took ~5% less
//                                                  time than storing it at once), which its
//                                                  writer warp adds to the fp32 accumulator by
//                                                  TMA reductions
//              and release the stage once the products that read it have completed.
// dS^T has two buffers, alternating per query block: a consumer writes block i + 1's while
// the other may still read block i's (dQ by 64-column panels needs both consumers' keys).
// The dQ buffer is one [query][column] tile in the TMA map's 128-byte swizzled boxes of 32
// columns when the consumers split dQ by columns, else one per consumer (both add theirs).
// Each consumer hands its dQ buffer to a writer warp of its own (warps 1 and 2 of the producer
// warpgroup, named barriers both ways), which walks the query blocks as the producer does,
// issues each block's reductions and frees the buffer once they have read it: the consumers
// wait only for their buffer. dK is scaled by softmax_scale at the end; dQ in
// backward_convert_dq. Masks and score modifiers as in bwd_grid_sm80.cuh;
// a predicate's partial tiles are masked by one bit per element of S^T (the block table's
// stored bits with key rows, else the element rule), read while S^T and dP^T are computed.
//
// Deterministic mode (kAtomicDq false): the reductions into each query block's dQ take turns,
// highest key block first, so that every run adds the same values in the same order. A turn
// counter per (batch, head, query block) and lane (params.cuh's dq_turns, zeroed) counts the
// reductions done. The writer warp counts, per block, its turn (the key blocks after this one
// that visit it), waits for it before issuing the reductions, and once they are complete
// passes the turn on: the consumers never wait for turns, only for their buffer. The CTAs of
// a head start highest key block first (the natural order's other direction, never a CTA
// order; the hardware starts CTAs in linear order), so each waits only on CTAs that started
// before it. That order puts the key blocks most query blocks see (causal masks' first ones,
// global tokens, shared questions, prefixes) last in every turn, and under causal-like masks
// key block j reaches each query block one step after key block j + 1 (both walk upwards):
// the turns cost little waiting.
//
// Config (bound by the generated code): Element, kHeadDim, kBlockM, kBlockN, kStages,
// kAtomicDq, kProducerRegisters, kConsumerRegisters. Score: a ScoreMod. The kernel
// takes (BwdParams, BwdTensorMaps), 384 threads, __launch_bounds__(384, 1).
#pragma once

#include "attnjit/sm90a/barrier.cuh"
#include "attnjit/common/bwd_common.cuh"
#include "attnjit/sm90a/bwd_sm90a_dq.cuh"
#include "attnjit/sm90a/bwd_sm90a_producer.cuh"
#include "attnjit/sm90a/bwd_sm90a_wide.cuh"
#include "attnjit/sm90a/bwd_wgmma_products.cuh"
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

/// Two consumer warpgroups of 64 keys (BackwardWgmmaProducts' groups): head dims up to 128.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct BackwardSm90aNarrow : BackwardWgmmaProducts<typename Config::Element, Config::kHeadDim,
                                                   Config::kBlockM, Config::kBlockN, 2> {
  typedef BackwardWgmmaProducts<typename Config::Element, Config::kHeadDim, Config::kBlockM,
                                Config::kBlockN, 2>
      Products;
  typedef typename Config::Element Element;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kBlockM = Config::kBlockM;  // queries per stage
  static constexpr int kBlockN = Config::kBlockN;  // keys of the CTA
  static constexpr int kStages = Config::kStages;
  static constexpr int kConsumers = 2;
  using Products::kDqAccCols;
  using Products::kDqByColumns;
  using Products::kDqCols;
  using Products::kDqTransposed;
  using Products::kQSteps;
  using Products::kSTiles;
  static constexpr int kColumns = Mask::kColumns;
  /// Deterministic mode: dQ reductions in turns; CTAs in the natural order, highest key block
  /// first (else lowest first, or the CTA order).
  static constexpr bool kOrderedDq = !Config::kAtomicDq;
  static constexpr bool kOrderedCtas = Mask::kOrderedCtas && !kOrderedDq;
  static constexpr bool kLowBlocksFirst = !kOrderedDq;
  /// Turn counters per query block: one per consumer when they split dQ's columns, else one
  /// that the consumers of a key block take in turn (kDqTurns turns per key block).
  static constexpr int kDqLanes = kDqByColumns ? kConsumers : 1;
  static constexpr int kDqTurns = kDqByColumns ? 1 : kConsumers;
  /// Named barriers: both consumers (dS^T of all keys), or each consumer's own (its keys);
  /// each consumer's dQ buffer written (then its reductions go out).
  static constexpr int kDsBarrier = 1;
  static constexpr int kDqBarrier = kDsBarrier + 1 + kConsumers;
  /// Each consumer's dQ buffer read by its writer's reductions (free).
  static constexpr int kDqFreeBarrier = kDqBarrier + kConsumers;
  /// The threads of a consumer and its writer warp meeting at those.
  static constexpr int kWriterThreads = 128 + 32;
  /// dQ buffers: kBlockM rows x kHeadDim floats as boxes of 32 columns (128-byte rows).
  static constexpr int kDqBuffers = kDqByColumns ? 1 : kConsumers;
  static constexpr int kDqBoxBytes = kBlockM * 128;
  static_assert(kDqTransposed || kDqBoxBytes == kSumBoxBytes,
                "dQ's 64 query rows per box (store_fp32_tile)");
  static constexpr int kDqBufferBytes = kHeadDim / 32 * kDqBoxBytes;

  static_assert(kStages >= 2, "a ring of at least two stages");

  typedef Mask MaskType;
  typedef typename Products::KvTile KvTile;
  typedef typename Products::QTile QTile;  // Q and dO
  typedef typename Products::DsTile DsTile;
  typedef Pipeline<kStages> Ring;
  typedef PipelineState<kStages> RingState;

  // A stage: Q, dO and the row statistics, LSE2 and D (kBlockM floats each), then the block's
  // index and classification. With 64-row blocks the statistics follow the tiles in the stage,
  // padded so that the next stage's tiles stay 1024-byte aligned; 80-row stages would not fit
  // with that padding: their statistics have an area of their own after the dQ buffers.
  static constexpr bool kStatsInStage = !kDqTransposed;
  /// Whether warp 3 of the producer warpgroup loads the statistics (bwd_sm90a_producer.cuh).
  static constexpr bool kStatisticsWarp = kDqTransposed;
  static constexpr int kInfoOffset = 2 * kBlockM * 4;  // in a stage's statistics
  static constexpr int kStatsAlign = kStatsInStage ? 1024 : 16;
  static constexpr int kStatsBytes =
      (kInfoOffset + 8 + kStatsAlign - 1) / kStatsAlign * kStatsAlign;
  static constexpr int kStageBytes = 2 * QTile::kBytes + (kStatsInStage ? kStatsBytes : 0);
  static_assert(kStageBytes % 1024 == 0, "1024-byte aligned stages");

  // Shared memory from a 1024-byte aligned base: K, V, the stages, two dS^T buffers, the dQ
  // buffers, the stages' statistics (80 rows), the key block's FlashMask values, the K/V
  // barrier, the ring's barriers.
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = KvTile::kBytes;
  static constexpr int kStagesOffset = 2 * KvTile::kBytes;
  static constexpr int kDsOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kDqOffset = kDsOffset + 2 * DsTile::kBytes;
  static constexpr int kStatsOffset = kDqOffset + kDqBuffers * kDqBufferBytes;
  static constexpr int kVectorOffset = kStatsOffset + (kStatsInStage ? 0 : kStages * kStatsBytes);
  static constexpr int kKvBarrierOffset = kVectorOffset + (kBlockN * kColumns * 4 + 7) / 8 * 8;
  static constexpr int kRingOffset = kKvBarrierOffset + 8;
  /// Dynamic shared memory, alignment slack included, except with 80-row blocks, which would
  /// not fit with it (the 1024-byte aligned dynamic shared memory starts 1024-byte aligned:
  /// run() traps otherwise).
  static constexpr int kAlignSlack = kDqTransposed ? 0 : 1024;
  static constexpr int kSmemBytes = kAlignSlack + kRingOffset + Ring::kBytes;

  WarpgroupAccumulator<kHeadDim> acc_dk;
  WarpgroupAccumulator<kHeadDim> acc_dv;

  __device__ __forceinline__ static u32 stage_address(u32 base, int index) {
    return base + kStagesOffset + index * kStageBytes;
  }

  /// The LSE2 then D (kBlockM floats each) of stage `index` at `stage`, then its block's index
  /// and classification (at kInfoOffset).
  __device__ __forceinline__ static u32 stats_address(u32 base, u32 stage, int index) {
    if constexpr (kStatsInStage) return stage + 2 * QTile::kBytes;
    return base + kStatsOffset + index * kStatsBytes;
  }

  /// stats_address + kInfoOffset (one constant from the stage where it holds them).
  __device__ __forceinline__ static u32 info_address(u32 base, u32 stage, int index) {
    if constexpr (kStatsInStage) return stage + (2 * QTile::kBytes + kInfoOffset);
    return stats_address(base, stage, index) + kInfoOffset;
  }

  /// The mask state of the CTA's (head, batch), no rows yet, formed at its use (not held in
  /// registers across the loop) from the parameters and the CTA's mask row (read from shared
  /// memory: no division per block).
  __device__ __forceinline__ static MaskState key_mask_state(const BwdParams& p) {
    const CtaWork work = cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
    return make_mask_state_at_row<kBlockN>(p, cta_mask_row<Mask>(), work.head, work.batch);
  }

  /// key_mask_state with the rows of query block `block`.
  __device__ __forceinline__ static MaskState query_block_mask_state(const BwdParams& p,
                                                                     int block) {
    MaskState ms = key_mask_state(p);
    ms.row_begin = block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
    return ms;
  }

  /// The first key of the CTA's block.
  __device__ __forceinline__ static int cta_key0(const BwdParams& p) {
    return cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p)).block * kBlockN;
  }

  __device__ __forceinline__ void run(const BwdParams& p, const BwdTensorMaps& maps,
                                      unsigned char* smem_raw) {
    start_cta<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
    // The missing half of the last head pair (schedule.cuh).
    if (cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p)).head >= p.heads) return;

    const u32 base =
        kAlignSlack > 0 ? (smem_address(smem_raw) + 1023) & ~1023u : smem_address(smem_raw);
    if (kAlignSlack == 0 && base % 1024 != 0) __trap();
    if (threadIdx.x == 0) {
      store_cta_heads<Mask>(p, cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p)));
      // K/V: the TMA thread, plus the lanes' cp.async of the FlashMask values. Ring stages:
      // the TMA thread and the lanes' cp.async of LSE2 and D; empty: one arrival per
      // consumer thread (as in the forward, fwd_sm90a.cuh's release).
      mbarrier_init(base + kKvBarrierOffset, 1 + (kColumns > 0 ? 32 : 0));
      Ring{base + kRingOffset}.init(1 + 32, 128 * kConsumers);
      mbarrier_init_fence();
    }
    __syncthreads();

    if (warpgroup_index() == 0) {
      warpgroup_registers_decrease<Config::kProducerRegisters>();
      if (threadIdx.x < 32) {
        BackwardProducer<BackwardSm90aNarrow>::run(p, maps, base);
      } else if (threadIdx.x < 32 * (1 + kConsumers)) {
        write_dq(p, maps, base, threadIdx.x / 32 - 1);
      } else if constexpr (kStatisticsWarp) {
        BackwardProducer<BackwardSm90aNarrow>::run_statistics(p, base);
      }
      return;
    }
    warpgroup_registers_increase<Config::kConsumerRegisters>();
    consume(p, maps, base);
  }

  /// This consumer warpgroup's index (0, 1), read where used: nothing is held across the loop
  /// that the accumulators could use.
  __device__ __forceinline__ static int consumer_index() { return warpgroup_index() - 1; }

  /// A consumer warpgroup: keys [64 consumer, 64 consumer + 64) of the block.
  __device__ __forceinline__ void consume(const BwdParams& p, const BwdTensorMaps& maps, u32 base) {
    const Ring ring{base + kRingOffset};
    RingState state;
    acc_dk.fill(0.f);
    acc_dv.fill(0.f);
    mbarrier_wait(base + kKvBarrierOffset, 0);
    // Each block's dQ is handed to the writer during the next block's first products (or
    // after the last block), so that its stores run while the tensor cores work.
    WarpgroupAccumulator<kDqAccCols> acc_dq;
    // Defined before the loop: the machine code measured on the GPU has it (without it ptxas
    // schedules the loop otherwise).
    acc_dq.fill(0.f);
    for (int it = 0;; ++it) {
      ring.consumer_wait(state);
      const u32 info = info_address(base, stage_address(base, state.index), state.index);
      const int block = load_shared_s32(info);
      if (block < 0) {
        if (it > 0) hand_dq(base, acc_dq);
        break;
      }
      const int tile = load_shared_s32(info + 4);
      iterate(p, base, base + kDsOffset + (it % 2) * DsTile::kBytes, block, tile, ring, state,
              acc_dq, it > 0);
      state.advance();
    }
    const CtaWork work = cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
    if (p.dk_partial == nullptr) {
      store_gradients(p, maps, base, work);
      return;
    }
    if constexpr (!kOrderedDq) {
      add_gradients(p, maps, base, work);
      return;
    }
    // GQA, deterministic mode: fp32 dK and dV of this query head, which backward_reduce_dkdv
    // sums per K/V head in order (the writer warps wait for their dQ reductions).
    store_dkdv_tile<Element, kHeadDim>(
        p, work.head, work.batch,
        work.block * kBlockN + 64 * consumer_index() + 16 * ((read_tid_x() / 32) % 4), 0,
        acc_dk.tiles(), acc_dv.tiles());
  }

  /// dK (scaled by softmax_scale) and dV of the consumer's 64 keys, written through the K and
  /// V tiles (no product reads them once both consumers have met: dQ = dS K reads every key
  /// of K) and stored by TMA, which drops the keys past Sk (issue_gradient_copies). Storing
  /// the fragments from registers took 15% of the warps' samples with a 1024-key sliding
  /// window (ncu: 4-byte stores stalled on the store queue).
  __device__ __forceinline__ void store_gradients(const BwdParams& p, const BwdTensorMaps& maps,
                                                  u32 base, const CtaWork& work) {
    const int consumer = consumer_index();
    const int lane = read_tid_x() % 32;
    const int row = 64 * consumer + 16 * ((read_tid_x() / 32) % 4) + lane / 4;
    const int col = 2 * (lane % 4);
    named_barrier_sync(kDsBarrier, 128 * kConsumers);
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int offset = KvTile::element_offset(row + 8 * r, 8 * dt + col);
        store_shared_u32(base + kKOffset + offset,
                         pack2<Element>(acc_dk.v[0][dt][2 * r] * p.softmax_scale,
                                        acc_dk.v[0][dt][2 * r + 1] * p.softmax_scale));
        store_shared_u32(base + kVOffset + offset,
                         pack2<Element>(acc_dv.v[0][dt][2 * r], acc_dv.v[0][dt][2 * r + 1]));
      }
    }
    issue_gradient_copies(work, consumer, [&](int key0, int kv_head) {
#pragma unroll
      for (int panel = 0; panel < kHeadDim / KvTile::kPanelCols; ++panel) {
        const u32 rows = panel * KvTile::kPanelBytes + 64 * consumer * KvTile::kPanelCols * 2;
        tma_store(maps.d_k, base + kKOffset + rows, panel * KvTile::kPanelCols, key0, kv_head,
                  work.batch);
        tma_store(maps.d_v, base + kVOffset + rows, panel * KvTile::kPanelCols, key0, kv_head,
                  work.batch);
      }
    });
  }

  /// After a consumer has staged its dK and dV in shared memory: the async-proxy fence and the
  /// consumer's barrier (all of its stores are in), then its one thread issues copies(first
  /// key, K/V head) and waits for them (the writer warps wait for their dQ reductions),
  /// shared memory staying until the copies have read it.
  template <class Copies>
  __device__ __forceinline__ static void issue_gradient_copies(const CtaWork& work, int consumer,
                                                               Copies copies) {
    fence_async_shared();
    named_barrier_sync(kDsBarrier + 1 + consumer, 128);
    if (warpgroup_thread() != 0) return;
    copies(work.block * kBlockN + 64 * consumer, cta_kv_head());
    tma_store_commit();
    tma_store_wait<0>();
  }

  /// One query block: the five products of the consumer, the stage released once the ones
  /// that read it have completed; dQ is left in acc_dq, whose previous block (`dq_pending`)
  /// goes to the writer while S^T runs (dP^T is issued after those stores). Element (nt, e)
  /// of an m64 x kBlockM accumulator is key row key_row0 + g + 8 (e / 2), query column
  /// 8 nt + 2 t + e % 2.
  __device__ __forceinline__ void iterate(const BwdParams& p, u32 base, u32 smem_ds, int block,
                                          int tile, const Ring& ring, const RingState& state,
                                          WarpgroupAccumulator<kDqAccCols>& acc_dq,
                                          bool dq_pending) {
    const int consumer = consumer_index();
    const u32 stage = stage_address(base, state.index);
    const int lane = read_tid_x() % 32;
    const int key_row0 = 64 * consumer + 16 * ((read_tid_x() / 32) % 4);
    const int g = lane / 4;
    const int t = lane % 4;
    const u32 smem_k = base + kKOffset;
    const u32 smem_v = base + kVOffset;
    const u32 smem_q = stage;
    const u32 smem_do = stage + QTile::kBytes;
    const u32 lse_log2 = stats_address(base, stage, state.index);  // kBlockM floats, then D
    const u32 row_dot = lse_log2 + kBlockM * 4;

    // S^T = K Q^T and dP^T = V dO^T, issued together. P^T is computed while dP^T is in
    // flight, except under soft-capping, where P^T (1 - tanh^2) would have to wait for dP^T in
    // fp32 registers: there dS^T is formed in the same pass, once both are done.
    WarpgroupAccumulator<kBlockM> acc_s;
    WarpgroupAccumulator<kBlockM> acc_dp;
    wgmma_fence();
    Products::keys_times_queries(acc_s.tiles(), smem_k, smem_q, consumer);
    if (dq_pending) {
      // The last block's dQ product has completed (waited for in its iteration); this wait,
      // for every group but S^T's (the only one in flight), shows ptxas that acc_dq is free
      // to read (else it injects a wait for S^T before the stores).
      wgmma_wait<1>();
      fence_accumulators(acc_dq.tiles());
      hand_dq(base, acc_dq);
    }
    wgmma_fence();
    Products::keys_times_queries(acc_dp.tiles(), smem_v, smem_do, consumer);
    // A predicate's partial tile: one bit per element of the thread's fragment of S^T (rows
    // g, g + 8 are keys, columns queries), from the stored bits or the element rule, read
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
    const int key0 = cta_key0(p);
    if (tile_kind(tile) == kTilePartial) {
      if constexpr (Mask::kElementBits) {
        mask_by_bits(acc_s, 0, hidden);
      } else {
        if constexpr (Mask::kHasVectors) {
          mask_scores_by_key_bounds<Mask>(ms, acc_s, base + kVectorOffset, key0, key_row0, lane);
        } else {
          mask_scores_by_key<Mask>(p, ms, acc_s, base + kVectorOffset, key0, key_row0, 0, lane);
        }
      }
    }

    // P^T = 2^(S^T c - LSE2): 0 where masked and in rows that see no key (LSE2 = +inf).
    // Score modifiers apply after the mask; P^T is packed at once as dV's A operand.
    // dS^T = P^T (dP^T - D) (P^T (1 - tanh^2) under soft-capping, else the packed P^T read
    // back, as the sm80 kernels do), packed as dK's A operand and stored as the [key][query]
    // tile.
    OperandA<1, kQSteps> a_p;
    OperandA<1, kQSteps> a_ds;
    const Score score = Score::template make<kOrderedCtas>(p);
    const int distance0 = key0 + key_row0 + g - (ms.row_begin + 2 * t + ms.diagonal);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      float lse[2];
      load_lse_pair<Score>(lse_log2, nt * 8 + 2 * t, ms, lse);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float value[2];
        float grad[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          value[c] = backward_probability(p, score, acc_s.v[0][nt][2 * r + c],
                                          distance0 + 8 * r - 8 * nt - c, lse[c], grad[c]);
        }
        a_p.v[0][nt / 2][operand_register(nt, r)] = pack2<Element>(value[0], value[1]);
        if constexpr (Score::kSoftcap) {
          float d[2];
          load_shared_v2_f32(row_dot + (nt * 8 + 2 * t) * 4, d[0], d[1]);
          store_ds_pair(a_ds, smem_ds, nt, r, key_row0 + g, 2 * t,
                        value[0] * grad[0] * (acc_dp.v[0][nt][2 * r] - d[0]),
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
        load_shared_v2_f32(row_dot + (nt * 8 + 2 * t) * 4, d[0], d[1]);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const u32 p_pair = a_p.v[0][nt / 2][operand_register(nt, r)];
          store_ds_pair(a_ds, smem_ds, nt, r, key_row0 + g, 2 * t,
                        unpack_lo<Element>(p_pair) * (acc_dp.v[0][nt][2 * r] - d[0]),
                        unpack_hi<Element>(p_pair) * (acc_dp.v[0][nt][2 * r + 1] - d[1]));
        }
      }
    }
    if constexpr (kDqTransposed) Products::store_ds_transposed(a_ds.v[0], smem_ds, key_row0, lane);

    // dV += P^T dO and dK += dS^T Q, running while the consumers meet for dS^T.
    wgmma_fence();
    Products::add_dv_dk(acc_dv.tiles(), acc_dk.tiles(), a_p, a_ds, smem_do, smem_q);
    fence_async_shared();
    if constexpr (kDqByColumns) {
      named_barrier_sync(kDsBarrier, 128 * kConsumers);
    } else {
      // Only this consumer's rows of dS^T are read: its own barrier.
      named_barrier_sync(kDsBarrier + 1 + consumer, 128);
    }

    // dQ_i = dS K.
    // The registers the last block's dQ stores read are the accumulator's again.
    wgmma_fence();
    Products::dq_product(acc_dq.tiles(), smem_ds, smem_k, consumer);
    // dV and dK have read Q and dO: the stage goes back to the producer.
    wgmma_wait<1>();
    fence_accumulators(acc_dk.tiles());
    fence_accumulators(acc_dv.tiles());
    ring.consumer_release(state);
    wgmma_wait<0>();
    fence_accumulators(acc_dq.tiles());
  }

  /// The consumer's part of the dQ buffer, once the writer's reductions of the last tile
  /// have read it, takes acc_dq; the tile goes to the writer (its reductions drop the rows
  /// past Sq).
  __device__ __forceinline__ static void hand_dq(u32 base,
                                                 const WarpgroupAccumulator<kDqAccCols>& acc_dq) {
    const int consumer = consumer_index();
    const u32 buffer = base + kDqOffset + (kDqByColumns ? 0 : consumer) * kDqBufferBytes;
    named_barrier_sync(kDqFreeBarrier + consumer, kWriterThreads);
    store_dq(buffer, Products::dq_panel(consumer) * 64, acc_dq.v[0]);
    fence_async_shared();
    named_barrier_arrive(kDqBarrier + consumer, kWriterThreads);
  }

  /// A predicate's hidden elements of the thread's S^T fragment (key rows `key_row`, + 8 of the
  /// block, query columns 2 t (+ 1) + 8 nt of query block `block`) in partial tile `tile`
  /// (the block table's entry): its stored bits (predicate_blocks.cuh, rows are keys), or the
  /// element rule where the tile has no slot of bits.
  __device__ __forceinline__ static unsigned long long element_bits(const BwdParams& p, int block,
                                                                    int tile, int key_row, int t) {
    if (tile_bits_slot(tile) >= 0) {
      return Mask::template fragment_bits<kSTiles>(
          Mask::template load_fragment_words<kSTiles, true>(p.predicate_bits, tile, key_row),
          2 * t);
    }
    const MaskState ms = query_block_mask_state(p, block);
    return Mask::template evaluate_bits<kSTiles, true>(p, ms, key_row, 2 * t, cta_key0(p),
                                                       ms.row_begin);
  }

  /// GQA, atomic mode: dK (scaled by softmax_scale) and dV of the consumer's 64 keys added into
  /// the fp32 sums of the K/V head (dk_partial / dv_partial, zeroed; backward_reduce_dkdv
  /// converts them) by TMA reductions from fp32 boxes of 32 columns: dK's in the K and V tiles
  /// (free once both consumers have met), dV's in ring stage `consumer` (the consumers have
  /// passed the last stage; the tile ends before the stage's block index).
  static constexpr int kSumTileBytes = kHeadDim / 32 * kSumBoxBytes;
  static_assert(kSumTileBytes * kConsumers <= 2 * KvTile::kBytes && kSumTileBytes <= kStageBytes &&
                    kConsumers <= kStages,
                "the fp32 dK and dV tiles fit the K/V tiles and the stages");

  __device__ __forceinline__ void add_gradients(const BwdParams& p, const BwdTensorMaps& maps,
                                                u32 base, const CtaWork& work) {
    const int consumer = consumer_index();
    const u32 dk_tile = base + kKOffset + consumer * kSumTileBytes;
    const u32 dv_tile = stage_address(base, consumer);
    named_barrier_sync(kDsBarrier, 128 * kConsumers);
    store_fp32_tile<kHeadDim>(dk_tile, 0, acc_dk.tiles(), p.softmax_scale);
    store_fp32_tile<kHeadDim>(dv_tile, 0, acc_dv.tiles(), 1.f);
    issue_gradient_copies(work, consumer, [&](int key0, int kv_head) {
#pragma unroll
      for (int box = 0; box < kHeadDim / 32; ++box) {
        tma_reduce_add(maps.dk_sum, dk_tile + box * kSumBoxBytes, box * 32, key0, kv_head,
                       work.batch);
        tma_reduce_add(maps.dv_sum, dv_tile + box * kSumBoxBytes, box * 32, key0, kv_head,
                       work.batch);
      }
    });
  }

  /// Adds `panel`'s boxes of the dQ tile in `buffer` to query block `block`'s dQ by TMA
  /// reductions (one thread).
  __device__ __forceinline__ static void add_dq_tile(const BwdParams& p, const BwdTensorMaps& maps,
                                                     u32 buffer, int panel, int block) {
    const CtaWork work = cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
#pragma unroll
    for (int box = panel * 2; box < panel * 2 + kDqCols / 32; ++box) {
      tma_reduce_add(maps.dq_accum, buffer + box * kDqBoxBytes, box * 32, block * kBlockM,
                     work.head, work.batch);
    }
    tma_store_commit();
  }

  /// The writer warp of `consumer`. It walks the query blocks the producer
  /// streams; per block, once the consumer has written the dQ tile, its first lane issues the
  /// reductions (in the deterministic mode once the block's turn has come); the buffer goes
  /// back once they have read it (but after the last block). In the deterministic mode the
  /// turn passes on once they are complete; in the atomic mode nothing waits for them but the
  /// writer's exit.
  __device__ static void write_dq(const BwdParams& p, const BwdTensorMaps& maps, u32 base,
                                  int consumer) {
    const u32 buffer = base + kDqOffset + (kDqByColumns ? 0 : consumer) * kDqBufferBytes;
    const bool leader = threadIdx.x % 32 == 0;
    const int n_block = cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p)).block;
    MaskState ms = key_mask_state(p);
    int block, end;
    Mask::template query_block_range<kBlockM, kBlockN>(ms, n_block, block, end);
    block = Mask::template first_active_query_block<kBlockM, kBlockN>(ms, p.minmax, n_block, block,
                                                                      end);
    // The buffer starts free.
    if (block < end) named_barrier_arrive(kDqFreeBarrier + consumer, kWriterThreads);
    while (block < end) {
      ms.row_begin = block * kBlockM;
      ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
      const int turn =
          kOrderedDq ? later_key_visitors<Mask, kBlockM, kBlockN>(p, ms, block, n_block) : 0;
      const int next = Mask::template first_active_query_block<kBlockM, kBlockN>(
          ms, p.minmax, n_block, block + 1, end);
      int* counter = kOrderedDq ? dq_turn_counter<kBlockM, kDqLanes>(
                                      p, cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p)),
                                      block, kDqByColumns ? consumer : 0)
                                : nullptr;
      named_barrier_sync(kDqBarrier + consumer, kWriterThreads);
      if (leader) {
        if constexpr (kOrderedDq) {
          wait_turn(counter, turn * kDqTurns + (kDqByColumns ? 0 : consumer));
        }
        add_dq_tile(p, maps, buffer, Products::dq_panel(consumer), block);
        tma_store_wait_read<0>();
      }
      __syncwarp();
      if (next < end) named_barrier_arrive(kDqFreeBarrier + consumer, kWriterThreads);
      if (kOrderedDq && leader) {
        tma_store_wait<0>();
        pass_turn(counter);
      }
      __syncwarp();
      block = next;
    }
    // The reductions are complete before the kernel ends (backward_convert_dq reads them).
    if (leader) tma_store_wait<0>();
  }

  /// Stores the warp's dQ rows 16 w + g (+ 8) of the accumulator, columns col0 + 8 dt + 2 t,
  /// into the dQ buffer at `buffer` (store_fp32_tile's layout). kDqTransposed: the
  /// accumulator is dQ^T, its rows columns col0 + 16 w + g (+ 8) of dQ, its columns queries
  /// 8 nt + 2 t (+ 1), stored one float at a time into the same layout (boxes of kBlockM rows
  /// of 32 columns, 128-byte rows, 16-byte chunk (c % 32 / 4) ^ (row % 8)): for each element
  /// the warp's 32 stores cover 8 chunks of 4 rows, one per bank. Row 8 nt + 2 t + c has the
  /// swizzle of row 2 t + c: four addresses, the tiles 1 KB apart.
  __device__ __forceinline__ static void store_dq(u32 buffer, int col0,
                                                  const float (&acc)[kDqAccCols / 8][4]) {
    if constexpr (kDqTransposed) {
      const u32 lane = static_cast<u32>(read_tid_x()) % 32;
      const u32 t = lane % 4;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const u32 warp = (static_cast<u32>(read_tid_x()) / 32) % 4;
        const u32 col = col0 + 16 * warp + lane / 4 + 8 * r;
        const u32 box = buffer + (col / 32) * kDqBoxBytes + (col % 4) * 4;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const u32 row = 2 * t + c;
          const u32 at = box + row * 128 + (((col % 32) / 4) ^ row) * 16;
#pragma unroll
          for (int nt = 0; nt < kDqAccCols / 8; ++nt) {
            store_shared_f32(at + nt * 1024, acc[nt][2 * r + c]);
          }
        }
      }
    } else {
      store_fp32_tile<kDqCols>(buffer, col0, acc, 1.f);
    }
  }

  /// Rounds the dS^T pair of tile nt, row half r (key row key_row + 8 r, query columns
  /// 8 nt + col, + 1) into dK's A operand and the [key][query] tile at smem_ds.
  __device__ __forceinline__ static void store_ds_pair(OperandA<1, kQSteps>& a_ds, u32 smem_ds,
                                                       int nt, int r, int key_row, int col,
                                                       float ds0, float ds1) {
    const u32 pair = pack2<Element>(ds0, ds1);
    a_ds.v[0][nt / 2][operand_register(nt, r)] = pair;
    // kDqTransposed: the whole operand is stored after (store_ds_transposed).
    if constexpr (!kDqTransposed) {
      store_shared_u32(smem_ds + DsTile::element_offset(key_row + 8 * r, nt * 8 + col), pair);
    }
  }
};

/// The sm90a backward of a head dim: two consumers of 64 keys up to 128, else two consumers of
/// half the head dim over 64 keys (bwd_sm90a_wide.cuh). Naming a specialisation does not
/// instantiate it: only the chosen layout's static checks run.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
using BackwardSm90a =
    typename Select<(Config::kHeadDim > 128), BackwardSm90aWide<Config, Mask, Score>,
                    BackwardSm90aNarrow<Config, Mask, Score>>::type;

/// The body of a generated sm90a backward (dK, dV, dQ by TMA reductions) kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void backward_sm90a(const BwdParams& params, const BwdTensorMaps& maps) {
  extern __shared__ __align__(1024) unsigned char smem[];
  BackwardSm90a<Config, Mask, Score> kernel;
  kernel.run(params, maps, smem);
}

}  // namespace attnjit
