// The append of new keys and values to a KV cache (kv_cache specs with KvCacheArgs::k_new/v_new,
// flash_attn_with_kvcache's k= and v=), launched before the decode kernel on the same stream:
// one thread per 16-byte chunk of every new row of K and V copies it to the cache at position
// cache_seqlens[b] + t (through the block table when paged; with ragged new tokens, t below the
// sequence's count, from its packed rows). Positions past the capacity are
// not written. The bits are copied as they are: the cache afterwards holds exactly k_new, v_new.
#pragma once

#include "attnjit/common/kv_cache.cuh"

namespace attnjit {

template <int kHeadDimQK, int kHeadDimV, bool kPaged, int kElementBytes = 2>
__device__ __forceinline__ void kv_append(const FwdParams& p) {
  constexpr int kChunksK = kHeadDimQK * kElementBytes / 16;
  constexpr int kChunks = kChunksK + kHeadDimV * kElementBytes / 16;
  const KvCacheInputs& c = p.kv_cache;
  allow_dependent_grids();  // the decode kernel waits for these writes before reading the cache
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<long long>(p.batch) * c.new_tokens * p.kv_heads * kChunks) return;
  const int chunk = static_cast<int>(index % kChunks);
  long long rest = index / kChunks;
  const int head = static_cast<int>(rest % p.kv_heads);
  rest /= p.kv_heads;
  const int token = static_cast<int>(rest % c.new_tokens);
  const int batch = static_cast<int>(rest / c.new_tokens);
  const NewTokens tokens = new_tokens(p, batch);
  if (token >= appended_keys(p, tokens)) return;
  const int position = max(c.cache_seqlens[batch], 0) + token;
  if (position >= p.seqlen_k) return;
  const CacheRow row = cache_row<kPaged>(p, batch, position);
  const bool is_k = chunk < kChunksK;
  // Offsets in elements, then bytes: 16-bit or e4m3 rows alike.
  const long long column = 16 * (is_k ? chunk : chunk - kChunksK);
  const long long source =
      is_k ? batch * c.k_new_batch_stride + (tokens.first + token) * c.k_new_row_stride +
                 head * c.k_new_head_stride
           : batch * c.v_new_batch_stride + (tokens.first + token) * c.v_new_row_stride +
                 head * c.v_new_head_stride;
  const long long target =
      is_k ? row.page * p.k_batch_stride + row.within * p.k_row_stride + head * p.k_head_stride
           : row.page * p.v_batch_stride + row.within * p.v_row_stride + head * p.v_head_stride;
  const char* from = static_cast<const char*>(is_k ? c.k_new : c.v_new);
  char* to = const_cast<char*>(static_cast<const char*>(is_k ? p.k : p.v));
  *reinterpret_cast<uint4*>(to + target * kElementBytes + column) =
      *reinterpret_cast<const uint4*>(from + source * kElementBytes + column);
}

}  // namespace attnjit
