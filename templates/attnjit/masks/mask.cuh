// Mask hooks of the attention kernels: which key blocks a CTA visits, how each block is
// classified (skipped / partial / full), and the element rule applied to partial blocks.
//
// One policy covers every mask kind; the generated code binds its flags:
//   kCausal  key j visible to query i only if j <= i + (Sk - Sq)   (bottom-right aligned)
//   kWindow  i + off - window_left <= j <= i + off + window_right  (runtime sizes, < 0: none)
//   kLts..kUte  column of each FlashMask vector in startend_row_indices, -1 if absent.
// FlashMask (docs/masks.md): column j masks rows [LTS, LTE) and [UTS, UTE); an absent LTE
// reads as Sq and an absent UTS as 0.
//   kVisibleBegin, kVisibleEnd  columns of a packed batch's visible rows (varlen_intervals.cuh):
//   column j masks the rows outside [VISIBLE_BEGIN, VISIBLE_END) too; -1 if absent.
//
// PredicatePolicy (same interface) serves mask=predicate: a block table built before the
// attention kernel classifies the tiles, and the generated predicate is the element rule.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/masks/mask_builders.cuh"
#include "attnjit/masks/predicate.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"

namespace attnjit {

enum TileKind { kTileSkip = 0, kTilePartial = 1, kTileFull = 2 };

/// A packed batch's row or key `x` (varlen) as its sequence and its position in it; sequence
/// -1 when x lies past the last boundary. Stays inside the boundaries whatever their data.
struct PackedPosition {
  int sequence, local;
};

__device__ __forceinline__ PackedPosition packed_position(const int* cu, int sequences, int x) {
  const mask_build::Segment s = mask_build::segment_of(cu, sequences, x);
  return {x < s.end ? s.index : -1, x - s.start};
}

/// Whether packed query `row` and key `col` of a packed batch lie in one sequence, the key
/// among its used ones; if so, `at` holds the sequence and their local positions.
struct PackedPair {
  int sequence, q, k;
};

__device__ __forceinline__ bool same_sequence(const VarlenInputs& v, int row, int col,
                                              PackedPair& at) {
  const PackedPosition q = packed_position(v.cu_seqlens_q, v.sequences, row);
  const PackedPosition k = packed_position(v.cu_seqlens_k, v.sequences, col);
  if (q.sequence < 0 || q.sequence != k.sequence) return false;
  if (v.seqused_k != nullptr && k.local >= v.seqused_k[k.sequence]) return false;
  at = {q.sequence, q.local, k.local};
  return true;
}

/// The kind of a tile from Mask::classify's value: a TileKind, which for a predicate's block
/// table also carries the slot of the tile's element bits (predicate_blocks.cuh).
__device__ __forceinline__ int tile_kind(int tile) {
  return tile & 3;
}

/// The slot of a partial predicate tile's element bits, or -1 when it has none.
__device__ __forceinline__ int tile_bits_slot(int tile) {
  return (tile >> 2) - 1;
}

/// The stored element bits of a thread's two fragment rows in a partial predicate tile
/// (PredicatePolicy::load_fragment_words), kWords 32-bit words per row.
template <int kWords>
struct FragmentWords {
  unsigned words[2][kWords];
};

/// The shape of the element bits of one partial tile of kBlockM queries x kBlockN keys
/// (predicate_blocks.cuh): kRows rows (keys when kKeyRows, else queries) of kRowWords 32-bit
/// words, bit c of word w of row r being element (r, 32 w + c), 1 = hidden.
template <int kBlockM, int kBlockN, bool kKeyRows>
struct PredicateTileBits {
  static constexpr int kRows = kKeyRows ? kBlockN : kBlockM;
  static constexpr int kCols = kKeyRows ? kBlockM : kBlockN;
  static constexpr int kRowWords = (kCols + 31) / 32;
  static constexpr int kSlotWords = kRows * kRowWords;
};

/// What one CTA knows about the mask: its rows and the runtime mask data of its (b, head).
struct MaskState {
  int seqlen_q, seqlen_k;
  int diagonal;            ///< Sk - Sq: the causal diagonal of row i is key i + diagonal
  int row_begin, row_end;  ///< this CTA's rows, row_end clamped to Sq
  int window_left, window_right;
  /// The row of the mask's per-(batch, head) data (Mask::mask_row). FlashMask: row
  /// b * mask_heads + mask head of startend_row_indices [B * Hm, Sk, C] and of the min/max
  /// tables [B * Hm, num_key_blocks, 2 * C]; predicate: the row of the block table. An index,
  /// not pointers: the pointers are formed where used, so no 64-bit value is held across the
  /// key loop.
  int vector_row;
  /// FlashMask: the keys of a row of startend_row_indices (Sk; over a KV cache the capacity,
  /// which seqlen_k, a sequence's keys, may be short of).
  int vector_keys;
  int num_key_blocks;
  /// The (batch, query head) whose rows these are: a predicate's inputs are indexed by them.
  int batch, head;
};

/// The mask state of (head, batch), whose mask row (Mask::mask_row of its head and batch) is
/// `vector_row`, from the kernel parameters (FwdParams or BwdParams: the fields have the same
/// names), with no rows yet; min/max tables are built for key blocks of kBlockN.
template <int kBlockN, class Params>
__device__ __forceinline__ MaskState make_mask_state_at_row(const Params& p, int vector_row,
                                                           int head, int batch) {
  MaskState ms;
  ms.batch = batch;
  ms.head = head;
  ms.seqlen_q = p.seqlen_q;
  ms.seqlen_k = p.seqlen_k;
  ms.diagonal = p.seqlen_k - p.seqlen_q;
  ms.row_begin = 0;
  ms.row_end = 0;
  ms.window_left = p.window_left;
  ms.window_right = p.window_right;
  ms.vector_row = vector_row;
  ms.vector_keys = p.seqlen_k;
  ms.num_key_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
  return ms;
}

/// The mask state of the CTA's (head, batch), with no rows yet.
template <int kBlockN, class Mask, class Params>
__device__ __forceinline__ MaskState make_mask_state(const Params& p, int head, int batch) {
  return make_mask_state_at_row<kBlockN>(p, Mask::mask_row(p, head, batch), head, batch);
}

/// Narrows key blocks [begin, end) of the rows [s.row_begin, s.row_end) of a packed batch
/// (`v`, its boundaries; null cu_seqlens_q: not packed, nothing changes) to the blocks of the
/// keys of the rows' sequences, cu_k[first row's] .. cu_k[last row's + 1]: a row sees no key
/// of another sequence (varlen_intervals.cuh), so the walk need not classify those blocks.
/// Two searches of the boundaries; whatever their data, [begin, end) only shrinks.
template <int kBlockN>
__device__ __forceinline__ void narrow_to_sequences(const VarlenInputs& v, const MaskState& s,
                                                    int& begin, int& end) {
  if (v.cu_seqlens_q == nullptr || v.sequences <= 0 || s.row_end <= s.row_begin) return;
  const int first = mask_build::segment_of(v.cu_seqlens_q, v.sequences, s.row_begin).index;
  const int last = mask_build::segment_of(v.cu_seqlens_q, v.sequences, s.row_end - 1).index;
  const int key_begin = max(v.cu_seqlens_k[first], 0);
  const int key_end = max(v.cu_seqlens_k[last + 1], 0);
  begin = max(begin, key_begin / kBlockN);
  end = min(end, (key_end + kBlockN - 1) / kBlockN);
}

/// The backward's counterpart: narrows query blocks [begin, end) of key block n_block of a
/// packed batch to the blocks of the rows of its keys' sequences, cu_q[first key's] ..
/// cu_q[last key's + 1]. Whatever the boundaries hold, [begin, end) only shrinks.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void narrow_to_key_sequences(const VarlenInputs& v, const MaskState& s,
                                                        int n_block, int& begin, int& end) {
  const int first_key = n_block * kBlockN;
  const int last_key = min(first_key + kBlockN, s.seqlen_k) - 1;
  if (v.cu_seqlens_k == nullptr || v.sequences <= 0 || last_key < first_key) return;
  const int first = mask_build::segment_of(v.cu_seqlens_k, v.sequences, first_key).index;
  const int last = mask_build::segment_of(v.cu_seqlens_k, v.sequences, last_key).index;
  const int row_begin = max(v.cu_seqlens_q[first], 0);
  const int row_end = max(v.cu_seqlens_q[last + 1], 0);
  begin = max(begin, row_begin / kBlockM);
  end = min(end, (row_end + kBlockM - 1) / kBlockM);
}

