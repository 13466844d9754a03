// The backward mainloop on warpgroup MMAs (sm_90a, wgmma.cuh): one CTA per key block of
// 64 keys per warpgroup, the products' operands read by the tensor cores straight from the
// swizzled shared tiles.
//
// Warpgroup w owns keys [64 w, 64 w + 64) of the CTA's block for S^T, dP^T, dK and dV; for
// dQ, columns [w kDqCols, (w + 1) kDqCols) over all keys where the head dim gives each
// warpgroup a 64-column panel (d128), else its own keys over all columns (d64):
//   S^T  = K_w Q^T, dP^T = V_w dO^T   m64 x kBlockM, both operands K-major from shared memory
//   P^T  = 2^(S^T c - LSE2)           in registers, packed as the A operand of dV
//   dS^T = P^T (dP^T - D)             in registers (A of dK) and to shared memory (A of dQ)
//   dV  += P^T dO, dK += dS^T Q       m64 x kHeadDim, fp32 accumulators in registers; dO and Q
//                                     MN-major from the query stage
//   dQ_i += dS K                      m64 x kDqCols after a CTA barrier (dS^T of all keys) or
//                                     a warpgroup barrier (its keys), fp32 red.global
//                                     reductions (twice as many when split by keys)
// One barrier per query block besides the walk's (QueryBlockWalk, bwd_common.cuh: Q_i, dO_i,
// LSE_i and D_i through two cp.async stages). dK is scaled by softmax_scale at the end; dQ in
// backward_convert_dq. Masks and score modifiers as in bwd_grid_sm80.cuh, on the same
// accumulator layout; masks with element bits and the deterministic mode take the sm80
// kernels.
//
// Config: Element, kHeadDim, kBlockM, kBlockN, kWarps, kAtomicDq. Score: a ScoreMod.
#pragma once

#include "attnjit/common/bwd_common.cuh"
#include "attnjit/sm90a/bwd_wgmma_products.cuh"
#include "attnjit/common/fragment.cuh"
#include "attnjit/common/kv_block.cuh"
#include "attnjit/masks/mask.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/common/score_mod.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/sm90a/wgmma.cuh"

