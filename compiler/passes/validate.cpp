// validate: the spec is one attnjit can compile.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {
namespace {

constexpr std::array<int, 6> kHeadDims{32, 64, 96, 128, 192, 256};

// (head_dim_qk, head_dim_v) pairs of unequal head dims the sm80 family's kernels take.
constexpr std::array<std::pair<int, int>, 4> kUnequalHeadDims{
    {{64, 128}, {128, 64}, {192, 128}, {256, 128}}};

void check_head_dim(std::string_view field, int value) {
  if (std::find(kHeadDims.begin(), kHeadDims.end(), value) == kHeadDims.end()) {
    throw_field_error(field, std::to_string(value), "32, 64, 96, 128, 192, 256");
  }
}

void check_head_dim_pair(int head_dim_qk, int head_dim_v) {
  if (std::ranges::find(kUnequalHeadDims, std::pair{head_dim_qk, head_dim_v}) !=
      kUnequalHeadDims.end()) {
    return;
  }
  std::string pairs;
  for (const auto& [qk, v] : kUnequalHeadDims) {
    pairs += fmt::format("{}({}, {})", pairs.empty() ? "" : ", ", qk, v);
  }
  throw_field_error("(head_dim_qk, head_dim_v)", fmt::format("({}, {})", head_dim_qk, head_dim_v),
                    fmt::format("equal head dims, or one of {}", pairs));
}

// The spec holds the lifted structure: literals are runtime scalars, so one kernel serves
// every value of them.
Predicate check_predicate(const std::string& text) {
  const std::string field = fmt::format("mask=predicate({})", text);
  Predicate predicate;
  try {
    predicate = parse_predicate(text, PredicateParseOptions{.allow_reserved_tensor_names = true});
  } catch (const PredicateParseError& error) {
    throw Error(fmt::format("{}: {}", field, error.what()));
  }
  const PredicateInfo used = info(predicate);
  if (used.tensors.size() > static_cast<std::size_t>(kPredicateTensorLimit)) {
    throw_field_error(field, fmt::format("{} tensors", used.tensors.size()),
                      fmt::format("at most {} tensors", kPredicateTensorLimit));
  }
  if (used.scalar_count > kPredicateScalarLimit) {
    throw_field_error(field, fmt::format("{} scalar slots", used.scalar_count),
                      fmt::format("at most {} scalars ($0 .. ${})", kPredicateScalarLimit,
                                  kPredicateScalarLimit - 1));
  }
  if (used.literal_count > 0) {
    std::vector<std::int32_t> values;
    throw_field_error(field, text,
                      fmt::format("the lifted structure, literals replaced by runtime scalars "
                                  "$0, $1, ... (here {})",
                                  to_string(lift_literals(predicate, values))));
  }
  return predicate;
}

// Checks the mask's arguments; returns its parsed predicate for mask=predicate.
std::optional<Predicate> check_mask(const MaskSpec& mask) {
  const MaskKindInfo& kind = info_of(mask.kind);
  if (!kind.predicate && !mask.predicate.empty()) {
    throw Error(
        fmt::format("mask: a predicate expression ('{}') applies to mask=predicate "
                    "only; accepted: no expression for mask={}",
                    mask.predicate, name_of(mask.kind)));
  }
  std::optional<Predicate> predicate;
  if (kind.predicate) predicate = check_predicate(mask.predicate);
  if (!kind.interval_vectors) {
    if (mask.causal || mask.columns != 0) {
      throw Error(
          fmt::format("mask: causal/columns are FlashMask arguments and do not apply to mask={}; "
                      "accepted: flashmask(causal=...,columns=...)",
                      name_of(mask.kind)));
    }
    return predicate;
  }
  const std::string value = to_string(mask);
  if (mask.columns != 1 && mask.columns != 2 && mask.columns != 4) {
    throw_field_error("flashmask columns", std::to_string(mask.columns), "1, 2, 4");
  }
  if (mask.causal && mask.columns == 4) {
    throw_field_error("mask", value,
                      "causal flashmask with columns=1 (LTS) or 2 (LTS, LTE); 4 columns need "
                      "causal=false");
  }
  if (!mask.causal && mask.columns == 1) {
    throw_field_error("mask", value,
                      "non-causal flashmask with columns=2 (LTS, UTE) or 4 (LTS, LTE, UTS, "
                      "UTE); 1 column needs causal=true");
  }
  return std::nullopt;
}

// A packed batch takes every mask; ALiBi only with shared boundaries.
void check_varlen(const AttentionSpec& spec) {
  // Under shared boundaries the packed row's distances j - i are every sequence's own
  // (its diagonal is the row's), so ALiBi's biases are exact; with keys of their own they
  // would differ by a constant per sequence, which the LSE would keep.
  if (spec.alibi && spec.varlen != VarlenMode::shared) {
    throw_field_error("alibi", "true",
                      "false with varlen=true in this version (ALiBi in a packed batch takes "
                      "varlen=shared: the keys on the queries' boundaries)");
  }
}

// Attention against a KV cache: the decode kernels take forward passes over padded batches with
// every mask and every score modifier.
void check_kv_cache(const AttentionSpec& spec) {
  const std::string_view cache = name_of(spec.kv_cache);
  if (spec.direction != Direction::forward) {
    throw Error(fmt::format("kv_cache: {} with direction=backward; accepted: direction=forward "
                            "(a KV cache is attended to by inference, which takes no gradients)",
                            cache));
  }
  if (spec.varlen != VarlenMode::off) {
    throw Error(fmt::format("kv_cache: {} with varlen={}; accepted: varlen=false (the cached "
                            "lengths are the launch's cache_seqlens)",
                            cache, name_of(spec.varlen)));
  }
  if (!spec.tiles.is_auto()) {
    throw_field_error("tiles", to_string(spec.tiles),
                      fmt::format("auto with kv_cache={} (the decode kernels choose their tiles; "
                                  "the key splits are the launch's num_splits)",
                                  cache));
  }
}

// FP8 inputs (`what`: the spec's setting that makes them so) come in equal head dims of 64, 128
// or 256 (this version).
void check_fp8_head_dims(const AttentionSpec& spec, std::string_view what) {
  if (spec.head_dim_v != spec.head_dim_qk ||
      (spec.head_dim_qk != 64 && spec.head_dim_qk != 128 && spec.head_dim_qk != 256)) {
    throw_field_error("head_dim",
                      fmt::format("{} with {}",
                                  spec.head_dim_v == spec.head_dim_qk
                                      ? std::to_string(spec.head_dim_qk)
                                      : fmt::format("({}, {})", spec.head_dim_qk, spec.head_dim_v),
                                  what),
                      "64, 128 or 256 (equal head dims)");
  }
}

// dtype=e4m3: the sm90a forward over the call's tensors, padded or packed (varlen), equal head
// dims of 64, 128 or 256, masks by index or FlashMask vectors (this version).
void check_fp8(const AttentionSpec& spec) {
  if (spec.direction != Direction::forward) {
    throw Error(
        "dtype: e4m3 with direction=backward; accepted: direction=forward (FP8 inputs are an "
        "inference and prefill format: training takes bf16 or fp16)");
  }
  check_fp8_head_dims(spec, "dtype=e4m3");
  if (spec.mask.kind == MaskKind::predicate) {
    throw_field_error("mask", fmt::format("{} with dtype=e4m3", to_string(spec.mask)),
                      "none, causal, sliding_window or flashmask(...) in this version");
  }
  if (spec.kv_cache != KvCache::none) {
    throw Error(fmt::format(
        "dtype: e4m3 with kv_cache={}; accepted: kv_cache=none (an FP8 cache under 16-bit "
        "queries is kv_dtype=e4m3)",
        name_of(spec.kv_cache)));
  }
}

// kv_dtype=e4m3: an FP8 cache under 16-bit queries, read by the decode kernel (every mask and
// score modifier), equal head dims of 64, 128 or 256 (this version).
void check_kv_dtype(const AttentionSpec& spec) {
  const std::string_view kv = name_of(*spec.kv_dtype);
  if (*spec.kv_dtype != DType::e4m3) {
    throw_field_error(
        "kv_dtype", kv,
        fmt::format("e4m3 (leave kv_dtype out for a cache of dtype={})", name_of(spec.dtype)));
  }
  if (spec.kv_cache == KvCache::none) {
    throw Error(
        fmt::format("kv_dtype: {} with kv_cache=none; accepted: kv_cache=contiguous or "
                    "paged (kv_dtype is a KV cache's element type)",
                    kv));
  }
  if (spec.dtype == DType::e4m3) {
    throw_field_error("dtype", "e4m3 with kv_dtype=e4m3",
                      "bf16 or fp16 (the queries' and the output's type over an FP8 cache)");
  }
  check_fp8_head_dims(spec, "kv_dtype=e4m3");
}

}  // namespace

Lowering validate(const Lowering& in) {
  const AttentionSpec& spec = in.spec;
  // Equal dims were most likely given as one `head_dim`; name what the user wrote.
  check_head_dim(spec.head_dim_v == spec.head_dim_qk ? "head_dim" : "head_dim_qk",
                 spec.head_dim_qk);
  if (spec.head_dim_v != 0) {
    check_head_dim("head_dim_v", spec.head_dim_v);
    if (spec.head_dim_v != spec.head_dim_qk) check_head_dim_pair(spec.head_dim_qk, spec.head_dim_v);
  }
  Lowering out = in;
  out.predicate = check_mask(spec.mask);
  if (spec.varlen != VarlenMode::off) check_varlen(spec);
  if (spec.kv_cache != KvCache::none) check_kv_cache(spec);
  if (spec.dtype == DType::e4m3) check_fp8(spec);
  if (spec.kv_dtype) check_kv_dtype(spec);
  return out;
}

}  // namespace attnjit