/// Query blocks [begin, end) that can see key block n_block: the mask's range, narrowed to
/// the block's sequences in a packed batch where kNarrow. The blocks left out are skipped by
/// classify() anyway; narrowing saves their classification. Walks that must agree on the
/// blocks visited (the deterministic mode's turns) take the same kNarrow. Masks without
/// tables (no vectors, no predicate) never run in a packed batch and keep their code.
template <class Mask, int kBlockM, int kBlockN, bool kNarrow = true>
__device__ __forceinline__ void query_blocks_of(const VarlenInputs& v, const MaskState& s,
                                                int n_block, int& begin, int& end) {
  Mask::template query_block_range<kBlockM, kBlockN>(s, n_block, begin, end);
  if constexpr (kNarrow && Mask::kOrderedCtas) {
    narrow_to_key_sequences<kBlockM, kBlockN>(v, s, n_block, begin, end);
  }
}

/// Start of the FlashMask values of key column `key` for the CTA's (batch, mask head), from
/// the kernel parameter `intervals` (passed at each use, not held in a register).
template <int kColumns>
__device__ __forceinline__ const int* interval_values(const int* intervals, const MaskState& s,
                                                      int key) {
  const long long row = static_cast<int>(opaque(static_cast<u32>(s.vector_row)));
  return intervals + (row * s.vector_keys + key) * kColumns;
}

