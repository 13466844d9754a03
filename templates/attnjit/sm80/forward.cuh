// The forward attention mainloop of the sm80 family (FA2 structure, mma.sync), written in
// the tile vocabulary: fragments (fragment.cuh), warp products (warp_mma.cuh), the key-block
// walk (block_walk.cuh), mask application (mask_apply.cuh) and the online softmax
// (softmax.cuh).
//
// One CTA owns kBlockM query rows of one (head, batch); each warp owns kBlockM / kWarps rows
// as 16-row slabs (split-Q: no cross-warp reduction). Q and K have kHeadDimQK columns, V and O
// kHeadDimV. The CTA walks its key blocks from the
// last to the first; K, V (and FlashMask vector values) of the next blocks stream into shared
// memory with cp.async while the current one is computed. Per block:
//   S = Q K^T                    warp_rows_times_rows (Q from registers: warp_regs_times_rows)
//   score modifiers              soft-capping, ALiBi (score_mod.cuh), when the spec has them
//   mask                         only when the block is partial (mask.cuh classifies)
//   online softmax               OnlineSoftmax::step: exp2 with the scale folded in
//   O += P V                     P re-packed from the S accumulators as the A operand
// O is divided by the row sum once, at the end; rows with no visible key give O = 0 and
// LSE = -inf.
//
// Config (bound by the generated code): Element, kHeadDimQK, kHeadDimV, kBlockM, kBlockN,
// kWarps, kStages, kQInRegisters, kReturnLse. Score: a ScoreMod (score_mod.cuh).
#pragma once

#include "attnjit/common/softmax.cuh"
#include "attnjit/sm80/vocabulary.cuh"

