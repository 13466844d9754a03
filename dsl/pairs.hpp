// Counting the (query, key) pairs a mask leaves visible: the FLOP count of the benchmark
// protocol (forward FLOPs = 4 * head_dim * visible pairs).
#pragma once

#include <cstdint>

#include "attnjit/spec.hpp"
#include "dsl/intervals.hpp"

namespace attnjit::dsl {

/// Visible pairs summed over `batch` and `heads` query heads. `intervals` is required for
/// flashmask (its heads are mask heads, each shared by heads / intervals->heads query heads)
/// and ignored otherwise; the window sizes apply to sliding_window only (< 0: unbounded).
/// Throws Error for mask=predicate.
/// O(batch * (seqlen_q + heads * seqlen_k)).
std::int64_t visible_pairs(const MaskSpec& mask, int batch, int heads, int seqlen_q, int seqlen_k,
                           int window_left, int window_right, const IntervalVectors* intervals);

}  // namespace attnjit::dsl
