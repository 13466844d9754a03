// The wgmma products of a consumer warpgroup of the sm90a backward (sm90a/backward.cuh), from its
// swizzled shared tiles (smem_tile.cuh). A consumer owns 64 keys of S^T and dP^T (its own 64 of
// 128 when the consumers split the keys, all 64 when they split the head dim) and kQueries of
// the block's queries (all, or its half):
//   S^T = K Q^T, dP^T = V dO^T   m64 x kQueries, both operands K-major (head_dim_qk and
//                                head_dim_v the reductions)
//   dV += P^T dO, dK += dS^T Q   m64 x kColsV and m64 x kColsQK (its columns of dV and dK:
//                                all, or its half), dO and Q MN-major; P^T and dS^T from registers
//                                (the consumer holds all queries of its keys), else from the
//                                [key][query] P^T and dS^T tiles (K-major)
//   dQ_i = dS K                  m64 x kDqCols: where the head dim gives each consumer 64
//                                columns or more (d128 and above), its columns over all keys,
//                                else its own keys over all columns (d64, d96)
//   dQ_i^T = K^T dS^T            instead where the query block is no whole m64 (80 rows,
//                                d128): m64 x kBlockM, the consumer's 64 columns of dQ as
//                                rows, A = K MN-major, B = dS from a [query][key] tile
#pragma once

#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The products of Kernel's consumers (sm90a/backward.cuh gives the tiles and the split).
template <class Kernel>
struct BackwardProducts {
  typedef typename Kernel::Element Element;
  typedef typename Kernel::KTile KTile;
  typedef typename Kernel::VTile VTile;
  typedef typename Kernel::QTile QTile;
  typedef typename Kernel::DoTile DoTile;
  typedef typename Kernel::DsTile DsTile;
  typedef typename Kernel::Pairs Pairs;
  static constexpr int kBlockM = Kernel::kBlockM;
  static constexpr int kQueries = Kernel::kQueries;
  static constexpr int kColsQK = Kernel::kColsQK;
  static constexpr int kColsV = Kernel::kColsV;
  static constexpr int kSTiles = Kernel::kSTiles;
  static constexpr int kQSteps = kBlockM / 16;  // k16 steps over the block's queries
  static constexpr bool kDqByColumns = Kernel::kDqByColumns;
  static constexpr bool kDqTransposed = Kernel::kDqTransposed;
  static constexpr int kDqCols = Kernel::kDqCols;
  static constexpr int kDqAccCols = Kernel::kDqAccCols;
  /// k16 steps over the keys of the dQ product: all of the block's, or the consumer's 64.
  static constexpr int kDqSteps = kDqByColumns ? Kernel::kBlockN / 16 : 4;

  /// acc = the 64 keys of consumer `consumer` of `keys` (K or V: KeyTile) times its kQueries
  /// rows of `queries` (Q or dO: QueryTile), transposed: S^T or dP^T, one wgmma group.
  template <class KeyTile, class QueryTile>
  __device__ __forceinline__ static void keys_times_queries(float (&acc)[kSTiles][4], u32 keys,
                                                            u32 queries, int consumer) {
    static_assert(KeyTile::kChunks == QueryTile::kChunks, "one head dim reduced");
#pragma unroll
    for (int kk = 0; kk < KeyTile::kChunks / 2; ++kk) {
      wgmma_ss<Element, kQueries, 0, 0>(
          acc, k_major_descriptor<KeyTile>(keys, Kernel::consumer_key0(consumer), kk),
          k_major_descriptor<QueryTile>(queries, Kernel::consumer_query0(consumer), kk), kk > 0);
    }
    wgmma_commit();
  }

  /// dV += P^T dO and dK += dS^T Q, consumer `consumer`'s columns of dO and Q, one wgmma group
  /// (the caller fences first): P^T and dS^T from registers (a_p, a_ds) when the consumer
  /// holds all queries of its keys, else from the tiles at p_tile and ds_tile.
  __device__ __forceinline__ static void add_dv_dk(float (&acc_dv)[kColsV / 8][4],
                                                   float (&acc_dk)[kColsQK / 8][4],
                                                   const Pairs& a_p, const Pairs& a_ds, u32 p_tile,
                                                   u32 ds_tile, u32 smem_do, u32 smem_q,
                                                   int consumer) {
    const int panel_v = Kernel::consumer_panel0_v(consumer);
    const int panel_qk = Kernel::consumer_panel0_qk(consumer);
    if constexpr (kQueries == kBlockM) {
#pragma unroll
      for (int kk = 0; kk < kQSteps; ++kk) {
        wgmma_rs<Element, kColsV, 1>(acc_dv, a_p.v[0][kk],
                                     mn_major_descriptor<DoTile>(smem_do, panel_v, kk), 1);
      }
#pragma unroll
      for (int kk = 0; kk < kQSteps; ++kk) {
        wgmma_rs<Element, kColsQK, 1>(acc_dk, a_ds.v[0][kk],
                                      mn_major_descriptor<QTile>(smem_q, panel_qk, kk), 1);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kQSteps; ++kk) {
        wgmma_ss<Element, kColsV, 0, 1>(acc_dv, k_major_descriptor<DsTile>(p_tile, 0, kk),
                                        mn_major_descriptor<DoTile>(smem_do, panel_v, kk), 1);
      }
#pragma unroll
      for (int kk = 0; kk < kQSteps; ++kk) {
        wgmma_ss<Element, kColsQK, 0, 1>(acc_dk, k_major_descriptor<DsTile>(ds_tile, 0, kk),
                                         mn_major_descriptor<QTile>(smem_q, panel_qk, kk), 1);
      }
    }
    wgmma_commit();
  }

  /// The panel of K whose columns of dQ consumer `consumer` computes (0 when split by keys).
  __device__ __forceinline__ static int dq_panel(int consumer) {
    return kDqByColumns ? consumer * kDqCols / KTile::kPanelCols : 0;
  }

  /// acc_dq = dS K for consumer `consumer`, one wgmma group: dS (queries x keys) is the
  /// MN-major [key][query] tile, K MN-major too. kDqTransposed: acc_dq = (dS K)^T = K^T dS^T,
  /// the consumer's 64-column panel of K (MN-major: the head dim is M) times the [query][key]
  /// dS tile (K-major: the keys are the reduction).
  __device__ __forceinline__ static void dq_product(float (&acc_dq)[kDqAccCols / 8][4], u32 smem_ds,
                                                    u32 smem_k, int consumer) {
    const int key_step0 = kDqByColumns ? 0 : 4 * consumer;
#pragma unroll
    for (int kk = 0; kk < kDqSteps; ++kk) {
      if constexpr (kDqTransposed) {
        wgmma_ss<Element, kBlockM, 1, 0>(acc_dq,
                                         mn_major_descriptor<KTile>(smem_k, dq_panel(consumer), kk),
                                         k_major_descriptor<DsTile>(smem_ds, 0, kk), kk > 0);
      } else {
        wgmma_ss<Element, kDqCols, 1, 1>(
            acc_dq, mn_major_descriptor<DsTile>(smem_ds, 0, key_step0 + kk),
            mn_major_descriptor<KTile>(smem_k, dq_panel(consumer), key_step0 + kk), kk > 0);
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
