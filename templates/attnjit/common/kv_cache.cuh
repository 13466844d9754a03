// Where a key of a KV cache lives (kv_cache=contiguous|paged): what the decode kernel and the
// append kernel share.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// The keys of sequence `batch`: its cached length (every key of the capacity without
/// cache_seqlens) plus the appended ones, cut to the capacity so that no copy leaves the cache.
__device__ __forceinline__ int cache_length(const FwdParams& p, int batch) {
  const int* lengths = p.kv_cache.cache_seqlens;
  const int cached = lengths != nullptr ? max(lengths[batch], 0) : p.seqlen_k;
  return min(cached + p.kv_cache.new_tokens, p.seqlen_k);
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
    const int page = p.kv_cache.block_table[batch * p.kv_cache.block_table_stride +
                                            (key >> p.kv_cache.page_shift)];
    return {page, key & ((1 << p.kv_cache.page_shift) - 1)};
  } else {
    return {batch, key};
  }
}

}  // namespace attnjit
