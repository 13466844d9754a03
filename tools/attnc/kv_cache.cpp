// KV caches for attnc run and bench (tools/attnc/kv_cache.hpp).
#include "tools/attnc/kv_cache.hpp"

#include <algorithm>
#include <numeric>
#include <random>

#include "dsl/pairs.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

// Seeds p.seed to p.seed + 4 are the activations' and the sinks'.
constexpr std::uint64_t kBlockTableSeed = 5;

DeviceBuffer upload_ints(const std::vector<std::int32_t>& values) {
  DeviceBuffer buffer(values.size() * 4);
  buffer.upload(values.data(), values.size() * 4);
  return buffer;
}

// Whether new token t of sequence b, of `keys` keys, sees key j under the vectors of mask head
// h: its row is its position, keys - seqlen_q + t.
bool token_sees(const attnjit::dsl::IntervalVectors& v, const ProblemOptions& p, int b, int h,
                int keys, int t, int j) {
  const int position = keys - p.seqlen_q + t;
  return position >= 0 && !attnjit::dsl::is_masked(v, b, h, position, j);
}

// The keys of a sequence of `keys` cached keys that at least one of its `queries` new tokens
// sees: all but those left of a sliding window's reach from its first query.
std::int64_t keys_seen(const attnjit::MaskSpec& mask, const ProblemOptions& p, int keys) {
  if (mask.kind != attnjit::MaskKind::sliding_window || p.window_left < 0) return keys;
  return std::min<std::int64_t>(keys, static_cast<std::int64_t>(p.seqlen_q) + p.window_left);
}

}  // namespace

std::vector<std::int32_t> block_table(const ProblemOptions& p) {
  std::vector<std::int32_t> table(static_cast<std::size_t>(p.batch) * p.pages_per_sequence());
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(p.seed + kBlockTableSeed));
  return table;
}

DeviceKvCache upload_kv_cache(const ProblemOptions& p) {
  DeviceKvCache c;
  c.cache_seqlens = upload_ints(p.cache_lengths);
  c.args.cache_seqlens =
      attnjit::contiguous_view(c.cache_seqlens.data(), attnjit::ScalarType::int32, {p.batch});
  if (p.paged()) {
    c.block_table = upload_ints(block_table(p));
    c.args.block_table = attnjit::contiguous_view(c.block_table.data(), attnjit::ScalarType::int32,
                                                  {p.batch, p.pages_per_sequence()});
  }
  c.args.num_splits = *p.num_splits;
  return c;
}

std::int64_t cached_visible_pairs(const attnjit::MaskSpec& mask, const ProblemOptions& p,
                                  const attnjit::dsl::IntervalVectors* vectors) {
  std::int64_t pairs = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int keys = p.cache_lengths[b];
    if (vectors == nullptr) {
      pairs += attnjit::dsl::visible_pairs(mask, 1, p.heads, p.seqlen_q, keys, p.window_left,
                                           p.window_right, nullptr);
      continue;
    }
    for (int h = 0; h < vectors->heads; ++h) {
      std::int64_t seen = 0;
      for (int t = 0; t < p.seqlen_q; ++t) {
        for (int j = 0; j < keys; ++j) seen += token_sees(*vectors, p, b, h, keys, t, j);
      }
      pairs += seen * (p.heads / vectors->heads);
    }
  }
  return pairs;
}

double kv_cache_bytes(const attnjit::AttentionSpec& spec, const ProblemOptions& p,
                      const attnjit::dsl::IntervalVectors* vectors) {
  double keys = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int length = p.cache_lengths[b];
    if (vectors == nullptr) {
      keys += static_cast<double>(keys_seen(spec.mask, p, length)) * p.kv_heads;
      continue;
    }
    // Each mask head (1 or Hkv of them) serves Hkv / Hm KV heads.
    for (int h = 0; h < vectors->heads; ++h) {
      std::int64_t seen = 0;
      for (int j = 0; j < length; ++j) {
        for (int t = 0; t < p.seqlen_q; ++t) {
          if (token_sees(*vectors, p, b, h, length, t, j)) {
            ++seen;
            break;
          }
        }
      }
      keys += static_cast<double>(seen) * (p.kv_heads / vectors->heads);
    }
  }
  const double key_bytes =
      static_cast<double>(attnjit::kv_element_size(spec)) * (spec.head_dim_qk + spec.head_dim_v);
  const double queries = static_cast<double>(p.batch) * p.seqlen_q * p.heads;
  return keys * key_bytes + queries * 2.0 * (spec.head_dim_qk + spec.head_dim_v);
}

}  // namespace attnc
