// The forward attention kernel of the sm90a family (FA3 structure: TMA, mbarrier rings, warp
// specialization, wgmma).
//
// One CTA of 1 + kConsumers warpgroups owns kBlockM = 64 x kConsumers query rows of one
// (head, batch): two consumers (128 rows); three (192 rows) at small head dims, where the
// softmax's exponentials take as long as the products and two softmaxes must hide behind one
// warpgroup's products; or one (64 rows, two CTAs per SM), where query blocks visit few key
// blocks and one CTA's start and epilogue should run beside another's products:
//   producer   warpgroup 0 gives its registers away (setmaxnreg) and one warp of it feeds Q
//              once and rings of K and V stages by TMA (forward_producer.cuh);
//   consumers  warpgroups 1 .. kConsumers take the registers and 64 query rows each:
//                S = Q K^T      wgmma SS, Q and K straight from the swizzled stages
//                scores         score modifiers; the mask on partial blocks only
//                               (forward_scores.cuh)
//                softmax        online, on the accumulator fragment (softmax.cuh)
//                O += P V       wgmma RS, P packed from the softmax's registers
// Within a warpgroup, S of block j + 1 is issued with O += P V of block j, and the softmax
// of block j + 1 runs while O += P V does; O takes block j's correction while S is computed.
// With kPingPong the consumers take turns, in a ring, to issue their products (named
// barriers), so their softmaxes run while another's products hold the tensor cores. Under
// masks by index every warp walks the key blocks itself (key_block_walk.cuh); under masks
// with tables the producer's walk feeds the consumers through the K stages (kFedWalk). From
// head dim 128 the softmax's steps are lazy (a row keeps its max until it rises by more than
// 2^8) and O is rescaled only where a row of the warp moved its max (kLazyRescale,
// kSkipRescale). The epilogue writes O through shared memory and TMA (forward_epilogue.cuh).
//
// kPersistent (the registry's rule: masks with a CTA order, two or three consumers, head_dim_v
// up to 128): a grid of min(works, SMs) CTAs, each taking works (query blocks) of the CTA order,
// which sorts them heaviest first: launch index blockIdx.x, then those its producer draws from
// a counter (forward_producer.cuh's draw_work). The producer decodes each work, publishes it
// in a shared slot (two, by the works' parity) and loads the next work's Q and first K block
// while the consumers end the current one (the Q tile's empty barrier), the rings running on
// from work to work; O goes out through a tile of its own, its store running under the next
// work. Otherwise one CTA per work (schedule.cuh's CTA order).
//
// Head dims: kHeadDimQK for Q and K (the Q tile, the K stages, the k16 steps of Q K^T),
// kHeadDimV for V and O (the V stages, O's accumulator, O += P V, the epilogue); O goes out
// through the Q tile where its panels fit there (kHeadDimV <= kHeadDimQK), else through a tile
// of its own.
//
// Over a KV cache (kKvCache: prefill.cuh, the launch's choice where a call has many new tokens)
// the keys and values are the cache's: contiguous [B, capacity, Hkv, D], or pages of a
// pool [num_pages, page_size, Hkv, D] found through the block table, copied as boxes of up to a
// page's rows (forward_producer.cuh). Each sequence's keys are its cached length plus the keys
// the call appended, the causal diagonal and the window at the bottom right of them.
//
// Config (bound by the generated code): Element, kHeadDimQK, kHeadDimV, kBlockM, kBlockN,
// kStages, kReturnLse, kPingPong, kProducerRegisters, kConsumerRegisters, kPersistent, kPacked
// (a packed batch), and kKvCache for prefill.cuh. Score: a ScoreMod. The kernel takes (FwdParams,
// FwdTensorMaps), 128 (1 + kConsumers) threads, one CTA per SM (two of one consumer).
#pragma once

#include "attnjit/common/key_block_walk.cuh"
#include "attnjit/common/kv_cache.cuh"
#include "attnjit/common/softmax.cuh"
#include "attnjit/sm90a/forward_epilogue.cuh"
#include "attnjit/sm90a/forward_producer.cuh"
#include "attnjit/sm90a/forward_scores.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The work slots of a persistent forward CTA (ForwardSm90a::work_slot_address): two works of
/// five words each.
__shared__ int persistent_work_slots[2][5];

/// dtype=e4m3: the CTA's descale factors, written before the CTA's barrier (FwdParams'
/// q_descale * k_descale, then v_descale, of its (batch, KV head)); plain loads, which the
/// compiler may keep in a register within a loop.
__shared__ float fp8_descales[2];

/// dtype=e4m3 in a packed batch with factors per sequence (FwdParams::descale_rows): the
/// scores' factor ([0]) and O's ([1]) of each query row of the work, by consumer (64 rows
/// each), written and read by the warp that holds the row (in shared memory: registers held
/// across the key loop, or the search at the epilogue, spilled at head dim 256).
__shared__ float fp8_row_descales[2][4 * 64];

/// dtype=e4m3: Score with the scores' descale (q_descale * k_descale) folded into the scale
/// that turns a raw q . k into log2 units, as softmax_scale is (the accumulators hold the
/// products of the e4m3 values).
template <class Score>
struct DescaledScore : Score {
  template <class Params>
  __device__ __forceinline__ static DescaledScore make_for_head(const Params& p, int head) {
    DescaledScore m;
    static_cast<Score&>(m) = Score::make_for_head(p, head);
    m.scale_log2 *= fp8_descales[0];
    m.softcap_exp2 *= fp8_descales[0];
    return m;
  }
  template <bool kOrderedCtas, class Params>
  __device__ __forceinline__ static DescaledScore make(const Params& p) {
    return make_for_head(
        p, Score::kAlibi ? cta_work<true>(cta_order_of<kOrderedCtas>(p)).head : 0);
  }
  template <class Params>
  __device__ __forceinline__ static float exponent_scale(const Params& p) {
    return Score::kActive ? 1.f : p.scale_log2 * fp8_descales[0];
  }
};

