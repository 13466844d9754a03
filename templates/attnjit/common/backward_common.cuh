// Pieces shared by the layouts of the backward main kernel (sm80/backward_slabs.cuh: a key slab per
// warp; sm80/backward_grid.cuh: 2-D warp grids; sm90a/backward.cuh: warpgroups): the masking of
// S^T by key rows, P from a score, the dK/dV stores and the dQ reductions. The walk over the
// query blocks is QueryBlockWalk (block_walk.cuh).
#pragma once

#include "attnjit/common/block_walk.cuh"
#include "attnjit/common/fragment.cuh"
#include "attnjit/common/mask_apply.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/common/warp_mma.cuh"
#include "attnjit/masks/mask.cuh"

namespace attnjit {

/// Sets to -inf the scores a partial tile's mask hides in the accumulators of S^T (rows keys,
/// columns queries): the fragment's element (0, 0) is key key0 + key_row0 (its FlashMask values
/// at `vectors`, kColumns per key of the block) and query ms.row_begin + query0. Each key's
/// values are read once for its whole row of the tile (mask_by_rows). Queries past Sq add
/// nothing to dK and dV whether masked or not (their dO and D are read as zeros), so an absent
/// LTE (Sq) or UTS (0) is not compared (Mask::masked's kRowsBelowSq).
template <class Mask, int kSlabs, int kTiles>
__device__ __forceinline__ void mask_scores_by_key(const BwdParams& p, const MaskState& ms,
                                                   WarpAccumulator<kSlabs, kTiles>& acc,
                                                   u32 vectors, int key0, int key_row0, int query0,
                                                   int lane) {
  mask_by_rows(
      acc, lane, key_row0, ms.row_begin + query0,
      [ms, vectors](int key_local) {
        return Mask::load_column(ms, vectors + key_local * Mask::kColumns * 4);
      },
      [&p, ms, key0](const typename Mask::Column& column, int key_local, int query) {
        return Mask::template masked<true>(p, ms, query, key0 + key_local, column);
      });
}

/// mask_scores_by_key for one warpgroup's m64 accumulator of S^T under FlashMask (no window
/// by index): each key's rule as bounds on the queries' offsets from the thread's first query
/// (Mask::row_bounds), so that no query index per element is held in registers (the causal
/// FlashMask kernels at d128 spilled with them).
template <class Mask, int kTiles>
__device__ __forceinline__ void mask_scores_by_key_bounds(const MaskState& ms,
                                                          WarpAccumulator<1, kTiles>& acc,
                                                          u32 vectors, int key0, int key_row0,
                                                          int lane) {
  const int base = ms.row_begin + 2 * (lane % 4);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key_local = key_row0 + lane / 4 + 8 * r;
    const typename Mask::RowBounds bounds =
        Mask::row_bounds(ms, base, key0 + key_local,
                         Mask::load_column(ms, vectors + key_local * Mask::kColumns * 4));
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        if (Mask::rows_masked(bounds, 8 * nt + c)) acc.v[0][nt][2 * r + c] = negative_infinity();
      }
    }
  }
}

/// LSE2 of queries query_local and query_local + 1 of the block, from the stage's LSE2 row
/// at `lse_log2`. With ALiBi, rows past Sq (which read LSE2 = 0) get +inf: their scores are
/// the bias alone, which a negative slope makes large, and +inf keeps their P at 0 (0 * inf
/// would reach dV and dK).
template <class Score>
__device__ __forceinline__ void load_lse_pair(u32 lse_log2, int query_local, const MaskState& ms,
                                              float (&lse)[2]) {
  load_shared_v2_f32(lse_log2 + query_local * 4, lse[0], lse[1]);
  if (Score::kAlibi) {
    const int query = ms.row_begin + query_local;
    if (query >= ms.seqlen_q) lse[0] = -negative_infinity();
    if (query + 1 >= ms.seqlen_q) lse[1] = -negative_infinity();
  }
}

/// P of one score (-inf where masked): the score modifier first (its derivative to `grad`,
/// 1 without one), then 2^(s c - LSE2); `distance` = key - (query + Sk - Sq) for ALiBi.
template <class Score>
__device__ __forceinline__ float backward_probability(const BwdParams& p, const Score& score,
                                                      float s, int distance, float lse,
                                                      float& grad) {
  grad = 1.f;
  if (Score::kActive) s = score.apply_after_mask(s, distance, grad);
  return exp2_approx(fmaf(s, Score::exponent_scale(p), -lse));
}

