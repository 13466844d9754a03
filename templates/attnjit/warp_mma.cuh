// Warp-level products on swizzled shared tiles: the building blocks the backward kernels
// compose. A warp computes kMTiles m16 tiles of rows x kNTiles n8 tiles of columns; fp32
// accumulators in the mma.sync C layout, 16-bit A operands in registers packed as in
// pack_tiles. Each k16 step loads every A and B fragment once and uses it kNTiles resp.
// kMTiles times, so a warp tile of 32 x 32 reads its operands half as often per product as
// one of 16 x 64.
#pragma once

#include "attnjit/primitives.cuh"

namespace attnjit {

/// acc (16*kMTiles x 8*kNTiles) = A x B^T, with A the rows [a_row0, a_row0 + 16*kMTiles) of
/// ATile and B the rows [b_row0, b_row0 + 8*kNTiles) of BTile, both read non-transposed over
/// kKSteps k16 steps: products like Q K^T or K Q^T, where both operands are stored row by
/// row. a_lane / b_lane are this lane's SmemTile::lane_offset for A rows and B rows; a_row0
/// and b_row0 are multiples of 16.
template <class Element, class ATile, class BTile, int kMTiles, int kNTiles, int kKSteps>
__device__ __forceinline__ void warp_rows_times_rows(float (&acc)[kMTiles][kNTiles][4], u32 smem_a,
                                                     u32 a_lane, int a_row0, u32 smem_b, u32 b_lane,
                                                     int b_row0) {
  static_assert(kNTiles % 2 == 0, "n8 tiles are loaded in pairs");
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    }
  }
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    u32 a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      ldmatrix_x4(a[mt], ATile::matrix_address(smem_a, a_lane, a_row0 + 16 * mt, kk * 2));
    }
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      u32 b[4];
      ldmatrix_x4(b, BTile::matrix_address(smem_b, b_lane, b_row0 + np * 16, kk * 2));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_m16n8k16<Element>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma_m16n8k16<Element>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

/// The single-m16-tile form: acc (16 x 8*kNTiles) = A x B^T with B from row 0.
template <class Element, class ATile, class BTile, int kNTiles, int kKSteps>
__device__ __forceinline__ void warp_rows_times_rows(float (&acc)[kNTiles][4], u32 smem_a,
                                                     u32 a_lane, int row0, u32 smem_b, u32 b_lane) {
  warp_rows_times_rows<Element, ATile, BTile, 1, kNTiles, kKSteps>(
      reinterpret_cast<float(&)[1][kNTiles][4]>(acc), smem_a, a_lane, row0, smem_b, b_lane, 0);
}

/// acc (16 x 8*kNTiles) += A x B, with A in registers (2*kKSteps packed n8 tiles along k)
/// and B the BTile rows [0, 16*kKSteps) read transposed (k = row), columns from 16-byte
/// chunk chunk0: products like P V, P^T dO or dS K. bt_lane is the lane offset of
/// transposed reads (row = lane % 16, chunk = lane / 16).
template <class Element, class BTile, int kKSteps, int kNTiles>
__device__ __forceinline__ void warp_regs_times_tile(float (&acc)[kNTiles][4],
                                                     const u32 (&a)[2 * kKSteps][2], u32 smem_b,
                                                     u32 bt_lane, int chunk0) {
  static_assert(kNTiles % 2 == 0, "n8 tiles are loaded in pairs");
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    const u32 frag[4] = {a[2 * kk][0], a[2 * kk][1], a[2 * kk + 1][0], a[2 * kk + 1][1]};
#pragma unroll
    for (int dp = 0; dp < kNTiles / 2; ++dp) {
      u32 b[4];
      ldmatrix_x4_trans(b, BTile::matrix_address(smem_b, bt_lane, kk * 16, chunk0 + dp * 2));
      mma_m16n8k16<Element>(acc[2 * dp], frag, b[0], b[1]);
      mma_m16n8k16<Element>(acc[2 * dp + 1], frag, b[2], b[3]);
    }
  }
}

/// acc (16*kMTiles x 8*kNTiles) += A x B with both operands in shared memory and B read as in
/// warp_regs_times_tile (BTile rows [0, 16*kKSteps) transposed, columns from chunk chunk0).
/// kATransposed: A is stored [k][m]: the ATile rows [0, 16*kKSteps) are k and its columns
/// from 16-byte chunk a_at on are m (a_lane as b_lane of warp_rows_times_rows), for products
/// like dS K from a [key][query] dS^T tile. Otherwise A is stored [m][k]: its rows from row
/// a_at on are m (a_lane as a_lane of warp_rows_times_rows), for products like P^T dO from a
/// [key][query] P^T tile.
template <class Element, bool kATransposed, class ATile, class BTile, int kMTiles, int kNTiles,
          int kKSteps>
__device__ __forceinline__ void warp_tile_times_tile(float (&acc)[kMTiles][kNTiles][4], u32 smem_a,
                                                     u32 a_lane, int a_at, u32 smem_b, u32 bt_lane,
                                                     int chunk0) {
  static_assert(kNTiles % 2 == 0, "n8 tiles are loaded in pairs");
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    u32 a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (kATransposed) {
        ldmatrix_x4_trans(a[mt], ATile::matrix_address(smem_a, a_lane, kk * 16, a_at + 2 * mt));
      } else {
        ldmatrix_x4(a[mt], ATile::matrix_address(smem_a, a_lane, a_at + 16 * mt, kk * 2));
      }
    }
#pragma unroll
    for (int dp = 0; dp < kNTiles / 2; ++dp) {
      u32 b[4];
      ldmatrix_x4_trans(b, BTile::matrix_address(smem_b, bt_lane, kk * 16, chunk0 + dp * 2));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_m16n8k16<Element>(acc[mt][2 * dp], a[mt], b[0], b[1]);
        mma_m16n8k16<Element>(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

/// The accumulators as 16-bit pairs: out[nt][0] = row g, out[nt][1] = row g + 8; for the
/// tiles (2kk, 2kk+1) they form the A fragment of k16 step kk.
template <class Element, int kNTiles>
__device__ __forceinline__ void pack_tiles(u32 (&out)[kNTiles][2], const float (&acc)[kNTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    out[nt][0] = pack2<Element>(acc[nt][0], acc[nt][1]);
    out[nt][1] = pack2<Element>(acc[nt][2], acc[nt][3]);
  }
}

}  // namespace attnjit
