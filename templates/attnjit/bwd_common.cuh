// Pieces shared by the two layouts of the backward main kernel (bwd_sm80.cuh: a key slab per
// warp; bwd_grid_sm80.cuh: 2-D warp grids): the query-block copies, the dK/dV stores and the
// dQ reductions.
#pragma once

#include "attnjit/mask.cuh"
#include "attnjit/params.cuh"
#include "attnjit/primitives.cuh"
#include "attnjit/schedule.cuh"
#include "attnjit/smem_tile.cuh"
#include "attnjit/warp_mma.cuh"
#include "attnjit/wgmma.cuh"

namespace attnjit {

/// cp.async of query block m into one stage: Q, dO (zero-filled past Sq), then LSE2 and D
/// (kBlockM floats each, zero past Sq).
template <int kBlockM, int kHeadDim, int kThreads>
__device__ __forceinline__ void load_backward_query_block(const BwdParams& p, int m, u32 smem_stage,
                                                          int head, int batch, int thread) {
  typedef SmemTile<kBlockM, kHeadDim> QTile;
  const int row0 = m * kBlockM;
  const int valid = min(kBlockM, p.seqlen_q - row0);
  load_tile_async<kBlockM, kHeadDim, kThreads>(smem_stage,
                                               static_cast<const u16*>(p.q) +
                                                   batch * p.q_batch_stride +
                                                   head * p.q_head_stride + row0 * p.q_row_stride,
                                               p.q_row_stride, valid, thread);
  load_tile_async<kBlockM, kHeadDim, kThreads>(smem_stage + QTile::kBytes,
                                               static_cast<const u16*>(p.d_o) +
                                                   batch * p.do_batch_stride +
                                                   head * p.do_head_stride + row0 * p.do_row_stride,
                                               p.do_row_stride, valid, thread);
  const long long bh_row = (static_cast<long long>(batch) * p.heads + head) * p.seqlen_q + row0;
  for (int i = thread; i < 2 * kBlockM; i += kThreads) {
    const int r = i % kBlockM;
    const float* src = (i < kBlockM ? p.lse_log2 : p.row_dot) + bh_row + r;
    cp_async_4(smem_stage + 2 * QTile::kBytes + i * 4, r < valid ? src : p.row_dot,
               r < valid ? 4 : 0);
  }
}

/// A backward main kernel's walk (one CTA per key block) over the query blocks that can see
/// its keys (mask.cuh: index ranges, FlashMask min/max skipping), with Q_i, dO_i, LSE_i and
/// D_i streamed through two cp.async stages of kStageBytes. begin() issues the first block's
/// copies; each iteration `it` calls stage() at its top, computes query block `block` from
/// the stage it returns, then calls advance(). kTensorReads: the tensor cores read the
/// stages through matrix descriptors (wgmma), which needs a proxy fence after the copies.
template <class Mask, int kBlockM, int kBlockN, int kHeadDim, int kThreads, int kStageBytes,
          bool kTensorReads = false>
struct QueryBlockWalk {
  int block;  ///< this iteration's query block; the walk is over when it reaches `end`
  int end;
  int load;  ///< the next block to copy

  __device__ __forceinline__ void begin(const BwdParams& p, const MaskState& ms, int n_block,
                                        u32 smem_stages, const CtaWork& work) {
    int first;
    Mask::template query_block_range<kBlockM, kBlockN>(ms, n_block, first, end);
    load = next_active(p, ms, n_block, first);
    block = load;
    if (load < end) {
      load_backward_query_block<kBlockM, kHeadDim, kThreads>(p, load, smem_stages, work.head,
                                                             work.batch, threadIdx.x);
      load = next_active(p, ms, n_block, load + 1);
    }
    cp_async_commit();
  }

  __device__ __forceinline__ bool more() const { return block < end; }

  /// Waits for stage `it` and makes it visible to all warps, which also frees the other stage
  /// (and whatever else the previous iteration read); issues the next active block's copies
  /// into that other stage. Returns stage `it`.
  __device__ __forceinline__ u32 stage(const BwdParams& p, const MaskState& ms, int n_block,
                                       u32 smem_stages, int it) {
    cp_async_wait<0>();
    if constexpr (kTensorReads) fence_async_shared();
    __syncthreads();
    if (load < end) {
      const CtaWork now = cta_work<true>(cta_order_of<Mask::kOrderedCtas>(p));
      load_backward_query_block<kBlockM, kHeadDim, kThreads>(
          p, load, smem_stages + ((it + 1) % 2) * kStageBytes, now.head, now.batch, read_tid_x());
      load = next_active(p, ms, n_block, load + 1);
    }
    cp_async_commit();
    return smem_stages + (it % 2) * kStageBytes;
  }

  __device__ __forceinline__ void advance(const BwdParams& p, const MaskState& ms, int n_block) {
    block = next_active(p, ms, n_block, block + 1);
  }

