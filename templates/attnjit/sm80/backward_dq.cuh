// The dQ kernel of the deterministic backward: one CTA per query block (like the forward),
// each warp owning 16 query rows, walking the key blocks that its rows can see. Per block:
//   S = Q K^T, P = 2^(S c - LSE2), dP = dO V^T, dS = P (dP - D), dQ += dS K
// with dS used from registers as the A operand. Every dQ element is summed by one thread in
// a fixed order: no atomics, bitwise repeatable. Costs a second computation of S and dP.
// Score modifiers (score_mod.cuh) as in the main kernel: P from the modified scores, and with
// soft-capping dS = P (1 - tanh^2) (dP - D).
//
// Q, K and dQ have kHeadDimQK columns, V and dO kHeadDimV.
//
// Config: Element, kHeadDimQK, kHeadDimV, kBlockM (16 * kWarps), kBlockN, kWarps. Score: a
// ScoreMod.
#pragma once

#include "attnjit/sm80/vocabulary.cuh"

namespace attnjit {

template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct BackwardDqSm80 : Config {
  using typename Config::Element, Config::kHeadDimQK, Config::kHeadDimV, Config::kBlockM,
      Config::kBlockN, Config::kWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kNTiles = kBlockN / 8;
  static constexpr int kQkSteps = kHeadDimQK / 16;  // k16 steps of S = Q K^T
  static constexpr int kVSteps = kHeadDimV / 16;    // k16 steps of dP = dO V^T
  static constexpr int kDTiles = kHeadDimQK / 8;    // n8 tiles of dQ
  static constexpr int kKeySteps = kBlockN / 16;
  static constexpr int kColumns = Mask::kColumns;
  static constexpr bool kElementBits = Mask::kElementBits;
  /// A predicate's stored bits of a thread's two fragment rows (FragmentWords).
  typedef FragmentWords<(kNTiles + 3) / 4> Words;

  static_assert(kBlockM == 16 * kWarps, "each warp owns 16 query rows");

  typedef SmemTile<kBlockM, kHeadDimQK> QTile;
  typedef SmemTile<kBlockM, kHeadDimV> DoTile;
  typedef KeyBlockWalk<Mask, kBlockN, kHeadDimQK, kHeadDimV, kThreads, 2> Walk;
  typedef typename Walk::KTile KTile;
  typedef typename Walk::VTile VTile;
  // One lane offset serves Q and dO, and one K and V.
  static_assert(KTile::kPanelCols == VTile::kPanelCols && QTile::kPanelCols == DoTile::kPanelCols,
                "K and V, Q and dO: tiles of one panel width");
  /// Q, dO, then two stages of (K, V), then two stages of FlashMask values.
  static constexpr int kSmemBytes = QTile::kBytes + DoTile::kBytes + Walk::kSmemBytes;

  WarpAccumulator<1, kDTiles> acc_dq;
  float lse_log2[2];  // rows g and g + 8 of the warp
  float row_dot[2];

  __device__ __forceinline__ void run(const BwdParams& p, unsigned char* smem) {
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

    const u32 smem_q = smem_address(smem);
    const u32 smem_do = smem_q + QTile::kBytes;
    const u32 smem_kv = smem_do + DoTile::kBytes;
    const u32 smem_vectors = smem_kv + 2 * Walk::kStageBytes;
    const int valid_rows = ms.row_end - ms.row_begin;
    load_tile_async<kBlockM, kHeadDimQK, kThreads>(
        smem_q,
        static_cast<const u16*>(p.q) + batch * p.q_batch_stride + head * p.q_head_stride +
            ms.row_begin * p.q_row_stride,
        p.q_row_stride, valid_rows, thread);
    load_tile_async<kBlockM, kHeadDimV, kThreads>(
        smem_do,
        static_cast<const u16*>(p.d_o) + batch * p.do_batch_stride + head * p.do_head_stride +
            ms.row_begin * p.do_row_stride,
        p.do_row_stride, valid_rows, thread);

    const int g = lane / 4;
    const long long bh = static_cast<long long>(batch) * p.heads + head;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = ms.row_begin + warp * 16 + g + 8 * r;
      // Rows past Sq: +inf makes their P 0 (their Q and dO are zero-filled as well).
      lse_log2[r] = row < p.seqlen_q ? p.lse_log2[bh * p.seqlen_q + row] : -negative_infinity();
      row_dot[r] = row < p.seqlen_q ? p.row_dot[bh * p.seqlen_q + row] : 0.f;
    }
    acc_dq.fill(0.f);

    Walk walk;
    walk.find_range(ms);
    walk.prefetch(p, ms, &BwdParams::minmax_dq, smem_kv, smem_vectors, thread);
    // A predicate's table entry and stored bits are read one block ahead (read_tile).
    int tile_next = 0;
    Words words[1];
    if (kElementBits && walk.more()) tile_next = read_tile(ms, p, walk.block, warp, lane, words);
    for (int it = 0; walk.more(); ++it) {
      const int stage = walk.stage(p, ms, &BwdParams::minmax_dq, smem_kv, smem_vectors, it, thread);
      const int tile =
          kElementBits ? tile_next : Mask::template classify<kBlockN>(ms, p.minmax_dq, walk.block);
      compute_block(p, ms, smem_q, smem_do, Walk::kv_stage(smem_kv, stage),
                    Walk::vector_stage(smem_vectors, stage), walk.block, tile, words, warp, lane);
      walk.advance(p, ms, &BwdParams::minmax_dq);
      if (kElementBits && walk.more()) tile_next = read_tile(ms, p, walk.block, warp, lane, words);
    }
    cp_async_wait<0>();

    const int t = lane % 4;
    u16* d_q = static_cast<u16*>(p.d_q) + batch * p.dq_batch_stride + head * p.dq_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = ms.row_begin + warp * 16 + g + 8 * r;
      if (row < p.seqlen_q) {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          *reinterpret_cast<u32*>(d_q + row * p.dq_row_stride + dt * 8 + 2 * t) =
              pack2<Element>(acc_dq.v[0][dt][2 * r] * p.softmax_scale,
                             acc_dq.v[0][dt][2 * r + 1] * p.softmax_scale);
        }
      }
    }
  }

  /// A predicate's table entry of key block n_block and the stored bits of the thread's
  /// fragment rows in it (read_tile, mask_apply.cuh).
  __device__ __forceinline__ static int read_tile(const MaskState& ms, const BwdParams& p,
                                                  int n_block, int warp, int lane,
                                                  Words (&words)[1]) {
    return attnjit::read_tile<Mask, kBlockN, kNTiles, false>(
        p, ms, &BwdParams::minmax_dq, &BwdParams::predicate_bits_dq, n_block,
        [warp, lane](int) { return warp * 16 + lane / 4; }, words);
  }

  __device__ __forceinline__ void compute_block(const BwdParams& p, const MaskState& ms, u32 smem_q,
                                                u32 smem_do, u32 smem_k, u32 vectors, int n_block,
                                                int tile, const Words (&words)[1], int warp,
                                                int lane) {
    const int kind = tile_kind(tile);
    const u32 smem_v = smem_k + KTile::kBytes;
    const u32 a_lane = opaque(QTile::lane_offset(lane % 16, lane / 16));
    const u32 b_lane = opaque(KTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2));
    const u32 bt_lane = opaque(KTile::lane_offset(lane % 16, lane / 16));
    const int row0 = warp * 16;
    const int g = lane / 4;
    const int t = lane % 4;

    // A predicate's partial tile, before S = Q K^T: the stored bits (read during the block
    // before), else the generated element rule.
    unsigned long long hidden = 0;
    if constexpr (kElementBits) {
      if (kind == kTilePartial) {
        hidden = tile_bits_slot(tile) >= 0
                     ? Mask::template fragment_bits<kNTiles>(words[0], 2 * t)
                     : Mask::template evaluate_bits<kNTiles, false>(
                           p, ms, row0 + g, 2 * t, ms.row_begin, n_block * kBlockN);
      }
    }
    WarpAccumulator<1, kNTiles> acc_s;
    warp_rows_times_rows<Element, QTile, KTile, kQkSteps>(acc_s, smem_q, a_lane, row0, smem_k,
                                                          b_lane, 0);
    if constexpr (kElementBits) {
      if (kind == kTilePartial) mask_by_bits(acc_s, 0, hidden);
    } else if (kind == kTilePartial) {
      mask_by_columns(
          acc_s, lane, ms.row_begin + row0, 0,
          [ms, vectors](int key) { return Mask::load_column(ms, vectors + key * kColumns * 4); },
          [&p, ms, n_block](const typename Mask::Column& column, int query, int key) {
            // Rows past Sq are not stored: an absent LTE or UTS is not compared.
            return Mask::template masked<true>(p, ms, query, n_block * kBlockN + key, column);
          });
    }
    // P from the scores modified after the mask (masked ones stay -inf), times 1 - tanh^2
    // with soft-capping: only dS = P (dP - D) needs P here. Element e of tile nt is row
    // g + 8 (e / 2), key nt * 8 + 2 t + e % 2.
    const Score score = Score::template make<Mask::kOrderedCtas>(p);
    const int distance0 = n_block * kBlockN + 2 * t - (ms.row_begin + row0 + g + ms.diagonal);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float grad = 1.f;
        if (Score::kActive) {
          acc_s.v[0][nt][e] = score.apply_after_mask(
              acc_s.v[0][nt][e], distance0 + nt * 8 + e % 2 - 8 * (e / 2), grad);
        }
        acc_s.v[0][nt][e] =
            exp2_approx(fmaf(acc_s.v[0][nt][e], Score::exponent_scale(p), -lse_log2[e / 2]));
        if (Score::kSoftcap) acc_s.v[0][nt][e] *= grad;
      }
    }
    WarpAccumulator<1, kNTiles> acc_ds;
    warp_rows_times_rows<Element, DoTile, VTile, kVSteps>(acc_ds, smem_do, a_lane, row0, smem_v,
                                                          b_lane, 0);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc_ds.v[0][nt][e] = acc_s.v[0][nt][e] * (acc_ds.v[0][nt][e] - row_dot[e / 2]);
      }
    }
    OperandA<1, kKeySteps> ds;
    to_operand_a<Element>(acc_ds, ds);
    // dQ += dS K: K read transposed (k = key, n = head dim).
    warp_regs_times_tile<Element, KTile, kKeySteps>(acc_dq, ds, smem_k, bt_lane, 0);
  }
};

/// The body of a generated deterministic dQ kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void backward_dq_sm80(const BwdParams& params) {
  run_kernel<BackwardDqSm80<Config, Mask, Score>, 128>(params);
}

}  // namespace attnjit
