// The C ABI of the host FlashMask builders (include/attnjit/attnjit.h, attnjit_intervals_*):
// dsl/builders.hpp's families, packing, batching and the visible-pair count behind handles.
#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "attnjit/attnjit.h"
#include "dsl/builders.hpp"
#include "dsl/pairs.hpp"
#include "runtime/c_api/c_api_support.hpp"

struct attnjit_intervals {
  attnjit::dsl::IntervalVectors vectors;
};

namespace {

namespace dsl = attnjit::dsl;
using attnjit::c_api::guarded;
using attnjit::c_api::require;

static_assert(std::is_same_v<std::int32_t, int>, "the builders take int spans for int32 arrays");

/// Counts beyond a sequence's most tokens are refused before an array is read.
constexpr std::size_t kMaxCount = INT32_MAX;

void check_count(std::string_view field, std::size_t count) {
  if (count > kMaxCount) {
    attnjit::throw_field_error(fmt::format("{} count", field), std::to_string(count),
                               fmt::format("0 to {}", kMaxCount));
  }
}

/// `count` values at `values`; NULL only with a count of 0.
std::span<const int> values_of(std::string_view field, const std::int32_t* values,
                               std::size_t count) {
  check_count(field, count);
  require(values != nullptr || count == 0, field,
          fmt::format("an array of {} int32 values (NULL only with a count of 0)", count));
  return {values, count};
}

/// Runs `build` and stores its result in a new handle at `*out` (NULL on failure).
template <typename Build>
int build_into(attnjit_intervals** out, Build&& build) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    require(out != nullptr, "out", "a pointer to an attnjit_intervals* to fill");
    *out = new attnjit_intervals{build()};
  });
}

/// The vectors behind `count` handles, each required.
std::vector<dsl::IntervalVectors> vectors_of(std::string_view field,
                                             const attnjit_intervals* const* handles,
                                             std::size_t count) {
  check_count(field, count);
  require(handles != nullptr || count == 0, field,
          fmt::format("an array of {} attnjit_intervals handles", count));
  std::vector<dsl::IntervalVectors> result;
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    require(handles[i] != nullptr, fmt::format("{}[{}]", field, i),
            "a handle from an attnjit_intervals_* function");
    result.push_back(handles[i]->vectors);
  }
  return result;
}

const dsl::IntervalVectors& required(const attnjit_intervals* intervals) {
  require(intervals != nullptr, "intervals", "a handle from an attnjit_intervals_* function");
  return intervals->vectors;
}

}  // namespace

extern "C" {

int attnjit_intervals_sliding_window(int n, int window, attnjit_intervals** out) {
  return build_into(out, [&] { return dsl::sliding_window(n, window); });
}

int attnjit_intervals_causal_document(const std::int32_t* doc_lengths, size_t count,
                                      attnjit_intervals** out) {
  return build_into(
      out, [&] { return dsl::causal_document(values_of("doc_lengths", doc_lengths, count)); });
}

int attnjit_intervals_document(const std::int32_t* doc_lengths, size_t count,
                               attnjit_intervals** out) {
  return build_into(out,
                    [&] { return dsl::document(values_of("doc_lengths", doc_lengths, count)); });
}

int attnjit_intervals_share_question(int question, const std::int32_t* answers, size_t count,
                                     attnjit_intervals** out) {
  return build_into(
      out, [&] { return dsl::share_question(question, values_of("answers", answers, count)); });
}

int attnjit_intervals_global_sliding_window(int n, int global, int left, int right,
                                            attnjit_intervals** out) {
  return build_into(out, [&] { return dsl::global_sliding_window(n, global, left, right); });
}

int attnjit_intervals_causal_blockwise(const std::int32_t* blocks, size_t count, int test,
                                       attnjit_intervals** out) {
  return build_into(
      out, [&] { return dsl::causal_blockwise(values_of("blocks", blocks, count), test); });
}

int attnjit_intervals_prefix_lm_causal(int n, int prefix, attnjit_intervals** out) {
  return build_into(out, [&] { return dsl::prefix_lm_causal(n, prefix); });
}

int attnjit_intervals_prefix_lm_document(const std::int32_t* doc_lengths,
                                         const std::int32_t* prefixes, size_t count,
                                         attnjit_intervals** out) {
  return build_into(out, [&] {
    return dsl::prefix_lm_document(values_of("doc_lengths", doc_lengths, count),
                                   values_of("prefixes", prefixes, count));
  });
}

int attnjit_intervals_qk_sparse(int n, int offset, int length, attnjit_intervals** out) {
  return build_into(out, [&] { return dsl::qk_sparse(n, offset, length); });
}

int attnjit_intervals_random_eviction(const std::int32_t* evicted_at_row, size_t count,
                                      attnjit_intervals** out) {
  return build_into(out, [&] {
    return dsl::random_eviction(values_of("evicted_at_row", evicted_at_row, count));
  });
}

int attnjit_intervals_pack(const attnjit_intervals* const* pieces, size_t count,
                           attnjit_intervals** out) {
  return build_into(out, [&] { return dsl::pack(vectors_of("pieces", pieces, count)); });
}

int attnjit_intervals_stack(const attnjit_intervals* const* samples, size_t count, int heads,
                            attnjit_intervals** out) {
  return build_into(out, [&] {
    if (heads < 1 || count % static_cast<std::size_t>(heads) != 0) {
      attnjit::throw_field_error("heads", std::to_string(heads),
                                 fmt::format("a divisor >= 1 of the sample count ({})", count));
    }
    const std::vector<dsl::IntervalVectors> parts = vectors_of("samples", samples, count);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].heads != 1) {
        attnjit::throw_field_error(fmt::format("samples[{}].heads", i),
                                   std::to_string(parts[i].heads), "1 (single-head samples)");
      }
    }
    // Samples in (batch, head) order stacked along the batch are the [B, Hm, N, C] layout.
    dsl::IntervalVectors batch = dsl::stack(parts);
    batch.batch = static_cast<int>(count / static_cast<std::size_t>(heads));
    batch.heads = heads;
    return batch;
  });
}

int attnjit_intervals_broadcast_heads(const attnjit_intervals* intervals, int heads,
                                      attnjit_intervals** out) {
  return build_into(out, [&] { return dsl::broadcast_heads(required(intervals), heads); });
}

int attnjit_intervals_get_shape(const attnjit_intervals* intervals,
                                attnjit_intervals_shape* shape) {
  return guarded([&] {
    const dsl::IntervalVectors& m = required(intervals);
    require(shape != nullptr, "shape", "a pointer to an attnjit_intervals_shape to fill");
    *shape = {m.causal ? 1 : 0, m.columns, m.batch, m.heads, m.seqlen_q, m.seqlen_k};
  });
}

const std::int32_t* attnjit_intervals_data(const attnjit_intervals* intervals) {
  return intervals == nullptr ? nullptr : intervals->vectors.data.data();
}

int attnjit_intervals_visible_pairs(const attnjit_intervals* intervals, int heads,
                                    std::int64_t* pairs) {
  return guarded([&] {
    const dsl::IntervalVectors& m = required(intervals);
    require(pairs != nullptr, "pairs", "a pointer to an int64_t to fill");
    if (heads < 1) {
      attnjit::throw_field_error("heads", std::to_string(heads),
                                 fmt::format(">= 1, a multiple of the mask heads ({})", m.heads));
    }
    *pairs = dsl::visible_pairs(m.mask_spec(), m.batch, heads, m.seqlen_q, m.seqlen_k, -1, -1, &m);
  });
}

void attnjit_intervals_release(attnjit_intervals* intervals) {
  delete intervals;
}

}  // extern "C"
