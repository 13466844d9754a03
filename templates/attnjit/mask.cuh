// Mask hooks of the attention kernels: which key blocks a CTA visits, how each block is
// classified (skipped / partial / full), and the element rule applied to partial blocks.
//
// One policy covers every mask kind; the generated code binds its flags:
//   kCausal  key j visible to query i only if j <= i + (Sk - Sq)   (bottom-right aligned)
//   kWindow  i + off - window_left <= j <= i + off + window_right  (runtime sizes, < 0: none)
//   kLts..kUte  column of each FlashMask vector in startend_row_indices, -1 if absent.
// FlashMask (flashmask.md): column j masks rows [LTS, LTE) and [UTS, UTE); an absent LTE
// reads as Sq and an absent UTS as 0.
#pragma once

#include "attnjit/primitives.cuh"

namespace attnjit {

enum TileKind { kTileSkip = 0, kTilePartial = 1, kTileFull = 2 };

/// What one CTA knows about the mask: its rows and the runtime mask data of its (b, head).
struct MaskState {
  int seqlen_q, seqlen_k;
  int diagonal;            ///< Sk - Sq: the causal diagonal of row i is key i + diagonal
  int row_begin, row_end;  ///< this CTA's rows, row_end clamped to Sq
  int window_left, window_right;
  /// FlashMask: row b * mask_heads + mask head of startend_row_indices [B * Hm, Sk, C] and
  /// of the min/max tables [B * Hm, num_key_blocks, 2 * C]. An index, not pointers: the
  /// pointers are formed where used, so no 64-bit value is held across the key loop.
  int vector_row;
  int num_key_blocks;
};

/// The mask state of the CTA's (head, batch) from the kernel parameters (FwdParams or
/// BwdParams: the fields have the same names), with no rows yet; min/max tables are built for
/// key blocks of kBlockN.
template <int kBlockN, bool kHasVectors, class Params>
__device__ __forceinline__ MaskState make_mask_state(const Params& p, int head, int batch) {
  MaskState ms;
  ms.seqlen_q = p.seqlen_q;
  ms.seqlen_k = p.seqlen_k;
  ms.diagonal = p.seqlen_k - p.seqlen_q;
  ms.row_begin = 0;
  ms.row_end = 0;
  ms.window_left = p.window_left;
  ms.window_right = p.window_right;
  ms.vector_row = kHasVectors ? batch * p.mask_heads + head / (p.heads / p.mask_heads) : 0;
  ms.num_key_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
  return ms;
}

/// Start of the FlashMask values of key column `key` for the CTA's (batch, mask head), from
/// the kernel parameter `intervals` (passed at each use, not held in a register).
template <int kColumns>
__device__ __forceinline__ const int* interval_values(const int* intervals, const MaskState& s,
                                                      int key) {
  const long long row = static_cast<int>(opaque(static_cast<u32>(s.vector_row)));
  return intervals + (row * s.seqlen_k + key) * kColumns;
}

template <bool kCausal, bool kWindow, int kLts, int kLte, int kUts, int kUte>
struct MaskPolicy {
  static constexpr int kColumns = (kLts >= 0) + (kLte >= 0) + (kUts >= 0) + (kUte >= 0);
  static constexpr bool kHasVectors = kColumns > 0;
  static constexpr bool kHasLower = kLts >= 0;
  static constexpr bool kHasUpper = kUte >= 0;

  /// Key blocks [begin, end) that can hold a visible key for the CTA's rows.
  template <int kBlockN>
  __device__ static void key_block_range(const MaskState& s, int& begin, int& end) {
    const int num_blocks = (s.seqlen_k + kBlockN - 1) / kBlockN;
    begin = 0;
    end = num_blocks;
    if (kCausal || (kWindow && s.window_right >= 0)) {
      const int right = kCausal ? 0 : s.window_right;
      const int last_visible = s.row_end - 1 + s.diagonal + right;
      end = last_visible < 0 ? 0 : min(num_blocks, last_visible / kBlockN + 1);
    }
    if (kWindow && s.window_left >= 0) {
      const int first_visible = s.row_begin + s.diagonal - s.window_left;
      begin = first_visible <= 0 ? 0 : first_visible / kBlockN;
    }
  }

  /// Query blocks [begin, end) whose rows can see a key of block n_block (backward: the CTA
  /// owns the key block and walks the query blocks).
  template <int kBlockM, int kBlockN>
  __device__ static void query_block_range(const MaskState& s, int n_block, int& begin, int& end) {
    const int num_blocks = (s.seqlen_q + kBlockM - 1) / kBlockM;
    const int first_key = n_block * kBlockN;
    const int last_key = min(first_key + kBlockN, s.seqlen_k) - 1;
    begin = 0;
    end = num_blocks;
    // Query i sees key j only if j <= i + diagonal + right, i.e. i >= j - diagonal - right.
    if (kCausal || (kWindow && s.window_right >= 0)) {
      const int right = kCausal ? 0 : s.window_right;
      const int first_row = first_key - s.diagonal - right;
      begin = first_row <= 0 ? 0 : min(num_blocks, first_row / kBlockM);
    }
    // And j >= i + diagonal - left, i.e. i <= j - diagonal + left.
    if (kWindow && s.window_left >= 0) {
      const int last_row = last_key - s.diagonal + s.window_left;
      end = last_row < 0 ? 0 : min(num_blocks, last_row / kBlockM + 1);
    }
  }

