// The decode kernel of every target (kv_cache=contiguous|paged; mma.sync and cp.async, the sm80
// family's instructions): a few query rows per sequence against a long
// KV cache, which makes attention a stream of K/V bytes (Flash-Decoding).
//
// Rows: the G = H / Hkv query heads that share a KV head and the Sq new tokens of a sequence are
// packed into the rows of one m16 tile (GQA packing), row r = token r / G, head kv_head G + r % G,
// so each K/V byte is read once per 16 rows. A CTA of four warps takes one such tile (grid y:
// the tile and the KV head; z: the sequence) and one of num_splits key ranges (grid x): the
// visible keys of its rows (a causal mask or a window cut them, bottom-right aligned to the
// sequence's cached length) in num_splits equal parts, so a small batch still fills the SMs.
// FlashMask vectors narrow those keys first to the key blocks that any of the CTA's rows can
// see (the flashmask_minmax tables, built for the cache's blocks of kBlockN keys), and within
// its split the CTA neither loads nor computes a block they hide from all its rows: the time
// follows the visible keys, not the cache's length. Their rows are positions in the sequence
// (token s of a sequence of L keys with Sq new tokens is row L - Sq + s, the index of its own
// key), so one set of vectors serves every step of a sequence.
//
// Keys stream through kStages shared-memory stages of kBlockN keys by 16-byte cp.async (row by
// row: a paged cache maps each key to its page through the block table). Each warp takes its
// own kBlockN / 4 keys of every stage: S = Q K^T with Q's fragments held in registers, the score
// modifiers and the mask, an online softmax and O += P V, all in registers, no barrier between
// warps but the stage ring's. At the end the four warps' rows (each normalized, with its LSE)
// merge in shared memory, exactly: LSE = log sum_w e^LSE_w, O = sum_w e^(LSE_w - LSE) O_w. With
// one split the CTA writes O (and LSE) itself, the sink logit joining the merge as a term
// without value; with more, its fp32 rows and LSEs go to o_partial / lse_partial, which
// decode_combine.cuh merges the same way.
//
// Keys past the sequence's length are zero-filled in shared memory (a cache's unused rows may
// hold anything, NaN included, and 0 * NaN would poison O) and masked.
//
// An e4m3 cache (kv_dtype=e4m3, KvElement) streams half the bytes: its stages hold the rows as
// they are, and each warp widens what it reads to fp16 in registers (exact: fp16 holds every
// e4m3 value) for fp16 products. Q's tile becomes fp16 in place at the first block, each row
// scaled by a power of two that puts its largest |q| in [2^13, 2^14) (so fp16 keeps bf16's
// precision at any magnitude); the scores take back that power and k_descale, O v_descale at the
// merge. The operands follow the mma.sync layouts through permutations that let each lane read
// whole 32-bit words of the cache: S = Q K^T contracts Q's and K's head dims in the order
// [4t, 4t+1 | 4t+2, 4t+3] of each 16 (Q's tile reordered to match, widen_q), and O += P V takes
// column 32 q + 4 n + j of V in n8 tile 4 q + j's column n (fp8_values, merge).
//
// Config (bound by the generated code): Element, KvElement (Element or e4m3), kHeadDimQK,
// kHeadDimV, kBlockN, kStages, kReturnLse. Mask: a MaskPolicy (mask.cuh) of causal, a window or
// FlashMask vectors, each by position (its diagonal is 0), or a PredicatePolicy whose predicate
// sees (b, h, position, key) and whose blocks the CTA classifies itself. kPaged: a paged cache.
// Score: a ScoreMod (softcap, ALiBi with each row's own head and distance j - position, sinks).
#pragma once

#include "attnjit/common/fragment.cuh"
#include "attnjit/common/kv_cache.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/score_mod.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/common/softmax.cuh"
#include "attnjit/common/warp_mma.cuh"
#include "attnjit/masks/mask.cuh"