/// The highest key block in [n_begin, from] that Mask does not skip for the CTA's rows, or
/// n_begin - 1. Each lane of the warp classifies one block per step and a ballot takes the
/// first hit, so a long run of skipped blocks costs 1/32 of a serial scan. Call from all
/// lanes of a warp with the same arguments.
template <class Mask, int kBlockN>
__device__ __forceinline__ int search_last_active_key_block(const MaskState& s, const int* table,
                                                            int from, int n_begin) {
  const int lane = threadIdx.x % 32;
  for (int base = from; base >= n_begin; base -= 32) {
    const int n = base - lane;
    const bool active =
        n >= n_begin && tile_kind(Mask::template classify<kBlockN>(s, table, n)) != kTileSkip;
    const unsigned hits = __ballot_sync(0xffffffffu, active);
    if (hits != 0) return base - (__ffs(hits) - 1);
  }
  return n_begin - 1;
}

/// The lowest query block in [from, end) with a visible element in key block n_block (the
/// backward's walk), or end; the same warp-parallel search.
template <class Mask, int kBlockM, int kBlockN>
__device__ __forceinline__ int search_first_active_query_block(MaskState s, const int* table,
                                                               int n_block, int from, int end) {
  const int lane = threadIdx.x % 32;
  for (int base = from; base < end; base += 32) {
    const int m = base + lane;
    s.row_begin = m * kBlockM;
    s.row_end = min(s.row_begin + kBlockM, s.seqlen_q);
    const bool active =
        m < end && tile_kind(Mask::template classify<kBlockN>(s, table, n_block)) != kTileSkip;
    const unsigned hits = __ballot_sync(0xffffffffu, active);
    if (hits != 0) return base + (__ffs(hits) - 1);
  }
  return end;
}

template <bool kCausal, bool kWindow, int kLts, int kLte, int kUts, int kUte,
          int kVisibleBegin = -1, int kVisibleEnd = -1>
struct MaskPolicy {
  static constexpr int kColumns = (kLts >= 0) + (kLte >= 0) + (kUts >= 0) + (kUte >= 0) +
                                  (kVisibleBegin >= 0) + (kVisibleEnd >= 0);
  static constexpr bool kHasVectors = kColumns > 0;
  static constexpr bool kHasLower = kLts >= 0;
  static constexpr bool kHasUpper = kUte >= 0;
  static constexpr bool kHasVisible = kVisibleBegin >= 0 || kVisibleEnd >= 0;
  /// The flags and the vectors' columns, for the kernel that writes them (varlen_intervals.cuh).
  static constexpr bool kCausalByIndex = kCausal;
  static constexpr bool kWindowByIndex = kWindow;
  static constexpr int kLtsColumn = kLts, kLteColumn = kLte, kUtsColumn = kUts,
                       kUteColumn = kUte, kVisibleBeginColumn = kVisibleBegin,
                       kVisibleEndColumn = kVisibleEnd;
  /// The element rule is cheap index arithmetic: the kernels apply masked() unrolled.
  static constexpr bool kElementBits = false;
  /// The vectors make a block's work depend on the data: the CTAs run in a CTA order.
  static constexpr bool kOrderedCtas = kHasVectors;
  /// No predicate's block table over a KV cache (PredicatePolicy's).
  static constexpr bool kCacheTable = false;
  /// Causal and windows without vectors: the visible keys of a row are one range
  /// (visible_keys), bounded below only by a window. (No mask keeps the plain Sk bound.)
  static constexpr bool kIndexRange = !kHasVectors && (kCausal || kWindow);
  static constexpr bool kIndexBegins = kWindow;