  /// The first query block >= from (and < end) with a visible element in this key block.
  __device__ __forceinline__ int next_active(const BwdParams& p, const MaskState& ms, int n_block,
                                             int from) const {
    return Mask::template first_active_query_block<kBlockM, kBlockN>(ms, p.minmax, n_block, from,
                                                                     end);
  }
};

/// Sets to -inf the scores a partial tile's mask hides, in kMTiles x kNTiles m16n8 accumulator
/// tiles of S^T: element (mt, nt, 2 r + c) of this thread is key key0 + key_row + 16 mt + 8 r
/// (its FlashMask values at `vectors`, kColumns per key of the block) and query ms.row_begin +
/// query_col + 8 nt + c; key_row and query_col are the thread's first, g and 2 t into the warp
/// tile. Each key's values are read once for its whole row of the tile.
template <class Mask, int kMTiles, int kNTiles>
__device__ __forceinline__ void mask_scores_by_key(const BwdParams& p, const MaskState& ms,
                                                   float (&acc)[kMTiles][kNTiles][4], u32 vectors,
                                                   int key0, int key_row, int query_col) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key_local = key_row + 16 * mt + 8 * r;
      const typename Mask::Column column =
          Mask::load_column(ms, vectors + key_local * Mask::kColumns * 4);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int query = ms.row_begin + query_col + nt * 8 + c;
          if (Mask::masked(p, ms, query, key0 + key_local, column)) {
            acc[mt][nt][2 * r + c] = negative_infinity();
          }
        }
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

/// dK (scaled by softmax_scale) and dV of one m16 accumulator tile of a warp: keys
/// key_row0 + g and key_row0 + g + 8, columns col0 + 8 dt + 2 t. Straight to d_k / d_v for
/// MHA, to the fp32 per-query-head partials for GQA (summed by backward_reduce_dkdv).
template <class Element, int kHeadDim, int kDTiles>
__device__ __forceinline__ void store_dkdv_tile(const BwdParams& p, int head, int batch,
                                                int key_row0, int col0,
                                                const float (&acc_dk)[kDTiles][4],
                                                const float (&acc_dv)[kDTiles][4]) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int kv_head = head / (p.heads / p.kv_heads);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_row0 + g + 8 * r;
    if (key >= p.seqlen_k) continue;
    if (p.dk_partial != 0) {
      const long long row =
          ((static_cast<long long>(batch) * p.heads + head) * p.seqlen_k + key) * kHeadDim;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const int col = col0 + dt * 8 + 2 * t;
        p.dk_partial[row + col] = acc_dk[dt][2 * r] * p.softmax_scale;
        p.dk_partial[row + col + 1] = acc_dk[dt][2 * r + 1] * p.softmax_scale;
        p.dv_partial[row + col] = acc_dv[dt][2 * r];
        p.dv_partial[row + col + 1] = acc_dv[dt][2 * r + 1];
      }
    } else {
      u16* d_k = static_cast<u16*>(p.d_k) + batch * p.dk_batch_stride + key * p.dk_row_stride +
                 kv_head * p.dk_head_stride;
      u16* d_v = static_cast<u16*>(p.d_v) + batch * p.dv_batch_stride + key * p.dv_row_stride +
                 kv_head * p.dv_head_stride;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const int col = col0 + dt * 8 + 2 * t;
        *reinterpret_cast<u32*>(d_k + col) = pack2<Element>(
            acc_dk[dt][2 * r] * p.softmax_scale, acc_dk[dt][2 * r + 1] * p.softmax_scale);
        *reinterpret_cast<u32*>(d_v + col) =
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

/// dQ_i += dS K for one warp's kMTiles m16 tiles of queries (from query0 of the block) and
/// kDqTiles n8 tiles of columns (from 16-byte chunk chunk0), read from the [key][query] dS^T
/// tile (DsTile) and the K tile (KvTile) over kKeySteps k16 steps, added to the fp32
/// accumulator with add_dq_tile. The key-slab and the grid layout differ only in their warps'
/// query0 / chunk0 and tile counts.
template <class Element, int kHeadDim, class DsTile, class KvTile, int kMTiles, int kDqTiles,
          int kKeySteps>
__device__ __forceinline__ void accumulate_dq_tiles(const BwdParams& p, const MaskState& ms,
                                                    const CtaWork& work, u32 smem_ds, u32 smem_k,
                                                    int query0, int chunk0) {
  const int lane = read_tid_x() % 32;
  const u32 ds_lane = opaque(DsTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2));
  const u32 k_lane = opaque(KvTile::lane_offset(lane % 16, lane / 16));
  float acc[kMTiles][kDqTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDqTiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.f;
    }
  }
  // dS (query x key) from the [key][query] tile: the transposed load gives A's layout.
  warp_tile_times_tile<Element, true, DsTile, KvTile, kMTiles, kDqTiles, kKeySteps>(
      acc, smem_ds, ds_lane, query0 / 8, smem_k, k_lane, chunk0);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    add_dq_tile<kHeadDim>(p, ms.seqlen_q, work.head, work.batch, ms.row_begin + query0 + 16 * mt,
                          chunk0 * 8, acc[mt]);
  }
}

}  // namespace attnjit
