// The scores of the sm90a forward (sm90a/forward.cuh) on one warpgroup's m64 x kBlockN
// accumulator of S = Q K^T, before the online softmax (softmax.cuh): score modifiers and the
// mask of a partial key block. Element (nt, e) of the fragment (wgmma.cuh) is row
// `row0 + 8 (e / 2)` of the thread and key `8 nt + 2 t + e % 2` of the block, t = lane % 4.
#pragma once

#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// Applies the score modifiers (before the mask, which then sets -inf: a modifier would turn
/// -inf into a number). row0: the thread's first query row in the sequence; head: its query
/// head.
template <class Score, int kTiles, class Params>
__device__ __forceinline__ void modify_scores(const Params& p, float (&s)[kTiles][4], int row0,
                                              int key0, int diagonal, int t, int head) {
  if constexpr (Score::kActive) {
    const Score score = Score::make_for_head(p, head);
    const int distance0 = key0 + 2 * t - (row0 + diagonal);
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = score.apply(s[nt][e], distance0 + 8 * nt + e % 2 - 8 * (e / 2));
      }
    }
  }
}

/// Calls hidden(nt, r, c) for each of the thread's two rows (row0, row0 + 8) whose element of
/// column 2 nt + c (key 8 nt + 2 t + c of the block) the mask hides, the column's FlashMask
/// values read from shared memory (`vectors`, kColumns ints per key). kRowsBelowSq: rows are
/// 0 or more and those past Sq are not kept (the epilogue drops them), so an absent LTE or UTS
/// is not compared; over a KV cache rows are positions, which the tokens past a sequence's
/// keys take below 0. Keys past Sk are not compared either (mask_scores hides them, in the
/// last block only).
template <class Mask, bool kRowsBelowSq, class Params, class Hidden>
__device__ __forceinline__ void for_each_hidden(const Params& p, const MaskState& ms, u32 vectors,
                                                int row0, int key0, int t, int nt, int c,
                                                Hidden hidden) {
  const int local_col = 8 * nt + 2 * t + c;
  const typename Mask::Column column =
      Mask::load_column(ms, vectors + local_col * Mask::kColumns * 4);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (Mask::template masked<kRowsBelowSq, true>(p, ms, row0 + 8 * r, key0 + local_col, column)) {
      hidden(nt, r, c);
    }
  }
}

/// Sets the elements of the block's keys `limit` and beyond (8 nt + 2 t + e % 2 >= limit) to
/// -inf.
template <int kTiles>
__device__ __forceinline__ void hide_keys_from(float (&s)[kTiles][4], int limit, int t) {
  const int first = limit - 2 * t;  // element (nt, e) is hidden when 8 nt + e % 2 >= first
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (8 * nt + e % 2 >= first) s[nt][e] = negative_infinity();
    }
  }
}

/// Sets the masked elements of a partial key block to -inf by the mask's element rule on the
/// columns' FlashMask values in shared memory. row0: the thread's first query row in the
/// sequence; key0: the block's first key. kDirect: each element is selected as its column's
/// values arrive (a compare chain and a select per element); otherwise the rule is evaluated
/// into bits first, 32 elements per word, so that no more than a column's values are live next
/// to the accumulators, and the bits are applied after (two more operations per element).
/// Keys past Sk, in the last block only, are hidden by a pass of their own: the rule of the
/// other blocks saves a compare per element (which counts where many blocks are partial, as
/// under global + sliding window). kDirect with a packed batch's visible vectors
/// (Mask::kHasVisible) reads the values of a thread's two keys of a tile at once, unhoisted.
/// Causal and window masks by index (Mask::kIndexRange)
/// instead hide each row's keys outside its visible range, which ends at Sk.
template <class Mask, bool kDirect, bool kRowsBelowSq, int kTiles, class Params>
__device__ __forceinline__ void mask_scores(const Params& p, const MaskState& ms,
                                            float (&s)[kTiles][4], u32 vectors, int row0, int key0,
                                            int t) {
  if constexpr (Mask::kIndexRange) {
    // Causal and windows by index: one range of keys per row, Sk included; element (nt, e)
    // is key 8 nt + 2 t + e % 2 of the block.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int begin, end;
      Mask::visible_keys(ms, row0 + 8 * r, begin, end);
      begin -= key0 + 2 * t;
      end -= key0 + 2 * t;
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int key = 8 * nt + c;
          if ((Mask::kIndexBegins && key < begin) || key >= end) {
            s[nt][2 * r + c] = negative_infinity();
          }
        }
      }
    }
    return;
  }
  if (key0 + 8 * kTiles > ms.seqlen_k) hide_keys_from(s, ms.seqlen_k - key0, t);
  if constexpr (kDirect && Mask::kHasVisible) {
    // A packed batch's visible rows on top of both ends of an interval: ptxas hoisted the
    // scalar loads of every column and spilled. The thread's two keys of tile nt are adjacent,
    // so their values come by volatile 8-byte loads, which stay in their tile.
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
      int values[2 * Mask::kColumns];
      load_shared_volatile_s32(vectors + (8 * nt + 2 * t) * Mask::kColumns * 4, values);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const typename Mask::Column column = Mask::column_of(ms, values + c * Mask::kColumns);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (Mask::template masked<true, true>(p, ms, row0 + 8 * r, key0 + 8 * nt + 2 * t + c,
                                                column)) {
            s[nt][2 * r + c] = negative_infinity();
          }
        }
      }
    }
    return;
  }
  if constexpr (kDirect) {
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        for_each_hidden<Mask, kRowsBelowSq>(
            p, ms, vectors, row0, key0, t, nt, c,
            [&](int n, int r, int col) { s[n][2 * r + col] = negative_infinity(); });
      }
    }
    return;
  }
  constexpr int kWords = (kTiles * 4 + 31) / 32;
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    // Bit 4 (nt % 8) + 2 r + c of word w: element (nt, 2 r + c), nt in [8 w, 8 w + 8).
    unsigned hidden = 0;
    const auto column_bits = [&](int j) {
      for_each_hidden<Mask, kRowsBelowSq>(
          p, ms, vectors, row0, key0, t, (16 * w + j) / 2, j % 2,
          [&](int n, int r, int col) { hidden |= 1u << (4 * (n % 8) + 2 * r + col); });
    };
#pragma unroll
    for (int j = 0; j < 16 && 16 * w + j < kTiles * 2; ++j) column_bits(j);
#pragma unroll
    for (int e = 0; e < 32 && 32 * w + e < kTiles * 4; ++e) {
      if ((hidden >> e) & 1) s[8 * w + e / 4][e % 4] = negative_infinity();
    }
  }
}

/// Sets the hidden elements (bit 4 nt + e of `hidden`) of the fragment to -inf.
template <int kTiles>
__device__ __forceinline__ void hide_scores(float (&s)[kTiles][4], unsigned long long hidden) {
#pragma unroll
  for (int i = 0; i < kTiles * 4; ++i) {
    if ((hidden >> i) & 1) s[i / 4][i % 4] = negative_infinity();
  }
}

}  // namespace attnjit
