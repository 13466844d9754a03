// Register fragments of the tensor-core products, with the coordinates of every element.
//
// mma.sync m16n8k16 (PTX ISA, "matrix fragments for mma.m16n8k16"), per warp, g = lane / 4,
// t = lane % 4:
//   A (16 x 16, 16-bit, row-major)  4 registers of two values: register r, half h is row
//                                   g + 8 (r % 2), column 2 t + h + 8 (r / 2)
//   B (16 x 8, 16-bit, k x n)       2 registers: register r, half h is k = 2 t + h + 8 r, n = g
//   C (16 x 8, fp32)                4 values: element e is row g + 8 (e / 2), column 2 t + e % 2
// wgmma m64 x N (sm_90a, wgmma.cuh): the fp32 accumulator of each warp w of the warpgroup is
// N / 8 stacked m16n8 C tiles of the rows [16 (w % 4), 16 (w % 4) + 16), and a 16-bit A
// operand in registers has the mma.sync A layout. So one accumulator type serves both: a warp
// holds kSlabs x kTiles m16n8 C tiles (a wgmma accumulator is one slab), and its rows come in
// pairs (g, g + 8) per slab, shared by the four lanes of a quad (the softmax reduces over
// them, softmax.cuh).
//
// P reuse: the accumulator tiles (2 kk, 2 kk + 1) of a slab, packed to 16 bits pairwise, are
// the A operand of k16 step kk of the next product (to_operand_a): no shared memory.
#pragma once

#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// Element coordinates of the mma.sync m16n8k16 fragments of `lane` (the table above).
struct MmaLayout {
  /// A: row and column of half h of register r.
  __host__ __device__ __forceinline__ static constexpr int a_row(int lane, int r) {
    return lane / 4 + 8 * (r % 2);
  }
  __host__ __device__ __forceinline__ static constexpr int a_col(int lane, int r, int h) {
    return 2 * (lane % 4) + h + 8 * (r / 2);
  }
  /// B: k (row) and n (column) of half h of register r.
  __host__ __device__ __forceinline__ static constexpr int b_k(int lane, int r, int h) {
    return 2 * (lane % 4) + h + 8 * r;
  }
  __host__ __device__ __forceinline__ static constexpr int b_n(int lane) { return lane / 4; }
  /// C: row and column of element e.
  __host__ __device__ __forceinline__ static constexpr int c_row(int lane, int e) {
    return lane / 4 + 8 * (e / 2);
  }
  __host__ __device__ __forceinline__ static constexpr int c_col(int lane, int e) {
    return 2 * (lane % 4) + e % 2;
  }
};

static_assert(MmaLayout::a_row(5, 3) == 9 && MmaLayout::a_col(5, 3, 1) == 11, "A layout");
static_assert(MmaLayout::b_k(6, 1, 0) == 12 && MmaLayout::b_n(6) == 1, "B layout");
static_assert(MmaLayout::c_row(31, 2) == 15 && MmaLayout::c_col(31, 3) == 7, "C layout");

/// fp32 accumulators of one warp in the mma.sync C layout: kSlabs m16 slabs x kTiles n8 tiles,
/// a 16 kSlabs x 8 kTiles tile. Element v[s][nt][e] is row row(lane, s, e), column
/// col(lane, nt, e) of the warp's tile.
template <int kSlabs, int kTiles>
struct WarpAccumulator {
  static_assert(kSlabs > 0 && kTiles > 0, "a fragment has at least one m16n8 tile");

  float v[kSlabs][kTiles][4];

  __host__ __device__ __forceinline__ static constexpr int row(int lane, int s, int e) {
    return 16 * s + MmaLayout::c_row(lane, e);
  }
  __host__ __device__ __forceinline__ static constexpr int col(int lane, int nt, int e) {
    return 8 * nt + MmaLayout::c_col(lane, e);
  }

  __device__ __forceinline__ void fill(float value) {
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[s][nt][e] = value;
      }
    }
  }
};

/// The fp32 accumulator of an m64 x kN wgmma of a warpgroup, as one warp holds it: one slab of
/// kN / 8 m16n8 C tiles (a WarpAccumulator<1, kN / 8>, so the softmax and the masks take it),
/// the warp's rows starting at first_row(warp). tiles() is the form wgmma_ss / wgmma_rs take.
template <int kN>
struct WarpgroupAccumulator : WarpAccumulator<1, kN / 8> {
  static_assert(kN % 8 == 0 && kN >= 8 && kN <= 256, "wgmma: N a multiple of 8 up to 256");