namespace attnjit {

/// kWarps / 4 warpgroups of 64 keys (BackwardWgmmaProducts' groups).
template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct BackwardWgmmaSm90 : BackwardWgmmaProducts<typename Config::Element, Config::kHeadDim,
                                                 Config::kBlockM, Config::kBlockN,
                                                 Config::kWarps / 4> {
  typedef BackwardWgmmaProducts<typename Config::Element, Config::kHeadDim, Config::kBlockM,
                                Config::kBlockN, Config::kWarps / 4>
      Products;
  typedef typename Config::Element Element;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kBlockM = Config::kBlockM;  // queries per iteration
  static constexpr int kBlockN = Config::kBlockN;  // keys of the CTA
  static constexpr int kWarps = Config::kWarps;
  static constexpr int kThreads = kWarps * 32;
  using Products::kDqByColumns;
  using Products::kDqCols;
  using Products::kSTiles;
  using Products::kQSteps;
  static constexpr int kColumns = Mask::kColumns;

  static_assert(Config::kAtomicDq, "the deterministic mode takes the sm80 kernels");
  static_assert(!Mask::kElementBits, "masks with element bits take the key-slab layout");
  static_assert(kWarps % 4 == 0, "whole warpgroups");

  typedef typename Products::KvTile KvTile;
  typedef typename Products::QTile QTile;  // Q and dO
  typedef typename Products::DsTile DsTile;
  /// Q, dO, LSE2 and D, padded to keep the next stage's tiles 1024-byte aligned.
  static constexpr int kStageBytes = 2 * QTile::kBytes + ((2 * kBlockM * 4 + 1023) / 1024) * 1024;
  /// Alignment slack, K, V, two stages, dS^T, the key block's FlashMask values.
  static constexpr int kSmemBytes =
      1024 + 2 * KvTile::kBytes + 2 * kStageBytes + DsTile::kBytes + kBlockN * kColumns * 4;

  WarpgroupAccumulator<kHeadDim> acc_dk;
  WarpgroupAccumulator<kHeadDim> acc_dv;

  __device__ __forceinline__ void run(const BwdParams& p, unsigned char* smem) {
    start_cta<true>(cta_order_of<Mask::kOrderedCtas>(p));
    const CtaWork work = cta_work<true>(cta_order_of<Mask::kOrderedCtas>(p));
    const int n_block = work.block;
    if (work.head >= p.heads) return;  // the missing half of the last pair (schedule.cuh)

    MaskState ms = make_mask_state<kBlockN, Mask>(p, work.head, work.batch);

    const int key0 = n_block * kBlockN;
    // The swizzled tiles need 1024-byte aligned bases (wgmma.cuh).
    const u32 smem_k = (smem_address(smem) + 1023) & ~1023u;
    const u32 smem_v = smem_k + KvTile::kBytes;
    const u32 smem_stages = smem_v + KvTile::kBytes;
    const u32 smem_ds = smem_stages + 2 * kStageBytes;
    const u32 smem_vectors = smem_ds + DsTile::kBytes;
    load_key_value_block<kBlockN, kHeadDim, kThreads, kColumns, Mask::kOrderedCtas>(
        p, ms, n_block, smem_k, smem_vectors, threadIdx.x);
    QueryBlockWalk<Mask, kBlockM, kBlockN, kHeadDim, kThreads, kStageBytes, true> walk;
    walk.begin(p, ms, n_block, smem_stages, work);

    acc_dk.fill(0.f);
    acc_dv.fill(0.f);

    for (int it = 0; walk.more(); ++it) {
      const u32 smem_stage = walk.stage(p, ms, n_block, smem_stages, it);
      ms.row_begin = walk.block * kBlockM;
      ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
      iterate(p, ms, smem_k, smem_v, smem_stage, smem_ds, smem_vectors, key0,
              Mask::template classify<kBlockN>(ms, p.minmax, n_block));
      walk.advance(p, ms, n_block);
    }
    cp_async_wait<0>();
    epilogue(p, key0);
  }

  /// One query block: the five products of the warpgroup. Element (nt, e) of an m64 x kBlockM
  /// accumulator is key row key_row0 + g + 8 (e / 2), query column 8 nt + 2 t + e % 2.
  __device__ __forceinline__ void iterate(const BwdParams& p, const MaskState& ms, u32 smem_k,
                                          u32 smem_v, u32 smem_stage, u32 smem_ds, u32 vectors,
                                          int key0, int tile) {
    const int warpgroup = read_tid_x() / 128;
    const int lane = read_tid_x() % 32;
    const int key_row0 = 64 * warpgroup + 16 * ((read_tid_x() / 32) % 4);
    const int g = lane / 4;
    const int t = lane % 4;
    const u32 smem_q = smem_stage;
    const u32 smem_do = smem_stage + QTile::kBytes;
    const u32 lse_log2 = smem_stage + 2 * QTile::kBytes;  // kBlockM floats, then D
    const u32 row_dot = lse_log2 + kBlockM * 4;

    // S^T = K Q^T and dP^T = V dO^T, issued together.
    WarpgroupAccumulator<kBlockM> acc_s;
    WarpgroupAccumulator<kBlockM> acc_dp;
    wgmma_fence();
    Products::keys_times_queries(acc_s.tiles(), smem_k, smem_q, warpgroup);
    Products::keys_times_queries(acc_dp.tiles(), smem_v, smem_do, warpgroup);
    wgmma_wait<1>();
    fence_accumulators(acc_s.tiles());

    if (tile_kind(tile) == kTilePartial) {
      mask_scores_by_key<Mask>(p, ms, acc_s, vectors, key0, key_row0, 0, lane);
    }

    // P^T = 2^(S^T c - LSE2): 0 where masked and in rows that see no key (LSE2 = +inf).
    // Score modifiers apply after the mask (bwd_sm80.cuh). P^T is packed at once as dV's A
    // operand; acc_s keeps P^T (1 - tanh^2) for dS^T under soft-capping, else dS^T reads the
    // packed (rounded) P^T back, as the sm80 kernels do.
    OperandA<1, kQSteps> a_p;
    const Score score = Score::template make<Mask::kOrderedCtas>(p);
    const int distance0 = key0 + key_row0 + g - (ms.row_begin + 2 * t + ms.diagonal);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      float lse[2];
      load_lse_pair<Score>(lse_log2, nt * 8 + 2 * t, ms, lse);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float value[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float grad;
          value[c] = backward_probability(p, score, acc_s.v[0][nt][2 * r + c],
                                          distance0 + 8 * r - 8 * nt - c, lse[c], grad);
          if (Score::kSoftcap) acc_s.v[0][nt][2 * r + c] = value[c] * grad;
        }
        a_p.v[0][nt / 2][operand_register(nt, r)] = pack2<Element>(value[0], value[1]);
      }
    }