/// The element pairs of a warp's fragment of S^T or dP^T (rows keys, columns queries; kSlabs
/// m16 tiles by kTiles n8 tiles, fragment.cuh's layout) and the two walks every backward main
/// kernel makes over them, P^T from the scores, then dS^T with the row dots (the sm80 layouts
/// write them out, which keeps their machine code). Pair (mt, nt, r)
/// holds elements 2 r and 2 r + 1 of tile (mt, nt): key row 16 mt + g + 8 r of the fragment,
/// queries query0 + 8 nt + 2 t and + 1 of the block.
template <int kSlabs, int kTiles>
struct TransposedPairs {
  /// P^T = 2^(S^T c - LSE2) of each pair of `scores` (backward_probability; distance0: key -
  /// query - diagonal of the fragment's first element, for ALiBi) handed to
  /// pair(mt, nt, r, value, grad), grad the score modifier's derivatives; the LSE2 of each
  /// tile's queries read once from the stage's row at `lse_log2` (load_lse_pair).
  template <class Score, class Pair>
  __device__ __forceinline__ static void probabilities(const BwdParams& p, const Score& score,
                                                       const MaskState& ms,
                                                       const float (&scores)[kSlabs][kTiles][4],
                                                       u32 lse_log2, int query0, int t,
                                                       int distance0, Pair pair) {
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
      float lse[2];
      load_lse_pair<Score>(lse_log2, query0 + nt * 8 + 2 * t, ms, lse);
#pragma unroll
      for (int mt = 0; mt < kSlabs; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float value[2];
          float grad[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            value[c] =
                backward_probability(p, score, scores[mt][nt][2 * r + c],
                                     distance0 + 16 * mt + 8 * r - 8 * nt - c, lse[c], grad[c]);
          }
          pair(mt, nt, r, value, grad);
        }
      }
    }
  }

  /// Each pair with the D of its queries (the stage's row dots at `row_dot`, read once per
  /// tile): pair(mt, nt, r, d) forms dS^T = P^T (dP^T - D).
  template <class Pair>
  __device__ __forceinline__ static void row_dots(u32 row_dot, int query0, int t, Pair pair) {
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
      float d[2];
      load_shared_v2_f32(row_dot + (query0 + nt * 8 + 2 * t) * 4, d[0], d[1]);
#pragma unroll
      for (int mt = 0; mt < kSlabs; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) pair(mt, nt, r, d);
      }
    }
  }
};

/// dK (scaled by softmax_scale) and dV of one m16 accumulator tile of a warp: keys
/// key_row0 + g and key_row0 + g + 8, dK columns dk_col0 + 8 dt + 2 t of kHeadDimQK and dV
/// columns dv_col0 + 8 dt + 2 t of kHeadDimV. Straight to d_k / d_v for MHA, to the fp32
/// per-query-head partials for GQA (summed by backward_reduce_dkdv).
template <class Element, int kHeadDimQK, int kHeadDimV, int kDkTiles, int kDvTiles>
__device__ __forceinline__ void store_dkdv_tile(const BwdParams& p, int head, int batch,
                                                int key_row0, int dk_col0, int dv_col0,
                                                const float (&acc_dk)[kDkTiles][4],
                                                const float (&acc_dv)[kDvTiles][4]) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int kv_head = head / (p.heads / p.kv_heads);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_row0 + g + 8 * r;
    if (key >= p.seqlen_k) continue;
    if (p.dk_partial != 0) {
      const long long row = (static_cast<long long>(batch) * p.heads + head) * p.seqlen_k + key;
#pragma unroll
      for (int dt = 0; dt < kDkTiles; ++dt) {
        float* dk = p.dk_partial + row * kHeadDimQK + dk_col0 + dt * 8 + 2 * t;
        dk[0] = acc_dk[dt][2 * r] * p.softmax_scale;
        dk[1] = acc_dk[dt][2 * r + 1] * p.softmax_scale;
      }
#pragma unroll
      for (int dt = 0; dt < kDvTiles; ++dt) {
        float* dv = p.dv_partial + row * kHeadDimV + dv_col0 + dt * 8 + 2 * t;
        dv[0] = acc_dv[dt][2 * r];
        dv[1] = acc_dv[dt][2 * r + 1];
      }
    } else {
      u16* d_k = static_cast<u16*>(p.d_k) + batch * p.dk_batch_stride + key * p.dk_row_stride +
                 kv_head * p.dk_head_stride;
      u16* d_v = static_cast<u16*>(p.d_v) + batch * p.dv_batch_stride + key * p.dv_row_stride +
                 kv_head * p.dv_head_stride;
#pragma unroll
      for (int dt = 0; dt < kDkTiles; ++dt) {
        *reinterpret_cast<u32*>(d_k + dk_col0 + dt * 8 + 2 * t) = pack2<Element>(
            acc_dk[dt][2 * r] * p.softmax_scale, acc_dk[dt][2 * r + 1] * p.softmax_scale);
      }
#pragma unroll
      for (int dt = 0; dt < kDvTiles; ++dt) {
        *reinterpret_cast<u32*>(d_v + dv_col0 + dt * 8 + 2 * t) =
            pack2<Element>(acc_dv[dt][2 * r], acc_dv[dt][2 * r + 1]);
      }
    }
  }
}

