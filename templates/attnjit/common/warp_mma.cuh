// Warp-level products on swizzled shared tiles: the building blocks the attention kernels
// compose. A warp computes kMTiles m16 tiles of rows x kNTiles n8 tiles of columns into a
// WarpAccumulator (fragment.cuh); 16-bit A operands in registers are OperandA fragments, e.g.
// accumulators converted by to_operand_a (P reuse). Each k16 step loads every A and B fragment
// once and uses it kNTiles resp. kMTiles times, so a warp tile of 32 x 32 reads its operands
// half as often per product as one of 16 x 64.
#pragma once

#include "attnjit/common/fragment.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// acc (16*kMTiles x 8*kNTiles) = A x B^T, with A the rows [a_row0, a_row0 + 16*kMTiles) of
/// ATile and B the rows [b_row0, b_row0 + 8*kNTiles) of BTile, both read non-transposed over
/// kKSteps k16 steps: products like Q K^T or K Q^T, where both operands are stored row by
/// row. a_lane / b_lane are this lane's SmemTile::lane_offset for A rows and B rows; a_row0
/// and b_row0 are multiples of 16.
template <class Element, class ATile, class BTile, int kKSteps, int kMTiles, int kNTiles>
__device__ __forceinline__ void warp_rows_times_rows(WarpAccumulator<kMTiles, kNTiles>& acc,
                                                     u32 smem_a, u32 a_lane, int a_row0, u32 smem_b,
                                                     u32 b_lane, int b_row0) {
  static_assert(kNTiles % 2 == 0, "n8 tiles are loaded in pairs");
  acc.fill(0.f);
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
        mma_m16n8k16<Element>(acc.v[mt][2 * np], a[mt], b[0], b[1]);
        mma_m16n8k16<Element>(acc.v[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

/// As warp_rows_times_rows with A already in registers (e.g. Q held across the key loop):
/// acc = A x B^T, B the rows [b_row0, b_row0 + 8*kNTiles) of BTile.
template <class Element, class BTile, int kKSteps, int kMTiles, int kNTiles>
__device__ __forceinline__ void warp_regs_times_rows(WarpAccumulator<kMTiles, kNTiles>& acc,
                                                     const OperandA<kMTiles, kKSteps>& a,
                                                     u32 smem_b, u32 b_lane, int b_row0) {
  static_assert(kNTiles % 2 == 0, "n8 tiles are loaded in pairs");
  acc.fill(0.f);
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      u32 b[4];
      ldmatrix_x4(b, BTile::matrix_address(smem_b, b_lane, b_row0 + np * 16, kk * 2));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_m16n8k16<Element>(acc.v[mt][2 * np], a.v[mt][kk], b[0], b[1]);
        mma_m16n8k16<Element>(acc.v[mt][2 * np + 1], a.v[mt][kk], b[2], b[3]);
      }
    }
  }
}

/// acc (16*kMTiles x 8*kNTiles) += A x B, with A in registers over kKSteps k16 steps and B the
/// BTile rows [0, 16*kKSteps) read transposed (k = row), columns from 16-byte chunk chunk0:
/// products like P V, P^T dO or dS K. bt_lane is the lane offset of transposed reads
/// (row = lane % 16, chunk = lane / 16).
template <class Element, class BTile, int kKSteps, int kMTiles, int kNTiles>
__device__ __forceinline__ void warp_regs_times_tile(WarpAccumulator<kMTiles, kNTiles>& acc,
                                                     const OperandA<kMTiles, kKSteps>& a,
                                                     u32 smem_b, u32 bt_lane, int chunk0) {
  static_assert(kNTiles % 2 == 0, "n8 tiles are loaded in pairs");
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
    for (int dp = 0; dp < kNTiles / 2; ++dp) {
      u32 b[4];
      ldmatrix_x4_trans(b, BTile::matrix_address(smem_b, bt_lane, kk * 16, chunk0 + dp * 2));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_m16n8k16<Element>(acc.v[mt][2 * dp], a.v[mt][kk], b[0], b[1]);
        mma_m16n8k16<Element>(acc.v[mt][2 * dp + 1], a.v[mt][kk], b[2], b[3]);
      }
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
template <class Element, bool kATransposed, class ATile, class BTile, int kKSteps, int kMTiles,
          int kNTiles>
__device__ __forceinline__ void warp_tile_times_tile(WarpAccumulator<kMTiles, kNTiles>& acc,
                                                     u32 smem_a, u32 a_lane, int a_at, u32 smem_b,
                                                     u32 bt_lane, int chunk0) {
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
        mma_m16n8k16<Element>(acc.v[mt][2 * dp], a[mt], b[0], b[1]);
        mma_m16n8k16<Element>(acc.v[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

}  // namespace attnjit
