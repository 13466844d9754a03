// The key blocks one query block visits, last first, as the mask's hooks give them: the
// block range of the rows, skipped blocks left out, each block classified (mask.cuh), walked
// by one warp. Every warp of a warp-specialized kernel that needs the sequence walks it
// itself (the sm90a forward's producer and consumers): the same inputs give the same blocks,
// and no block index passes through shared memory.
//
// Masks whose skipping reads tables (FlashMask min/max, predicate block tables) are walked 32
// blocks at a time: lane l classifies block base - l, a ballot keeps which of them are
// active, and a block's classification comes from the lane that computed it. A dense mask
// costs one table read per lane every 32 blocks.
#pragma once

#include "attnjit/masks/mask.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

template <class Mask, int kBlockN>
struct WarpKeyBlockWalk {
  /// Index masks (no tables) classify by arithmetic, at each block.
  static constexpr bool kTables = Mask::kOrderedCtas;

  int block;        ///< the current block; < n_begin once the walk is over
  int n_begin;      ///< the lowest block of the rows' range
  int window;       ///< tables: the highest block of the classified window of 32
  unsigned active;  ///< tables: bit l: block window - l is visited
  int lane_tile;    ///< tables: this lane's classification of block window - l

  /// Starts at the highest visited block of the rows of `ms`; tables: within the key blocks
  /// of the rows' sequences where `varlen` is a packed batch's (narrow_to_sequences). Every
  /// lane of the warp calls it.
  __device__ __forceinline__ void begin(const MaskState& ms, const int* table,
                                        const VarlenInputs& varlen) {
    int n_end;
    Mask::template key_block_range<kBlockN>(ms, n_begin, n_end);
    if constexpr (kTables) narrow_to_sequences<kBlockN>(varlen, ms, n_begin, n_end);
    window = n_end + 32;  // no window yet: the first find classifies one
    active = 0;
    lane_tile = 0;
    block = find(ms, table, n_end - 1);
  }

  __device__ __forceinline__ bool more() const { return block >= n_begin; }

  /// Moves to the next visited block below the current one.
  __device__ __forceinline__ void next(const MaskState& ms, const int* table) {
    block = find(ms, table, block - 1);
  }

  /// Mask::classify's value of the current block (more() must hold). Tables: from the lane
  /// that classified it, so every lane of the warp calls it.
  __device__ __forceinline__ int tile(const MaskState& ms, const int* table) const {
    if constexpr (kTables) {
      return __shfl_sync(0xffffffffu, lane_tile, window - block);
    } else {
      return Mask::template classify<kBlockN>(ms, table, block);
    }
  }

 private:
  /// The highest visited block <= from, or n_begin - 1.
  __device__ __forceinline__ int find(const MaskState& ms, const int* table, int from) {
    if constexpr (!kTables) {
      return from;
    } else {
      for (;;) {
        if (from < n_begin) return n_begin - 1;
        if (window - from < 32) {
          // Visited blocks of the window at or below `from`.
          const unsigned left = active >> (window - from) << (window - from);
          if (left != 0) return window - (__ffs(left) - 1);
          from = window - 32;
          continue;
        }
        window = from;
        const int lane = threadIdx.x % 32;
        const int n = window - lane;
        lane_tile = n >= n_begin ? Mask::template classify<kBlockN>(ms, table, n) : kTileSkip;
        active = __ballot_sync(0xffffffffu, tile_kind(lane_tile) != kTileSkip);
      }
    }
  }
};

}  // namespace attnjit
