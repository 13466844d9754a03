// Block classification of a predicate mask: one CTA per tile of the consuming attention
// kernel's shape (kBlockM queries x kBlockN keys) of one (batch row, head row) of the table.
// The CTA evaluates the predicate on every element of the tile, 32 at a time per warp, and a
// ballot gives each 32-element word of the tile's hidden bits; two barrier votes then give
// skip (nothing visible), full (everything visible) or partial. Keys past Sk count as hidden
// (the kernels must mask them), queries past Sq are ignored by the votes (the kernels never
// store them) and read as hidden in the bits.
//
// A partial tile also gets a slot of the bit buffer when one is left, so that the attention
// kernels read its element mask instead of evaluating the predicate again for every head and
// direction: the entry is then kTilePartial | (slot + 1) << 2 (mask.cuh, tile_bits_slot). A
// partial tile without a slot (the buffer is full) is evaluated element by element, as before.
//
// A packed batch (kVarlen): the predicate sees each sequence's index as b and the local
// positions of q and k in it, pairs of different sequences and unused keys are hidden, and a
// tile whose rows and keys lie in different sequences is skipped before any evaluation. Its
// CTAs also check the boundaries when p.varlen.first_error is set (varlen_intervals.cuh).
//
// Over a KV cache (kKvCache: the prefill kernel's table, one row per sequence) the table's rows
// are each sequence's new tokens and its keys those of the capacity: the predicate sees a new
// token's position (its row plus the sequence's keys less its new tokens) as q; rows past the
// sequence's new tokens and keys past its length count as for Sq and Sk.
//
// Bits layout of a slot: kRows rows of ceil(kCols / 32) words; bit c of word w of row r is
// element (r, 32 w + c), 1 = hidden. Rows are the consumer's fragment rows: queries
// (kKeyRows false: the forward and the dQ kernel), or keys (kKeyRows true: the backward main
// kernel, which computes S^T).
#pragma once

#include "attnjit/common/kv_cache.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/masks/mask.cuh"
#include "attnjit/masks/varlen_intervals.cuh"

namespace attnjit {

/// Whether a packed batch's rows [row0, row_end) and keys [col0, col_end), both non-empty,
/// share no sequence: the sequences of each range's ends.
__device__ __forceinline__ bool apart(const VarlenInputs& v, int row0, int row_end, int col0,
                                      int col_end) {
  const int q_first = mask_build::segment_of(v.cu_seqlens_q, v.sequences, row0).index;
  const int q_last = mask_build::segment_of(v.cu_seqlens_q, v.sequences, row_end - 1).index;
  const int k_first = mask_build::segment_of(v.cu_seqlens_k, v.sequences, col0).index;
  const int k_last = mask_build::segment_of(v.cu_seqlens_k, v.sequences, col_end - 1).index;
  return q_last < k_first || k_last < q_first;
}

template <class Visible, int kBlockM, int kBlockN, bool kPerBatch, bool kPerHead, bool kKeyRows,
          bool kVarlen = false, bool kKvCache = false>
__device__ __forceinline__ void predicate_blocks(const PredicateBlocksParams& p) {
  static_assert(!kKvCache || (kPerBatch && !kVarlen && !kKeyRows),
                "a cache's table has a row per sequence, for the forward's rows");
  using Bits = PredicateTileBits<kBlockM, kBlockN, kKeyRows>;
  __shared__ unsigned hidden_words[Bits::kSlotWords];
  __shared__ int slot;

  const long long tile = blockIdx.x;
  const int n_block = static_cast<int>(tile % p.blocks_n);
  const int m_block = static_cast<int>((tile / p.blocks_n) % p.blocks_m);
  const int table_row = static_cast<int>(tile / (static_cast<long long>(p.blocks_n) * p.blocks_m));
  const int head = kPerHead ? table_row % p.table_heads : 0;
  const int batch = kPerBatch ? table_row / p.table_heads : 0;
  const int row0 = m_block * kBlockM;
  const int col0 = n_block * kBlockN;
  const int lane = threadIdx.x % 32;
  // The rows and keys of the table's (sequence's) tile, and the position of its row 0.
  int rows = p.seqlen_q;
  int keys = p.seqlen_k;
  int diagonal = 0;
  if constexpr (kKvCache) {
    const NewTokens tokens = new_tokens(p, batch);
    rows = tokens.count;
    keys = cache_length(p, batch, appended_keys(p, tokens));
    diagonal = keys - rows;
    if (row0 >= rows || col0 >= keys) {
      if (threadIdx.x == 0) p.table[tile] = kTileSkip;
      return;
    }
  }
  if constexpr (kVarlen) {
    if (p.varlen.first_error != nullptr) varlen::check(p.varlen, p.seqlen_q, p.seqlen_k);
    if (row0 >= p.seqlen_q || col0 >= p.seqlen_k ||
        apart(p.varlen, row0, min(row0 + kBlockM, p.seqlen_q), col0,
              min(col0 + kBlockN, p.seqlen_k))) {
      if (threadIdx.x == 0) p.table[tile] = kTileSkip;
      return;
    }
  }

  bool any_visible = false;
  bool any_hidden = false;
  for (int w = threadIdx.x / 32; w < Bits::kSlotWords; w += blockDim.x / 32) {
    const int r = w / Bits::kRowWords;
    const int c = (w % Bits::kRowWords) * 32 + lane;
    const int q = row0 + (kKeyRows ? c : r);
    const int k = col0 + (kKeyRows ? r : c);
    const bool inside = c < Bits::kCols && q < rows;
    bool visible = inside && k < keys;
    if constexpr (kVarlen) {
      PackedPair at;
      visible = visible && same_sequence(p.varlen, q, k, at) &&
                Visible::visible(p.predicate, at.sequence, head, at.q, at.k);
    } else {
      visible = visible && Visible::visible(p.predicate, batch, head, q + diagonal, k);
    }
    const unsigned hidden = __ballot_sync(0xffffffffu, !visible);
    any_visible |= visible;
    any_hidden |= inside && !visible;
    if (lane == 0) hidden_words[w] = hidden;
  }
  const bool tile_visible = __syncthreads_or(any_visible);
  const bool tile_hidden = __syncthreads_or(any_hidden);
  const bool partial = tile_visible && tile_hidden;
  if (threadIdx.x == 0) {
    int entry = !tile_visible ? kTileSkip : tile_hidden ? kTilePartial : kTileFull;
    slot = -1;
    if (partial && p.bits_capacity > 0) {
      const int taken = static_cast<int>(atomicAdd(p.bits_used, 1u));
      if (taken < p.bits_capacity) {
        slot = taken;
        entry |= (taken + 1) << 2;
      }
    }
    p.table[tile] = entry;
  }
  __syncthreads();
  if (slot >= 0) {
    unsigned* out = p.bits + static_cast<long long>(slot) * Bits::kSlotWords;
    for (int w = threadIdx.x; w < Bits::kSlotWords; w += blockDim.x) out[w] = hidden_words[w];
  }
}

}  // namespace attnjit