namespace attnjit {

template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct ForwardSm80 : Config {
  using typename Config::Element, Config::kBlockM, Config::kBlockN, Config::kWarps, Config::kStages;
  static constexpr int kHeadDimQK = Config::kHeadDimQK;
  static constexpr int kHeadDimV = Config::kHeadDimV;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kSlabs = kBlockM / (16 * kWarps);  // 16-row slabs per warp
  static constexpr int kWarpRows = 16 * kSlabs;
  static constexpr int kNTiles = kBlockN / 8;      // n8 tiles of S
  static constexpr int kKSteps = kHeadDimQK / 16;  // k16 steps of Q K^T
  static constexpr int kDTiles = kHeadDimV / 8;    // n8 tiles of O
  static constexpr int kPvSteps = kBlockN / 16;    // k16 steps of P V
  static constexpr int kColumns = Mask::kColumns;
  static constexpr bool kQInRegisters = Config::kQInRegisters;
  static constexpr bool kElementBits = Mask::kElementBits;
  /// A predicate's stored bits of a thread's fragment rows, per slab (FragmentWords).
  typedef FragmentWords<(kNTiles + 3) / 4> Words;

  static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole 16-row slabs");
  static_assert(kBlockN % 16 == 0 && kHeadDimQK % 16 == 0 && kHeadDimV % 16 == 0,
                "tiles are multiples of 16");

  typedef SmemTile<kBlockM, kHeadDimQK> QTile;
  typedef SmemTile<kBlockM, kHeadDimV> OTile;  // the epilogue's staging of O
  typedef KeyBlockWalk<Mask, kBlockN, kHeadDimQK, kHeadDimV, kThreads, kStages> Walk;
  typedef typename Walk::KTile KTile;
  typedef typename Walk::VTile VTile;

  /// Dynamic shared memory: Q, then kStages x (K, V), then kStages x FlashMask values.
  static constexpr int kSmemBytes = QTile::kBytes + Walk::kSmemBytes;
  static_assert(OTile::kBytes <= kSmemBytes, "the epilogue stages O in the freed shared memory");

  // Per-thread state: O, the softmax's running max and sum, and Q when it stays in registers.
  WarpAccumulator<kSlabs, kDTiles> acc_o;
  OnlineSoftmax<kSlabs> softmax;
  OperandA<kQInRegisters ? kSlabs : 1, kQInRegisters ? kKSteps : 1> q_frag;

  __device__ __forceinline__ void run(const FwdParams& p, unsigned char* smem) {
    // In the mask's CTA order where it has one; otherwise heaviest causal rows start first.
    const CtaWork work = begin_cta<false, Mask>(p);
    const int head = work.head;
    const int batch = work.batch;
    if (head >= p.heads) return;
    const int thread = threadIdx.x;
    const int warp = thread / 32;
    const int lane = thread % 32;

    MaskState ms = make_mask_state<kBlockN, Mask>(p, head, batch);
    ms.row_begin = work.block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);

    const u16* q_base = static_cast<const u16*>(p.q) + batch * p.q_batch_stride +
                        head * p.q_head_stride + ms.row_begin * p.q_row_stride;

    const u32 smem_q = smem_address(smem);
    const u32 smem_kv = smem_q + QTile::kBytes;
    const u32 smem_vectors = smem_kv + kStages * Walk::kStageBytes;

    Walk walk;
    walk.find_range(ms);

    // Prologue: Q and the first kStages-1 key blocks.
    load_tile_async<kBlockM, kHeadDimQK, kThreads>(smem_q, q_base, p.q_row_stride,
                                                   ms.row_end - ms.row_begin, thread);
    walk.prefetch(p, ms, &FwdParams::minmax, smem_kv, smem_vectors, thread);

    acc_o.fill(0.f);
    softmax.reset();

    const int warp_row = warp * kWarpRows;
    if (kQInRegisters && walk.more()) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          ldmatrix_x4(q_frag.v[kQInRegisters ? s : 0][kQInRegisters ? kk : 0],
                      QTile::matrix_address(smem_q, QTile::lane_offset(lane % 16, lane / 16),
                                            warp_row + s * 16, kk * 2));
        }
      }
    }

    // A predicate's table entry and stored bits are read one block ahead (read_tile).
    int tile_next = 0;
    Words words[kElementBits ? kSlabs : 1];
    if (kElementBits && walk.more()) {
      tile_next = read_tile(ms, p, walk.block, warp_row, lane, words);
    }
    for (int it = 0; walk.more(); ++it) {
      // stage() makes block walk.block visible to all warps and frees the stage computed in
      // the previous iteration, which the next block's copies overwrite.
      const int stage = walk.stage(p, ms, &FwdParams::minmax, smem_kv, smem_vectors, it, thread);
      const int tile =
          kElementBits ? tile_next : Mask::template classify<kBlockN>(ms, p.minmax, walk.block);
      compute_block(p, ms, smem_q, Walk::kv_stage(smem_kv, stage),
                    Walk::vector_stage(smem_vectors, stage), walk.block, tile, words, warp_row,
                    lane);
      walk.advance(p, ms, &FwdParams::minmax);
      if (kElementBits && walk.more()) {
        tile_next = read_tile(ms, p, walk.block, warp_row, lane, words);
      }
    }

    cp_async_wait<0>();
    __syncthreads();  // no cp.async into Q's rows may land after the epilogue reuses them
    epilogue(p, ms, smem, warp_row, lane);
  }

  /// A predicate's table entry of key block n_block and the stored bits of the thread's
  /// fragment rows in it (read_tile, mask_apply.cuh).
  __device__ __forceinline__ static int read_tile(const MaskState& ms, const FwdParams& p,
                                                  int n_block, int warp_row, int lane,
                                                  Words (&words)[kElementBits ? kSlabs : 1]) {
    return attnjit::read_tile<Mask, kBlockN, kNTiles, false>(
        p, ms, &FwdParams::minmax, &FwdParams::predicate_bits, n_block,
        [warp_row, lane](int s) { return warp_row + s * 16 + lane / 4; }, words);
  }

  /// S = Q K^T, score modifiers, mask, online softmax, O += P V for one key block.
  __device__ __forceinline__ void compute_block(const FwdParams& p, const MaskState& ms, u32 smem_q,
                                                u32 smem_k, u32 vectors, int n_block, int tile,
                                                const Words (&words)[kElementBits ? kSlabs : 1],
                                                int warp_row, int lane) {
    const int kind = tile_kind(tile);
    const u32 smem_v = smem_k + KTile::kBytes;
    // Per-lane parts of the ldmatrix addresses (see SmemTile::matrix_address).
    const u32 q_lane = opaque(QTile::lane_offset(lane % 16, lane / 16));
    const u32 k_lane = opaque(KTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2));
    const u32 v_lane = opaque(VTile::lane_offset(lane % 16, lane / 16));
    const int g = lane / 4;
    const int t = lane % 4;
    // A predicate's partial tile is masked by one bit per element of the thread's fragment:
    // the stored bits (read during the block before), unpacked after S = Q K^T so that their
    // loads have that much longer to land, else the generated element rule, evaluated before
    // S = Q K^T while the scores hold no registers.
    const bool stored = tile_bits_slot(tile) >= 0;
    unsigned long long hidden[kElementBits ? kSlabs : 1];
    if constexpr (kElementBits) {
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
        hidden[s] = kind == kTilePartial && !stored
                        ? Mask::template evaluate_bits<kNTiles, false>(
                              p, ms, warp_row + s * 16 + g, 2 * t, ms.row_begin, n_block * kBlockN)
                        : 0ull;
      }
    }

    WarpAccumulator<kSlabs, kNTiles> acc_s;
    if constexpr (kQInRegisters) {
      warp_regs_times_rows<Element, KTile, kKSteps>(acc_s, q_frag, smem_k, k_lane, 0);
    } else {
      warp_rows_times_rows<Element, QTile, KTile, kKSteps>(acc_s, smem_q, q_lane, warp_row, smem_k,
                                                           k_lane, 0);
    }

    if (Score::kActive) {
      // Before the mask, which then sets -inf (a modifier would turn -inf into a number).
      // Element e of tile (s, nt) is row g + s * 16 + 8 (e / 2), key nt * 8 + 2 t + e % 2.
      const Score score = Score::template make<Mask::kOrderedCtas>(p);
      const int distance0 = n_block * kBlockN + 2 * t - (ms.row_begin + warp_row + g + ms.diagonal);
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc_s.v[s][nt][e] =
                score.apply(acc_s.v[s][nt][e], distance0 + nt * 8 + e % 2 - s * 16 - (e / 2) * 8);
          }
        }
      }
    }
    if constexpr (kElementBits) {
      if (kind == kTilePartial) {
#pragma unroll
        for (int s = 0; s < kSlabs; ++s) {
          if (stored) hidden[s] = Mask::template fragment_bits<kNTiles>(words[s], 2 * t);
          mask_by_bits(acc_s, s, hidden[s]);
        }
      }
    } else if (kind == kTilePartial) {
      // Rows are queries, columns the block's keys (local: their values' offsets). The
      // lambdas copy what they use: a local captured by reference would be address-taken,
      // which changes how the whole kernel is optimized.
      mask_by_columns(
          acc_s, lane, ms.row_begin + warp_row, 0,
          [ms, vectors](int key) { return Mask::load_column(ms, vectors + key * kColumns * 4); },
          [&p, ms, n_block](const typename Mask::Column& column, int query, int key) {
            return Mask::masked(p, ms, query, n_block * kBlockN + key, column);
          });
    }

    softmax.template step<Score>(p, acc_s, acc_o);

    // P as the A operand of P V (no shared memory). Packing now frees the fp32 scores.
    OperandA<kSlabs, kPvSteps> p_operand;
    to_operand_a<Element>(acc_s, p_operand);
    warp_regs_times_tile<Element, VTile, kPvSteps>(acc_o, p_operand, smem_v, v_lane, 0);
  }

  /// O = acc / rowsum (0 for rows with nothing visible), LSE, and 16-byte stores of O
  /// staged through the warp's own rows of an O tile over the freed shared memory. The (head,
  /// batch) is decoded again from the block indices rather than held in registers across the key
  /// loop.
  __device__ __forceinline__ void epilogue(const FwdParams& p, const MaskState& ms,
                                           unsigned char* smem, int warp_row, int lane) {
    const CtaWork work = cta_work<false>(cta_order_of<Mask::kOrderedCtas>(p));
    const int head = work.head;
    const int batch = work.batch;
    const int g = lane / 4;
    const int t = lane % 4;
    const int row_begin = ms.row_begin;
    const int seqlen_q = ms.seqlen_q;
    softmax.template finish<Score>(
        p, head, acc_o, [&p, this, t, g, warp_row, row_begin, seqlen_q, batch, head](int s, int r) {
          if (Config::kReturnLse && t == 0) {
            const int row = row_begin + warp_row + s * 16 + r * 8 + g;
            if (row < seqlen_q) {
              p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + row] =
                  softmax.template lse<Score>(p, s, r);
            }
          }
        });

#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = warp_row + s * 16 + r * 8 + g;
          const int col = dt * 8 + 2 * t;
          *reinterpret_cast<u32*>(smem + OTile::element_offset(row, col)) =
              pack2<Element>(acc_o.v[s][dt][2 * r], acc_o.v[s][dt][2 * r + 1]);
        }
      }
    }
    __syncwarp();

    u16* o_base = static_cast<u16*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
    constexpr int kChunks = OTile::kChunks;
#pragma unroll
    for (int i = lane; i < kWarpRows * kChunks; i += 32) {
      const int row = warp_row + i / kChunks;
      const int chunk = i % kChunks;
      const int global_row = ms.row_begin + row;
      if (global_row < ms.seqlen_q) {
        const uint4 value = *reinterpret_cast<const uint4*>(smem + OTile::offset(row, chunk));
        *reinterpret_cast<uint4*>(o_base + global_row * p.o_row_stride + chunk * 8) = value;
      }
    }
  }
};

/// The body of a generated forward kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void forward_sm80(const FwdParams& params) {
  run_kernel<ForwardSm80<Config, Mask, Score>, 128>(params);
}

}  // namespace attnjit
