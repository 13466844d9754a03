// The backward main kernel of the sm90a family (FA3 structure: TMA, an mbarrier ring, warp
// specialization, wgmma).
//
// One CTA of three warpgroups owns a key block of one (head, batch) and walks the query blocks
// that can see it, kBlockM = 64 rows each (80 at head dim 128 without a mask or soft-capping:
// dQ^T = K^T dS^T from a [query][key] dS tile, backward_products.cuh, the row statistics
// loaded by warp 3 of the producer warpgroup, which keeps 24 registers for the consumers' 240).
// Under GQA, where the launch groups them, the CTA walks the blocks of every query head of its
// KV head in turn (BwdParams::head_group, backward_walk.cuh): dK and dV then sum the heads in
// registers, with no fp32 partials and no reduction kernel.
// The warpgroups:
//   producer   warpgroup 0 gives its registers away (setmaxnreg); one warp of it loads K and
//              V once by TMA and streams Q, dO, LSE2 and D of the query blocks that can see
//              the keys through a ring of kStages stages (backward_producer.cuh);
//   consumers  warpgroups 1 and 2 take the registers and split the block's work, and per query
//              block compute (backward_products.cuh):
//                S^T  = K Q^T, dP^T = V dO^T       wgmma SS, K-major from shared memory
//                P^T  = 2^(S^T c - LSE2)           registers (TransposedPairs, backward_common.cuh)
//                dS^T = P^T (dP^T - D)             registers and shared memory
//                dV  += P^T dO, dK += dS^T Q       fp32 accumulators in registers
//                dQ  += dS K                       wgmma SS after the consumers' barrier, added
//                                                  to the fp32 accumulator by TMA reductions of
//                                                  the consumer's writer warp
//              and release the stage once the products that read it have completed.
// The consumers split the work by the head dim:
//   keys       up to head dim 128, kBlockN = 128 keys: each consumer 64 keys, all queries and
//              columns; P^T and dS^T stay in registers as the A operands of dV and dK (wgmma
//              RS), dS^T also goes to shared memory for dQ (two tiles, alternating per query
//              block: a consumer writes block i + 1's while the other may still read block
//              i's). dQ goes to a buffer of its own (one [query][column] tile in the TMA map's
//              128-byte swizzled boxes of 32 columns when the consumers split dQ by columns,
//              else one per consumer, both adding theirs), stored while the next block's S^T
//              runs; the writer frees the buffer once its reductions have read it.
//   head dim   above 128 (192, 256: dK and dV of 64 keys would take 256 fp32 registers a thread
//              at 256), kBlockN = 64 keys: each consumer S^T and dP^T of all keys and its half
//              of the queries, then dK, dV and dQ of its half of the columns over all keys and
//              queries. P^T and dS^T go through [key][query] tiles (wgmma SS), single: before
//              writing a block's, the consumers meet once more (all of both consumers' products
//              of the last block have completed). The consumer's fp32 dQ half goes back into its
//              Q and dO panels of the stage (at 256 four boxes of 64 rows x 32 columns; at 192,
//              whose halves of 96 columns are three panels of 32, six boxes of 16 columns in the
//              64-byte swizzle), and the writer releases the stage once its reductions have read
//              them: the ring's empty barriers take the consumers' arrivals and the writers'.
// Head dims: kHeadDimQK for Q, K, dQ and dK (S^T = K Q^T reduces over it), kHeadDimV for V, dO
// and dV (dP^T = V dO^T reduces over it); either above 128 splits the head dims, each consumer
// taking half of both. Where kHeadDimQK exceeds kHeadDimV ((192, 128), (256, 128)) a consumer's
// fp32 dQ half outgrows its Q and dO panels: each stage has an extra part for the rest.
// Each consumer hands dQ to a writer warp of its own (warps 1 and 2 of the producer warpgroup,
// named barriers: backward_writer.cuh), which walks the query blocks as the producer does and
// issues each block's reductions: the consumers never wait for them. dK is scaled by
// softmax_scale at the end (backward_epilogue.cuh); dQ in backward_convert_dq. Masks and score
// modifiers as in sm80/backward_grid.cuh; a predicate's partial tiles are masked by one bit per
// element of S^T (the block table's stored bits with key rows, else the element rule), read while
// S^T and dP^T are computed.
//
// Deterministic mode (kAtomicDq false): the reductions into each query block's dQ take turns,
// highest key block first, so that every run adds the same values in the same order. A turn
// counter per (batch, head, query block) and lane (params.cuh's dq_turns, zeroed) counts the
// reductions done. The writer warp counts, per block, its turn (the key blocks after this one
// that visit it), waits for it before issuing the reductions, and once they are complete
// passes the turn on: the consumers never wait for turns. The CTAs of a head start highest key
// block first (the natural order's other direction, never a CTA order; the hardware starts CTAs
// in linear order), so each waits only on CTAs that started before it. That order puts the key
// blocks most query blocks see (causal masks' first ones, global tokens, shared questions,
// prefixes) last in every turn, and under causal-like masks key block j reaches each query
// block one step after key block j + 1 (both walk upwards): the turns cost little waiting.
//
// Config (bound by the generated code): Element, kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kStages,
// kAtomicDq, kProducerRegisters, kConsumerRegisters. Score: a ScoreMod. The kernel
// takes (BwdParams, BwdTensorMaps), 384 threads, __launch_bounds__(384, 1).
#pragma once