template <class Config, class Mask, class ScoreArg = ScoreMod<false, false>,
          int kKvLayout = kKvTensors>
struct ForwardSm90a {
  typedef typename Config::Element Element;
  /// e4m3 inputs: Q, K and V of one byte an element, O in bf16 (kFp8).
  static constexpr bool kFp8 = is_e4m3<Element>();
  typedef typename Select<kFp8, bf16, Element>::type OutElement;
  typedef typename Select<kFp8, DescaledScore<ScoreArg>, ScoreArg>::type Score;
  static constexpr int kHeadDimQK = Config::kHeadDimQK;
  static constexpr int kHeadDimV = Config::kHeadDimV;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kStages = Config::kStages;
  static constexpr int kConsumers = kBlockM / 64;
  static_assert(!kFp8 || kConsumers <= 4, "fp8_row_descales holds four consumers' rows");
  /// Turns between consumers (a lone consumer takes none).
  static constexpr bool kPingPong = Config::kPingPong && kConsumers > 1;
  /// The Q, K and V tiles as 16-bit tiles: head dim columns, or with e4m3 half as many (an
  /// 8-bit tile is laid out as the 16-bit tile of half its columns, SmemTile8), so that their
  /// panels, boxes and descriptors are the 16-bit ones and a k32 e4m3 step is a k16 step.
  static constexpr int kQkCols = kFp8 ? kHeadDimQK / 2 : kHeadDimQK;
  static constexpr int kVCols = kFp8 ? kHeadDimV / 2 : kHeadDimV;
  static constexpr int kSTiles = kBlockN / 8;                     // n8 tiles of S
  static constexpr int kDTiles = kHeadDimV / 8;                   // n8 tiles of O
  static constexpr int kQkSteps = kQkCols / 16;                   // k16 (e4m3: k32) steps of Q K^T
  static constexpr int kPvSteps = kFp8 ? kBlockN / 32 : kBlockN / 16;  // k16 / k32 steps of P V
  static constexpr int kColumns = Mask::kColumns;
  static constexpr bool kElementBits = Mask::kElementBits;
  /// Partial blocks take the FlashMask rule element by element (mask_scores' kDirect) with one
  /// or four vectors, where it is faster than the per-block bounds, and with a packed batch's
  /// visible vectors (read unhoisted, see mask_scores); with two vectors the causal families
  /// were slower by it (and d128 spilled).
  static constexpr bool kDirectMask = kColumns == 1 || kColumns == 4 || Mask::kHasVisible;
  /// Named barriers: the consumers' turns (1 .. kConsumers) and their epilogues (after).
  static constexpr int kTurnBarrier = 1;
  static constexpr int kEpilogueBarrier = kTurnBarrier + kConsumers;

