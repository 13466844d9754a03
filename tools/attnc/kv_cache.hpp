// attnc run's and bench's KV caches (a spec with kv_cache=contiguous|paged): the cached lengths
// and a paged cache's shuffled block table on the device, the visible pairs counted sequence by
// sequence, and the bytes a decode launch moves.
#pragma once

#include <cstdint>
#include <vector>

#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "dsl/intervals.hpp"
#include "runtime/jit/driver.hpp"
#include "tools/attnc/problem.hpp"

namespace attnc {

/// A KV cache's cache_seqlens (int32 [batch]) and, for kv_cache=paged, its block table (int32
/// [batch, pages_per_sequence], block_table) on the device, and the KvCacheArgs naming them
/// with the problem's num_splits.
struct DeviceKvCache {
  attnjit::runtime::DeviceBuffer cache_seqlens, block_table;
  attnjit::KvCacheArgs args;
};
DeviceKvCache upload_kv_cache(const ProblemOptions& p);

/// A paged cache's block table, [batch, pages_per_sequence] row-major: every page of the pool
/// (batch x pages_per_sequence) appears once, in an order shuffled deterministically for p.seed.
std::vector<std::int32_t> block_table(const ProblemOptions& p);

/// (head, query, key) triples visible over each sequence's cached keys: its seqlen_q new tokens
/// are the last of them (a causal mask or a window is aligned to the bottom right); FlashMask
/// `vectors` (else null) hide more, their rows being the tokens' positions.
std::int64_t cached_visible_pairs(const attnjit::MaskSpec& mask, const ProblemOptions& p,
                                  const attnjit::dsl::IntervalVectors* vectors);

/// The bytes a decode launch reads and writes at the least: K and V of every cached key some
/// query of its KV head sees, head_dim_qk + head_dim_v elements of 2 bytes each (all of a
/// sequence's keys, those within a sliding window's reach, or those FlashMask `vectors` leave
/// some token; one byte each over an e4m3 cache), plus q and o.
double kv_cache_bytes(const attnjit::AttentionSpec& spec, const ProblemOptions& p,
                      const attnjit::dsl::IntervalVectors* vectors);

}  // namespace attnc