  /// The keys [begin, end) that row `row` sees by index (kIndexRange), end clamped to Sk;
  /// begin is 0 unless kIndexBegins: the range form of masked()'s causal and window terms.
  __device__ static __forceinline__ void visible_keys(const MaskState& s, int row, int& begin,
                                                      int& end) {
    begin = kWindow && s.window_left >= 0 ? row + s.diagonal - s.window_left : 0;
    end = s.seqlen_k;
    if (kCausal) end = min(end, row + s.diagonal + 1);
    if (kWindow && s.window_right >= 0) end = min(end, row + s.diagonal + s.window_right + 1);
  }

  /// MaskState::vector_row of the CTA's (head, batch).
  template <class Params>
  __device__ static int mask_row(const Params& p, int head, int batch) {
    return kHasVectors ? batch * p.mask_heads + head / (p.heads / p.mask_heads) : 0;
  }

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
      if (kVisibleBegin >= 0) {
        if (s.row_end <= mm[2 * kVisibleBegin]) return kTileSkip;
        partial |= s.row_begin < mm[2 * kVisibleBegin + 1];
      }
      if (kVisibleEnd >= 0) {
        if (s.row_begin >= mm[2 * kVisibleEnd + 1]) return kTileSkip;
        partial |= s.row_end > mm[2 * kVisibleEnd];
      }
    }
    return partial ? kTilePartial : kTileFull;
  }

  /// The highest key block in [n_begin, from] that is not skipped for the CTA's rows, or
  /// n_begin - 1 (search_last_active_key_block). Call from all lanes of a warp.
  template <int kBlockN>
  __device__ static int last_active_key_block(const MaskState& s, const int* minmax, int from,
                                              int n_begin) {
    if (!kHasVectors) return from;
    return search_last_active_key_block<MaskPolicy, kBlockN>(s, minmax, from, n_begin);
  }

  /// The lowest query block in [from, end) with a visible element in key block n_block, or end
  /// (search_first_active_query_block). Call from all lanes of a warp.
  template <int kBlockM, int kBlockN>
  __device__ static int first_active_query_block(const MaskState& s, const int* minmax, int n_block,
                                                 int from, int end) {
    if (!kHasVectors) return from;
    return search_first_active_query_block<MaskPolicy, kBlockM, kBlockN>(s, minmax, n_block, from,
                                                                         end);
  }

  /// One key column's FlashMask rows, read once from shared memory (`values` is the address
  /// of the column's kColumns values) and then applied to every row of the column: masked
  /// rows are [lower_start, lower_end), [upper_start, upper_end) and those outside
  /// [visible_begin, visible_end).
  struct Column {
    int lower_start, lower_end, upper_start, upper_end;
    int visible_begin, visible_end;
  };

  __device__ static __forceinline__ Column load_column(const MaskState& s, u32 values) {
    int read[kColumns > 0 ? kColumns : 1];
#pragma unroll
    for (int i = 0; i < kColumns; ++i) read[i] = load_shared_s32(values + 4 * i);
    return column_of(s, read);
  }

  /// The column whose kColumns values are `values` (already read, in their column order).
  __device__ static __forceinline__ Column column_of(const MaskState& s, const int* values) {
    Column c;
    c.lower_start = kHasLower ? values[kLts] : s.seqlen_q;
    c.lower_end = kLte >= 0 ? values[kLte] : s.seqlen_q;
    c.upper_start = kUts >= 0 ? values[kUts] : 0;
    c.upper_end = kHasUpper ? values[kUte] : 0;
    c.visible_begin = kVisibleBegin >= 0 ? values[kVisibleBegin] : 0;
    c.visible_end = kVisibleEnd >= 0 ? values[kVisibleEnd] : s.seqlen_q;
    return c;
  }

  /// The element rule for query `row` and key `col` (whose column was loaded as `c`).
  /// kRowsBelowSq: the caller keeps no result of rows past Sq (the forward, whose O and LSE
  /// stores drop them), so an absent LTE (Sq) or UTS (0) bounds nothing and is not compared.
  /// kKeysBelowSk: the caller hides keys past Sk itself (only the last key block has any), so
  /// `col` is not compared with Sk.
  template <bool kRowsBelowSq = false, bool kKeysBelowSk = false, class Params>
  __device__ static __forceinline__ bool masked(const Params&, const MaskState& s, int row, int col,
                                                const Column& c) {
    bool out = !kKeysBelowSk && col >= s.seqlen_k;
    if (kCausal) out |= col > row + s.diagonal;
    if (kWindow) {
      if (s.window_left >= 0) out |= col < row + s.diagonal - s.window_left;
      if (s.window_right >= 0) out |= col > row + s.diagonal + s.window_right;
    }
    if (kHasLower) out |= row >= c.lower_start && ((kRowsBelowSq && kLte < 0) || row < c.lower_end);
    if (kHasUpper) out |= ((kRowsBelowSq && kUts < 0) || row >= c.upper_start) && row < c.upper_end;
    if (kVisibleBegin >= 0) out |= row < c.visible_begin;
    if (kVisibleEnd >= 0) out |= row >= c.visible_end;
    return out;
  }

  /// masked<true>'s rule for key `col` (column `c`) and the rows base + e, e >= 0, as bounds
  /// on e: the rows' comparisons become comparisons of compile-time offsets with a few values
  /// per key, instead of a row index per element in registers (rows_masked).
  struct RowBounds {
    bool past_sk;
    int causal_end;   ///< kCausal: rows base + e with e < causal_end see no key col
    int lower_begin;  ///< LTS - base
    u32 lower_width;  ///< LTE - LTS (0 for an empty interval); without LTE, unbounded
    int upper_begin;  ///< UTS - base; without UTS, unbounded below
    int upper_end;    ///< UTE - base
    u32 upper_width;  ///< UTE - UTS (0 for an empty interval)
    int visible_begin;  ///< VISIBLE_BEGIN - base
    u32 visible_width;  ///< VISIBLE_END - VISIBLE_BEGIN (0 for an empty range)
  };

  __device__ static __forceinline__ RowBounds row_bounds(const MaskState& s, int base, int col,
                                                         const Column& c) {
    static_assert(!kWindow, "windows by index take masked()");
    RowBounds b;
    b.past_sk = col >= s.seqlen_k;
    b.causal_end = col - s.diagonal - base;  // col > row + diagonal
    b.lower_begin = c.lower_start - base;
    b.lower_width = c.lower_end > c.lower_start ? static_cast<u32>(c.lower_end - c.lower_start) : 0;
    b.upper_begin = c.upper_start - base;
    b.upper_end = c.upper_end - base;
    b.upper_width = c.upper_end > c.upper_start ? static_cast<u32>(c.upper_end - c.upper_start) : 0;
    b.visible_begin = c.visible_begin - base;
    b.visible_width =
        c.visible_end > c.visible_begin ? static_cast<u32>(c.visible_end - c.visible_begin) : 0;
    return b;
  }

  /// masked<true>(p, s, base + e, col, c) from row_bounds(s, base, col, c): e in [begin, begin
  /// + width) as one unsigned compare of e - begin with the width.
  __device__ static __forceinline__ bool rows_masked(const RowBounds& b, int e) {
    bool out = b.past_sk;
    if (kCausal) out |= e < b.causal_end;
    if constexpr (kHasLower && kLte < 0) out |= e >= b.lower_begin;
    if constexpr (kHasLower && kLte >= 0) {
      out |= static_cast<u32>(e - b.lower_begin) < b.lower_width;
    }
    if constexpr (kHasUpper && kUts < 0) out |= e < b.upper_end;
    if constexpr (kHasUpper && kUts >= 0) {
      out |= static_cast<u32>(e - b.upper_begin) < b.upper_width;
    }
    if constexpr (kHasVisible) out |= static_cast<u32>(e - b.visible_begin) >= b.visible_width;
    return out;
  }
};