  /// The first of the 16 warpgroup rows that warp `warp` (any warp index) holds.
  __host__ __device__ __forceinline__ static constexpr int first_row(int warp) {
    return 16 * (warp % 4);
  }
  /// Row and column of element (nt, e) of `lane` of warp `warp` in the warpgroup's m64 x kN tile.
  __host__ __device__ __forceinline__ static constexpr int row(int warp, int lane, int e) {
    return first_row(warp) + MmaLayout::c_row(lane, e);
  }
  __host__ __device__ __forceinline__ static constexpr int col(int lane, int nt, int e) {
    return 8 * nt + MmaLayout::c_col(lane, e);
  }

  __device__ __forceinline__ float (&tiles())[kN / 8][4] { return this->v[0]; }
};

static_assert(WarpgroupAccumulator<64>::row(6, 9, 3) == 42 &&
                  WarpgroupAccumulator<64>::col(9, 5, 3) == 43,
              "wgmma accumulator layout");

/// 16-bit A operands of one warp in the mma.sync A layout: kSlabs m16 slabs x kSteps k16
/// steps; v[s][kk] is what mma_m16n8k16 (or wgmma_rs, for a warpgroup's slab) takes. Half h of
/// register v[s][kk][r] is row row(lane, s, r), column col(lane, kk, r, h).
template <int kSlabs, int kSteps>
struct OperandA {
  static_assert(kSlabs > 0 && kSteps > 0, "an operand has at least one m16k16 tile");

  u32 v[kSlabs][kSteps][4];

  __host__ __device__ __forceinline__ static constexpr int row(int lane, int s, int r) {
    return 16 * s + MmaLayout::a_row(lane, r);
  }
  __host__ __device__ __forceinline__ static constexpr int col(int lane, int kk, int r, int h) {
    return 16 * kk + MmaLayout::a_col(lane, r, h);
  }
};

/// 16-bit B operands of one warp in the mma.sync B layout: kSteps k16 steps x kTiles n8 tiles;
/// half h of register v[kk][nt][r] is k = k_of(lane, kk, r, h), n = n_of(lane, nt).
template <int kSteps, int kTiles>
struct OperandB {
  static_assert(kSteps > 0 && kTiles > 0, "an operand has at least one k16n8 tile");

  u32 v[kSteps][kTiles][2];

  __host__ __device__ __forceinline__ static constexpr int k_of(int lane, int kk, int r, int h) {
    return 16 * kk + MmaLayout::b_k(lane, r, h);
  }
  __host__ __device__ __forceinline__ static constexpr int n_of(int lane, int nt) {
    return 8 * nt + MmaLayout::b_n(lane);
  }
};

/// Which A register of k16 step nt / 2 holds accumulator tile nt's row g (row_half 0) or row
/// g + 8 (row_half 1) after to_operand_a.
__host__ __device__ __forceinline__ constexpr int operand_register(int nt, int row_half) {
  return 2 * (nt % 2) + row_half;
}

/// P reuse: the accumulators rounded to Element pairwise, as the A operand of a product over
/// their columns (k16 step kk = tiles 2 kk and 2 kk + 1). Packs in tile order, row g before
/// row g + 8.
template <class Element, int kSlabs, int kTiles>
__device__ __forceinline__ void to_operand_a(const WarpAccumulator<kSlabs, kTiles>& acc,
                                             OperandA<kSlabs, kTiles / 2>& a) {
  static_assert(kTiles % 2 == 0, "a k16 step takes two n8 accumulator tiles");
#pragma unroll
  for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        a.v[s][nt / 2][operand_register(nt, r)] =
            pack2<Element>(acc.v[s][nt][2 * r], acc.v[s][nt][2 * r + 1]);
      }
    }
  }
}

/// acc += A B for every slab and n8 tile, B from registers: the plain mma.sync product of two
/// register fragments over kSteps k16 steps.
template <class Element, int kSlabs, int kSteps, int kTiles>
__device__ __forceinline__ void mma(WarpAccumulator<kSlabs, kTiles>& acc,
                                    const OperandA<kSlabs, kSteps>& a,
                                    const OperandB<kSteps, kTiles>& b) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
        mma_m16n8k16<Element>(acc.v[s][nt], a.v[s][kk], b.v[kk][nt][0], b.v[kk][nt][1]);
      }
    }
  }
}

}  // namespace attnjit
