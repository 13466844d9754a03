// Warp-level products on swizzled shared tiles: the building blocks the backward kernels
// compose. Every warp computes 16 rows; n8 tiles of fp32 accumulators in the mma.sync C
// layout, 16-bit A operands in registers packed as in pack_tiles.
#pragma once

#include "attnjit/primitives.cuh"

namespace attnjit {

/// acc (16 x 8*kNTiles) = A x B^T, with A the 16 rows of ATile from row0 and B the first
/// 8*kNTiles rows of BTile, both read non-transposed over kKSteps k16 steps: products like
/// Q K^T or K Q^T, where both operands are stored row by row. a_lane / b_lane are this
/// lane's SmemTile::lane_offset for A rows and B rows.
template <class Element, class ATile, class BTile, int kNTiles, int kKSteps>
__device__ __forceinline__ void warp_rows_times_rows(float (&acc)[kNTiles][4], u32 smem_a,
                                                     u32 a_lane, int row0, u32 smem_b, u32 b_lane) {
  static_assert(kNTiles % 2 == 0, "n8 tiles are loaded in pairs");
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    u32 a[4];
    ldmatrix_x4(a, ATile::matrix_address(smem_a, a_lane, row0, kk * 2));
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      u32 b[4];
      ldmatrix_x4(b, BTile::matrix_address(smem_b, b_lane, np * 16, kk * 2));
      mma_m16n8k16<Element>(acc[2 * np], a, b[0], b[1]);
      mma_m16n8k16<Element>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
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