  static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 192,
                "one, two or three consumer warpgroups of 64 rows");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "key blocks of whole k16 steps, N <= 256");
  static_assert(kHeadDimQK % 32 == 0 && kHeadDimV % 32 == 0,
                "64-column panels (128-byte swizzle) or 32 (64-byte)");
  static_assert(kStages >= 2, "K and V rings of at least two stages");
  static_assert(!kElementBits || kSTiles <= 16, "a predicate's fragment bits fit 64 bits");

  static_assert(!kFp8 || (kBlockN % 64 == 0 && kKvLayout == kKvTensors && !Config::kPersistent),
                "e4m3: key blocks of whole 64-byte V^T rows, over the call's tensors, one CTA "
                "per work");

  typedef Mask MaskType;
  typedef SmemTile<kBlockM, kQkCols> QTile;
  typedef SmemTile<kBlockN, kQkCols> KTile;
  typedef SmemTile<kBlockN, kVCols> VTile;
  typedef SmemTile<kBlockM, kHeadDimV> OTile;
  /// kFp8: V^T of a block, [head_dim_v][kBlockN] e4m3, the K-major B of O += P V, its columns
  /// in the key order of the packed P (fp8_operand_key); written from the V stage by the
  /// producer warpgroup's other warps (forward_producer.cuh's ForwardTransposer).
  typedef SmemTile8<kHeadDimV, kFp8 ? kBlockN : 64> VtTile;
  typedef ForwardProducer<ForwardSm90a> Producer;
  /// The TMA boxes: a panel of the Q tile, of the K and V tiles, and of a consumer's 64 rows of
  /// O (in OTile's layout).
  static constexpr TmaBox kQBox = panel_box(kBlockM, QTile::kPanelCols);
  static constexpr TmaBox kKBox = panel_box(kBlockN, KTile::kPanelCols);
  static constexpr TmaBox kVBox = panel_box(kBlockN, VTile::kPanelCols);
  static constexpr TmaBox kOBox = panel_box(64, OTile::kPanelCols);
  static constexpr int kVectorStageBytes = kBlockN * kColumns * 4;

  static constexpr bool kPersistent = Config::kPersistent;
  /// A packed batch (varlen): with e4m3, its descales may be per sequence, hence per row
  /// (FwdParams::descale_rows).
  static constexpr bool kRowDescales = kFp8 && Config::kPacked;
  /// Over a KV cache (kKvContiguous, kKvPaged): each sequence has its own keys, and rows of the
  /// cache past them may hold anything (NaN included), so the V block that holds a sequence's
  /// end is zeroed past it (0 x NaN would reach O; scores of those keys are masked).
  static constexpr int kKvCache = kKvLayout;
  static constexpr bool kPaged = kKvLayout == kKvPaged;
  static_assert(kKvCache == kKvTensors || !kPersistent, "over a KV cache: one CTA per work");
  /// Works in the mask's CTA order (cta_order.cuh): under masks with tables, but not over a KV
  /// cache, whose works are few and whose rows are positions the order's costs do not know.
  static constexpr bool kCtaOrder = Mask::kOrderedCtas && kKvCache == kKvTensors;
  /// O in the Q tile's place: each panel of O is the Q tile's panel of the same columns, a
  /// consumer's rows its own rows of Q (read no longer once its Q K^T products completed).
  static constexpr bool kOInQTile =
      OTile::kPanelCols == QTile::kPanelCols && OTile::kBytes <= QTile::kBytes;
  /// An O tile of its own: persistent (the next work's Q lands meanwhile), or O wider than Q.
  static constexpr bool kOwnOTile = kPersistent || !kOInQTile;
  /// Lazy rescaling (softmax.cuh) from head_dim_v 128, where the output rows a step rescales
  /// are 64 or more per thread (enough for the skipped work to pay; at d64 it does not).
  static constexpr bool kLazyRescale = kHeadDimV >= 128;
  /// Under masks with tables (FlashMask, predicates) the producer's walk is the only one: it
  /// writes each K stage's block, its classification and whether another block follows into
  /// the stage's slot (BlockSlotWord), and a work without a visited block gets one stage whose
  /// block is -1; the consumers read the slot with the stage, and the next block is known
  /// before its S is issued. The walk (table reads, a window's classification, the bit scans
  /// and shuffles) is then compiled once, not in the producer and again at each of a
  /// consumer's uses, and its latency is off the consumers' path (walked by every consumer
  /// warp, it had to run a block ahead, under the products, and its shuffle stalled the
  /// consumers between S and the softmax). Masks by index keep every warp's walk, by arithmetic.
  static constexpr bool kFedWalk = WarpKeyBlockWalk<Mask, kBlockN>::kTables;
  /// The K stages' empty barrier takes one arrival per consumer warp, or per consumer thread
  /// where the stages hold FlashMask values, which every thread reads (see release()). The
  /// block slot is read by lane 0 where the release is per warp (read_block_slot).
  static constexpr bool kKReleasePerWarp = kColumns == 0;
  /// Steps that keep the rows' running maxima where every P stays within the lazy limit
  /// (OnlineSoftmax::step_keeping_max: no block max, no shuffles), P in a fragment of its own so
  /// that the scores remain for a full step where they do not: with e4m3, whose products take
  /// half of bf16's time and leave the softmax to set the pace; where S and P fit a consumer's
  /// registers beside O (two consumers, key blocks up to 128, and not under a fed walk, whose
  /// producer keeps 48 registers: the consumers' 232 spilled).
  static constexpr bool kKeepMax = kFp8 && kConsumers <= 2 && kBlockN <= 128 && !kFedWalk;
  /// Whether the output's rescaling is skipped where no row of the warp moved its max (a warp
  /// vote): with lazy steps, and under masks with tables, where the vote pays for itself (under
  /// masks by index it does not).
  static constexpr bool kSkipRescale = kLazyRescale || kFedWalk || kKeepMax;
  static_assert(!kPersistent || (Mask::kOrderedCtas && kConsumers >= 2),
                "persistent: works sorted by a CTA order, two or three consumers");

  // Shared memory from a 1024-byte aligned base: Q, the K stages, the V stages, the V^T stages
  // (kFp8), the O tile (kOwnOTile), the FlashMask values of each K stage, the block slot of
  // each K stage (kFedWalk), the V slot of each V stage (kFp8 and kFedWalk), the barriers (Q
  // full, Q empty, the K ring's, the V ring's, the V^T ring's).
  static constexpr int kKOffset = QTile::kBytes;
  static constexpr int kVOffset = kKOffset + kStages * KTile::kBytes;
  static constexpr int kVtOffset = kVOffset + kStages * VTile::kBytes;
  static constexpr int kVtBytes = kFp8 ? kStages * VtTile::kBytes : 0;
  static constexpr int kOOffset = kOwnOTile ? kVtOffset + kVtBytes : 0;
  static constexpr int kVectorOffset = kVtOffset + kVtBytes + (kOwnOTile ? OTile::kBytes : 0);
  static constexpr int kBlockSlotOffset = kVectorOffset + kStages * kVectorStageBytes;
  static constexpr int kVSlotOffset = kBlockSlotOffset + (kFedWalk ? kStages * 16 : 0);
  static constexpr int kBarrierOffset = kVSlotOffset + (kFp8 && kFedWalk ? kStages * 16 : 0);
  static constexpr int kQEmptyOffset = kBarrierOffset + 8;
  static constexpr int kKRingOffset = kQEmptyOffset + 8;
  static constexpr int kVRingOffset = kKRingOffset + Pipeline<kStages>::kBytes;
  static constexpr int kVtRingOffset = kVRingOffset + Pipeline<kStages>::kBytes;
  /// Dynamic shared memory, alignment slack included.
  static constexpr int kSmemBytes =
      1024 + kVtRingOffset + (kFp8 ? Pipeline<kStages>::kBytes : 0);
  /// kFp8: the producer warpgroup's warps 1 .. 3 write V^T (ForwardTransposer).
  static constexpr int kTransposerWarps = 3;
  /// kPersistent: the Q tile and the work slot of the work before are free for the next work
  /// once every consumer thread's last Q K^T of the current work has completed: an arrival per
  /// thread, as compute-sanitizer's racecheck does not follow a warp's reads of the slot to
  /// its lane 0 through __syncwarp.
  static constexpr int kQEmptyArrivals = 128 * kConsumers;

  __device__ __forceinline__ void run(const FwdParams& p, const FwdTensorMaps& maps,
                                      unsigned char* smem_raw) {
    if constexpr (!kPersistent) {
      // The CTA order (schedule.cuh) when the mask has one; otherwise heaviest rows first.
      start_cta<false>(cta_order_of<kCtaOrder>(p));
      if (cta_work<false>(cta_order_of<kCtaOrder>(p)).head >= p.heads) return;
      if constexpr (kKvCache != kKvTensors) {
        // Ragged new tokens: the query blocks past the sequence's count have no rows.
        const CtaWork work = cta_work<false>(cta_order_of<kCtaOrder>(p));
        if (work.block * kBlockM >= new_tokens(p, work.batch).count) return;
      }
    }
    const u32 base = (smem_address(smem_raw) + 1023) & ~1023u;
    if (threadIdx.x == 0) {
      if constexpr (!kPersistent) {
        store_cta_heads<Mask>(p, cta_work<false>(cta_order_of<kCtaOrder>(p)));
      }
      if constexpr (kKvCache != kKvTensors) {
        const int batch = cta_work<false>(cta_order_of<kCtaOrder>(p)).batch;
        const NewTokens rows = new_tokens(p, batch);
        kv_cache_rows_slot = rows;
        kv_cache_keys_slot = cache_length(p, batch, appended_keys(p, rows));
        mbarrier_init(smem_address(&kv_cache_tail_barrier), Producer::ring_arrivals(p));
      }
      mbarrier_init(base + kBarrierOffset, 1);
      mbarrier_init(base + kQEmptyOffset, kQEmptyArrivals);
      // K stages: the TMA thread of each warp that copies K (Producer::ring_arrivals), plus
      // the lanes' cp.async of the FlashMask values. Empty: kKReleasePerWarp's arrivals. V
      // stages: the TMA thread of each warp that copies V; empty: one arrival per consumer
      // warp.
      const int copiers = Producer::ring_arrivals(p);
      Pipeline<kStages>{base + kKRingOffset}.init(copiers + (kColumns > 0 ? 32 : 0),
                                                  (kKReleasePerWarp ? 4 : 128) * kConsumers);
      // kFp8: the transposer warps' threads take the V stages (an arrival each on empty) and
      // fill the V^T stages (an arrival each on full), which the consumer warps release.
      Pipeline<kStages>{base + kVRingOffset}.init(copiers,
                                                  kFp8 ? 32 * kTransposerWarps : 4 * kConsumers);
      if constexpr (kFp8) {
        Pipeline<kStages>{base + kVtRingOffset}.init(32 * kTransposerWarps, 4 * kConsumers);
        const CtaWork work = cta_work<false>(cta_order_of<kCtaOrder>(p));
        const int kv_head = work.head / (p.heads / p.kv_heads);
        // Factors per sequence of a packed batch are the rows' (row_descales).
        fp8_descales[0] =
            fp8_descale(p, 0, work.batch, kv_head) * fp8_descale(p, 1, work.batch, kv_head);
        fp8_descales[1] = fp8_descale(p, 2, work.batch, kv_head);
        if constexpr (kRowDescales) {
          if (p.descale_rows) fp8_descales[0] = fp8_descales[1] = 1.f;
        }
      }
      mbarrier_init_fence();
    }
    __syncthreads();

    if (warpgroup_index() == 0) {
      warpgroup_registers_decrease<Config::kProducerRegisters>();
      if (threadIdx.x < 32 * Producer::kWarps) {
        Producer::run(p, maps, base);
      } else if constexpr (kFp8) {
        if (threadIdx.x < 32 * (1 + kTransposerWarps)) {
          ForwardTransposer<ForwardSm90a>::run(p, base, threadIdx.x - 32);
        }
      }
      return;
    }
    warpgroup_registers_increase<Config::kConsumerRegisters>();
    const int consumer = warpgroup_index() - 1;
    const Pipeline<kStages> k_ring{base + kKRingOffset};
    // kFp8: the consumers read V^T, whose ring follows the V ring stage for stage.
    const Pipeline<kStages> v_ring{base + (kFp8 ? kVtRingOffset : kVRingOffset)};
    PipelineState<kStages> k_state, v_state;
    if constexpr (!kPersistent) {
      consume(p, maps, base, consumer, k_ring, v_ring, k_state, v_state, 0);
    } else {
      // The producer publishes each work in its slot before its Q arrives; a slot without a
      // work ends the loop.
      for (u32 parity = 0;; parity ^= 1) {
        mbarrier_wait(base + kBarrierOffset, parity);
        if (load_shared_s32(work_slot_address(parity, kSlotBlock)) < 0) break;
        consume(p, maps, base, consumer, k_ring, v_ring, k_state, v_state, parity);
      }
      // Shared memory must stay until the last O store has read it.
      if (threadIdx.x % 128 == 0) tma_store_wait_read<0>();
    }
  }

  /// The work slots of a persistent CTA: the works of parity 0 and 1 (the number of works the
  /// CTA took before, mod 2), written by the producer once the consumers no longer read the
  /// work two before (Q empty of the work before: they have passed its epilogue), read where
  /// used (volatile loads: not held in registers across the key loop). block < 0: no work.
  enum SlotWord { kSlotBlock, kSlotHead, kSlotBatch, kSlotKvHead, kSlotMaskRow };
  __device__ __forceinline__ static u32 work_slot_address(u32 parity, int word) {
    return smem_address(&persistent_work_slots[parity][word]);
  }

  /// The work a warp is on: of parity `parity` (kPersistent), else the CTA's.
  __device__ __forceinline__ static CtaWork current_work(const FwdParams& p, u32 parity) {
    if constexpr (kPersistent) {
      return {load_shared_s32(work_slot_address(parity, kSlotBlock)),
              load_shared_s32(work_slot_address(parity, kSlotHead)),
              load_shared_s32(work_slot_address(parity, kSlotBatch))};
    } else {
      return cta_work<false>(cta_order_of<kCtaOrder>(p));
    }
  }

  /// The K/V head of the current work.
  __device__ __forceinline__ static int current_kv_head(u32 parity) {
    if constexpr (kPersistent) return load_shared_s32(work_slot_address(parity, kSlotKvHead));
    return cta_kv_head();
  }

  /// A consumer warpgroup's share of one work: rows [64 consumer, 64 consumer + 64) of the
  /// query block of parity `parity`. Its registers hold the accumulators (O, S, P) and little
  /// else: shared addresses and the mask state are formed where used (the block walk, partial
  /// blocks).
  __device__ __forceinline__ void consume(const FwdParams& p, const FwdTensorMaps& maps, u32 base,
                                          int consumer, const Pipeline<kStages>& k_ring,
                                          const Pipeline<kStages>& v_ring,
                                          PipelineState<kStages>& k_state,
                                          PipelineState<kStages>& v_state, u32 parity) {
    WarpgroupAccumulator<kHeadDimV> acc_o;
    acc_o.fill(0.f);
    WarpgroupAccumulator<kBlockN> acc_s;
    // P: in place of S, or kKeepMax in a fragment of its own.
    WarpgroupAccumulator<kBlockN> acc_kept;
    WarpgroupAccumulator<kBlockN>& acc_p = kKeepMax ? acc_kept : acc_s;
    OperandA<1, kPvSteps> p_frag;
    OnlineSoftmax<1> softmax;
    softmax.reset();
    float correction[1][2];
    // kRowDescales with factors per sequence (p.descale_rows): the factors of the thread's two
    // rows, the scores' applied to S before the mask and the score modifiers see it, O's at the
    // end.
    if constexpr (kRowDescales) {
      if (p.descale_rows) {
        float factors[2];
        row_descales(p, parity, consumer, 0, factors);
        fp8_row_descales[0][row_slot(consumer)] = factors[0];
        fp8_row_descales[0][row_slot(consumer) + 8] = factors[1];
        row_descales(p, parity, consumer, 2, factors);
        fp8_row_descales[1][row_slot(consumer)] = factors[0];
        fp8_row_descales[1][row_slot(consumer) + 8] = factors[1];
        __syncwarp();
      }
    }

    // The blocks: the producer's, from each K stage's slot (kFedWalk), or every warp walks
    // them itself (key_block_walk.cuh). `block`, `tile`: the block whose S is in flight or
    // ready and its classification; `more`: whether another block follows (kFedWalk).
    WarpKeyBlockWalk<Mask, kBlockN> walk;
    if constexpr (!kFedWalk) walk.begin(block_mask_state(p, parity), p.minmax, p.varlen);
    int block = 0;
    int tile = 0;
    bool more = false;
    // Every work's Q is waited for, also when no block follows: the epilogue may write into
    // the Q tile (one CTA per work), and the Q tile's phases stay in step with the producer's.
    mbarrier_wait(base + kBarrierOffset, parity);
    if (first_block(base, walk, k_ring, k_state, block, tile, more)) {
      turn_begin(consumer, /*first=*/true);
      wgmma_fence();
      multiply_qk(acc_s.tiles(), base, consumer, base + kKOffset + k_state.index * KTile::kBytes);
      wgmma_commit();
      turn_end(consumer);
      wgmma_wait<0>();
      fence_accumulators(acc_s.tiles());
      // The loop is rotated so that the score step has one copy (code size is compile time):
      // S of the block is ready at the top; O += P V of the block before is in flight.
      for (bool first = true;; first = false) {
        const u32 vectors = base + kVectorOffset + k_state.index * kVectorStageBytes;
        if constexpr (kRowDescales) {
          if (p.descale_rows) {
            scale_rows(acc_s.tiles(), {fp8_row_descales[0][row_slot(consumer)],
                                       fp8_row_descales[0][row_slot(consumer) + 8]});
          }
        }
        if constexpr (kFedWalk) {
          score_block(p, acc_s.tiles(), block, tile, vectors, consumer, parity);
        } else {
          score_block(p, acc_s.tiles(), walk.block,
                      walk.tile(block_mask_state(p, parity), p.minmax), vectors, consumer, parity);
        }
        release<kKReleasePerWarp>(k_ring, k_state);
        if (kKeepMax && !first && softmax.template step_keeping_max<Score>(p, acc_s, acc_p)) {
          correction[0][0] = correction[0][1] = 1.f;
        } else {
          softmax.template step<Score, kLazyRescale>(p, acc_s, acc_p, correction);
        }
        wgmma_wait<0>();
        fence_accumulators(acc_o.tiles());
        if (!first) release(v_ring, v_state);
        pack_p(acc_p, p_frag);
        if constexpr (kFedWalk) {
          if (!more) break;
          k_ring.consumer_wait(k_state);
          read_block_slot(base, k_state.index, block, tile, more);
        } else {
          walk.next(block_mask_state(p, parity), p.minmax);
          if (!walk.more()) break;
          k_ring.consumer_wait(k_state);
        }
        // S of the next block is issued before O += P V of this one, and the next score step
        // runs while O += P V does; O takes this block's correction meanwhile.
        turn_begin(consumer, false);
        wgmma_fence();
        multiply_qk(acc_s.tiles(), base, consumer, base + kKOffset + k_state.index * KTile::kBytes);
        wgmma_commit();
        rescale(acc_o, correction);
        v_ring.consumer_wait(v_state);
        wgmma_fence();
        multiply_pv(acc_o.tiles(), p_frag, pv_stage(base, v_state.index));
        wgmma_commit();
        turn_end(consumer);
        wgmma_wait<1>();
        fence_accumulators(acc_s.tiles());
      }
      // The work's Q K^T products have all completed: the next work's Q may land.
      release_q(base);
      turn_begin(consumer, false);
      rescale(acc_o, correction);
      v_ring.consumer_wait(v_state);
      wgmma_fence();
      multiply_pv(acc_o.tiles(), p_frag, pv_stage(base, v_state.index));
      wgmma_commit();
      turn_end(consumer);
      wgmma_wait<0>();
      fence_accumulators(acc_o.tiles());
      release(v_ring, v_state);
      // Every consumer takes as many turns; consumer 0 takes the last hand-over, so no
      // arrival stays pending at exit (or at the next work, which consumer 0 starts).
      if (kPingPong && consumer == 0) named_barrier_sync(kTurnBarrier, 256);
    } else {
      release_q(base);
    }
    const CtaWork work = current_work(p, parity);
    // Over a KV cache the sequence's own rows; with ragged new tokens packed from its first.
    const NewTokens rows = kKvCache != kKvTensors ? sequence_rows() : NewTokens{p.seqlen_q, 0};
    if constexpr (kFp8) {
      // O was summed from V's e4m3 values: its descale (the row sums are unaffected), the
      // CTA's or each row's.
      bool per_row = false;
      if constexpr (kRowDescales) per_row = p.descale_rows != 0;
      if (per_row) {
        scale_rows(acc_o.tiles(), {fp8_row_descales[1][row_slot(consumer)],
                                   fp8_row_descales[1][row_slot(consumer) + 8]});
      } else {
        const float v_descale = fp8_descales[1];
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_o.v[0][dt][e] *= v_descale;
        }
      }
    }
    forward_epilogue<OutElement, OTile, Config::kReturnLse, kEpilogueBarrier, Score, kPersistent>(
        p, maps.o, acc_o, softmax, base + kOOffset, consumer, work.block * kBlockM + 64 * consumer,
        work.head, work.batch, rows, kKvCache != kKvTensors && p.kv_cache.cu_seqlens_q != nullptr);
  }

  /// The words of a K stage's block slot (kFedWalk), written by the producer before the
  /// stage's full arrival: the block (-1: the work visits none, nothing was loaded), its
  /// classification (Mask::classify), and whether another block of the work follows.
  enum BlockSlotWord { kSlotKeyBlock, kSlotTile, kSlotMore };
  __device__ __forceinline__ static u32 block_slot_address(u32 base, int stage, int word) {
    return base + kBlockSlotOffset + 16 * stage + 4 * word;
  }

  /// kFp8 under a fed walk: the words of a V stage's slot, written by the producer before the
  /// stage's full arrival, for the transposer warps, which cannot walk masks with tables: the
  /// block whose V the stage holds (-1: the work visits none, nothing was loaded) and whether
  /// another V stage of the work follows. (kSlotTile is unused here.)
  __device__ __forceinline__ static u32 v_slot_address(u32 base, int stage, int word) {
    return base + kVSlotOffset + 16 * stage + 4 * word;
  }

  /// kFedWalk: the block, classification and follow-on flag of K stage `stage` (waited for).
  /// Where the stage is released per warp (kKReleasePerWarp: predicate masks), lane 0 reads
  /// the slot and the warp takes it by shuffles: the reads then precede the releasing lane's
  /// arrival in its own order (compute-sanitizer's racecheck does not follow __syncwarp and
  /// reported the other lanes' reads against the producer's next write); one arrival per warp
  /// is cheaper than one per thread.
  __device__ __forceinline__ static void read_block_slot(u32 base, int stage, int& block, int& tile,
                                                         bool& more) {
    if constexpr (kKReleasePerWarp) {
      int words[3] = {0, 0, 0};
      if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int w = 0; w < 3; ++w) words[w] = load_shared_s32(block_slot_address(base, stage, w));
      }
