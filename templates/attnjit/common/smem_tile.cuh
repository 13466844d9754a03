// Swizzled shared-memory tiles of 16-bit (and 8-bit) elements and their global -> shared copies.
//
// A tile of kRows x kCols is stored as panels of kPanelCols columns (by default 64 when kCols
// is a multiple of 64, else 32): [panel][row][kPanelCols]. Inside a panel the 16-byte chunks of
// a row are permuted (chunk ^ f(row)) so that the 8 row addresses of one ldmatrix land in 8
// different 16-byte bank groups: conflict-free reads for every head dim, 96 included.
#pragma once

#include "attnjit/common/primitives.cuh"

namespace attnjit {

template <int kRows, int kCols, int kPanelWidth = (kCols % 64 == 0 ? 64 : 32)>
struct SmemTile {
  static_assert(kCols % 32 == 0, "tile width must be a multiple of 32 elements");
  static_assert((kPanelWidth == 64 || kPanelWidth == 32) && kCols % kPanelWidth == 0,
                "panels of 64 or 32 columns");
  static constexpr int kPanelCols = kPanelWidth;
  static constexpr int kChunksPerPanel = kPanelCols / 8;  // 16-byte chunks per panel row
  static constexpr int kChunks = kCols / 8;               // 16-byte chunks per row
  static constexpr int kPanelBytes = kRows * kPanelCols * 2;
  static constexpr int kBytes = kRows * kCols * 2;

  /// XOR pattern of a row: 8 chunks -> row % 8; 4 chunks (64-byte rows) -> (row / 2) % 4,
  /// which, with the odd/even row alternating 64-byte halves, also covers 8 bank groups.
  __device__ static __forceinline__ int swizzle(int row) {
    return kChunksPerPanel == 8 ? (row & 7) : ((row >> 1) & 3);
  }

  /// Byte offset of 16-byte chunk `chunk` (0 .. kChunks-1) of row `row`.
  __device__ static __forceinline__ int offset(int row, int chunk) {
    const int panel = chunk / kChunksPerPanel;
    const int within = chunk % kChunksPerPanel;
    return panel * kPanelBytes + row * (kPanelCols * 2) + ((within ^ swizzle(row)) << 4);
  }

  /// The lane-dependent part of an ldmatrix address: this lane reads row row0 + row_lane,
  /// 16-byte chunk chunk0 + chunk_lane (row_lane < 16, chunk_lane in {0, 1}). Computed once;
  /// matrix_address() adds the compile-time part.
  __device__ static __forceinline__ u32 lane_offset(int row_lane, int chunk_lane) {
    return row_lane * (kPanelCols * 2) + ((chunk_lane ^ swizzle(row_lane)) << 4);
  }

  /// Address of the rows [row0, row0 + 16) at chunks chunk0 + {0, 1} for ldmatrix, given
  /// this lane's lane_offset(). row0 % 8 == 0 and chunk0 % 2 == 0 make the swizzle of the
  /// lane's row equal to that of row_lane and the chunk's panel independent of the lane, so
  /// everything but one XOR and one add is a compile-time constant (no per-address registers).
  __device__ static __forceinline__ u32 matrix_address(u32 base, u32 lane, int row0, int chunk0) {
    return base + (chunk0 / kChunksPerPanel) * kPanelBytes + row0 * (kPanelCols * 2) +
           (lane ^ ((chunk0 % kChunksPerPanel) << 4));
  }

  /// Byte offset of element (row, col); col need not be chunk aligned.
  __device__ static __forceinline__ int element_offset(int row, int col) {
    return offset(row, col >> 3) + ((col & 7) << 1);
  }
};

/// A tile of kRows x kCols 8-bit elements (e4m3), laid out as the 16-bit tile of half as many
/// columns: the same 128-byte (or 64-byte) panel rows, panels and swizzle, so that wgmma's
/// descriptors and the TMA boxes of the 16-bit tiles serve it (Layout). Element (row, col) is
/// byte col % 2 of that tile's element (row, col / 2).
template <int kRows, int kCols>
struct SmemTile8 {
  static_assert(kCols % 64 == 0, "tile width must be a multiple of 64 bytes");
  typedef SmemTile<kRows, kCols / 2> Layout;
  static constexpr int kPanelCols = Layout::kPanelCols * 2;
  static constexpr int kPanelBytes = Layout::kPanelBytes;
  static constexpr int kBytes = Layout::kBytes;

  /// Byte offset of element (row, col).
  __device__ static __forceinline__ int element_offset(int row, int col) {
    return Layout::element_offset(row, col >> 1) + (col & 1);
  }
};

/// Copies rows [0, valid_rows) of a row-major global tile (row stride in elements) into a
/// swizzled shared tile with 16-byte cp.async; rows past valid_rows are zero-filled so
/// that out-of-range keys and queries never feed garbage (or NaN) into the MMAs.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile_async(u32 smem_base, const u16* global,
                                                long long row_stride, int valid_rows, int thread) {
  typedef SmemTile<kRows, kCols> Tile;
  constexpr int kTotal = kRows * Tile::kChunks;
  // Called inside the key-block loop: opaque inputs keep the per-copy address terms from
  // being hoisted out of that loop, where each would pin a register for its whole length.
  const u32 lane_thread = opaque(static_cast<u32>(thread));
  constexpr int kPassRows = kThreads / Tile::kChunks;
  if constexpr (kThreads % Tile::kChunks == 0 && kPassRows % 8 == 0) {
    // Each pass of the threads covers kPassRows whole rows, a multiple of the swizzle's
    // period: a thread keeps its chunk and its swizzle, and its addresses advance by
    // constants (no division per copy).
    const int chunk = static_cast<int>(lane_thread % Tile::kChunks);
    const int row0 = static_cast<int>(lane_thread / Tile::kChunks);
    const u32 dst = smem_base + Tile::offset(row0, chunk);
    const u16* src = global + row0 * row_stride + chunk * 8;
#pragma unroll
    for (int i = 0; i < (kRows + kPassRows - 1) / kPassRows; ++i) {
      const int row = row0 + i * kPassRows;
      if (kRows % kPassRows == 0 || row < kRows) {
        const bool valid = row < valid_rows;
        cp_async_16(dst + i * kPassRows * (Tile::kPanelCols * 2),
                    valid ? src + i * kPassRows * row_stride : global, valid ? 16 : 0);
      }
    }
  } else {
    row_stride = opaque(row_stride);
#pragma unroll
    for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
      const int index = static_cast<int>(lane_thread) + i * kThreads;
      if (kTotal % kThreads == 0 || index < kTotal) {
        const int row = index / Tile::kChunks;
        const int chunk = index % Tile::kChunks;
        const bool valid = row < valid_rows;
        const u16* src = global + (valid ? row * row_stride + chunk * 8 : 0);
        cp_async_16(smem_base + Tile::offset(row, chunk), src, valid ? 16 : 0);
      }
    }
  }
}

}  // namespace attnjit