    // dS^T = P^T (dP^T - D), packed as dK's A operand and stored as the [key][query] tile.
    wgmma_wait<0>();
    fence_accumulators(acc_dp.tiles());
    OperandA<1, kQSteps> a_ds;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      float d[2];
      load_shared_v2_f32(row_dot + (nt * 8 + 2 * t) * 4, d[0], d[1]);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const u32 p_pair = a_p.v[0][nt / 2][operand_register(nt, r)];
        const float p0 = Score::kSoftcap ? acc_s.v[0][nt][2 * r] : unpack_lo<Element>(p_pair);
        const float p1 = Score::kSoftcap ? acc_s.v[0][nt][2 * r + 1] : unpack_hi<Element>(p_pair);
        const u32 pair = pack2<Element>(p0 * (acc_dp.v[0][nt][2 * r] - d[0]),
                                        p1 * (acc_dp.v[0][nt][2 * r + 1] - d[1]));
        a_ds.v[0][nt / 2][operand_register(nt, r)] = pair;
        store_shared_u32(smem_ds + DsTile::element_offset(key_row0 + g + 8 * r, nt * 8 + 2 * t),
                         pair);
      }
    }

    // dV += P^T dO and dK += dS^T Q, running while the CTA waits for all of dS^T.
    wgmma_fence();
    Products::add_dv_dk(acc_dv.tiles(), acc_dk.tiles(), a_p, a_ds, smem_do, smem_q);
    fence_async_shared();
    if constexpr (kDqByColumns) {
      __syncthreads();
    } else {
      // Only this warpgroup's rows of dS^T are read: its own barrier (ids 1, 2, ...).
      asm volatile("bar.sync %0, 128;" ::"r"(1 + warpgroup) : "memory");
    }

    // dQ_i = dS K.
    WarpgroupAccumulator<kDqCols> acc_dq;
    const int panel = Products::dq_panel(warpgroup);
    Products::dq_product(acc_dq.tiles(), smem_ds, smem_k, warpgroup);
    wgmma_wait<0>();
    fence_accumulators(acc_dq.tiles());
    fence_accumulators(acc_dk.tiles());
    fence_accumulators(acc_dv.tiles());
    const CtaWork work = cta_work<true>(cta_order_of<Mask::kOrderedCtas>(p));
    add_dq_tile<kHeadDim>(p, ms.seqlen_q, work.head, work.batch,
                          ms.row_begin + 16 * ((read_tid_x() / 32) % 4), panel * 64,
                          acc_dq.tiles());
  }

  /// dK (scaled) and dV of the warp's 16 keys, all columns (store_dkdv_tile).
  __device__ __forceinline__ void epilogue(const BwdParams& p, int key0) {
    const CtaWork work = cta_work<true>(cta_order_of<Mask::kOrderedCtas>(p));
    const int warp = threadIdx.x / 32;
    store_dkdv_tile<Element, kHeadDim>(p, work.head, work.batch,
                                       key0 + 64 * (warp / 4) + 16 * (warp % 4), 0, acc_dk.tiles(),
                                       acc_dv.tiles());
  }
};

/// The body of a generated backward (dK, dV, atomic dQ) kernel on warpgroup MMAs.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void backward_wgmma_sm90(const BwdParams& params) {
  extern __shared__ __align__(1024) unsigned char smem[];
  BackwardWgmmaSm90<Config, Mask, Score> kernel;
  kernel.run(params, smem);
}

}  // namespace attnjit