#pragma unroll
      for (int w = 0; w < 3; ++w) words[w] = __shfl_sync(0xffffffffu, words[w], 0);
      block = words[kSlotKeyBlock];
      tile = words[kSlotTile];
      more = words[kSlotMore] != 0;
    } else {
      block = load_shared_s32(block_slot_address(base, stage, kSlotKeyBlock));
      tile = load_shared_s32(block_slot_address(base, stage, kSlotTile));
      more = load_shared_s32(block_slot_address(base, stage, kSlotMore)) != 0;
    }
  }

  /// Whether the work visits a block; if so, its first K stage has been waited for (and,
  /// kFedWalk, `block`, `tile` and `more` read from its slot). kFedWalk: a work without a
  /// block has one stage without a block, released here.
  __device__ __forceinline__ static bool first_block(u32 base,
                                                     const WarpKeyBlockWalk<Mask, kBlockN>& walk,
                                                     const Pipeline<kStages>& k_ring,
                                                     PipelineState<kStages>& k_state, int& block,
                                                     int& tile, bool& more) {
    if constexpr (kFedWalk) {
      k_ring.consumer_wait(k_state);
      read_block_slot(base, k_state.index, block, tile, more);
      if (block >= 0) return true;
      release<kKReleasePerWarp>(k_ring, k_state);
      return false;
    } else {
      if (!walk.more()) return false;
      k_ring.consumer_wait(k_state);
      return true;
    }
  }

  /// The output rows times a step's corrections (kSkipRescale: where a row of the warp needs
  /// it).
  __device__ __forceinline__ static void rescale(WarpgroupAccumulator<kHeadDimV>& o,
                                                 const float (&correction)[1][2]) {
    if constexpr (kSkipRescale) {
      OnlineSoftmax<1>::rescale_if_any(o, correction);
    } else {
      OnlineSoftmax<1>::rescale(o, correction);
    }
  }

  /// kPersistent: frees the Q tile for the next work's copy once this thread's Q K^T
  /// products have completed (its waits are done).
  __device__ __forceinline__ static void release_q(u32 base) {
    if constexpr (kPersistent) mbarrier_arrive(base + kQEmptyOffset);
  }

  /// The mask state of the current work's rows, formed at its use (not hoisted into registers
  /// held across the key loop) from the parameters, the work and its mask row (read from
  /// shared memory: no division per block). The producer and the consumers walk the blocks
  /// with it.
  __device__ __forceinline__ static MaskState block_mask_state(const FwdParams& p, u32 parity) {
    const CtaWork work = current_work(p, parity);
    MaskState ms = make_mask_state_at_row<kBlockN>(
        p,
        kPersistent ? load_shared_s32(work_slot_address(parity, kSlotMaskRow))
                    : cta_mask_row<Mask>(),
        work.head, work.batch);
    ms.row_begin = static_cast<int>(opaque(u32(work.block))) * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
    if constexpr (kKvCache != kKvTensors) {
      const int keys = sequence_keys();
      const int rows = sequence_rows().count;
      ms.seqlen_q = rows;
      ms.seqlen_k = keys;
      ms.diagonal = keys - rows;
      ms.row_end = min(ms.row_begin + kBlockM, rows);
      // The min/max tables keep their blocks of the capacity (num_key_blocks, their stride)
      // and the vectors their rows of it (vector_keys).
      if constexpr (Mask::kHasVectors) {
        // The vectors' rows are positions in the sequence (a new token's is the index of its
        // own key), as in the decode kernel: the rows move by the diagonal, which becomes 0,
        // and an absent LTE reads as the capacity, past every position.
        ms.row_begin += ms.diagonal;
        ms.row_end += ms.diagonal;
        ms.diagonal = 0;
        ms.seqlen_q = p.seqlen_k;
      }
      // A predicate's block table keeps its rows of new tokens (Sq of them, its stride): the
      // rows stay, and the predicate adds the diagonal (PredicatePolicy's kKvCache).
      if constexpr (Mask::kElementBits) ms.seqlen_q = p.seqlen_q;
    }
    return ms;
  }

  /// kFp8 in a packed batch with factors per sequence: the factors of the thread's rows g and
  /// g + 8 of the consumer's 64, each from its sequence (a row sees only its sequence's keys):
  /// `what` 0 the scores' (q_descale * k_descale), 2 O's (v_descale). Rows past the batch take
  /// the last sequence's (they are never stored).
  __device__ __forceinline__ static void row_descales(const FwdParams& p, u32 parity, int consumer,
                                                      int what, float (&out)[2]) {
    const int kv_head = current_work(p, parity).head / (p.heads / p.kv_heads);
    const int row = block_mask_state(p, parity).row_begin + row_slot(consumer);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The last sequence whose first row is at most the row (empty ones before it skipped).
      int lo = 0;
      int hi = p.varlen.sequences - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (__ldg(p.varlen.cu_seqlens_q + mid) <= row + 8 * r) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      out[r] = what == 0 ? fp8_descale(p, 0, lo, kv_head) * fp8_descale(p, 1, lo, kv_head)
                         : fp8_descale(p, 2, lo, kv_head);
    }
  }

  /// The thread's row g of its consumer's 64 in fp8_row_descales (row g + 8: 8 more).
  __device__ __forceinline__ static int row_slot(int consumer) {
    return 64 * consumer + 16 * ((threadIdx.x / 32) % 4) + (threadIdx.x % 32) / 4;
  }

  /// Multiplies the rows g and g + 8 of a warpgroup fragment by `factors`.
  template <int kTiles>
  __device__ __forceinline__ static void scale_rows(float (&frag)[kTiles][4],
                                                    const float (&factors)[2]) {
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) frag[i][e] *= factors[e / 2];
    }
  }

  /// Over a KV cache: the new tokens of the CTA's sequence (its count, at most Sq, and with
  /// ragged new tokens its first packed row), read where used, from shared memory.
  __device__ __forceinline__ static NewTokens sequence_rows() {
    return {load_shared_s32(smem_address(&kv_cache_rows_slot.count)),
            load_shared_s32(smem_address(&kv_cache_rows_slot.first))};
  }

  /// Over a KV cache: the keys of the CTA's sequence, its cached length and what the call
  /// appended (read where used, from shared memory).
  __device__ __forceinline__ static int sequence_keys() {
    return load_shared_s32(smem_address(&kv_cache_keys_slot));
  }

  /// Waits for this consumer's turn to issue products (ping-pong); consumer 0 goes first.
  __device__ __forceinline__ static void turn_begin(int consumer, bool first) {
    if (kPingPong && !(first && consumer == 0)) named_barrier_sync(kTurnBarrier + consumer, 256);
  }

  /// Hands the turn to the next consumer of the ring (two: the other one).
  __device__ __forceinline__ static void turn_end(int consumer) {
    if constexpr (kPingPong && kConsumers == 2) {
      named_barrier_arrive(kTurnBarrier + 1 - consumer, 256);
    } else if constexpr (kPingPong) {
      named_barrier_arrive(kTurnBarrier + (consumer + 1 == kConsumers ? 0 : consumer + 1), 256);
    }
  }

  /// Releases a stage and moves on: kPerWarp, lane 0 of each consumer warp after the warp's
  /// reads (__syncwarp), else every consumer thread. The K stages that hold FlashMask values
  /// take an arrival from every thread: compute-sanitizer's racecheck does not follow the
  /// __syncwarp ordering and reported the values' reuse as hazards. Arrivals per thread cost
  /// time, so the V stages and the K stages of other masks keep one arrival per warp.
  template <bool kPerWarp = true>
  __device__ __forceinline__ static void release(const Pipeline<kStages>& ring,
                                                 PipelineState<kStages>& state) {
    if constexpr (kPerWarp) {
      __syncwarp();
      if (threadIdx.x % 32 == 0) ring.consumer_release(state);
    } else {
      ring.consumer_release(state);
    }
    state.advance();
  }

  /// S = Q K^T for the consumer's 64 rows (the caller commits the group).
  __device__ __forceinline__ static void multiply_qk(float (&s)[kSTiles][4], u32 q, int consumer,
                                                     u32 k) {
    WgmmaSteps<kBlockN, kQkSteps>::template ss<Element, 0, 0>(
        s, [&](int kk) { return k_major_descriptor<QTile>(q, 64 * consumer, kk); },
        [&](int kk) { return k_major_descriptor<KTile>(k, 0, kk); }, 0);
  }

  /// O += P V (the caller commits the group): V MN-major from its stage, or kFp8 V^T K-major.
  __device__ __forceinline__ static void multiply_pv(float (&o)[kDTiles][4],
                                                     const OperandA<1, kPvSteps>& a, u32 v) {
    if constexpr (kFp8) {
      WgmmaSteps<kHeadDimV, kPvSteps>::template rs<Element, 0>(
          o, a.v[0], [&](int kk) { return k_major_descriptor<typename VtTile::Layout>(v, 0, kk); },
          1);
    } else {
      WgmmaSteps<kHeadDimV, kPvSteps>::template rs<Element, 1>(
          o, a.v[0], [&](int kk) { return mn_major_descriptor<VTile>(v, 0, kk); }, 1);
    }
  }

  /// The stage O += P V reads: V's, or kFp8 V^T's.
  __device__ __forceinline__ static u32 pv_stage(u32 base, int index) {
    return kFp8 ? base + kVtOffset + index * VtTile::kBytes
                : base + kVOffset + index * VTile::kBytes;
  }

  /// P as the A operand of O += P V: pairs of 16-bit values, or kFp8 four e4m3 values a
  /// register in fp8_operand_key's order.
  __device__ __forceinline__ static void pack_p(const WarpgroupAccumulator<kBlockN>& s,
                                                OperandA<1, kPvSteps>& a) {
    if constexpr (kFp8) {
#pragma unroll
      for (int kk = 0; kk < kPvSteps; ++kk) pack_e4m3_operand(s.v[0], kk, a.v[0][kk]);
    } else {
      to_operand_a<Element>(s, a);
    }
  }

  /// Score modifiers and, on a partial block, the mask (from the stage's FlashMask values,
  /// the predicate's stored bits or its expression).
  __device__ __forceinline__ static void score_block(const FwdParams& p, float (&s)[kSTiles][4],
                                                     int block, int tile, u32 vectors, int consumer,
                                                     u32 parity) {
    const int lane = threadIdx.x % 32;
    const int g = lane / 4;
    const int t = lane % 4;
    const int warp_row = 64 * consumer + 16 * ((threadIdx.x / 32) % 4);  // in the query block
    const int key0 = block * kBlockN;
    if constexpr (Score::kActive) {
      const MaskState ms = block_mask_state(p, parity);
      modify_scores<Score>(p, s, ms.row_begin + warp_row + g, key0, ms.diagonal, t,
                           current_work(p, parity).head);
    }
    if (tile_kind(tile) != kTilePartial) return;
    const MaskState ms = block_mask_state(p, parity);
    if constexpr (kElementBits) {
      const unsigned long long hidden =
          tile_bits_slot(tile) >= 0 ? Mask::template fragment_bits<kSTiles>(
                                          Mask::template load_fragment_words<kSTiles, false>(
                                              p.predicate_bits, tile, warp_row + g),
                                          2 * t)
                                    : Mask::template evaluate_bits<kSTiles, false>(
                                          p, ms, warp_row + g, 2 * t, ms.row_begin, key0);
      hide_scores(s, hidden);
    } else {
      mask_scores<Mask, kDirectMask, kKvCache == kKvTensors>(p, ms, s, vectors,
                                                             ms.row_begin + warp_row + g, key0, t);
    }
  }
};

/// The body of a generated sm90a forward kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void forward_sm90a(const FwdParams& params, const FwdTensorMaps& maps) {
  run_kernel<ForwardSm90a<Config, Mask, Score>, 1024>(params, maps);
}

}  // namespace attnjit