#include "attnjit/common/backward_common.cuh"
#include "attnjit/sm90a/backward_epilogue.cuh"
#include "attnjit/sm90a/backward_producer.cuh"
#include "attnjit/sm90a/backward_products.cuh"
#include "attnjit/sm90a/backward_reductions.cuh"
#include "attnjit/sm90a/backward_writer.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The sm90a backward main kernel of Config's head dims and tiles (the layout above).
template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct BackwardSm90a {
  typedef typename Config::Element Element;
  static constexpr int kHeadDimQK = Config::kHeadDimQK;  // Q, K, dQ, dK
  static constexpr int kHeadDimV = Config::kHeadDimV;    // V, dO, dV
  static constexpr int kBlockM = Config::kBlockM;        // queries per stage
  static constexpr int kBlockN = Config::kBlockN;        // keys of the CTA
  static constexpr int kStages = Config::kStages;
  static constexpr int kConsumers = 2;
  /// The consumers split the head dims (a head dim above 128), else the keys.
  static constexpr bool kSplitHeadDim = kHeadDimQK > 128 || kHeadDimV > 128;
  /// A consumer's queries of S^T and dP^T, and its columns of dK (and Q) and of dV (and dO).
  static constexpr int kQueries = kSplitHeadDim ? kBlockM / kConsumers : kBlockM;
  static constexpr int kColsQK = kSplitHeadDim ? kHeadDimQK / kConsumers : kHeadDimQK;
  static constexpr int kColsV = kSplitHeadDim ? kHeadDimV / kConsumers : kHeadDimV;
  /// The tiles' panels: 64 columns where a consumer's columns are whole 64-column panels, else
  /// 32 (head dims 96 and 192).
  static constexpr int kPanelColsQK = kColsQK % 64 == 0 ? 64 : 32;
  static constexpr int kPanelColsV = kColsV % 64 == 0 ? 64 : 32;
  static constexpr int kColPanelsQK = kColsQK / kPanelColsQK;
  static constexpr int kColPanelsV = kColsV / kPanelColsV;
  static constexpr int kSTiles = kQueries / 8;  // n8 tiles of the consumer's S^T, dP^T
  /// dQ by columns (each consumer its kDqCols columns over all keys) where they are 64 or more,
  /// else by keys (each consumer its own keys, all columns).
  static constexpr bool kDqByColumns = kHeadDimQK / kConsumers >= 64;
  static constexpr int kDqCols = kDqByColumns ? kHeadDimQK / kConsumers : kHeadDimQK;
  /// dQ^T = K^T dS^T, the queries as N: query blocks that are no whole m64.
  static constexpr bool kDqTransposed = kBlockM % 64 != 0;
  /// Columns of the dQ accumulator: dQ's (kDqCols), or the queries of dQ^T.
  static constexpr int kDqAccCols = kDqTransposed ? kBlockM : kDqCols;
  /// dQ goes back into the stage when the consumers split the head dim, else to dQ buffers.
  static constexpr bool kDqInStage = kSplitHeadDim;
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
  /// Named barriers: both consumers (dS^T written; with dQ in the stage, the P^T and dS^T
  /// tiles written and free again: kTilesFreeBarrier), each consumer's own, each consumer and
  /// its writer warp on a dQ tile written (dq_barrier) and, with dQ buffers, the buffer read by
  /// the writer's reductions (free).
  static constexpr int kDsBarrier = 1;
  static constexpr int kTilesFreeBarrier = 2;
  static constexpr int kOwnBarrier = kDqInStage ? 3 + kConsumers * kStages : 2;
  static constexpr int kDqBarrier = kDqInStage ? 3 : kOwnBarrier + kConsumers;
  static constexpr int kDqFreeBarrier = kDqBarrier + kConsumers;
  /// The threads of a consumer and its writer warp meeting at those.
  static constexpr int kWriterThreads = 128 + 32;

  static_assert(kBlockN == (kSplitHeadDim ? 64 : 128), "64 keys per consumer, or 64 in all");
  static_assert(kSplitHeadDim ? kBlockM == 64 : kBlockM == 64 || kBlockM == 80,
                "m64n32 / m64n64 / m64n80 score products");
  static_assert(kColsQK % 32 == 0 && kColsV % 32 == 0 && kDqCols % 32 == 0,
                "whole 32-column panels and boxes");
  static_assert(!kDqTransposed || kDqByColumns, "dQ^T by each consumer's 64-column panel");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(kDqFreeBarrier + kConsumers <= 16 && kOwnBarrier + kConsumers <= 16,
                "16 named barriers");

  typedef Mask MaskType;
  typedef SmemTile<kBlockN, kHeadDimQK, kPanelColsQK> KTile;
  typedef SmemTile<kBlockN, kHeadDimV, kPanelColsV> VTile;
  typedef SmemTile<kBlockM, kHeadDimQK, kPanelColsQK> QTile;
  typedef SmemTile<kBlockM, kHeadDimV, kPanelColsV> DoTile;
  /// [key][query]: dS^T (the MN-major A of dQ = dS K), and P^T (the K-major A of dV when the
  /// consumers split the head dim); [query][key] dS (the K-major B of dQ^T = K^T dS^T: 80
  /// queries are no whole 32-column panel).
  typedef
      typename Select<!kDqTransposed, SmemTile<kBlockN, kBlockM>, SmemTile<kBlockM, kBlockN>>::type
          DsTile;
  /// A consumer's P^T or dS^T packed in pairs of queries, as the A operand of dV or dK.
  typedef OperandA<1, kSTiles / 2> Pairs;
  typedef BackwardProducts<BackwardSm90a> Products;
  typedef BackwardDqWriter<BackwardSm90a> DqWriter;
  typedef BackwardEpilogue<BackwardSm90a> Epilogue;
  typedef Pipeline<kStages> Ring;
  typedef PipelineState<kStages> RingState;

  /// dQ buffers: kBlockM rows x kHeadDimQK floats as boxes of 32 columns (128-byte rows).
  static constexpr int kDqBuffers = kDqInStage ? 0 : kDqByColumns ? 1 : kConsumers;
  static constexpr int kDqBoxBytes = kBlockM * 128;
  static_assert(kDqTransposed || kDqBoxBytes == kSumBoxBytes,
                "dQ's 64 query rows per box (store_fp32_tile)");
  static constexpr int kDqBufferBytes = kHeadDimQK / 32 * kDqBoxBytes;
  /// dQ in the stage: a consumer's fp32 half as boxes of 64 rows of one Q panel's bytes (32
  /// columns, or 16 at 32-column panels), over its Q panels, then its dO panels, then (where
  /// head_dim_qk exceeds head_dim_v, so that its fp32 dQ outgrows its Q and dO) a part of the
  /// stage's own, kDqExtraBytes per consumer.
  static constexpr int kDqBoxCols = kPanelColsQK / 2;
  static constexpr int kDqBoxes = kColsQK / kDqBoxCols;
  static constexpr int kDqStageBoxBytes = 64 * kDqBoxCols * 4;
  static constexpr int kQHalfBytes = QTile::kBytes / kConsumers;
  static constexpr int kDoHalfBytes = DoTile::kBytes / kConsumers;
  static constexpr int kDqExtraBytes =
      kDqInStage && kDqBoxes * kDqStageBoxBytes > kQHalfBytes + kDoHalfBytes
          ? kDqBoxes* kDqStageBoxBytes - kQHalfBytes - kDoHalfBytes
          : 0;
  static_assert(!kDqInStage ||
                    (QTile::kPanelBytes == kDqStageBoxBytes &&
                     kQHalfBytes % kDqStageBoxBytes == 0 && kDoHalfBytes % kDqStageBoxBytes == 0 &&
                     kDqBoxes * kDqStageBoxBytes >= kQHalfBytes + kDoHalfBytes),
                "a consumer's dQ boxes fill its Q and dO panels (and its extra part)");
  /// The TMA boxes: a panel of the Q and dO tiles, of the K and V tiles and of a consumer's 64
  /// keys of dK and dV; the dQ accumulator's fp32 boxes of the query block (kDqBoxBytes: 128-byte
  /// rows; in the stage kDqBoxCols); GQA's fp32 dK and dV sums (kSumBoxBytes).
  static constexpr TmaBox kQBox = panel_box(kBlockM, kPanelColsQK);
  static constexpr TmaBox kDoBox = panel_box(kBlockM, kPanelColsV);
  static constexpr TmaBox kKBox = panel_box(kBlockN, kPanelColsQK);
  static constexpr TmaBox kVBox = panel_box(kBlockN, kPanelColsV);
  static constexpr TmaBox kDqAccumBox = fp32_box(kBlockM, kDqInStage ? kDqBoxCols : 32);
  static constexpr TmaBox kDkBox = panel_box(64, kPanelColsQK);
  static constexpr TmaBox kDvBox = panel_box(64, kPanelColsV);
  static constexpr TmaBox kDkSumBox = fp32_box(64, 32);
  static constexpr TmaBox kDvSumBox = fp32_box(64, 32);

  // A stage: Q, dO, the dQ boxes' extra part, and the row statistics, LSE2 and D (kBlockM
  // floats each), then the block's index, classification and query head. With 64-row blocks the
  // statistics follow the tiles in the stage, padded so that the next stage's tiles stay 1024-byte
  // aligned; 80-row stages would not fit with that padding: their statistics have an area of
  // their own after the dQ buffers.
  static constexpr bool kStatsInStage = !kDqTransposed;
  /// Whether warp 3 of the producer warpgroup loads the statistics (backward_producer.cuh).
  static constexpr bool kStatisticsWarp = kDqTransposed;
  static constexpr int kInfoOffset = 2 * kBlockM * 4;  // in a stage's statistics
  static constexpr int kStatsAlign = kStatsInStage ? 1024 : 16;
  static constexpr int kStatsBytes =
      (kInfoOffset + 12 + kStatsAlign - 1) / kStatsAlign * kStatsAlign;
  static constexpr int kDoStageOffset = QTile::kBytes;
  static constexpr int kDqExtraStageOffset = kDoStageOffset + DoTile::kBytes;
  static constexpr int kStatsStageOffset = kDqExtraStageOffset + kConsumers * kDqExtraBytes;
  static constexpr int kStageBytes = kStatsStageOffset + (kStatsInStage ? kStatsBytes : 0);
  static_assert(kStageBytes % 1024 == 0, "1024-byte aligned stages");

  // Shared memory from a 1024-byte aligned base: K, V, the stages, two [key][query] tiles (the
  // alternating dS^T, or P^T and dS^T), the dQ buffers, the stages' statistics (80 rows), the
  // key block's FlashMask values, the K/V barrier, the ring's barriers.
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = KTile::kBytes;
  static constexpr int kStagesOffset = KTile::kBytes + VTile::kBytes;
  static constexpr int kTilesOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kDqOffset = kTilesOffset + 2 * DsTile::kBytes;
  static constexpr int kStatsOffset = kDqOffset + kDqBuffers * kDqBufferBytes;
  static constexpr int kVectorOffset = kStatsOffset + (kStatsInStage ? 0 : kStages * kStatsBytes);
  static constexpr int kKvBarrierOffset = kVectorOffset + (kBlockN * kColumns * 4 + 7) / 8 * 8;
  static constexpr int kRingOffset = kKvBarrierOffset + 8;
  /// Dynamic shared memory, alignment slack included, except with 80-row blocks, which would
  /// not fit with it (the 1024-byte aligned dynamic shared memory starts 1024-byte aligned:
  /// run() traps otherwise).
  static constexpr int kAlignSlack = kDqTransposed ? 0 : 1024;
  static constexpr int kSmemBytes = kAlignSlack + kRingOffset + Ring::kBytes;

  WarpgroupAccumulator<kColsQK> acc_dk;
  WarpgroupAccumulator<kColsV> acc_dv;

  __device__ __forceinline__ static u32 stage_address(u32 base, int index) {
    return base + kStagesOffset + index * kStageBytes;
  }

  /// The LSE2 then D (kBlockM floats each) of stage `index` at `stage`, then its block's index,
  /// classification and query head (at kInfoOffset).
  __device__ __forceinline__ static u32 stats_address(u32 base, u32 stage, int index) {
    if constexpr (kStatsInStage) return stage + kStatsStageOffset;
    return base + kStatsOffset + index * kStatsBytes;
  }

  /// stats_address + kInfoOffset (one constant from the stage where it holds them).
  __device__ __forceinline__ static u32 info_address(u32 base, u32 stage, int index) {
    if constexpr (kStatsInStage) return stage + (kStatsStageOffset + kInfoOffset);
    return stats_address(base, stage, index) + kInfoOffset;
  }

  /// kDqInStage: box `box` of consumer `consumer`'s dQ half in `stage`: its Q panels, then its
  /// dO panels, then its extra part (`box` is a compile-time index where unrolled).
  __device__ __forceinline__ static u32 dq_box(u32 stage, int consumer, int box) {
    const int bytes = box * kDqStageBoxBytes;
    if (bytes < kQHalfBytes) return stage + consumer * kQHalfBytes + bytes;
    if (bytes < kQHalfBytes + kDoHalfBytes) {
      return stage + kDoStageOffset + consumer * kDoHalfBytes + (bytes - kQHalfBytes);
    }
    return stage + kDqExtraStageOffset + consumer * kDqExtraBytes +
           (bytes - kQHalfBytes - kDoHalfBytes);
  }

  /// The CTA's work: its key block, batch and first query head (the grid counts groups of
  /// p.head_group query heads, which the CTA walks one after another: backward_walk.cuh).
  __device__ __forceinline__ static CtaWork work_of(const BwdParams& p) {
    CtaWork work = cta_work<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
    work.head *= p.head_group;
    return work;
  }

  /// The mask state of the CTA's (first query head, batch), no rows yet, formed at its use (not
  /// held in registers across the loop) from the parameters and the CTA's mask row (read from
  /// shared memory: no division per block; the same for every head of the CTA's group).
  __device__ __forceinline__ static MaskState key_mask_state(const BwdParams& p) {
    const CtaWork work = work_of(p);
    return make_mask_state_at_row<kBlockN>(p, cta_mask_row<Mask>(), work.head, work.batch);
  }

  /// key_mask_state with query head `head` and the rows of query block `block`.
  __device__ __forceinline__ static MaskState query_block_mask_state(const BwdParams& p, int head,
                                                                     int block) {
    MaskState ms = key_mask_state(p);
    ms.head = head;
    ms.row_begin = block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
    return ms;
  }

  /// The first key of the CTA's block.
  __device__ __forceinline__ static int cta_key0(const BwdParams& p) {
    return work_of(p).block * kBlockN;
  }

  /// This consumer warpgroup's index (0, 1), read where used: nothing is held across the loop
  /// that the accumulators could use.
  __device__ __forceinline__ static int consumer_index() { return warpgroup_index() - 1; }

  /// Consumer `consumer`'s first key of the block, first query of S^T, and first column and
  /// first panel of dK (Q, K) and of dV (dO, V).
  __device__ __forceinline__ static int consumer_key0(int consumer) {
    return kSplitHeadDim ? 0 : 64 * consumer;
  }
  __device__ __forceinline__ static int consumer_query0(int consumer) {
    return kSplitHeadDim ? kQueries * consumer : 0;
  }
  __device__ __forceinline__ static int consumer_col0_qk(int consumer) {
    return kSplitHeadDim ? kColsQK * consumer : 0;
  }
  __device__ __forceinline__ static int consumer_col0_v(int consumer) {
    return kSplitHeadDim ? kColsV * consumer : 0;
  }
  __device__ __forceinline__ static int consumer_panel0_qk(int consumer) {
    return kSplitHeadDim ? kColPanelsQK * consumer : 0;
  }
  __device__ __forceinline__ static int consumer_panel0_v(int consumer) {
    return kSplitHeadDim ? kColPanelsV * consumer : 0;
  }

  /// The named barrier on which `consumer` hands a dQ tile to its writer warp. dQ buffers: one
  /// per consumer (the consumer waits for its buffer to be free first). dQ in the stage: one
  /// per ring stage, because the consumer arrives without waiting and may finish the next
  /// stage's block before the writer, held by a turn or by its reductions, has met it on this
  /// one; a single barrier would then count both arrivals in one round. A stage's barrier is
  /// used again only after the writer has released the stage, i.e. met its barrier.
  __device__ __forceinline__ static int dq_barrier(int consumer, int index) {
    return kDqInStage ? kDqBarrier + consumer * kStages + index : kDqBarrier + consumer;
  }

  __device__ __forceinline__ void run(const BwdParams& p, const BwdTensorMaps& maps,
                                      unsigned char* smem_raw) {
    start_cta<kLowBlocksFirst>(cta_order_of<kOrderedCtas>(p));
    // The missing half of the last head pair (schedule.cuh).
    if (work_of(p).head >= p.heads) return;

    const u32 base =
        kAlignSlack > 0 ? (smem_address(smem_raw) + 1023) & ~1023u : smem_address(smem_raw);
    if (kAlignSlack == 0 && base % 1024 != 0) __trap();
    if (threadIdx.x == 0) {
      store_cta_heads<Mask>(p, work_of(p));
      // K/V: the TMA thread, plus the lanes' cp.async of the FlashMask values. Ring stages:
      // the TMA thread and the lanes' cp.async of LSE2 and D; empty: one arrival per consumer
      // thread (after its last access to the stage; as in the forward, sm90a/forward.cuh's
      // release) and, with dQ in the stage, one per writer warp (after its reductions have
      // read it).
      mbarrier_init(base + kKvBarrierOffset, 1 + (kColumns > 0 ? 32 : 0));
      Ring{base + kRingOffset}.init(1 + 32, 128 * kConsumers + (kDqInStage ? kConsumers : 0));
      mbarrier_init_fence();
    }
    __syncthreads();

    if (warpgroup_index() == 0) {
      warpgroup_registers_decrease<Config::kProducerRegisters>();
      if (threadIdx.x < 32) {
        BackwardProducer<BackwardSm90a>::run(p, maps, base);
      } else if (threadIdx.x < 32 * (1 + kConsumers)) {
        DqWriter::run(p, maps, base, threadIdx.x / 32 - 1);
      } else if constexpr (kStatisticsWarp) {
        BackwardProducer<BackwardSm90a>::run_statistics(p, base);
      }
      return;
    }
    warpgroup_registers_increase<Config::kConsumerRegisters>();
    consume(p, maps, base);
  }

  /// A consumer warpgroup: its share of each query block, then its dK and dV.
  __device__ __forceinline__ void consume(const BwdParams& p, const BwdTensorMaps& maps, u32 base) {
    const Ring ring{base + kRingOffset};
    RingState state;
    acc_dk.fill(0.f);
    acc_dv.fill(0.f);
    mbarrier_wait(base + kKvBarrierOffset, 0);
    // dQ buffers: each block's dQ is handed to the writer during the next block's first
    // products (or after the last block), so that its stores run while the tensor cores work.
    WarpgroupAccumulator<kDqAccCols> acc_dq;
    if constexpr (!kDqInStage) {
      // Defined before the loop: the machine code measured on the GPU has it (without it ptxas
      // schedules the loop otherwise).
      acc_dq.fill(0.f);
    }
    for (int it = 0;; ++it) {
      ring.consumer_wait(state);
      const u32 info = info_address(base, stage_address(base, state.index), state.index);
      const int block = load_shared_s32(info);
      if (block < 0) {
        if constexpr (!kDqInStage) {
          if (it > 0) DqWriter::hand(base, acc_dq);
        }
        break;
      }
      const int tile = load_shared_s32(info + 4);
      const int head = load_shared_s32(info + 8);
      // dQ buffers: the block's dS^T tile alternates; dQ in the stage: P^T, then dS^T.
      const u32 smem_ds = base + kTilesOffset + (kDqInStage ? 1 : it % 2) * DsTile::kBytes;
      if constexpr (kDqInStage) {
        // The block's dQ product has completed in its iteration: the consumer is done with
        // the stage.
        WarpgroupAccumulator<kDqAccCols> block_dq;
        iterate(p, base, smem_ds, head, block, tile, ring, state, block_dq, false);
        ring.consumer_release(state);
      } else {
        iterate(p, base, smem_ds, head, block, tile, ring, state, acc_dq, it > 0);
      }
      state.advance();
    }
    const CtaWork work = work_of(p);
    // No partials: one query head per KV head, or the CTA walked all of its KV head's.
    if (p.dk_partial == nullptr) {
      Epilogue::store(p, maps, base, work, acc_dk, acc_dv);
      return;
    }
    if constexpr (!kOrderedDq) {
      // dQ in the stage: the end's stage, which carries no data.
      Epilogue::add(p, maps, base, kDqInStage ? stage_address(base, state.index) : 0u, work, acc_dk,
                    acc_dv);
      return;
    }
    // GQA, deterministic mode: fp32 dK and dV of this query head, which backward_reduce_dkdv
    // sums per K/V head in order (the writer warps wait for their dQ reductions).
    // (The consumer's index is read where the split needs it.)
    const int consumer = consumer_index();
    store_dkdv_tile<Element, kHeadDimQK, kHeadDimV>(
        p, work.head, work.batch,
        work.block * kBlockN + consumer_key0(consumer) + 16 * ((read_tid_x() / 32) % 4),
        consumer_col0_qk(consumer), consumer_col0_v(consumer), acc_dk.tiles(), acc_dv.tiles());
  }

  /// One query block of query head `head`: the five products of the consumer. Element (nt, e) of
  /// its m64 x kQueries S^T is key row key_row0 + g + 8 (e / 2), query column q0 + 8 nt + 2 t + e
  /// % 2. dQ buffers: dQ is left in acc_dq, whose previous block (`dq_pending`) goes to the writer
  /// while S^T runs (dP^T is issued after those stores), and the stage is released once the
  /// products that read it have completed. dQ in the stage: dQ goes into the consumer's Q and dO
  /// panels.
  __device__ __forceinline__ void iterate(const BwdParams& p, u32 base, u32 smem_ds, int head,
                                          int block, int tile, const Ring& ring,
                                          const RingState& state,
                                          WarpgroupAccumulator<kDqAccCols>& acc_dq,
                                          bool dq_pending) {
    const int consumer = consumer_index();
    const u32 stage = stage_address(base, state.index);
    const int lane = read_tid_x() % 32;
    const int key_row0 = consumer_key0(consumer) + 16 * ((read_tid_x() / 32) % 4);
    const int q0 = consumer_query0(consumer);
    const int g = lane / 4;
    const int t = lane % 4;
    const u32 smem_k = base + kKOffset;
    const u32 smem_v = base + kVOffset;
    const u32 smem_q = stage;
    const u32 smem_do = stage + kDoStageOffset;
    const u32 lse_log2 = stats_address(base, stage, state.index);  // kBlockM floats, then D
    const u32 row_dot = lse_log2 + kBlockM * 4;
    const u32 smem_p = base + kTilesOffset;  // dQ in the stage: P^T

    // S^T = K Q^T and dP^T = V dO^T, issued together. P^T is computed while dP^T is in
    // flight, except under soft-capping, where P^T (1 - tanh^2) would have to wait for dP^T in
    // fp32 registers: there dS^T is formed in the same pass, once both are done.
    WarpgroupAccumulator<kQueries> acc_s;
    WarpgroupAccumulator<kQueries> acc_dp;
    wgmma_fence();
    Products::template keys_times_queries<KTile, QTile>(acc_s.tiles(), smem_k, smem_q, consumer);
    if constexpr (!kDqInStage) {
      if (dq_pending) {
        // The last block's dQ product has completed (waited for in its iteration); this wait,
        // for every group but S^T's (the only one in flight), shows ptxas that acc_dq is free
        // to read (else it injects a wait for S^T before the stores).
        wgmma_wait<1>();
        fence_accumulators(acc_dq.tiles());
        DqWriter::hand(base, acc_dq);
      }
      wgmma_fence();
    }
    Products::template keys_times_queries<VTile, DoTile>(acc_dp.tiles(), smem_v, smem_do, consumer);
    // A predicate's partial tile: one bit per element of the thread's fragment of S^T (rows
    // g, g + 8 are keys, columns queries), from the stored bits or the element rule, read
    // while the products run.
    unsigned long long hidden = 0;
    if constexpr (Mask::kElementBits) {
      if (tile_kind(tile) == kTilePartial) {
        hidden = element_bits(p, head, block, tile, key_row0 + g, t);
      }
    }
    if constexpr (Score::kSoftcap) {
      wgmma_wait<0>();
      fence_accumulators(acc_dp.tiles());
    } else {
      wgmma_wait<1>();
    }
    fence_accumulators(acc_s.tiles());

    const MaskState ms = query_block_mask_state(p, head, block);
    const int key0 = cta_key0(p);
    if (tile_kind(tile) == kTilePartial) {
      if constexpr (Mask::kElementBits) {
        mask_by_bits(acc_s, 0, hidden);
      } else if constexpr (Mask::kHasVectors && !kSplitHeadDim) {
        // Bounds per key: no query index per element held in registers (d128 spilled).
        mask_scores_by_key_bounds<Mask>(ms, acc_s, base + kVectorOffset, key0, key_row0, lane);
      } else {
        mask_scores_by_key<Mask>(p, ms, acc_s, base + kVectorOffset, key0, key_row0, q0, lane);
      }
    }

    // P^T = 2^(S^T c - LSE2): 0 where masked and in rows that see no key (LSE2 = +inf).
    // Score modifiers apply after the mask; P^T is packed at once. dS^T = P^T (dP^T - D)
    // (P^T (1 - tanh^2) under soft-capping, else the packed P^T read back, as the sm80 kernels
    // do), packed too.
    Pairs a_p;
    Pairs a_ds;
    const Score score = Score::make_for_head(p, head);
    const int distance0 = key0 + key_row0 + g - (ms.row_begin + q0 + 2 * t + ms.diagonal);
    TransposedPairs<1, kSTiles>::probabilities(
        p, score, ms, acc_s.v, lse_log2, q0, t, distance0,
        [=, &a_p, &a_ds, &acc_dp](int, int nt, int r, const float(&value)[2],
                                  const float(&grad)[2]) {
          a_p.v[0][nt / 2][operand_register(nt, r)] = pack2<Element>(value[0], value[1]);
          if constexpr (Score::kSoftcap) {
            float d[2];
            load_shared_v2_f32(row_dot + (q0 + nt * 8 + 2 * t) * 4, d[0], d[1]);
            store_ds_pair(a_ds, smem_ds, nt, r, key_row0 + g, 2 * t,
                          value[0] * grad[0] * (acc_dp.v[0][nt][2 * r] - d[0]),
                          value[1] * grad[1] * (acc_dp.v[0][nt][2 * r + 1] - d[1]));
          }
        });
    if constexpr (!Score::kSoftcap) {
      wgmma_wait<0>();
      fence_accumulators(acc_dp.tiles());
      TransposedPairs<1, kSTiles>::row_dots(
          row_dot, q0, t, [=, &a_p, &a_ds, &acc_dp](int, int nt, int r, const float(&d)[2]) {
            const u32 p_pair = a_p.v[0][nt / 2][operand_register(nt, r)];
            store_ds_pair(a_ds, smem_ds, nt, r, key_row0 + g, 2 * t,
                          unpack_lo<Element>(p_pair) * (acc_dp.v[0][nt][2 * r] - d[0]),
                          unpack_hi<Element>(p_pair) * (acc_dp.v[0][nt][2 * r + 1] - d[1]));
          });
    }
    if constexpr (kDqInStage) {
      // Both consumers' products of the last block have completed: the tiles are free.
      named_barrier_sync(kTilesFreeBarrier, 128 * kConsumers);
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int offset = DsTile::element_offset(key_row0 + g + 8 * r, q0 + nt * 8 + 2 * t);
          store_shared_u32(smem_p + offset, a_p.v[0][nt / 2][operand_register(nt, r)]);
          store_shared_u32(smem_ds + offset, a_ds.v[0][nt / 2][operand_register(nt, r)]);
        }
      }
      fence_async_shared();
      named_barrier_sync(kDsBarrier, 128 * kConsumers);
    } else if constexpr (kDqTransposed) {
      Products::store_ds_transposed(a_ds.v[0], smem_ds, key_row0, lane);
    }

    // dV += P^T dO and dK += dS^T Q (dQ buffers: running while the consumers meet for dS^T),
    // then dQ_i = dS K.
    wgmma_fence();
    Products::add_dv_dk(acc_dv.tiles(), acc_dk.tiles(), a_p, a_ds, smem_p, smem_ds, smem_do, smem_q,
                        consumer);
    if constexpr (!kDqInStage) {
      fence_async_shared();
      if constexpr (kDqByColumns) {
        named_barrier_sync(kDsBarrier, 128 * kConsumers);
      } else {
        // Only this consumer's rows of dS^T are read: its own barrier.
        named_barrier_sync(kOwnBarrier + consumer, 128);
      }
      // The registers the last block's dQ stores read are the accumulator's again.
      wgmma_fence();
    }
    Products::dq_product(acc_dq.tiles(), smem_ds, smem_k, consumer);
    if constexpr (kDqInStage) {
      wgmma_wait<0>();
      fence_accumulators(acc_dk.tiles());
      fence_accumulators(acc_dv.tiles());
      fence_accumulators(acc_dq.tiles());
      // The dQ half into the consumer's Q and dO panels (read by nothing else now), then to
      // its writer.
      store_fp32_boxes<kDqCols, kDqBoxCols>(
          [stage, consumer](int box) { return dq_box(stage, consumer, box); }, 0, acc_dq.tiles(),
          1.f);
      fence_async_shared();
      named_barrier_arrive(dq_barrier(consumer, state.index), kWriterThreads);
    } else {
      // dV and dK have read Q and dO: the stage goes back to the producer.
      wgmma_wait<1>();
      fence_accumulators(acc_dk.tiles());
      fence_accumulators(acc_dv.tiles());
      ring.consumer_release(state);
      wgmma_wait<0>();
      fence_accumulators(acc_dq.tiles());
    }
  }

  /// Rounds the dS^T pair of tile nt, row half r (key row key_row + 8 r, query columns
  /// 8 nt + col, + 1) into dK's A operand and, for dQ from the [key][query] tile at smem_ds,
  /// into that tile (dQ^T: the whole operand is stored after, store_ds_transposed; dQ in the
  /// stage: with P^T, once the tiles are free).
  __device__ __forceinline__ static void store_ds_pair(Pairs& a_ds, u32 smem_ds, int nt, int r,
                                                       int key_row, int col, float ds0, float ds1) {
    const u32 pair = pack2<Element>(ds0, ds1);
    a_ds.v[0][nt / 2][operand_register(nt, r)] = pair;
    if constexpr (!kDqTransposed && !kDqInStage) {
      store_shared_u32(smem_ds + DsTile::element_offset(key_row + 8 * r, nt * 8 + col), pair);
    }
  }

  /// A predicate's hidden elements of the thread's S^T fragment (key rows `key_row`, + 8 of the
  /// block, the consumer's query columns q0 + 2 t (+ 1) + 8 nt of query block `block` of query
  /// head `head`) in
  /// partial tile `tile` (the block table's entry): its stored bits (predicate_blocks.cuh, rows
  /// are keys; with half the queries, the word of the consumer's), or the element rule where
  /// the tile has no slot of bits.
  __device__ __forceinline__ static unsigned long long element_bits(const BwdParams& p, int head,
                                                                    int block, int tile,
                                                                    int key_row, int t) {
    const int consumer = kSplitHeadDim ? consumer_index() : 0;
    if (tile_bits_slot(tile) >= 0) {
      if constexpr (kSplitHeadDim) {
        static_assert(kQueries == 32, "one 32-bit word of a key row's bits per consumer");
        const FragmentWords<kBlockM / 32> row =
            Mask::template load_fragment_words<kBlockM / 8, true>(p.predicate_bits, tile, key_row);
        FragmentWords<1> mine;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          // A select, not an index by the consumer: the row's words stay in registers.
          mine.words[r][0] = consumer == 0 ? row.words[r][0] : row.words[r][1];
        }
        return Mask::template fragment_bits<kSTiles>(mine, 2 * t);
      } else {
        return Mask::template fragment_bits<kSTiles>(
            Mask::template load_fragment_words<kSTiles, true>(p.predicate_bits, tile, key_row),
            2 * t);
      }
    }
    const MaskState ms = query_block_mask_state(p, head, block);
    return Mask::template evaluate_bits<kSTiles, true>(p, ms, key_row, 2 * t, cta_key0(p),
                                                       ms.row_begin + consumer_query0(consumer));
  }
};

/// The body of a generated sm90a backward (dK, dV, dQ by TMA reductions) kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void backward_sm90a(const BwdParams& params, const BwdTensorMaps& maps) {
  run_kernel<BackwardSm90a<Config, Mask, Score>, 1024>(params, maps);
}

}  // namespace attnjit