namespace attnjit {

/// The rows and keys of one decode CTA, and the key range of its split.
struct DecodeWork {
  int batch, kv_head, row0;  ///< row0: the first packed row (token row0 / G, ...)
  int group;                 ///< G = H / Hkv
  int tokens;                ///< Sq of the sequence (ragged new tokens: its own count)
  int first;                 ///< ragged new tokens: the packed row of its first token, else 0
  int length;                ///< keys of the sequence
  int diagonal;              ///< length - Sq: token s sees keys up to s + diagonal (causal)
  int key_begin, key_end;    ///< the split's keys
};

/// The visible keys of packed rows [row0, row0 + 16) of a sequence with `length` keys: a
/// causal mask or a window (bottom-right aligned) bounds them by the first and last token.
template <class Mask>
__device__ __forceinline__ void decode_visible_keys(const FwdParams& p, int length, int tokens,
                                                    int row0, int group, int& begin, int& end) {
  const int diagonal = length - tokens;
  const int first = row0 / group;
  const int last = min(tokens - 1, (row0 + 15) / group);
  begin = 0;
  end = length;
  if (Mask::kCausalByIndex) end = min(length, last + diagonal + 1);
  if (Mask::kWindowByIndex) {
    if (p.window_left >= 0) begin = max(0, first + diagonal - p.window_left);
    if (p.window_right >= 0) end = min(length, last + diagonal + p.window_right + 1);
  }
  end = max(end, begin);
}

/// The mask state of a decode CTA with FlashMask vectors: its rows are the positions of its
/// tokens, [diagonal + first token, diagonal + last token + 1), the diagonal 0 (a row sees the
/// keys up to its own), and an absent LTE reads as the capacity, past every position. The
/// tables and vectors have a row per key of the capacity (p.seqlen_k).
template <class Mask, int kBlockN>
__device__ __forceinline__ MaskState decode_mask_state(const FwdParams& p, const DecodeWork& w) {
  const int head = w.kv_head * w.group;
  MaskState ms = make_mask_state<kBlockN, Mask>(p, head, w.batch);
  ms.seqlen_q = p.seqlen_k;
  ms.diagonal = 0;
  ms.row_begin = w.diagonal + w.row0 / w.group;
  ms.row_end = w.diagonal + min(w.tokens - 1, (w.row0 + 15) / w.group) + 1;
  return ms;
}

/// Narrows keys [begin, end) (begin 0 or a multiple of kBlockN) to the key blocks from the first
/// to the last that the mask's tables do not hide from every row of the CTA ([begin, begin)
/// when they hide all; `kind_of(n)`: key block n's TileKind): each of the kThreads threads
/// classifies every kThreads-th block, and the warps' bounds meet in shared memory at
/// `scratch` (two ints a warp, free until the caller's next barrier-separated use).
template <int kBlockN, int kThreads, class KindOf>
__device__ __forceinline__ void narrow_to_visible_blocks(KindOf&& kind_of, u32 scratch, int& begin,
                                                         int& end) {
  static_assert(kThreads % 32 == 0, "whole warps");
  const int thread = static_cast<int>(threadIdx.x);
  const int first = begin / kBlockN;
  const int blocks_end = (end + kBlockN - 1) / kBlockN;
  int lo = blocks_end, hi = first - 1;
  for (int n = first + thread; n < blocks_end; n += kThreads) {
    if (kind_of(n) != kTileSkip) {
      lo = min(lo, n);
      hi = max(hi, n);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
  }
  const int warp = thread / 32;
  if (thread % 32 == 0) {
    store_shared_u32(scratch + 8 * warp, static_cast<u32>(lo));
    store_shared_u32(scratch + 8 * warp + 4, static_cast<u32>(hi));
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) {
    lo = min(lo, static_cast<int>(load_shared_u32(scratch + 8 * i)));
    hi = max(hi, static_cast<int>(load_shared_u32(scratch + 8 * i + 4)));
  }
  __syncthreads();  // the scratch is read before anyone overwrites it
  if (hi < lo) {
    end = begin;
    return;
  }
  begin = max(begin, lo * kBlockN);
  end = min(end, (hi + 1) * kBlockN);
}

/// The CTA's sequence, KV head and rows, from the grid; its keys come from decode_split.
__device__ __forceinline__ DecodeWork decode_rows(const FwdParams& p) {
  DecodeWork w;
  w.batch = static_cast<int>(blockIdx.z);
  w.kv_head = static_cast<int>(blockIdx.y) % p.kv_heads;
  w.row0 = 16 * (static_cast<int>(blockIdx.y) / p.kv_heads);
  w.group = p.heads / p.kv_heads;
  const NewTokens tokens = new_tokens(p, w.batch);
  w.tokens = tokens.count;
  w.first = tokens.first;
  w.length = cache_length(p, w.batch, appended_keys(p, tokens));
  w.diagonal = w.length - w.tokens;
  w.key_begin = w.key_end = 0;
  return w;
}

/// The keys of the CTA's split: visible keys [begin, end) in num_splits parts of whole key
/// blocks (the last ones may be empty).
template <int kBlockN>
__device__ __forceinline__ void decode_split(const FwdParams& p, DecodeWork& w, int begin,
                                             int end) {
  const int splits = p.kv_cache.num_splits;
  const int per_split = (end - begin + splits * kBlockN - 1) / (splits * kBlockN) * kBlockN;
  w.key_begin = min(end, begin + static_cast<int>(blockIdx.x) * per_split);
  w.key_end = min(end, w.key_begin + per_split);
}

/// The output row of packed row `row` (< G Sq): its token and query head.
__device__ __forceinline__ void decode_row(const DecodeWork& w, int row, int& token, int& head) {
  token = row / w.group;
  head = w.kv_head * w.group + (row - token * w.group);
}

template <class Config, class Mask, bool kPaged, class Score = ScoreMod<false, false>>
struct DecodeSm80 {
  typedef typename Config::Element Element;
  /// kv_dtype=e4m3: K and V of one byte an element, widened to fp16 as they are read, and the
  /// products in fp16 (Product).
  static constexpr bool kFp8 = is_e4m3<typename Config::KvElement>();
  static constexpr int kKvBytes = kFp8 ? 1 : 2;
  typedef typename Select<kFp8, fp16, Element>::type Product;
  static constexpr int kHeadDimQK = Config::kHeadDimQK;
  static constexpr int kHeadDimV = Config::kHeadDimV;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kStages = Config::kStages;
  static constexpr int kThreads = 128;
  static constexpr int kWarpKeys = kBlockN / 4;  // keys of a stage per warp
  static constexpr int kSTiles = kWarpKeys / 8;  // n8 tiles of a warp's scores
  static constexpr int kQkSteps = kHeadDimQK / 16;
  static constexpr int kPvSteps = kWarpKeys / 16;
  static constexpr int kDTiles = kHeadDimV / 8;
  static_assert(kWarpKeys % 16 == 0, "each warp takes whole k16 steps of keys");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static constexpr bool kVectors = Mask::kHasVectors;
  /// A predicate (PredicatePolicy) applies per element on the blocks it neither hides nor shows
  /// entirely. Where it does not read h, a block table of 16 new tokens x kBlockN keys per
  /// sequence (kPredicateTable, built before the kernel) classifies the blocks and narrows the
  /// keys as the vectors' tables do; otherwise the CTA classifies each block itself, a block
  /// ahead of its load, from the predicate on all of the block's (row, key) pairs.
  static constexpr bool kPredicate = Mask::kElementBits;
  static constexpr bool kPredicateTable = kPredicate && Mask::kCacheTable;
  /// The blocks' kinds are known before their loads: blocks hidden from every row are skipped.
  static constexpr bool kBlockKinds = kVectors || kPredicate;
  static_assert(!Mask::kHasVisible, "masks by index, FlashMask vectors or a predicate");
  static_assert(!(kVectors && Mask::kWindowByIndex),
                "a window or vectors, not both: the splits start at a block's first key");
  /// Q's fragments stay in registers beside O up to head_dim_qk + head_dim_v = 384 (d256 with
  /// a 256-wide O spilled), 256 with the vectors' rule ((192, 128) spilled); else each block
  /// re-reads them from the Q tile.
  static constexpr bool kQInRegisters = kHeadDimQK + kHeadDimV <= (kVectors ? 256 : 384);

  typedef SmemTile<16, kHeadDimQK> QTile;
  /// K's and V's rows as 16-bit tiles of as many bytes (e4m3: half the head dim's columns).
  typedef SmemTile<kBlockN, kHeadDimQK * kKvBytes / 2> KTile;
  typedef SmemTile<kBlockN, kHeadDimV * kKvBytes / 2> VTile;
  static constexpr int kStageBytes = KTile::kBytes + VTile::kBytes;
  /// kFp8: the 16 rows' score factors (2^-e_r k_descale, widen_q) after Q's tile.
  static constexpr int kFactorsOffset = QTile::kBytes;
  static constexpr int kKvOffset = QTile::kBytes + (kFp8 ? 128 : 0);
  static_assert(!kFp8 || (kHeadDimQK == kHeadDimV && kHeadDimQK % 64 == 0),
                "e4m3 caches: equal head dims of whole 64-byte rows");
  /// The merge of the warps' rows, over the stages once the key loop is done: each warp's 16
  /// rows of O (fp32) and their LSEs.
  static constexpr int kMergeBytes = 4 * 16 * (kHeadDimV + 4) * 4 + 4 * 16 * 4;
  static constexpr int kSmemBytes =
      kKvOffset + (kStages * kStageBytes > kMergeBytes ? kStages * kStageBytes : kMergeBytes);

  /// The softmax's modifiers: Score's without the sink, which joins the rows at the merge.
  typedef ScoreMod<Score::kSoftcap, Score::kAlibi, false> RowScore;

  /// A paged cache at head dim 64 or 128 (K and V rows of as many chunks, four or eight copy
  /// iterations a stage) reads each stage's pages a block ahead of its copies, so that the
  /// block table's latency overlaps a block's compute instead of delaying the copies (at 96
  /// ptxas spilled the pages, and at d256 over an e4m3 cache, whose eight copy iterations they
  /// are; 32 and 256 were not measured).
  static constexpr int kCopyIterations = (kBlockN * KTile::kChunks + kThreads - 1) / kThreads;
  static constexpr bool kPrefetchPages = kPaged && KTile::kChunks == VTile::kChunks &&
                                         (kCopyIterations == 4 || kCopyIterations == 8) &&
                                         kHeadDimQK <= 128;
  /// The physical page of each row this thread copies in one stage.
  struct StagePages {
    int page[kCopyIterations];
  };

  /// Rows past the split's keys take the page of its last key (a block table's entries past a
  /// sequence's pages may hold anything, and their copies read nothing), so that no read
  /// waits on a branch.
  __device__ __forceinline__ static StagePages stage_pages(const FwdParams& p, const DecodeWork& w,
                                                           int key0, int thread) {
    static_assert(kBlockN * KTile::kChunks % kThreads == 0, "every iteration copies a row");
    StagePages pages;
#pragma unroll
    for (int i = 0; i < kCopyIterations; ++i) {
      const int index = thread + i * kThreads;
      const int key = max(min(key0 + index / KTile::kChunks, w.key_end - 1), 0);
      pages.page[i] = static_cast<int>(cache_row<kPaged>(p, w.batch, key).page);
    }
    return pages;
  }

  WarpAccumulator<1, kDTiles> acc_o;
  OnlineSoftmax<1> softmax;

  /// Copies keys [key0, key0 + kBlockN) of the split (those before key_end; the rest zero) of
  /// K and V into stage `stage`, by 16-byte chunks, consecutive threads on consecutive chunks
  /// of a row (coalesced). Where K's and V's rows have as many chunks, one pass copies both
  /// from the row found once (in its page: one block-table read, or with kPrefetched `pages`'
  /// entry, read a block before).
  template <bool kPrefetched = false>
  __device__ __forceinline__ static void load_block(const FwdParams& p, const DecodeWork& w,
                                                    u32 smem, int stage, int key0, int thread,
                                                    const StagePages& pages = StagePages{}) {
    const u32 k_smem = smem + kKvOffset + stage * kStageBytes;
    const u32 v_smem = k_smem + KTile::kBytes;
    if constexpr (KTile::kChunks == VTile::kChunks) {
      copy_rows<KTile, true, true, kPrefetched>(p, w, k_smem, key0, thread, pages);
    } else {
      copy_rows<KTile, true, false>(p, w, k_smem, key0, thread);
      copy_rows<VTile, false, true>(p, w, v_smem, key0, thread);
    }
  }

  /// The chunks of Tile's rows of K (kK, into the tile at `smem`) and of V (kV, into the tile
  /// at `smem`, or after K's with both). With both, a paged cache unrolls up to eight
  /// iterations, so that their block-table reads are all in flight before the copies that
  /// wait on them (a read at a time starved the copies), a contiguous one pairs of
  /// iterations; K and V apart (unequal head dims) are not unrolled (the (192, 128) window
  /// kernel spilled).
  template <class Tile, bool kK, bool kV, bool kPrefetched = false>
  __device__ __forceinline__ static void copy_rows(const FwdParams& p, const DecodeWork& w,
                                                   u32 smem, int key0, int thread,
                                                   const StagePages& pages = StagePages{}) {
    constexpr int kTotal = kBlockN * Tile::kChunks;
    constexpr int kIterations = (kTotal + kThreads - 1) / kThreads;
    constexpr int kUnroll = kK && kV ? (kPaged ? (kIterations < 8 ? kIterations : 8) : 2) : 1;
    // kPaged: where each KV head's rows start in the pools, in bytes, at this thread's chunk
    // when that is the same in every iteration, and the strides in bytes.
    constexpr bool kFixedChunk = kThreads % Tile::kChunks == 0;
    const long long chunk_bytes = kFixedChunk ? thread % Tile::kChunks * 16 : 0;
    const long long k_head =
        reinterpret_cast<long long>(p.k) + w.kv_head * p.k_head_stride * kKvBytes + chunk_bytes;
    const long long v_head =
        reinterpret_cast<long long>(p.v) + w.kv_head * p.v_head_stride * kKvBytes + chunk_bytes;
    const int k_page_bytes = static_cast<int>(p.k_batch_stride * kKvBytes);
    const int k_row_bytes = static_cast<int>(p.k_row_stride * kKvBytes);
    const int v_page_bytes = static_cast<int>(p.v_batch_stride * kKvBytes);
    const int v_row_bytes = static_cast<int>(p.v_row_stride * kKvBytes);
#pragma unroll kUnroll
    for (int i = 0; i < kIterations; ++i) {
      const int index = thread + i * kThreads;
      if (kTotal % kThreads != 0 && index >= kTotal) break;
      const int row = index / Tile::kChunks;
      const int chunk = index % Tile::kChunks;
      const int key = key0 + row;
      const bool valid = key < w.key_end;
      const u32 at = smem + Tile::offset(row, chunk);
      if constexpr (kPaged) {
        // A row's address is two wide multiply-adds of 32-bit factors (the host keeps the
        // pools' page and row strides in bytes within int32), and a key past the split reads
        // in a page of the pool (page 0, or the prefetched page of the split's last key), so no
        // address needs a select: the copy loop is most of a block's integer work. The zero
        // size still zero-fills those rows.
        const int page =
            kPrefetched ? pages.page[i]
                        : (valid ? static_cast<int>(cache_row<kPaged>(p, w.batch, key).page) : 0);
        const int within = key & ((1 << p.kv_cache.page_shift) - 1);
        if (kK) {
          const long long at_k =
              wide_mad(page, k_page_bytes, wide_mad(within, k_row_bytes, k_head));
          cp_async_16(at, reinterpret_cast<const char*>(at_k) + (kFixedChunk ? 0 : chunk * 16),
                      valid ? 16 : 0);
        }
        if (kV) {
          const long long at_v =
              wide_mad(page, v_page_bytes, wide_mad(within, v_row_bytes, v_head));
          cp_async_16(at + (kK ? KTile::kBytes : 0),
                      reinterpret_cast<const char*>(at_v) + (kFixedChunk ? 0 : chunk * 16),
                      valid ? 16 : 0);
        }
      } else {
        // Byte offsets: the strides count elements of kKvBytes.
        const long long k_offset =
            (w.batch * p.k_batch_stride + key * p.k_row_stride + w.kv_head * p.k_head_stride) *
                kKvBytes +
            chunk * 16;
        const long long v_offset =
            (w.batch * p.v_batch_stride + key * p.v_row_stride + w.kv_head * p.v_head_stride) *
                kKvBytes +
            chunk * 16;
        if (kK) {
          cp_async_16(at, static_cast<const char*>(p.k) + (valid ? k_offset : 0), valid ? 16 : 0);
        }
        if (kV) {
          cp_async_16(at + (kK ? KTile::kBytes : 0),
                      static_cast<const char*>(p.v) + (valid ? v_offset : 0), valid ? 16 : 0);
        }
      }
    }
  }

  /// The kind of the split's key block `block` for the CTA's rows: what the vectors' tables or
  /// the predicate say (full otherwise: the index masks are applied to every block). The mask
  /// state is formed where used, from the parameters and the work, so none of it stays live
  /// across the key loop. With a predicate every thread of the CTA must call it (it meets them
  /// at two barriers).
  __device__ __forceinline__ static int block_kind(const FwdParams& p, const DecodeWork& w,
                                                   int block) {
    if constexpr (kPredicateTable) return predicate_table_kind(p, w, w.key_begin / kBlockN + block);
    if constexpr (kPredicate) return predicate_block_kind(p, w, block);
    if constexpr (!kVectors) return kTileFull;
    return tile_kind(Mask::template classify<kBlockN>(decode_mask_state<Mask, kBlockN>(p, w),
                                                      p.minmax, w.key_begin / kBlockN + block));
  }

  /// The mask state a predicate's element rule reads for (head, batch): the rows passed are
  /// positions (a diagonal of 0, which a table's policy adds).
  __device__ __forceinline__ static MaskState predicate_state(const FwdParams& p, int head,
                                                              int batch) {
    MaskState ms = make_mask_state_at_row<kBlockN>(p, 0, head, batch);
    ms.diagonal = 0;
    return ms;
  }

  /// The table's kind of the sequence's key block `n` for the CTA's tokens: the entries of the
  /// (at most two) table tiles they lie in, the same kind where both agree, else partial.
  __device__ __forceinline__ static int predicate_table_kind(const FwdParams& p,
                                                             const DecodeWork& w, int n) {
    static_assert(Mask::kTableRows >= 16, "16 packed rows span at most two tiles' tokens");
    MaskState ms = make_mask_state_at_row<kBlockN>(p, Mask::mask_row(p, 0, w.batch), 0, w.batch);
    ms.row_begin = w.row0 / w.group;
    const int first = tile_kind(Mask::template classify<kBlockN>(ms, p.minmax, n));
    const int last_token = min(w.tokens - 1, (w.row0 + 15) / w.group);
    if (last_token / Mask::kTableRows == ms.row_begin / Mask::kTableRows) return first;
    ms.row_begin = last_token;
    const int second = tile_kind(Mask::template classify<kBlockN>(ms, p.minmax, n));
    return first == second ? first : static_cast<int>(kTilePartial);
  }

  /// The predicate's kind of the split's block `block`: each thread evaluates kBlockN / 8 keys
  /// of one row (rows past G Sq and keys past the split count for nothing), and the CTA agrees on
  /// whether some pair is visible and whether all are.
  __device__ __forceinline__ static int predicate_block_kind(const FwdParams& p,
                                                             const DecodeWork& w, int block) {
    constexpr int kPairs = kBlockN * 16 / kThreads;  // of one row, consecutive keys
    static_assert(kBlockN % kPairs == 0 && kBlockN / kPairs == 8, "eight threads a row");
    const int thread = static_cast<int>(threadIdx.x);
    const int packed = w.row0 + thread / 8;
    int token, head;
    decode_row(w, packed, token, head);
    const int position = w.diagonal + token;
    const MaskState ms = predicate_state(p, head, w.batch);
    const int key0 = w.key_begin + block * kBlockN + (thread % 8) * kPairs;
    bool any = false, all = true;
    if (packed < w.group * w.tokens) {
#pragma unroll
      for (int i = 0; i < kPairs; ++i) {
        const int key = key0 + i;
        if (key >= w.key_end) break;
        const bool seen = !Mask::masked(p, ms, position, key, typename Mask::Column());
        any |= seen;
        all &= seen;
      }
    }
    if (!__syncthreads_or(any)) return kTileSkip;
    return __syncthreads_and(all) ? kTileFull : kTilePartial;
  }

  /// The vectors' rule on a partial block's scores: each of the thread's keys (those of the
  /// split) reads its column, which hides the thread's two rows (their positions) or not.
  __device__ __forceinline__ static void mask_by_vectors(const FwdParams& p, const DecodeWork& w,
                                                         WarpAccumulator<1, kSTiles>& acc_s,
                                                         int key0, int g, int t) {
    const MaskState ms = decode_mask_state<Mask, kBlockN>(p, w);
    int position[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) position[r] = w.diagonal + (w.row0 + g + 8 * r) / w.group;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int key = key0 + 8 * nt + 2 * t + c;
        if (key >= w.key_end) continue;  // masked by the split's bound
        const int* column = interval_values<Mask::kColumns>(p.intervals, ms, key);
        int values[Mask::kColumns];
#pragma unroll
        for (int i = 0; i < Mask::kColumns; ++i) values[i] = column[i];
        const typename Mask::Column col = Mask::column_of(ms, values);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (Mask::template masked<false, true>(p, ms, position[r], key, col)) {
            acc_s.v[0][nt][2 * r + c] = negative_infinity();
          }
        }
      }
    }
  }

  /// Calls f(head, position, key, score) on each of the thread's scores of a block: its two
  /// rows, each with its own query head and position, by the keys of its fragment.
  template <class F>
  __device__ __forceinline__ static void for_each_score(const DecodeWork& w,
                                                        WarpAccumulator<1, kSTiles>& acc_s,
                                                        int key0, int g, int t, F&& f) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int token, head;
      decode_row(w, w.row0 + g + 8 * r, token, head);
      const int position = w.diagonal + token;
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c)
          f(head, position, key0 + 8 * nt + 2 * t + c, acc_s.v[0][nt][2 * r + c]);
      }
    }
  }

  /// The predicate on the thread's scores: a row sees key j when visible(b, h, position, j)
  /// (the split's bound hides the keys past it already).
  __device__ __forceinline__ static void mask_by_predicate(const FwdParams& p, const DecodeWork& w,
                                                           WarpAccumulator<1, kSTiles>& acc_s,
                                                           int key0, int g, int t) {
    for_each_score(w, acc_s, key0, g, t, [&](int head, int position, int key, float& score) {
      const MaskState ms = predicate_state(p, head, w.batch);
      if (key < w.key_end && Mask::masked(p, ms, position, key, typename Mask::Column())) {
        score = negative_infinity();
      }
    });
  }

  /// Q's rows [row0, row0 + 16) (zero past G Sq) into the Q tile.
  __device__ __forceinline__ static void load_q(const FwdParams& p, const DecodeWork& w, u32 smem,
                                                int thread) {
    const u16* q = static_cast<const u16*>(p.q);
    for (int index = thread; index < 16 * QTile::kChunks; index += kThreads) {
      const int row = index / QTile::kChunks;
      const int chunk = index % QTile::kChunks;
      const bool valid = w.row0 + row < w.group * w.tokens;
      long long offset = 0;
      if (valid) {
        int token, head;
        decode_row(w, w.row0 + row, token, head);
        offset = w.batch * p.q_batch_stride + (w.first + token) * p.q_row_stride +
                 head * p.q_head_stride + chunk * 8;
      }
      cp_async_16(smem + QTile::offset(row, chunk), q + offset, valid ? 16 : 0);
    }
  }

  /// kFp8: Q's tile turned in place into the fp16 A operand of the products with the cache's
  /// widened values, and each row's score factor 2^-e_r k_descale written after it: row r is
  /// scaled by 2^e_r, which puts its largest |q| in [2^13, 2^14) (e_r within +-126, 0 for a
  /// row of zeros: the rows past G Sq). Each 16-column group's pairs go in the order
  /// [0, 2, 4, 6 | 1, 3, 5, 7], so that ldmatrix gives lane t the group's columns 4t .. 4t + 3,
  /// those of the K word it reads (fp8_scores). Eight threads a row, each on its own groups.
  __device__ __forceinline__ static void widen_q(const FwdParams& p, const DecodeWork& w, u32 smem,
                                                 int thread) {
    constexpr int kGroups = kHeadDimQK / 16;
    constexpr int kPerThread = (kGroups + 7) / 8;
    const int row = thread / 8;
    const int part = thread % 8;
    u32 words[kPerThread][8];
    float top = 0.f;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int group = part + 8 * i;
      if (group < kGroups) {
        const uint4 first = load_shared_v4(smem + QTile::offset(row, 2 * group));
        const uint4 second = load_shared_v4(smem + QTile::offset(row, 2 * group + 1));
        const u32 in[8] = {first.x,  first.y,  first.z,  first.w,
                           second.x, second.y, second.z, second.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          words[i][k] = in[k];
          top =
              fmaxf(top, fmaxf(fabsf(unpack_lo<Element>(in[k])), fabsf(unpack_hi<Element>(in[k]))));
        }
      }
    }
