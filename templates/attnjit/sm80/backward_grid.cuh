// The backward mainloop of the sm80 family with 2-D warp grids (mma.sync): one CTA per key
// block, P^T and dS^T passed between the products through shared memory.
//
// In the key-slab layout (sm80/backward_slabs.cuh) every warp owns 16 keys for all five products
// and reads the whole Q and dO block four times per query block; at head dim 128 that makes the
// shared-memory reads, not the tensor cores, the limit. Here each product has its own warp
// grid over the CTA's tile, every warp computing 32 x 32 (or 32 x 64) pieces whose operands
// it reads once per k step for two m16 tiles:
//   S^T  = K Q^T, dP^T = V dO^T   kKeyWarps x kQueryWarps, 32 keys x kWarpQueries
//   P^T  = 2^(S^T c - LSE2)       written to shared memory, 16-bit
//   dS^T = P^T (dP^T - D)         written to shared memory, 16-bit
//   dV += P^T dO, dK += dS^T Q    kKeyWarps x kDimWarps, 32 keys x kWarpDimsV / kWarpDimsQK
//                                 (registers)
//   dQ_i += dS K                  kDqRowWarps x kDqColWarps, 32 queries x kDqWarpDims,
//                                 fp32 atomics (kAtomicDq), or the deterministic dQ kernel
// Two barriers per query block: after P^T and dS^T are written, and (the next block's
// stage()) after they were read. The CTA walks the query blocks that can see its keys
// (QueryBlockWalk, backward_common.cuh), streaming Q_i, dO_i, LSE_i and D_i through two cp.async
// stages. dK is scaled by
// softmax_scale at the end; dQ in backward_convert_dq. Score modifiers as in
// sm80/backward_slabs.cuh. Masks with element bits (predicates) take the key-slab layout.
//
// Q, K and dK have kHeadDimQK columns, V, dO and dV kHeadDimV.
//
// Config: Element, kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kWarps, kAtomicDq. Score: a
// ScoreMod.
#pragma once

#include "attnjit/common/backward_common.cuh"
#include "attnjit/sm80/vocabulary.cuh"

