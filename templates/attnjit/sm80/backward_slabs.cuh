// The backward mainloop of the sm80 family (FA2 structure, mma.sync): one CTA per key block.
//
// K_j and V_j stay in shared memory; each warp owns 16 keys (and, for wide heads, a share
// of the head dims) and accumulates its rows of dK_j and dV_j in registers. Q, K and dK have
// kHeadDimQK columns, V, dO and dV kHeadDimV. The CTA walks the
// query blocks that can see its keys (QueryBlockWalk, backward_common.cuh), streaming Q_i, dO_i,
// LSE_i and D_i through two cp.async stages. Per query block, with
// the transposed products so that P^T and dS^T land in the A-operand layout:
//   S^T  = K Q^T                 P^T = 2^(S^T * scale * log2e - LSE_i * log2e)
//   dV  += P^T dO                dP^T = V dO^T
//   dS^T = P^T * (dP^T - D_i)    dK  += dS^T Q
//   dQ_i += dS K                 dS^T goes through shared memory; fp32 atomics (kAtomicDq),
//                                or a separate query-parallel kernel (deterministic mode)
// dK is scaled by softmax_scale at the end; dQ in backward_convert_dq.
// With score modifiers (score_mod.cuh) P^T is taken from the modified scores (in log2 units;
// masked elements stay -inf); soft-capping multiplies dS^T by 1 - tanh^2, recomputed from S^T
// and carried as the 16-bit product P^T (1 - tanh^2) until dS^T is formed.
//
// Config: Element, kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kWarps, kDimWarps, kAtomicDq.
// Score: a ScoreMod.
#pragma once

#include "attnjit/common/backward_common.cuh"
#include "attnjit/sm80/vocabulary.cuh"