#pragma unroll
    for (int offset = 1; offset < 8; offset *= 2) {
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
    }
    // top = m 2^E with m in [1, 2): E from its exponent field.
    const int exponent = static_cast<int>((__float_as_uint(top) >> 23) & 0xffu) - 127;
    const int e = top > 0.f ? min(max(13 - exponent, -126), 126) : 0;
    const float scale = __uint_as_float(static_cast<u32>(e + 127) << 23);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int group = part + 8 * i;
      if (group < kGroups) {
        u32 out[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          // Pair k goes to position k / 2 (even k) or 4 + k / 2 (odd k).
          out[(k % 2) * 4 + k / 2] = pack2<fp16>(unpack_lo<Element>(words[i][k]) * scale,
                                                 unpack_hi<Element>(words[i][k]) * scale);
        }
        store_shared_v4(smem + QTile::offset(row, 2 * group), out[0], out[1], out[2], out[3]);
        store_shared_v4(smem + QTile::offset(row, 2 * group + 1), out[4], out[5], out[6], out[7]);
      }
    }
    if (part == 0) {
      store_shared_f32(
          smem + kFactorsOffset + 4 * row,
          __uint_as_float(static_cast<u32>(127 - e) << 23) * fp8_descale(p, 1, w.batch, w.kv_head));
    }
  }

  /// kFp8: S = Q K^T over the warp's keys, rows [key0, key0 + kWarpKeys) of the K tile at
  /// k_smem. For k16 step kk and n8 tile nt the lane reads row key0 + 8 nt + g, bytes
  /// 16 kk + 4t .. + 3 (k_lane: KTile::lane_offset(g, 0) + 4t), widened to its B fragment: k
  /// = 2t, 2t + 1 hold columns 4t, 4t + 1 and k = 2t + 8, 2t + 9 columns 4t + 2, 4t + 3, as Q's
  /// reordered tile does. Eight steps' words are read before their products. Q comes from
  /// registers (kQInRegisters) or from its tile (q_lane: QTile's ldmatrix lane offset).
  template <class QFragment>
  __device__ __forceinline__ static void fp8_scores(WarpAccumulator<1, kSTiles>& acc,
                                                    const QFragment& q, u32 smem, u32 q_lane,
                                                    u32 k_smem, u32 k_lane, int key0) {
    acc.fill(0.f);
    // The words of up to eight k16 steps in flight at a time (at d256 all sixteen spilled).
    constexpr int kBatch = kQkSteps < 8 ? kQkSteps : 8;
    u32 words[kBatch][kSTiles];
#pragma unroll
    for (int kk = 0; kk < kQkSteps; ++kk) {
      if (kk % kBatch == 0) {
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
#pragma unroll
          for (int nt = 0; nt < kSTiles; ++nt) {
            words[i][nt] =
                load_shared_u32(KTile::matrix_address(k_smem, k_lane, key0 + 8 * nt, kk + i));
          }
        }
      }
      u32 a[4];
      if constexpr (kQInRegisters) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = q.v[0][kk][r];
      } else {
        ldmatrix_x4(a, QTile::matrix_address(smem, q_lane, 0, kk * 2));
      }
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
        u32 b0, b1;
        widen_e4m3x4(words[kk % kBatch][nt], b0, b1);
        mma_m16n8k16<fp16>(acc.v[0][nt], a, b0, b1);
      }
    }
  }

  /// kFp8: O += P V over the warp's keys, rows [key0, key0 + kWarpKeys) of the V tile at
  /// v_smem. For k16 step kk and 32 columns 32 q .. of V the lane reads the words of rows 2t,
  /// 2t + 1, 2t + 8 and 2t + 9 at bytes 32 q + 4g .. + 3 and pairs their bytes column by column
  /// (byte_perm): the B fragments of n8 tiles 4 q + j, j < 4, whose column g is V's column 32 q
  /// + 4g + j. v_lane: the offsets of rows 2t and 2t + 1, each at chunk g / 4, word g % 4;
  /// selectors: the byte pairings of its first and second pair of columns (with the rows
  /// swapped where the lane reads row 2t + 1 first).
  __device__ __forceinline__ static void fp8_values(WarpAccumulator<1, kDTiles>& acc,
                                                    const OperandA<1, kPvSteps>& p_frag, u32 v_smem,
                                                    const u32 (&v_lane)[2],
                                                    const u32 (&selectors)[2], int key0) {
#pragma unroll
    for (int kk = 0; kk < kPvSteps; ++kk) {
#pragma unroll
      for (int q = 0; q < kHeadDimV / 32; ++q) {
        u32 word[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          word[i] = load_shared_u32(
              VTile::matrix_address(v_smem, v_lane[i % 2], key0 + 16 * kk + 8 * (i / 2), 2 * q));
        }
        u32 b[2][4];  // [k half][j]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          widen_e4m3x4(byte_perm(word[2 * h], word[2 * h + 1], selectors[0]), b[h][0], b[h][1]);
          widen_e4m3x4(byte_perm(word[2 * h], word[2 * h + 1], selectors[1]), b[h][2], b[h][3]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          mma_m16n8k16<fp16>(acc.v[0][4 * q + j], p_frag.v[0][kk], b[0][j], b[1][j]);
        }
      }
    }
  }

  __device__ __forceinline__ void run(const FwdParams& p, unsigned char* smem_raw) {
    const u32 smem = smem_address(smem_raw);
    const int thread = static_cast<int>(threadIdx.x);
    const int warp = thread / 32;
    const int lane = thread % 32;
    // Launched as a dependent of kv_append (rows_decode.cpp): its keys first.
    wait_for_prior_grids();
    DecodeWork w = decode_rows(p);
    if (w.row0 >= w.group * w.tokens) return;  // ragged new tokens: none of its rows here
    int begin, end;
    decode_visible_keys<Mask>(p, w.length, w.tokens, w.row0, w.group, begin, end);
    if constexpr (kVectors) {
      const MaskState ms = decode_mask_state<Mask, kBlockN>(p, w);
      narrow_to_visible_blocks<kBlockN, kThreads>(
          [&](int n) { return tile_kind(Mask::template classify<kBlockN>(ms, p.minmax, n)); },
          smem + kKvOffset, begin, end);
    }
    if constexpr (kPredicateTable) {
      narrow_to_visible_blocks<kBlockN, kThreads>(
          [&](int n) { return predicate_table_kind(p, w, n); }, smem + kKvOffset, begin, end);
    }
    decode_split<kBlockN>(p, w, begin, end);
    const int blocks = (w.key_end - w.key_begin + kBlockN - 1) / kBlockN;

    load_q(p, w, smem, thread);
    // The ring: stages 0 .. kStages - 2 in flight before the loop, one group per stage
    // (empty groups past the last block keep the count of pending groups exact).
    // kBlockKinds: the kinds of the blocks in flight, two bits each, the next computed lowest,
    // and of the block the next iteration loads, found a block ahead so that the tables'
    // latency (or the predicate's evaluation) delays neither a load nor a block's compute.
    // Blocks the mask hides from every row are neither loaded nor computed.
    u32 kinds = 0;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      const int kind = s < blocks ? block_kind(p, w, s) : kTileSkip;
      if (kind != kTileSkip) load_block(p, w, smem, s, w.key_begin + s * kBlockN, thread);
      cp_async_commit();
      if constexpr (kBlockKinds) kinds |= static_cast<u32>(kind) << (2 * s);
    }
    int ahead_kind = kTileFull;
    if constexpr (kBlockKinds) {
      ahead_kind = kStages - 1 < blocks ? block_kind(p, w, kStages - 1) : kTileSkip;
    }

    acc_o.fill(0.f);
    softmax.reset();
    OperandA<1, kQInRegisters ? kQkSteps : 1> q_frag;
    // Each row's visible keys [lo, hi): the split's, cut by the mask at the row's token.
    int lo[2], hi[2];
    const int g = lane / 4;
    const int t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int token = (w.row0 + g + 8 * r) / w.group;
      lo[r] = w.key_begin;
      hi[r] = w.key_end;
      if (Mask::kCausalByIndex) hi[r] = min(hi[r], token + w.diagonal + 1);
      if (Mask::kWindowByIndex) {
        if (p.window_left >= 0) lo[r] = max(lo[r], token + w.diagonal - p.window_left);
        if (p.window_right >= 0) hi[r] = min(hi[r], token + w.diagonal + p.window_right + 1);
      }
    }

    const u32 k_lane = kFp8 ? KTile::lane_offset(g, 0) + 4 * t
                            : KTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
    const u32 v_lane = VTile::lane_offset(lane % 16, lane / 16);
    // kFp8: the V rows' lane offsets and byte pairings (fp8_values). With 64-byte rows (d64)
    // rows 4i and 4i + 2 share their banks: lanes of odd t read row 2t + 1 first.
    const bool swap = kFp8 && VTile::kChunksPerPanel == 4 && t % 2 == 1;
    const u32 fp8_v_lane[2] = {VTile::lane_offset(2 * t + (swap ? 1 : 0), g / 4) + 4 * (g % 4),
                               VTile::lane_offset(2 * t + (swap ? 0 : 1), g / 4) + 4 * (g % 4)};
    const u32 selectors[2] = {swap ? 0x1504u : 0x5140u, swap ? 0x3726u : 0x7362u};
    float score_factor[2] = {1.f, 1.f};  // kFp8: rows g's and g + 8's (widen_q)
    StagePages ahead{};  // kPrefetchPages: the pages of the block the next iteration loads
    if constexpr (kPrefetchPages) {
      ahead = stage_pages(p, w, w.key_begin + (kStages - 1) * kBlockN, thread);
    }
    for (int block = 0; block < blocks; ++block) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      if (block == 0) {
        if constexpr (kFp8) {
          widen_q(p, w, smem, thread);
          __syncthreads();
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            score_factor[r] =
                __uint_as_float(load_shared_u32(smem + kFactorsOffset + 4 * (g + 8 * r)));
          }
        }
        if constexpr (kQInRegisters) {
#pragma unroll
          for (int kk = 0; kk < kQkSteps; ++kk) {
            ldmatrix_x4(
                q_frag.v[0][kQInRegisters ? kk : 0],
                QTile::matrix_address(smem, QTile::lane_offset(lane % 16, lane / 16), 0, kk * 2));
          }
        }
      }
      // The stage computed in the block before is free for block + kStages - 1.
      const int next = block + kStages - 1;
      const int next_kind = next < blocks ? ahead_kind : kTileSkip;
      if (next_kind != kTileSkip) {
        load_block<kPrefetchPages>(p, w, smem, next % kStages, w.key_begin + next * kBlockN, thread,
                                   ahead);
      }
      cp_async_commit();
      if constexpr (kPrefetchPages) {
        ahead = stage_pages(p, w, w.key_begin + (next + 1) * kBlockN, thread);
      }
      int kind = kTileFull;
      if constexpr (kBlockKinds) {
        kinds |= static_cast<u32>(next_kind) << (2 * (kStages - 1));
        ahead_kind = next + 1 < blocks ? block_kind(p, w, next + 1) : kTileSkip;
        kind = static_cast<int>(kinds & 3u);
        kinds >>= 2;
        if (kind == kTileSkip) continue;  // not loaded: nothing to compute
      }
      const int stage = block % kStages;
      const u32 k_smem = smem + kKvOffset + stage * kStageBytes;
      const u32 v_smem = k_smem + KTile::kBytes;
      WarpAccumulator<1, kSTiles> acc_s;
      if constexpr (kFp8) {
        fp8_scores(acc_s, q_frag, smem, QTile::lane_offset(lane % 16, lane / 16), k_smem, k_lane,
                   warp * kWarpKeys);
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_s.v[0][nt][e] *= score_factor[e / 2];
        }
      } else if constexpr (kQInRegisters) {
        warp_regs_times_rows<Element, KTile, kQkSteps>(acc_s, q_frag, k_smem, k_lane,
                                                       warp * kWarpKeys);
      } else {
        warp_rows_times_rows<Element, QTile, KTile, kQkSteps>(
            acc_s, smem, QTile::lane_offset(lane % 16, lane / 16), 0, k_smem, k_lane,
            warp * kWarpKeys);
      }
      const int key0 = w.key_begin + block * kBlockN + warp * kWarpKeys;
      if constexpr (RowScore::kActive) {
        // Each row has its own query head (ALiBi's slope) and position (the distance j -
        // position).
        for_each_score(w, acc_s, key0, g, t, [&](int head, int position, int key, float& score) {
          score =
              RowScore::make_for_head(p, RowScore::kAlibi ? head : 0).apply(score, key - position);
        });
      }
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * nt + 2 * t + e % 2;
          const int r = e / 2;
          if (key < lo[r] || key >= hi[r]) acc_s.v[0][nt][e] = negative_infinity();
        }
      }
      if constexpr (kVectors) {
        if (kind == kTilePartial) mask_by_vectors(p, w, acc_s, key0, g, t);
      }
      if constexpr (kPredicate) {
        if (kind == kTilePartial) mask_by_predicate(p, w, acc_s, key0, g, t);
      }
      softmax.template step<RowScore>(p, acc_s, acc_o);
      OperandA<1, kPvSteps> p_frag;
      to_operand_a<Product>(acc_s, p_frag);
      if constexpr (kFp8) {
        fp8_values(acc_o, p_frag, v_smem, fp8_v_lane, selectors, warp * kWarpKeys);
      } else {
        // The warp's keys are rows [warp kWarpKeys, ...) of the V tile: the same panels, whose
        // rows start that many rows later (a multiple of 8: the swizzle is unchanged).
        warp_regs_times_tile<Element, VTile, kPvSteps>(
            acc_o, p_frag, v_smem + warp * kWarpKeys * VTile::kPanelCols * 2, v_lane, 0);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the stages, which the merge reuses
    // The merge of the splits may launch once every CTA is here (it waits for the writes).
    allow_dependent_grids();
    merge(p, w, smem, warp, lane);
  }

  /// The warps' rows merged and written: o and lse (one split), or the split's partial rows.
  __device__ __forceinline__ void merge(const FwdParams& p, const DecodeWork& w, u32 smem, int warp,
                                        int lane) {
    const int g = lane / 4;
    const int t = lane % 4;
    // Each warp's normalized rows (fp32, row stride kHeadDimV + 4 floats against bank
    // conflicts) and LSEs.
    constexpr int kRowFloats = kHeadDimV + 4;
    const u32 rows = smem + kKvOffset;
    const u32 lses = rows + 4 * 16 * kRowFloats * 4;
    softmax.finish(acc_o, [&](int, int r) {
      if (t == 0) {
        store_shared_f32(lses + (warp * 16 + g + 8 * r) * 4,
                         softmax.template lse<RowScore>(p, 0, r));
      }
    });
    if constexpr (kFp8) {
      // Tile 4 q + j's columns 2t + c hold V's columns 32 q + 8t + 4c + j (fp8_values): four
      // consecutive columns for each q, row and c.
#pragma unroll
      for (int q = 0; q < kHeadDimV / 32; ++q) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const auto& v = acc_o.v[0];
            store_shared_v4_f32(
                rows + ((warp * 16 + g + 8 * r) * kRowFloats + 32 * q + 8 * t + 4 * c) * 4,
                v[4 * q][2 * r + c], v[4 * q + 1][2 * r + c], v[4 * q + 2][2 * r + c],
                v[4 * q + 3][2 * r + c]);
          }
        }
      }
    } else {
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          store_shared_v2_f32(rows + ((warp * 16 + g + 8 * r) * kRowFloats + 8 * dt + 2 * t) * 4,
                              acc_o.v[0][dt][2 * r], acc_o.v[0][dt][2 * r + 1]);
        }
      }
    }
    __syncthreads();
    // Eight threads per row, kHeadDimV / 8 columns each (consecutive pairs).
    const int thread = static_cast<int>(threadIdx.x);
    const int row = thread / 8;
    const int part = thread % 8;
    const int packed = w.row0 + row;
    if (packed >= w.group * w.tokens) return;
    int token, head;
    decode_row(w, packed, token, head);
    float lse_w[4];
    float top = negative_infinity();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lse_w[i] = __uint_as_float(load_shared_u32(lses + (i * 16 + row) * 4));
      top = fmaxf(top, lse_w[i]);
    }
    const bool unsplit = p.kv_cache.num_splits == 1;
    const float sink = Score::kSinks && unsplit ? p.sinks[head] : negative_infinity();
    top = fmaxf(top, sink);
    const float offset = top == negative_infinity() ? 0.f : top;
    float weight[4];
    float total = expf(sink - offset);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      weight[i] = expf(lse_w[i] - offset);
      total += weight[i];
    }
    // An e4m3 cache's O was summed from V's stored values: v_descale joins the normalization.
    const float v_scale = kFp8 ? fp8_descale(p, 2, w.batch, w.kv_head) : 1.f;
    const float inverse = total > 0.f ? v_scale / total : 0.f;
    const float lse = total > 0.f ? offset + logf(total) : negative_infinity();
    constexpr int kCols = kHeadDimV / 8;
    const long long out_row =
        (static_cast<long long>(w.batch) * p.seqlen_q + token) * p.heads + head;
    float* partial =
        unsplit
            ? nullptr
            : p.kv_cache.o_partial +
                  (static_cast<long long>(blockIdx.x) * p.batch * p.seqlen_q * p.heads + out_row) *
                      kHeadDimV;
    u16* o = static_cast<u16*>(p.o) + w.batch * p.o_batch_stride +
             (w.first + token) * p.o_row_stride + head * p.o_head_stride;