namespace attnjit {

template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct BackwardGridSm80 : Config {
  // kBlockM queries per iteration, kBlockN keys of the CTA.
  using typename Config::Element, Config::kHeadDimQK, Config::kHeadDimV, Config::kBlockM,
      Config::kBlockN, Config::kWarps, Config::kAtomicDq;
  static constexpr int kThreads = kWarps * 32;
  // S^T and dP^T: 32 keys x kWarpQueries per warp.
  static constexpr int kKeyWarps = kBlockN / 32;
  static constexpr int kQueryWarps = kWarps / kKeyWarps;
  static constexpr int kWarpQueries = kBlockM / kQueryWarps;
  static constexpr int kSTiles = kWarpQueries / 8;
  // dK and dV: 32 keys x kWarpDimsQK (dK) and kWarpDimsV (dV) per warp.
  static constexpr int kDimWarps = kWarps / kKeyWarps;
  static constexpr int kWarpDimsQK = kHeadDimQK / kDimWarps;
  static constexpr int kWarpDimsV = kHeadDimV / kDimWarps;
  static constexpr int kDkTiles = kWarpDimsQK / 8;
  static constexpr int kDvTiles = kWarpDimsV / 8;
  // dQ: 32 queries x kDqWarpDims per warp.
  static constexpr int kDqRowWarps = kBlockM / 32;
  static constexpr int kDqColWarps = kWarps / kDqRowWarps;
  static constexpr int kDqWarpDims = kHeadDimQK / kDqColWarps;
  static constexpr int kDqTiles = kDqWarpDims / 8;
  static constexpr int kQkSteps = kHeadDimQK / 16;  // k16 steps of S^T = K Q^T
  static constexpr int kVSteps = kHeadDimV / 16;    // k16 steps of dP^T = V dO^T
  static constexpr int kQSteps = kBlockM / 16;      // over the queries
  static constexpr int kKeySteps = kBlockN / 16;    // over the keys
  static constexpr int kColumns = Mask::kColumns;

  static_assert(!Mask::kElementBits, "masks with element bits take the key-slab layout");
  static_assert(kBlockN % 32 == 0 && kBlockM % 32 == 0, "32-row warp tiles");
  static_assert(kWarps % kKeyWarps == 0 && kWarps % kDqRowWarps == 0, "warp grids");
  static_assert(kWarpQueries % 16 == 0 && kWarpDimsQK % 16 == 0 && kWarpDimsV % 16 == 0 &&
                    kDqWarpDims % 16 == 0,
                "n16 pairs of tiles");

  typedef SmemTile<kBlockN, kHeadDimQK> KTile;
  typedef SmemTile<kBlockN, kHeadDimV> VTile;
  typedef SmemTile<kBlockM, kHeadDimQK> QTile;
  typedef SmemTile<kBlockM, kHeadDimV> DoTile;
  typedef SmemTile<kBlockN, kBlockM> PTile;  // P^T, dS^T
  // One lane offset serves K and V, and one Q and dO.
  static_assert(KTile::kPanelCols == VTile::kPanelCols && QTile::kPanelCols == DoTile::kPanelCols,
                "K and V, Q and dO: tiles of one panel width");
  static constexpr int kStageBytes =
      QTile::kBytes + DoTile::kBytes + 2 * kBlockM * 4;  // Q, dO, LSE2, D
  /// K, V, two stages of (Q, dO, LSE2, D), P^T, dS^T, the key block's FlashMask values.
  static constexpr int kSmemBytes =
      KTile::kBytes + VTile::kBytes + 2 * kStageBytes + 2 * PTile::kBytes + kBlockN * kColumns * 4;

  WarpAccumulator<2, kDkTiles> acc_dk;
  WarpAccumulator<2, kDvTiles> acc_dv;

  __device__ __forceinline__ void run(const BwdParams& p, unsigned char* smem) {
    const CtaWork work = begin_cta<true, Mask>(p);
    const int n_block = work.block;
    if (work.head >= p.heads) return;
    const int thread = threadIdx.x;

    MaskState ms = make_mask_state<kBlockN, Mask>(p, work.head, work.batch);

    const int key0 = n_block * kBlockN;
    const u32 smem_k = smem_address(smem);
    const u32 smem_v = smem_k + KTile::kBytes;
    const u32 smem_stages = smem_v + VTile::kBytes;
    const u32 smem_pt = smem_stages + 2 * kStageBytes;
    const u32 smem_dst = smem_pt + PTile::kBytes;
    const u32 smem_vectors = smem_dst + PTile::kBytes;
    load_key_value_block<kBlockN, kHeadDimQK, kHeadDimV, kThreads, kColumns, Mask::kOrderedCtas>(
        p, ms, n_block, smem_k, smem_vectors, thread);
    QueryBlockWalk<Mask, kBlockM, kBlockN, kHeadDimQK, kHeadDimV, kThreads, kStageBytes> walk;
    walk.begin(p, ms, n_block, smem_stages, work);

    acc_dk.fill(0.f);
    acc_dv.fill(0.f);

    for (int it = 0; walk.more(); ++it) {
      const u32 smem_stage = walk.stage(p, ms, n_block, smem_stages, it);
      ms.row_begin = walk.block * kBlockM;
      ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
      compute_scores(p, ms, smem_k, smem_v, smem_stage, smem_pt, smem_dst, smem_vectors, key0,
                     Mask::template classify<kBlockN>(ms, p.minmax, n_block));
      // P^T and dS^T complete; the barrier at the next stage() frees them again.
      __syncthreads();
      accumulate_dkdv(smem_stage, smem_pt, smem_dst);
      if (kAtomicDq) {
        // dQ_i += dS K: 32 queries x kDqWarpDims columns per warp.
        accumulate_dq_tiles<Element, kHeadDimQK, PTile, KTile, 2, kDqTiles, kKeySteps, kDqRowWarps,
                            kDqWarpDims, Mask::kOrderedCtas>(p, ms, smem_dst, smem_k);
      }
      walk.advance(p, ms, n_block);
    }
    cp_async_wait<0>();
    epilogue(p, key0);
  }

  /// The warp's 32 x kWarpQueries piece of P^T and dS^T, written to their shared tiles.
  /// Element (mt, nt, 2 r + c) of the accumulators is key row key_row0 + 16 mt + g + 8 r,
  /// query column query0 + 8 nt + 2 t + c.
  __device__ __forceinline__ static void compute_scores(const BwdParams& p, const MaskState& ms,
                                                        u32 smem_k, u32 smem_v, u32 smem_stage,
                                                        u32 smem_pt, u32 smem_dst, u32 vectors,
                                                        int key0, int tile) {
    const int warp = read_tid_x() / 32;
    const int lane = read_tid_x() % 32;
    const u32 smem_q = smem_stage;
    const u32 smem_do = smem_stage + QTile::kBytes;
    const u32 lse_log2 = smem_do + DoTile::kBytes;  // kBlockM floats, then D
    const u32 row_dot = lse_log2 + kBlockM * 4;
    const int key_row0 = (warp % kKeyWarps) * 32;
    const int query0 = (warp / kKeyWarps) * kWarpQueries;
    const int g = lane / 4;
    const int t = lane % 4;
    const u32 kv_a_lane = opaque(KTile::lane_offset(lane % 16, lane / 16));
    const u32 q_b_lane = opaque(QTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2));

    // S^T = K Q^T.
    WarpAccumulator<2, kSTiles> acc_s;
    warp_rows_times_rows<Element, KTile, QTile, kQkSteps>(acc_s, smem_k, kv_a_lane, key_row0,
                                                          smem_q, q_b_lane, query0);

    if (tile_kind(tile) == kTilePartial) {
      mask_scores_by_key<Mask>(p, ms, acc_s, vectors, key0, key_row0, query0, lane);
    }

    // P^T = 2^(S^T c - LSE2): 0 where masked and in rows that see no key (LSE2 = +inf).
    // Score modifiers apply after the mask (sm80/backward_slabs.cuh). P^T goes to its tile at once
    // and dS^T reads it back from there (each thread its own pairs: no barrier), so that no
    // register holds it across dP^T = V dO^T; with soft-capping the dS^T tile keeps the
    // 16-bit P^T (1 - tanh^2) until dS^T overwrites it. The walks are TransposedPairs'
    // (backward_common.cuh), written out: through the shared function this kernel's machine
    // code would change.
    const Score score = Score::template make<Mask::kOrderedCtas>(p);
    const int distance0 = key0 + key_row0 + g - (ms.row_begin + query0 + 2 * t + ms.diagonal);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      float lse[2];
      load_lse_pair<Score>(lse_log2, query0 + nt * 8 + 2 * t, ms, lse);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float value[2], grad[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            value[c] =
                backward_probability(p, score, acc_s.v[mt][nt][2 * r + c],
                                     distance0 + 16 * mt + 8 * r - 8 * nt - c, lse[c], grad[c]);
          }
          const int offset =
              PTile::element_offset(key_row0 + 16 * mt + g + 8 * r, query0 + nt * 8 + 2 * t);
          store_shared_u32(smem_pt + offset, pack2<Element>(value[0], value[1]));
          if (Score::kSoftcap) {
            store_shared_u32(smem_dst + offset,
                             pack2<Element>(value[0] * grad[0], value[1] * grad[1]));
          }
        }
      }
    }

    // dP^T = V dO^T, then dS^T = P^T (dP^T - D) with the rounded P^T (sm80/backward_slabs.cuh).
    WarpAccumulator<2, kSTiles> acc_dp;
    warp_rows_times_rows<Element, VTile, DoTile, kVSteps>(acc_dp, smem_v, kv_a_lane, key_row0,
                                                          smem_do, q_b_lane, query0);
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      float d[2];
      load_shared_v2_f32(row_dot + (query0 + nt * 8 + 2 * t) * 4, d[0], d[1]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int offset =
              PTile::element_offset(key_row0 + 16 * mt + g + 8 * r, query0 + nt * 8 + 2 * t);
          const u32 pair = load_shared_u32((Score::kSoftcap ? smem_dst : smem_pt) + offset);
          const float ds0 = unpack_lo<Element>(pair) * (acc_dp.v[mt][nt][2 * r] - d[0]);
          const float ds1 = unpack_hi<Element>(pair) * (acc_dp.v[mt][nt][2 * r + 1] - d[1]);
          store_shared_u32(smem_dst + offset, pack2<Element>(ds0, ds1));
        }
      }
    }
  }

  /// dV += P^T dO and dK += dS^T Q for the warp's 32 keys and kWarpDimsV / kWarpDimsQK
  /// columns.
  __device__ __forceinline__ void accumulate_dkdv(u32 smem_stage, u32 smem_pt, u32 smem_dst) {
    const int warp = read_tid_x() / 32;
    const int lane = read_tid_x() % 32;
    const int key_row0 = (warp % kKeyWarps) * 32;
    const int dim_warp = warp / kKeyWarps;
    const u32 p_a_lane = opaque(PTile::lane_offset(lane % 16, lane / 16));
    const u32 q_bt_lane = opaque(QTile::lane_offset(lane % 16, lane / 16));
    warp_tile_times_tile<Element, false, PTile, DoTile, kQSteps>(
        acc_dv, smem_pt, p_a_lane, key_row0, smem_stage + QTile::kBytes, q_bt_lane,
        dim_warp * kWarpDimsV / 8);
    warp_tile_times_tile<Element, false, PTile, QTile, kQSteps>(
        acc_dk, smem_dst, p_a_lane, key_row0, smem_stage, q_bt_lane, dim_warp * kWarpDimsQK / 8);
  }

  /// dK (scaled) and dV of the warp's keys and columns (store_dkdv_tile).
  __device__ __forceinline__ void epilogue(const BwdParams& p, int key0) {
    const int warp = threadIdx.x / 32;
    const CtaWork work = cta_work<true>(cta_order_of<Mask::kOrderedCtas>(p));
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      store_dkdv_tile<Element, kHeadDimQK, kHeadDimV>(
          p, work.head, work.batch, key0 + (warp % kKeyWarps) * 32 + 16 * mt,
          (warp / kKeyWarps) * kWarpDimsQK, (warp / kKeyWarps) * kWarpDimsV, acc_dk.v[mt],
          acc_dv.v[mt]);
    }
  }
};

/// The body of a generated backward (dK, dV and, with kAtomicDq, dQ) kernel of the grid layout.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void backward_grid_sm80(const BwdParams& params) {
  run_kernel<BackwardGridSm80<Config, Mask, Score>, 128>(params);
}

}  // namespace attnjit
