// Mask application on accumulator fragments (fragment.cuh): hidden scores become -inf before
// the softmax (forward) or the exponent (backward), which turns them into P = 0.
//
// The element rule of mask.cuh needs one column's FlashMask values per key. Where the keys are
// the fragment's columns (S = Q K^T: forward, dQ kernel) mask_by_columns reads them once per
// column of the thread and applies them to its rows; where the keys are its rows (S^T = K Q^T:
// the backward main kernels) mask_by_rows reads them once per row. Predicates come as one bit
// per element of the thread's fragment (mask_by_bits), read ahead with read_tile.
#pragma once

#include "attnjit/common/fragment.cuh"
#include "attnjit/masks/mask.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// Sets to -inf the elements of `acc` that `hidden` hides, column by column: state_of(col)
/// runs once for each column of the thread and hidden(state, row, col) for each of its rows.
/// Coordinates are in the caller's index space: row_base and col_base are those of the
/// fragment's element (0, 0), so the thread's rows are row_base + 16 s + g + 8 r and its
/// columns col_base + 8 nt + 2 t + c (the WarpAccumulator layout).
template <int kSlabs, int kTiles, class StateOf, class Hidden>
__device__ __forceinline__ void mask_by_columns(WarpAccumulator<kSlabs, kTiles>& acc, int lane,
                                                int row_base, int col_base, StateOf state_of,
                                                Hidden hidden) {
  // The thread's first row and column, MmaLayout::c_row / c_col (lane, 0), written out: the
  // same expressions as the kernels' g and 2 t, which keeps the generated code unchanged.
  const int row0 = row_base + lane / 4;
  const int col0 = col_base + 2 * (lane % 4);
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int col = col0 + 8 * nt + c;
      const auto state = state_of(col);
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (hidden(state, row0 + 16 * s + 8 * r, col)) {
            acc.v[s][nt][2 * r + c] = negative_infinity();
          }
        }
      }
    }
  }
}

/// The same row by row: state_of(row) runs once for each row of the thread and
/// hidden(state, row, col) for each of its columns (coordinates as in mask_by_columns).
template <int kSlabs, int kTiles, class StateOf, class Hidden>
__device__ __forceinline__ void mask_by_rows(WarpAccumulator<kSlabs, kTiles>& acc, int lane,
                                             int row_base, int col_base, StateOf state_of,
                                             Hidden hidden) {
  // The thread's first row and column, MmaLayout::c_row / c_col (lane, 0), written out: the
  // same expressions as the kernels' g and 2 t, which keeps the generated code unchanged.
  const int row0 = row_base + lane / 4;
  const int col0 = col_base + 2 * (lane % 4);
#pragma unroll
  for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 16 * s + 8 * r;
      const auto state = state_of(row);
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          if (hidden(state, row, col0 + 8 * nt + c)) acc.v[s][nt][2 * r + c] = negative_infinity();
        }
      }
    }
  }
}

/// Sets to -inf element e of tile nt of slab `slab` where bit 4 nt + e of `hidden` is set (the
/// bit order of PredicatePolicy::fragment_bits and evaluate_bits).
template <int kSlabs, int kTiles>
__device__ __forceinline__ void mask_by_bits(WarpAccumulator<kSlabs, kTiles>& acc, int slab,
                                             unsigned long long hidden) {
  static_assert(kTiles * 4 <= 64, "one bit per element of the slab");
#pragma unroll
  for (int e = 0; e < kTiles * 4; ++e) {
    if ((hidden >> e) & 1) acc.v[slab][e / 4][e % 4] = negative_infinity();
  }
}

/// The class of the tile of key block n_block and the CTA's rows (ms) from the mask's table,
/// and for a partial tile of a mask with element bits the stored bits of the thread's fragment
/// rows row_of(s) and row_of(s) + 8 of each of its kSlabs slabs (zeros without a slot): rows
/// are queries, or keys when kKeyRows (S^T). `table` and `bits` name the kernel parameters
/// (member pointers, e.g. &FwdParams::minmax, &FwdParams::predicate_bits), read where used;
/// row_of runs only for a partial tile. The kernels call it for the next block, so that the
/// loads are in flight while the current one is computed.
template <class Mask, int kBlockN, int kTiles, bool kKeyRows, int kSlabs, class Params, class Table,
          class Bits, class RowOf>
__device__ __forceinline__ int read_tile(const Params& p, const MaskState& ms, Table table,
                                         Bits bits, int n_block, RowOf row_of,
                                         FragmentWords<(kTiles + 3) / 4> (&words)[kSlabs]) {
  const int tile = Mask::template classify<kBlockN>(ms, p.*table, n_block);
  if constexpr (Mask::kElementBits) {
    if (tile_kind(tile) == kTilePartial) {
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
        words[s] = Mask::template load_fragment_words<kTiles, kKeyRows>(p.*bits, tile, row_of(s));
      }
    }
  }
  return tile;
}

}  // namespace attnjit