namespace attnjit {

template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct BackwardSlabsSm80 : Config {
  // kBlockM queries per iteration, kBlockN keys of the CTA, kDimWarps warps per key slab.
  using typename Config::Element, Config::kHeadDimQK, Config::kHeadDimV, Config::kBlockM,
      Config::kBlockN, Config::kWarps, Config::kDimWarps, Config::kAtomicDq;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeyWarps = kWarps / kDimWarps;
  static constexpr int kDkPerWarp = kHeadDimQK / kDimWarps;  // dK columns of a warp
  static constexpr int kDvPerWarp = kHeadDimV / kDimWarps;   // dV columns of a warp
  static constexpr int kQTiles = kBlockM / 8;                // n8 tiles of S^T (queries)
  static constexpr int kQSteps = kBlockM / 16;               // k16 steps over queries
  static constexpr int kQkSteps = kHeadDimQK / 16;           // k16 steps of S^T = K Q^T
  static constexpr int kVSteps = kHeadDimV / 16;             // k16 steps of dP^T = V dO^T
  static constexpr int kDkTiles = kDkPerWarp / 8;            // n8 tiles of a warp's dK
  static constexpr int kDvTiles = kDvPerWarp / 8;            // n8 tiles of a warp's dV
  static constexpr int kKeySteps = kBlockN / 16;             // k16 steps of dQ = dS K
  static constexpr int kDqRowWarps = kBlockM / 16;           // dQ: 16-row slabs
  static constexpr int kDqColWarps = kWarps / kDqRowWarps;   // dQ: column groups
  static constexpr int kDqCols = kHeadDimQK / kDqColWarps;
  static constexpr int kDqTiles = kDqCols / 8;
  static constexpr int kColumns = Mask::kColumns;
  static constexpr bool kElementBits = Mask::kElementBits;
  /// A predicate's stored bits of a thread's two keys of S^T (FragmentWords), read one block
  /// ahead up to head dims 128 + 128; d256 has no registers to carry them across the loop (the
  /// NVRTC sweep spilled), so from 192 on they are read when the block is computed.
  typedef FragmentWords<(kQTiles + 3) / 4> Words;
  static constexpr bool kPrefetchBits = kHeadDimQK + kHeadDimV <= 256;

  static_assert(kBlockN == 16 * kKeyWarps, "each key warp owns 16 keys");
  static_assert(kWarps % kDimWarps == 0 && kWarps % kDqRowWarps == 0, "warp layout");
  static_assert(kDkPerWarp % 16 == 0 && kDvPerWarp % 16 == 0 && kDqCols % 16 == 0,
                "n16 pairs of tiles");
  static_assert(kBlockM % 32 == 0, "query block is a whole number of 32-column panels");

  typedef SmemTile<kBlockN, kHeadDimQK> KTile;
  typedef SmemTile<kBlockN, kHeadDimV> VTile;
  typedef SmemTile<kBlockM, kHeadDimQK> QTile;
  typedef SmemTile<kBlockM, kHeadDimV> DoTile;
  typedef SmemTile<kBlockN, kBlockM> DsTile;  // dS^T: [key][query]
  // One lane offset serves K and V, and one Q and dO.
  static_assert(KTile::kPanelCols == VTile::kPanelCols && QTile::kPanelCols == DoTile::kPanelCols,
                "K and V, Q and dO: tiles of one panel width");
  static constexpr int kStageBytes =
      QTile::kBytes + DoTile::kBytes + 2 * kBlockM * 4;  // Q, dO, LSE2, D
  static constexpr int kDsBytes = kAtomicDq ? DsTile::kBytes : 0;
  /// K, V, two stages of (Q, dO, LSE2, D), dS^T, the key block's FlashMask values.
  static constexpr int kSmemBytes =
      KTile::kBytes + VTile::kBytes + 2 * kStageBytes + kDsBytes + kBlockN * kColumns * 4;

  WarpAccumulator<1, kDkTiles> acc_dk;
  WarpAccumulator<1, kDvTiles> acc_dv;

  __device__ __forceinline__ void run(const BwdParams& p, unsigned char* smem) {
    // In the mask's CTA order where it has one; otherwise low key blocks (the most queries
    // under causal) first.
    const CtaWork work = begin_cta<true, Mask>(p);
    const int n_block = work.block;
    if (work.head >= p.heads) return;
    const int thread = threadIdx.x;

    MaskState ms = make_mask_state<kBlockN, Mask>(p, work.head, work.batch);

    const int key0 = n_block * kBlockN;
    const u32 smem_k = smem_address(smem);
    const u32 smem_v = smem_k + KTile::kBytes;
    const u32 smem_stages = smem_v + VTile::kBytes;
    const u32 smem_ds = smem_stages + 2 * kStageBytes;
    const u32 smem_vectors = smem_stages + 2 * kStageBytes + kDsBytes;
    load_key_value_block<kBlockN, kHeadDimQK, kHeadDimV, kThreads, kColumns, Mask::kOrderedCtas>(
        p, ms, n_block, smem_k, smem_vectors, thread);

    QueryBlockWalk<Mask, kBlockM, kBlockN, kHeadDimQK, kHeadDimV, kThreads, kStageBytes> walk;
    walk.begin(p, ms, n_block, smem_stages, work);

    acc_dk.fill(0.f);
    acc_dv.fill(0.f);

    // A predicate's table entry and stored bits are read one block ahead (read_tile).
    int tile_next = 0;
    Words words[1];
    if (kElementBits && walk.more()) tile_next = read_tile(ms, p, n_block, walk.block, words);
    for (int it = 0; walk.more(); ++it) {
      // The stage() barrier also frees dS^T, which the previous iteration read.
      const u32 smem_stage = walk.stage(p, ms, n_block, smem_stages, it);
      ms.row_begin = walk.block * kBlockM;
      ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
      const int tile =
          kElementBits ? tile_next : Mask::template classify<kBlockN>(ms, p.minmax, n_block);
      compute_block(p, ms, smem_k, smem_v, smem_stage, smem_ds, smem_vectors, key0, tile, words);
      walk.advance(p, ms, n_block);
      if (kElementBits && walk.more()) tile_next = read_tile(ms, p, n_block, walk.block, words);
    }
    cp_async_wait<0>();
    epilogue(p, key0);
  }

  /// A predicate's table entry of (query block m_block, key block n_block) and, when
  /// kPrefetchBits, the stored bits of the thread's two keys in it (read_tile, mask_apply.cuh).
  __device__ __forceinline__ static int read_tile(MaskState ms, const BwdParams& p, int n_block,
                                                  int m_block, Words (&words)[1]) {
    ms.row_begin = m_block * kBlockM;
    if constexpr (kPrefetchBits) {
      // The thread's keys from the special registers, read only for a partial tile.
      return attnjit::read_tile<Mask, kBlockN, kQTiles, true>(
          p, ms, &BwdParams::minmax, &BwdParams::predicate_bits, n_block,
          [](int) {
            const int lane = read_tid_x() % 32;
            const int key_row0 = (read_tid_x() / 32) % kKeyWarps * 16;
            return key_row0 + lane / 4;
          },
          words);
    } else {
      return Mask::template classify<kBlockN>(ms, p.minmax, n_block);
    }
  }

  __device__ __forceinline__ void compute_block(const BwdParams& p, const MaskState& ms, u32 smem_k,
                                                u32 smem_v, u32 smem_stage, u32 smem_ds,
                                                u32 vectors, int key0, int tile,
                                                const Words (&words)[1]) {
    const int kind = tile_kind(tile);
    const int warp = read_tid_x() / 32;
    const int lane = read_tid_x() % 32;
    const u32 smem_q = smem_stage;
    const u32 smem_do = smem_stage + QTile::kBytes;
    const u32 lse_log2 = smem_do + DoTile::kBytes;  // kBlockM floats, then D
    const u32 row_dot = lse_log2 + kBlockM * 4;
    const int key_warp = warp % kKeyWarps;
    const int dim_warp = warp / kKeyWarps;
    const int key_row0 = key_warp * 16;
    const int dk_chunk0 = dim_warp * kDkPerWarp / 8;
    const int dv_chunk0 = dim_warp * kDvPerWarp / 8;
    const int g = lane / 4;
    const int t = lane % 4;
    // Per-lane address parts (SmemTile::matrix_address): A rows, B rows (non-transposed),
    // B rows transposed.
    const u32 kv_a_lane = opaque(KTile::lane_offset(lane % 16, lane / 16));
    const u32 q_b_lane = opaque(QTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2));
    const u32 q_bt_lane = opaque(QTile::lane_offset(lane % 16, lane / 16));

    // A predicate's partial tile is masked by one bit per element of the thread's fragment
    // (S^T's rows are keys, its columns queries), taken before S^T = K Q^T while the scores
    // hold no registers: from the stored bits (read during the block before), else by
    // evaluating the generated element rule.
    unsigned long long hidden = 0;
    if constexpr (kElementBits) {
      if (kind == kTilePartial) {
        hidden = tile_bits_slot(tile) < 0 ? Mask::template evaluate_bits<kQTiles, true>(
                                                p, ms, key_row0 + g, 2 * t, key0, ms.row_begin)
                 : kPrefetchBits ? Mask::template fragment_bits<kQTiles>(words[0], 2 * t)
                                 : Mask::template fragment_bits<kQTiles>(
                                       Mask::template load_fragment_words<kQTiles, true>(
                                           p.predicate_bits, tile, key_row0 + g),
                                       2 * t);
      }
    }

    // S^T = K Q^T for the warp's 16 keys.
    WarpAccumulator<1, kQTiles> acc_s;
    warp_rows_times_rows<Element, KTile, QTile, kQkSteps>(acc_s, smem_k, kv_a_lane, key_row0,
                                                          smem_q, q_b_lane, 0);

    if constexpr (kElementBits) {
      if (kind == kTilePartial) mask_by_bits(acc_s, 0, hidden);
    } else if (kind == kTilePartial) {
      // This thread's two keys (rows g, g + 8 of S^T) are the FlashMask columns.
      mask_scores_by_key<Mask>(p, ms, acc_s, vectors, key0, key_row0, 0, lane);
    }

    // P^T = 2^(S^T c - LSE2): 0 where masked and in rows that see no key (LSE2 = +inf).
    // Score modifiers apply here, after the mask, so that soft-capping's 1 - tanh^2 goes
    // straight into the 16-bit P^T (1 - tanh^2) that dS^T uses, held in no fp32 register.
    // Element (nt, 2 r + c) is key row g + 8 r, query column nt * 8 + 2 t + c. The walks are
    // TransposedPairs' (backward_common.cuh), written out: through the shared function this
    // kernel's machine code would change.
    const Score score = Score::template make<Mask::kOrderedCtas>(p);
    const int distance0 = key0 + key_row0 + g - (ms.row_begin + 2 * t + ms.diagonal);
    u32 p_grad_packed[kQTiles][2];  // used by soft-capping only
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
      float lse[2];
      load_lse_pair<Score>(lse_log2, nt * 8 + 2 * t, ms, lse);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float grad[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          acc_s.v[0][nt][2 * r + c] = backward_probability(
              p, score, acc_s.v[0][nt][2 * r + c], distance0 + 8 * r - nt * 8 - c, lse[c], grad[c]);
        }
        if (Score::kSoftcap) {
          p_grad_packed[nt][r] =
              pack2<Element>(acc_s.v[0][nt][2 * r] * grad[0], acc_s.v[0][nt][2 * r + 1] * grad[1]);
        }
      }
    }

    // dV += P^T dO. From here on P lives only in its 16-bit form (the registers go to dP^T);
    // dS uses that rounded P, as a plain 16-bit implementation would (with soft-capping, the
    // rounded P^T (1 - tanh^2)).
    OperandA<1, kQSteps> p_packed;
    to_operand_a<Element>(acc_s, p_packed);
    warp_regs_times_tile<Element, DoTile, kQSteps>(acc_dv, p_packed, smem_do, q_bt_lane, dv_chunk0);

    // dP^T = V dO^T, then dS^T = P^T (dP^T - D).
    WarpAccumulator<1, kQTiles> acc_ds;
    warp_rows_times_rows<Element, VTile, DoTile, kVSteps>(acc_ds, smem_v, kv_a_lane, key_row0,
                                                          smem_do, q_b_lane, 0);
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
      float d[2];
      load_shared_v2_f32(row_dot + (nt * 8 + 2 * t) * 4, d[0], d[1]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const u32 pair = Score::kSoftcap ? p_grad_packed[nt][e / 2]
                                         : p_packed.v[0][nt / 2][operand_register(nt, e / 2)];
        const float p_value = e % 2 ? unpack_hi<Element>(pair) : unpack_lo<Element>(pair);
        acc_ds.v[0][nt][e] = p_value * (acc_ds.v[0][nt][e] - d[e % 2]);
      }
    }

    // dK += dS^T Q.
    OperandA<1, kQSteps> ds_packed;
    to_operand_a<Element>(acc_ds, ds_packed);
    warp_regs_times_tile<Element, QTile, kQSteps>(acc_dk, ds_packed, smem_q, q_bt_lane, dk_chunk0);

    if (kAtomicDq) {
      if (dim_warp == 0) {
#pragma unroll
        for (int nt = 0; nt < kQTiles; ++nt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int offset = DsTile::element_offset(key_row0 + g + 8 * r, nt * 8 + 2 * t);
            store_shared_u32(smem_ds + offset, ds_packed.v[0][nt / 2][operand_register(nt, r)]);
          }
        }
      }
      __syncthreads();
      // dQ_i += dS K, the warps as 16-row slabs by column groups.
      accumulate_dq_tiles<Element, kHeadDimQK, DsTile, KTile, 1, kDqTiles, kKeySteps, kDqRowWarps,
                          kDqCols, Mask::kOrderedCtas>(p, ms, smem_ds, smem_k);
    }
  }

  /// dK (scaled) and dV of the warp's keys and columns (store_dkdv_tile).
  __device__ __forceinline__ void epilogue(const BwdParams& p, int key0) {
    const int warp = threadIdx.x / 32;
    const CtaWork work = cta_work<true>(cta_order_of<Mask::kOrderedCtas>(p));
    const int dim_warp = warp / kKeyWarps;
    store_dkdv_tile<Element, kHeadDimQK, kHeadDimV>(
        p, work.head, work.batch, key0 + (warp % kKeyWarps) * 16, dim_warp * kDkPerWarp,
        dim_warp * kDvPerWarp, acc_dk.v[0], acc_dv.v[0]);
  }
};

/// The body of a generated backward (dK, dV and, with kAtomicDq, dQ) kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void backward_slabs_sm80(const BwdParams& params) {
  run_kernel<BackwardSlabsSm80<Config, Mask, Score>, 128>(params);
}

}  // namespace attnjit
