// The wgmma products of the sm90a backward's consumers of 64 keys (bwd_sm90a.cuh): kGroups
// warpgroups of 64 keys each over a key block of kBlockN = 64 kGroups keys and query blocks of
// kBlockM rows, from swizzled shared tiles (smem_tile.cuh):
//   S^T = K_w Q^T, dP^T = V_w dO^T   m64 x kBlockM, both operands K-major
//   dV += P^T dO, dK += dS^T Q       m64 x kHeadDim, A from registers, dO and Q MN-major
//   dQ_i = dS K                      m64 x kDqCols: where the head dim gives each warpgroup a
//                                    64-column panel (d128), its columns over all keys, else
//                                    its own keys over all columns (d64, d96)
//   dQ_i^T = K^T dS^T                instead where the query block is no whole m64 (80 rows,
//                                    d128): m64 x kBlockM, the warpgroup's 64 columns of dQ as
//                                    rows, A = K MN-major, B = dS from a [query][key] tile
#pragma once

#include "attnjit/common/fragment.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/sm90a/wgmma.cuh"

namespace attnjit {

/// Stores four 8 x 8 matrices of 16-bit elements transposed: register j of each lane holds
/// matrix j's fragment (mma layout), lane 8 j + i gives the address of stored row i (the
/// fragment's column i) of matrix j.
__device__ __forceinline__ void stmatrix_x4_trans(u32 address, const u32 (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
}

template <class Element, int kHeadDim, int kBlockM, int kBlockN, int kGroups>
struct BackwardWgmmaProducts {
  /// dQ split over the warpgroups by 64-column panels, else by their keys.
  static constexpr bool kDqByColumns = kHeadDim / kGroups >= 64;
  static constexpr int kDqCols = kDqByColumns ? kHeadDim / kGroups : kHeadDim;
  /// k16 steps over the keys of the dQ product: all of the block's, or the warpgroup's 64.
  static constexpr int kDqSteps = kDqByColumns ? kBlockN / 16 : 4;
  static constexpr int kSTiles = kBlockM / 8;    // n8 tiles of S^T, dP^T
  static constexpr int kDSteps = kHeadDim / 16;  // k16 steps over the head dim
  static constexpr int kQSteps = kBlockM / 16;   // over the queries
  /// dQ^T = K^T dS^T, the queries as N: query blocks that are no whole m64.
  static constexpr bool kDqTransposed = kBlockM % 64 != 0;
  /// Columns of the dQ accumulator: dQ's (kDqCols), or the queries of dQ^T.
  static constexpr int kDqAccCols = kDqTransposed ? kBlockM : kDqCols;

  static_assert(kBlockN == 64 * kGroups, "64 keys per warpgroup");
  static_assert(kBlockM == 64 || kBlockM == 80 || kBlockM == 128,
                "m64n64 / m64n80 / m64n128 score products");
  static_assert(!kDqTransposed || kDqByColumns, "dQ^T by each warpgroup's 64-column panel");
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128,
                "m64n64 / m64n96 / m64n128 dK and dV products");
  static_assert(kDqCols % 32 == 0, "whole 32-column boxes of dQ");

  typedef SmemTile<kBlockN, kHeadDim> KvTile;
  typedef SmemTile<kBlockM, kHeadDim> QTile;  // Q and dO
  /// dS^T as [key][query] (the MN-major A of dQ = dS K), or dS as [query][key] (the K-major B
  /// of dQ^T = K^T dS^T: 80 queries are no whole 32-column panel).
  typedef
      typename Select<!kDqTransposed, SmemTile<kBlockN, kBlockM>, SmemTile<kBlockM, kBlockN>>::type
          DsTile;

  /// acc = warpgroup `group`'s 64 keys of `keys` (K or V) times the block's rows of `queries`
  /// (Q or dO), transposed: S^T or dP^T, one wgmma group.
  __device__ __forceinline__ static void keys_times_queries(float (&acc)[kSTiles][4], u32 keys,
                                                            u32 queries, int group) {
#pragma unroll
    for (int kk = 0; kk < kDSteps; ++kk) {
      wgmma_ss<Element, kBlockM, 0, 0>(acc, k_major_descriptor<KvTile>(keys, 64 * group, kk),
                                       k_major_descriptor<QTile>(queries, 0, kk), kk > 0);
    }
    wgmma_commit();
  }

  /// dV += P^T dO and dK += dS^T Q, one wgmma group (the caller fences first).
  __device__ __forceinline__ static void add_dv_dk(float (&acc_dv)[kHeadDim / 8][4],
                                                   float (&acc_dk)[kHeadDim / 8][4],
                                                   const OperandA<1, kQSteps>& a_p,
                                                   const OperandA<1, kQSteps>& a_ds, u32 smem_do,
                                                   u32 smem_q) {
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      wgmma_rs<Element, kHeadDim, 1>(acc_dv, a_p.v[0][kk],
                                     mn_major_descriptor<QTile>(smem_do, 0, kk), 1);
    }
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      wgmma_rs<Element, kHeadDim, 1>(acc_dk, a_ds.v[0][kk],
                                     mn_major_descriptor<QTile>(smem_q, 0, kk), 1);
    }
    wgmma_commit();
  }

  /// The 64-column panel of dQ that warpgroup `group` computes (0 when split by keys).
  __device__ __forceinline__ static int dq_panel(int group) {
    return kDqByColumns ? group * kDqCols / 64 : 0;
  }

  /// acc_dq = dS K for warpgroup `group`, one wgmma group: dS (queries x keys) is the MN-major
  /// [key][query] tile, K MN-major too. kDqTransposed: acc_dq = (dS K)^T = K^T dS^T, the
  /// group's 64-column panel of K (MN-major: the head dim is M) times the [query][key] dS tile
  /// (K-major: the keys are the reduction).
  __device__ __forceinline__ static void dq_product(float (&acc_dq)[kDqAccCols / 8][4], u32 smem_ds,
                                                    u32 smem_k, int group) {
    const int key_step0 = kDqByColumns ? 0 : 4 * group;
#pragma unroll
    for (int kk = 0; kk < kDqSteps; ++kk) {
      if constexpr (kDqTransposed) {
        wgmma_ss<Element, kBlockM, 1, 0>(acc_dq,
                                         mn_major_descriptor<KvTile>(smem_k, dq_panel(group), kk),
                                         k_major_descriptor<DsTile>(smem_ds, 0, kk), kk > 0);
      } else {
        wgmma_ss<Element, kDqCols, 1, 1>(
            acc_dq, mn_major_descriptor<DsTile>(smem_ds, 0, key_step0 + kk),
            mn_major_descriptor<KvTile>(smem_k, dq_panel(group), key_step0 + kk), kk > 0);
      }
    }
    wgmma_commit();
  }

  /// kDqTransposed: stores the warp's dS^T, packed as dK's A operand (k16 step kk: key rows
  /// key_row0 + g (+ 8), queries 16 kk + 2 t (+ 1, + 8)), into the [query][key] dS tile: per
  /// step one transposing stmatrix of its four 8 x 8 matrices (operand_register order: query
  /// tiles 2 kk, 2 kk + 1, key rows + 0, + 8), lane 8 m + i giving the address of row i
  /// (query) of matrix m, whose 8 keys are one 16-byte chunk.
  __device__ __forceinline__ static void store_ds_transposed(const u32 (&a_ds)[kQSteps][4],
                                                             u32 smem_ds, int key_row0, int lane) {
    const int m = lane / 8;
    const int chunk = (key_row0 + 8 * (m % 2)) / 8;
#pragma unroll
    for (int kk = 0; kk < kQSteps; ++kk) {
      const int query = 16 * kk + 8 * (m / 2) + lane % 8;
      stmatrix_x4_trans(smem_ds + DsTile::offset(query, chunk), a_ds[kk]);
    }
  }
};

}  // namespace attnjit