/// The policy of mask=predicate. Visible (generated) has
///   static __device__ bool visible(const PredicateInputs&, int b, int h, int q, int k);
/// kVarlen: a packed batch, whose predicate sees each sequence's index as b and the local
/// positions of q and k in it; pairs of different sequences and unused keys are hidden.
/// the block table (the `table` argument: FwdParams::minmax, BwdParams::minmax or minmax_dq)
/// holds one int32 entry per tile of kTableBlockM x kTableBlockN for each (batch row, head
/// row), built by predicate_blocks.cuh: the TileKind, and for a partial tile the slot of its
/// element bits when it has one. kPerBatch / kPerHead: the table has a row per batch / per
/// query head. Keys past Sk are masked; the caller ignores rows past Sq.
/// kKvCache: over a KV cache the table's rows are each sequence's new tokens (MaskState::seqlen_q
/// the most a sequence has), and the element rule's rows too: the predicate sees a row's
/// position, the row plus MaskState::diagonal (the sequence's keys less its new tokens), as q
/// (the decode kernel passes positions with a diagonal of 0).
template <class Visible, int kTableBlockM, int kTableBlockN, bool kPerBatch, bool kPerHead,
          bool kVarlen = false, bool kKvCache = false>
struct PredicatePolicy {
  static constexpr int kColumns = 0;
  static constexpr bool kHasVectors = false;
  static constexpr bool kHasVisible = false;
  static constexpr bool kIndexRange = false;
  static constexpr bool kCausalByIndex = false, kWindowByIndex = false;
  /// The element rule comes as bits per fragment: the tile's stored bits (load_fragment_words,
  /// fragment_bits), else the generated expression (evaluate_bits).
  static constexpr bool kElementBits = true;
  /// The block table makes a block's work depend on the data: the CTAs run in a CTA order.
  static constexpr bool kOrderedCtas = true;
  /// Over a KV cache: the table's rows are each sequence's new tokens, kTableRows a tile.
  static constexpr bool kCacheTable = kKvCache;
  static constexpr int kTableRows = kTableBlockM;

