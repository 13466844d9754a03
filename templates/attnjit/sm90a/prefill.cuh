// The prefill kernel of the sm90a family: the forward (forward.cuh) over a KV cache, which the
// launch of a kv_cache spec runs instead of the decode kernel (sm80/decode.cuh) where a call has
// many new tokens per sequence (chunked prefill, long appends): there the query rows of a
// sequence fill the forward's 128-row tiles and its wgmma products, where the decode kernel's
// 16-row tiles would read the cache once per 16 rows. Config::kKvCache says how it reads the
// cache (KvLayout: contiguous, or pages through the block table).
#pragma once

#include "attnjit/sm90a/forward.cuh"

namespace attnjit {

template <class Config, class Mask, class Score = ScoreMod<false, false>>
using PrefillSm90a = ForwardSm90a<Config, Mask, Score, Config::kKvCache>;

/// The body of a generated prefill kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void prefill_sm90a(const FwdParams& params, const FwdTensorMaps& maps) {
  run_kernel<PrefillSm90a<Config, Mask, Score>, 1024>(params, maps);
}

}  // namespace attnjit
