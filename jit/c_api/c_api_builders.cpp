// The C ABI of the mask families (include/attnjit/attnjit.h): the family table as JSON
// (attnjit_mask_families), the host FlashMask builders (attnjit_intervals_*: any family by its
// keyword parameters, and dsl/builders.hpp's typed builders), packing, batching and the
// visible-pair count behind handles.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "attnjit/attnjit.h"
#include "dsl/builders.hpp"
#include "dsl/families.hpp"
#include "dsl/pairs.hpp"
#include "jit/c_api/c_api_intervals.hpp"
#include "jit/c_api/c_api_support.hpp"

namespace {

namespace dsl = attnjit::dsl;
using attnjit::c_api::copy_out;
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

/// The family table as attnjit_mask_families describes it.
std::string families_json() {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const dsl::FamilyRow& row : dsl::family_table()) {
    nlohmann::ordered_json parameters = nlohmann::ordered_json::array();
    for (const dsl::KeywordParam& p : dsl::keyword_params(row)) {
      parameters.push_back({{"name", p.name}, {"depth", p.depth}});
    }
    nlohmann::ordered_json device = nlohmann::ordered_json::array();
    for (unsigned bit = 1; bit != 0 && bit <= row.device_params; bit <<= 1) {
      if ((row.device_params & bit) != 0) device.push_back(dsl::device_param_names(bit));
    }
    out.push_back({{"name", row.name},
                   {"causal", row.causal},
                   {"columns", row.columns},
                   {"parameters", std::move(parameters)},
                   {"per_head", row.per_head},
                   {"device_parameters", std::move(device)}});
  }
  return out.dump();
}

/// One keyword's value from JSON: an int32, a list of them or a list of lists of them.
dsl::KeywordValue keyword_value(const std::string& name, const nlohmann::json& value) {
  const auto int32 = [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<std::int64_t>() >= INT32_MIN &&
           v.get<std::int64_t>() <= INT32_MAX;
  };
  const auto ints = [&](const nlohmann::json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), int32);
  };
  dsl::KeywordValue out;
  if (int32(value)) {
    out.rows = {{value.get<int>()}};
  } else if (ints(value)) {
    out.depth = 1;
    out.rows = {value.get<std::vector<int>>()};
  } else if (value.is_array() && std::all_of(value.begin(), value.end(), ints)) {
    out.depth = 2;
    out.rows = value.get<std::vector<std::vector<int>>>();
  } else {
    attnjit::throw_field_error(name, value.dump(),
                               "an int32, a list of them or a list of lists of them");
  }
  return out;
}

/// The keyword parameters of a JSON object.
dsl::KeywordArgs keyword_args(const char* parameters) {
  require(parameters != nullptr, "parameters", "a JSON object of the family's parameters");
  const nlohmann::json object = nlohmann::json::parse(parameters, nullptr, false);
  if (!object.is_object()) {
    attnjit::throw_field_error("parameters", parameters,
                               "a JSON object of the family's parameters, e.g. {\"window\": 8}");
  }
  dsl::KeywordArgs args;
  for (const auto& [name, value] : object.items())
    args.emplace_back(name, keyword_value(name, value));
  return args;
}

}  // namespace

extern "C" {

int attnjit_mask_families(char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] { result = copy_out(families_json(), buffer, size); });
  return status != ATTNJIT_OK ? status : result;
}

int attnjit_intervals_family(const char* family, int seqlen, const char* parameters,
                             const char* context, attnjit_intervals** out) {
  return build_into(out, [&] {
    require(family != nullptr, "family", "a family name such as \"causal_document\"");
    const dsl::FamilyRow& row = dsl::vector_family(family);
    if (seqlen < 1) attnjit::throw_field_error("seqlen", std::to_string(seqlen), ">= 1");
    return dsl::build_from_keywords(row, seqlen, keyword_args(parameters),
                                    context != nullptr ? context : "");
  });
}

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