  /// MaskState::vector_row: the table row of the CTA's (head, batch).
  template <class Params>
  __device__ static int mask_row(const Params& p, int head, int batch) {
    return (kPerBatch ? batch : 0) * (kPerHead ? p.heads : 1) + (kPerHead ? head : 0);
  }

  template <int kBlockN>
  __device__ static void key_block_range(const MaskState& s, int& begin, int& end) {
    begin = 0;
    end = (s.seqlen_k + kBlockN - 1) / kBlockN;
  }

  template <int kBlockM, int kBlockN>
  __device__ static void query_block_range(const MaskState& s, int, int& begin, int& end) {
    begin = 0;
    end = (s.seqlen_q + kBlockM - 1) / kBlockM;
  }

  /// The table's entry for the CTA's rows (a query block of kTableBlockM) and key block n:
  /// tile_kind() of it is the TileKind, tile_bits_slot() the slot of its element bits.
  template <int kBlockN>
  __device__ static int classify(const MaskState& s, const int* table, int n_block) {
    static_assert(kBlockN == kTableBlockN, "the block table is built for the kernel's tiles");
    const int blocks_m = (s.seqlen_q + kTableBlockM - 1) / kTableBlockM;
    const int row = static_cast<int>(opaque(static_cast<u32>(s.vector_row)));
    const long long tile =
        (static_cast<long long>(row) * blocks_m + s.row_begin / kTableBlockM) * s.num_key_blocks +
        n_block;
    return table[tile];
  }

  template <int kBlockN>
  __device__ static int last_active_key_block(const MaskState& s, const int* table, int from,
                                              int n_begin) {
    return search_last_active_key_block<PredicatePolicy, kBlockN>(s, table, from, n_begin);
  }

  template <int kBlockM, int kBlockN>
  __device__ static int first_active_query_block(const MaskState& s, const int* table, int n_block,
                                                 int from, int end) {
    return search_first_active_query_block<PredicatePolicy, kBlockM, kBlockN>(s, table, n_block,
                                                                              from, end);
  }

  struct Column {};

  __device__ static __forceinline__ Column load_column(const MaskState&, u32) { return Column(); }