/// Adds one m16 tile of dQ partial sums (queries query_row0 + g and + 8, columns
/// col0 + 8 dt + 2 t) to the fp32 accumulator with atomics (red.global.add); rows past Sq
/// are dropped.
template <int kHeadDim, int kDqTiles>
__device__ __forceinline__ void add_dq_tile(const BwdParams& p, int seqlen_q, int head, int batch,
                                            int query_row0, int col0,
                                            const float (&acc)[kDqTiles][4]) {
  const int lane = read_tid_x() % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  float* base = p.dq_accum +
                (static_cast<long long>(batch) * p.heads + head) * p.seqlen_q * kHeadDim + col0 +
                2 * t;
#if __CUDA_ARCH__ >= 900
  // Quad pairs swap halves so that each thread owns four consecutive floats of one row
  // (even t: row g, odd t: row g + 8) and adds them with one 16-byte vector reduction.
  const bool even = (t & 1) == 0;
  const int query = query_row0 + g + (even ? 0 : 8);
  float* row = base + static_cast<long long>(query) * kHeadDim - (even ? 0 : 2);
#pragma unroll
  for (int dt = 0; dt < kDqTiles; ++dt) {
    const float send0 = even ? acc[dt][2] : acc[dt][0];
    const float send1 = even ? acc[dt][3] : acc[dt][1];
    const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1);
    const float got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
    const float x0 = even ? acc[dt][0] : got0;
    const float x1 = even ? acc[dt][1] : got1;
    const float x2 = even ? got0 : acc[dt][2];
    const float x3 = even ? got1 : acc[dt][3];
    if (query < seqlen_q) {
      asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(row + dt * 8), "f"(x0),
                   "f"(x1), "f"(x2), "f"(x3)
                   : "memory");
    }
  }
#else
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = query_row0 + g + 8 * r;
    if (query < seqlen_q) {
      float* row = base + static_cast<long long>(query) * kHeadDim;
#pragma unroll
      for (int dt = 0; dt < kDqTiles; ++dt) {
        atomicAdd(row + dt * 8, acc[dt][2 * r]);
        atomicAdd(row + dt * 8 + 1, acc[dt][2 * r + 1]);
      }
    }
  }
#endif
}

/// dQ_i += dS K for one warp's kMTiles m16 tiles of queries and kDqTiles n8 tiles of columns,
/// read from the [key][query] dS^T tile (DsTile) and the K tile (KTile, kHeadDim = head_dim_qk
/// columns) over kKeySteps k16
/// steps, added to the fp32 accumulator with add_dq_tile. The warps split the query block as
/// kRowWarps row slabs (16 kMTiles queries) by column groups of kCols. The key-slab and the
/// grid layout differ only in that split and the tile counts.
template <class Element, int kHeadDim, class DsTile, class KTile, int kMTiles, int kDqTiles,
          int kKeySteps, int kRowWarps, int kCols, bool kOrderedCtas>
__device__ __forceinline__ void accumulate_dq_tiles(const BwdParams& p, const MaskState& ms,
                                                    u32 smem_ds, u32 smem_k) {
  const int warp = read_tid_x() / 32;
  const CtaWork work = cta_work<true>(cta_order_of<kOrderedCtas>(p));
  const int query0 = (warp % kRowWarps) * (16 * kMTiles);
  const int chunk0 = (warp / kRowWarps) * kCols / 8;
  const int lane = read_tid_x() % 32;
  const u32 ds_lane = opaque(DsTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2));
  const u32 k_lane = opaque(KTile::lane_offset(lane % 16, lane / 16));
  WarpAccumulator<kMTiles, kDqTiles> acc;
  acc.fill(0.f);
  // dS (query x key) from the [key][query] tile: the transposed load gives A's layout.
  warp_tile_times_tile<Element, true, DsTile, KTile, kKeySteps>(acc, smem_ds, ds_lane, query0 / 8,
                                                                smem_k, k_lane, chunk0);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    add_dq_tile<kHeadDim>(p, ms.seqlen_q, work.head, work.batch, ms.row_begin + query0 + 16 * mt,
                          chunk0 * 8, acc.v[mt]);
  }
}

}  // namespace attnjit