  /// Skip (every element masked: no load, no MMA), partial (element rule needed) or full.
  /// `minmax` is the kernel parameter holding the tables (built for key blocks of kBlockN).
  template <int kBlockN>
  __device__ static int classify(const MaskState& s, const int* minmax, int n_block) {
    const int col_begin = n_block * kBlockN;
    const int col_last = min(col_begin + kBlockN, s.seqlen_k) - 1;
    bool partial = col_begin + kBlockN > s.seqlen_k;
    if (kCausal) partial |= col_last > s.row_begin + s.diagonal;
    if (kWindow) {
      if (s.window_right >= 0) partial |= col_last > s.row_begin + s.diagonal + s.window_right;
      if (s.window_left >= 0) partial |= col_begin < s.row_end - 1 + s.diagonal - s.window_left;
    }
    if (kHasVectors) {
      const long long block =
          static_cast<long long>(static_cast<int>(opaque(static_cast<u32>(s.vector_row)))) *
              s.num_key_blocks +
          n_block;
      const int* mm = minmax + block * 2 * kColumns;
      if (kHasLower) {
        const int start_min = mm[2 * kLts], start_max = mm[2 * kLts + 1];
        const int end_min = kLte >= 0 ? mm[2 * kLte] : s.seqlen_q;
        const int end_max = kLte >= 0 ? mm[2 * kLte + 1] : s.seqlen_q;
        if (s.row_begin >= start_max && s.row_end <= end_min) return kTileSkip;
        partial |= s.row_begin < end_max && s.row_end > start_min;
      }
      if (kHasUpper) {
        const int start_min = kUts >= 0 ? mm[2 * kUts] : 0;
        const int start_max = kUts >= 0 ? mm[2 * kUts + 1] : 0;
        const int end_min = mm[2 * kUte], end_max = mm[2 * kUte + 1];
        if (s.row_begin >= start_max && s.row_end <= end_min) return kTileSkip;
        partial |= s.row_begin < end_max && s.row_end > start_min;
      }
    }
    return partial ? kTilePartial : kTileFull;
  }

  /// The highest key block in [n_begin, from] that is not skipped for the CTA's rows, or
  /// n_begin - 1. Each lane of the warp classifies one block per step and a ballot takes the
  /// first hit, so a long run of skipped blocks costs 1/32 of a serial scan. Call from all
  /// lanes of a warp with the same arguments.
  template <int kBlockN>
  __device__ static int last_active_key_block(const MaskState& s, const int* minmax, int from,
                                              int n_begin) {
    if (!kHasVectors) return from;
    const int lane = threadIdx.x % 32;
    for (int base = from; base >= n_begin; base -= 32) {
      const int n = base - lane;
      const bool active = n >= n_begin && classify<kBlockN>(s, minmax, n) != kTileSkip;
      const unsigned hits = __ballot_sync(0xffffffffu, active);
      if (hits != 0) return base - (__ffs(hits) - 1);
    }
    return n_begin - 1;
  }

  /// The lowest query block in [from, end) with a visible element in key block n_block (the
  /// backward's walk), or end; the same warp-parallel search.
  template <int kBlockM, int kBlockN>
  __device__ static int first_active_query_block(MaskState s, const int* minmax, int n_block,
                                                 int from, int end) {
    if (!kHasVectors) return from;
    const int lane = threadIdx.x % 32;
    for (int base = from; base < end; base += 32) {
      const int m = base + lane;
      s.row_begin = m * kBlockM;
      s.row_end = min(s.row_begin + kBlockM, s.seqlen_q);
      const bool active = m < end && classify<kBlockN>(s, minmax, n_block) != kTileSkip;
      const unsigned hits = __ballot_sync(0xffffffffu, active);
      if (hits != 0) return base + (__ffs(hits) - 1);
    }
    return end;
  }

  /// One key column's FlashMask rows, read once from shared memory (`values` is the address
  /// of the column's kColumns values) and then applied to every row of the column: masked
  /// rows are [lower_start, lower_end) and [upper_start, upper_end).
  struct Column {
    int lower_start, lower_end, upper_start, upper_end;
  };

  __device__ static __forceinline__ Column load_column(const MaskState& s, u32 values) {
    Column c;
    c.lower_start = kHasLower ? load_shared_s32(values + 4 * kLts) : s.seqlen_q;
    c.lower_end = kLte >= 0 ? load_shared_s32(values + 4 * kLte) : s.seqlen_q;
    c.upper_start = kUts >= 0 ? load_shared_s32(values + 4 * kUts) : 0;
    c.upper_end = kHasUpper ? load_shared_s32(values + 4 * kUte) : 0;
    return c;
  }

  /// The element rule for query `row` and key `col` (whose column was loaded as `c`).
  __device__ static __forceinline__ bool masked(const MaskState& s, int row, int col,
                                                const Column& c) {
    bool out = col >= s.seqlen_k;
    if (kCausal) out |= col > row + s.diagonal;
    if (kWindow) {
      if (s.window_left >= 0) out |= col < row + s.diagonal - s.window_left;
      if (s.window_right >= 0) out |= col > row + s.diagonal + s.window_right;
    }
    if (kHasLower) out |= row >= c.lower_start && row < c.lower_end;
    if (kHasUpper) out |= row >= c.upper_start && row < c.upper_end;
    return out;
  }
};

}  // namespace attnjit