  /// Key `col` is hidden from query `row` of the state's (batch, head) (a persistent kernel's
  /// CTA takes several).
  template <bool kRowsBelowSq = false, class Params>
  __device__ static __forceinline__ bool masked(const Params& p, const MaskState& s, int row,
                                                int col, const Column&) {
    if (col >= s.seqlen_k) return true;
    if constexpr (kVarlen) {
      PackedPair at;
      return !same_sequence(p.varlen, row, col, at) ||
             !Visible::visible(p.predicate, at.sequence, s.head, at.q, at.k);
    }
    return !Visible::visible(p.predicate, s.batch, s.head, kKvCache ? row + s.diagonal : row, col);
  }

  /// The stored bits of a thread's fragment rows row_local and row_local + 8 (tile rows:
  /// queries, or keys when kTransposed) in tile `tile` (classify's entry), for fragment_bits;
  /// zeros when the tile has no slot. `bits` is the table's bit buffer (predicate_blocks.cuh).
  /// The kernels read them a block ahead, so the loads are in flight during the block before.
  template <int kTiles, bool kTransposed>
  __device__ static __forceinline__ FragmentWords<(kTiles + 3) / 4> load_fragment_words(
      const unsigned* bits, int tile, int row_local) {
    using Bits = PredicateTileBits<kTableBlockM, kTableBlockN, kTransposed>;
    static_assert(kTiles * 8 == Bits::kCols, "the fragment spans the tile's columns");
    FragmentWords<(kTiles + 3) / 4> out;
    const int slot = tile_bits_slot(tile);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int w = 0; w < Bits::kRowWords; ++w) out.words[r][w] = 0;
    }
    if (slot >= 0) {
      const unsigned* rows =
          bits + static_cast<long long>(slot) * Bits::kSlotWords + row_local * Bits::kRowWords;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int w = 0; w < Bits::kRowWords; ++w)
          out.words[r][w] = rows[8 * r * Bits::kRowWords + w];
      }
    }
    return out;
  }

  /// The hidden bits of a thread's accumulator fragment of kTiles n8 tiles from its stored
  /// words: bit 4 * t8 + 2 * r + c is element (row r of `words`, col_local + 8 * t8 + c),
  /// col_local < 8 being the thread's first column in the tile. Word w holds n8 tiles
  /// 4w .. 4w + 3: the thread's two columns of each are shifted down, masked, and packed
  /// pairwise to 4 * (t8 - 4w).
  template <int kTiles>
  __device__ static __forceinline__ unsigned long long fragment_bits(
      const FragmentWords<(kTiles + 3) / 4>& words, int col_local) {
    static_assert(kTiles * 4 <= 64, "one bit per element of the fragment");
    unsigned long long out = 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int w = 0; w < (kTiles + 3) / 4; ++w) {
        unsigned x = (words.words[r][w] >> col_local) & 0x03030303u;
        x = (x | (x >> 4)) & 0x00330033u;
        x = (x | (x >> 8)) & 0x0000ffffu;
        out |= static_cast<unsigned long long>(x) << (16 * w + 2 * r);
      }
    }
    return out;
  }

  /// The same bits evaluated from the predicate, for a partial tile without a slot: element
  /// (tile_row0 + row_local + 8 * r, tile_col0 + col_local + 8 * t8 + c), rows being queries,
  /// or keys when kTransposed (the backward's S^T). The loop over columns stays rolled, so
  /// what depends on the two rows only is computed once and the temporaries never add to the
  /// live accumulators.
  template <int kTiles, bool kTransposed, class Params>
  __device__ static __forceinline__ unsigned long long evaluate_bits(const Params& p,
                                                                     const MaskState& s,
                                                                     int row_local, int col_local,
                                                                     int tile_row0, int tile_col0) {
    static_assert(kTiles * 4 <= 64, "one bit per element of the fragment");
    unsigned long long out = 0;
#pragma unroll 1
    for (int j = 0; j < kTiles * 2; ++j) {
      const int col = tile_col0 + col_local + 8 * (j >> 1) + (j & 1);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = tile_row0 + row_local + 8 * r;
        const bool hidden =
            kTransposed ? masked(p, s, col, row, Column()) : masked(p, s, row, col, Column());
        out |= static_cast<unsigned long long>(hidden) << (4 * (j >> 1) + 2 * r + (j & 1));
      }
    }
    return out;
  }
};

}  // namespace attnjit