#pragma unroll
    for (int c = 0; c < kCols; c += 2) {
      const int col = part * kCols + c;
      float x = 0.f, y = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float a, b;
        load_shared_v2_f32(rows + ((i * 16 + row) * kRowFloats + col) * 4, a, b);
        x = fmaf(weight[i], a, x);
        y = fmaf(weight[i], b, y);
      }
      if (unsplit) {
        *reinterpret_cast<u32*>(o + col) = pack2<Element>(x * inverse, y * inverse);
      } else {
        *reinterpret_cast<float2*>(partial + col) = make_float2(x * inverse, y * inverse);
      }
    }
    if (part != 0) return;
    if (unsplit) {
      if (Config::kReturnLse) {
        p.lse[w.batch * p.lse_batch_stride + head * p.lse_head_stride + w.first + token] = lse;
      }
    } else {
      p.kv_cache.lse_partial[static_cast<long long>(blockIdx.x) * p.batch * p.seqlen_q * p.heads +
                             out_row] = lse;
    }
  }
};

/// The body of a generated decode kernel.
template <class Config, class Mask, bool kPaged, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void decode_sm80(const FwdParams& params) {
  extern __shared__ __align__(128) unsigned char smem[];
  DecodeSm80<Config, Mask, kPaged, Score> kernel;
  kernel.run(params, smem);
}

}  // namespace attnjit
