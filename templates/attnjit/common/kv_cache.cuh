// Where a key of a KV cache lives (kv_cache=contiguous|paged) and how many a sequence has: what
// the decode, prefill and append kernels and a predicate's block classification share. The
// helpers read the parameters' kv_cache, seqlen_q and seqlen_k (FwdParams, PredicateBlocksParams).
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// The new tokens of one sequence: how many (at most seqlen_q) and the packed row of the first
/// (0 without cu_seqlens_q: the batch stride finds the sequence's rows).
struct NewTokens {
  int count;
  int first;
};

template <class Params>
__device__ __forceinline__ NewTokens new_tokens(const Params& p, int batch) {
  const int* cu = p.kv_cache.cu_seqlens_q;
  if (cu == nullptr) return {p.seqlen_q, 0};
  const int first = cu[batch];
  return {min(max(cu[batch + 1] - first, 0), p.seqlen_q), first};
}

/// The keys a sequence appends: k_new's rows (none without k_new), with ragged new tokens the
/// sequence's own count.
template <class Params>
__device__ __forceinline__ int appended_keys(const Params& p, const NewTokens& tokens) {
  if (p.kv_cache.new_tokens == 0) return 0;
  return p.kv_cache.cu_seqlens_q != nullptr ? tokens.count : p.kv_cache.new_tokens;
}

/// The keys of sequence `batch` with `appended` new ones: its cached length (every key of the
/// capacity without cache_seqlens) plus the appended keys, cut to the capacity so that no copy
/// leaves the cache.
template <class Params>
__device__ __forceinline__ int cache_length(const Params& p, int batch, int appended) {
  const int* lengths = p.kv_cache.cache_seqlens;
  const int cached = lengths != nullptr ? max(lengths[batch], 0) : p.seqlen_k;
  return min(cached + appended, p.seqlen_k);
}

/// The row of logical key `key` of sequence `batch`: (page, row in the page) of a paged cache
/// (through the block table), (batch, key) of a contiguous one; with the cache's batch stride
/// (per page when paged) and row stride it gives the key's offset.
struct CacheRow {
  long long page;
  long long within;
};

template <bool kPaged>
__device__ __forceinline__ CacheRow cache_row(const FwdParams& p, int batch, int key) {
  if constexpr (kPaged) {
    const int page =
        p.kv_cache
            .block_table[batch * p.kv_cache.block_table_stride + (key >> p.kv_cache.page_shift)];
    return {page, key & ((1 << p.kv_cache.page_shift) - 1)};
  } else {
    return {batch, key};
  }
}

/// The descale factor of e4m3 tensor `tensor` (0 q, 1 k, 2 v; dtype=e4m3's inputs or a
/// kv_dtype=e4m3 cache's K and V) for (batch, KV head), 1 where it has none.
__device__ __forceinline__ float fp8_descale(const FwdParams& p, int tensor, int batch,
                                             int kv_head) {
  const float* factors = tensor == 0 ? p.q_descale : tensor == 1 ? p.k_descale : p.v_descale;
  if (factors == nullptr) return 1.f;
  return (p.descale_per_tensor >> tensor) & 1 ? factors[0] : factors[batch * p.kv_heads + kv_head];
}

}  // namespace attnjit
