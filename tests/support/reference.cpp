// The CPU reference attention forward (float64 and a low-precision emulation) and the output
// and LSE comparisons.
#include "support/reference.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "support/half_round.hpp"

namespace attnjit::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check_positive(std::string_view field, int value) {
  if (value < 1) throw_field_error(field, fmt::to_string(value), ">= 1");
}

}  // namespace

void check_size(std::string_view function, std::string_view name, std::size_t got,
                std::size_t expected, std::string_view shape) {
  if (got != expected) {
    throw_field_error(fmt::format("{}: {} size", function, name), fmt::to_string(got),
                      fmt::format("{} = {}", shape, expected));
  }
}

void check_problem(std::string_view function, const Problem& p, std::span<const float> q,
                   std::span<const float> k, std::span<const float> v) {
  check_positive("batch", p.batch);
  check_positive("seqlen_q", p.seqlen_q);
  check_positive("seqlen_k", p.seqlen_k);
  check_positive("heads", p.heads);
  check_positive("kv_heads", p.kv_heads);
  check_positive("head_dim", p.head_dim);
  check_positive("head_dim_v", p.head_dim_v);
  if (p.heads % p.kv_heads != 0) {
    throw_field_error("kv_heads", fmt::to_string(p.kv_heads),
                      fmt::format("a divisor of heads ({})", p.heads));
  }
  if (!std::isfinite(p.softmax_scale)) {
    throw_field_error("softmax_scale", fmt::to_string(p.softmax_scale), "a finite number");
  }
  if (!(p.score_mod.softcap >= 0) || !std::isfinite(p.score_mod.softcap)) {
    throw_field_error("score_mod.softcap", fmt::to_string(p.score_mod.softcap),
                      "a finite number > 0, or 0 for none");
  }
  const std::vector<float>& slopes = p.score_mod.alibi_slopes;
  if (!slopes.empty() && slopes.size() != static_cast<std::size_t>(p.heads)) {
    throw_field_error("score_mod.alibi_slopes size", fmt::to_string(slopes.size()),
                      fmt::format("0 or heads ({})", p.heads));
  }
  for (const float slope : slopes) {
    if (!std::isfinite(slope)) {
      throw_field_error("score_mod.alibi_slopes", fmt::to_string(slope), "finite numbers");
    }
  }
  if (!p.sinks.empty() && p.sinks.size() != static_cast<std::size_t>(p.heads)) {
    throw_field_error("sinks size", fmt::to_string(p.sinks.size()),
                      fmt::format("0 or heads ({})", p.heads));
  }
  for (const float sink : p.sinks) {
    if (std::isnan(sink) || sink == std::numeric_limits<float>::infinity()) {
      throw_field_error("sinks", fmt::to_string(sink), "finite numbers or -inf");
    }
  }
  const auto b = static_cast<std::size_t>(p.batch);
  check_size(function, "q", q.size(), b * p.seqlen_q * p.heads * p.head_dim, "B*Sq*H*D");
  check_size(function, "k", k.size(), b * p.seqlen_k * p.kv_heads * p.head_dim, "B*Sk*Hkv*D");
  check_size(function, "v", v.size(), b * p.seqlen_k * p.kv_heads * p.head_dim_v, "B*Sk*Hkv*Dv");
  if (p.mask.kind == MaskKind::predicate && p.mask.predicate == nullptr) {
    throw_field_error("mask.predicate", "null", "an evaluator for mask=predicate");
  }
  if (p.mask.kind != MaskKind::flashmask) return;
  const dsl::IntervalVectors* m = p.mask.intervals;
  if (m == nullptr) throw_field_error("mask.intervals", "null", "interval vectors for flashmask");
  dsl::validate(*m);
  const auto mismatch = [](std::string_view field, int got, int expected) {
    if (got != expected) {
      throw_field_error(fmt::format("mask.intervals->{}", field), fmt::to_string(got),
                        fmt::format("{} (the problem's {})", expected, field));
    }
  };
  mismatch("batch", m->batch, p.batch);
  mismatch("seqlen_q", m->seqlen_q, p.seqlen_q);
  mismatch("seqlen_k", m->seqlen_k, p.seqlen_k);
  if (p.heads % m->heads != 0) {
    throw_field_error("mask.intervals->heads", fmt::to_string(m->heads),
                      fmt::format("a divisor of heads ({})", p.heads));
  }
}

bool key_visible(const Problem& p, int b, int h, int i, int j) {
  const int diagonal = i + (p.seqlen_k - p.seqlen_q);
  const MaskRef& mask = p.mask;
  switch (mask.kind) {
    case MaskKind::none:
      return true;
    case MaskKind::causal:
      return j <= diagonal;
    case MaskKind::sliding_window:
      return (mask.window_left < 0 || j >= diagonal - mask.window_left) &&
             (mask.window_right < 0 || j <= diagonal + mask.window_right);
    case MaskKind::flashmask: {
      const int h_mask = h / (p.heads / mask.intervals->heads);
      return !dsl::is_masked(*mask.intervals, b, h_mask, i, j);
    }
    case MaskKind::predicate:
      return mask.predicate->visible(mask.predicate_batch >= 0 ? mask.predicate_batch : b, h, i, j);
  }
  return false;
}

double modified_score(const Problem& p, int h, int i, int j, double s, double* derivative) {
  double slope = 1;
  if (p.score_mod.softcap > 0) {
    const double cap = p.score_mod.softcap;
    const double t = std::tanh(s / cap);
    s = cap * t;
    slope = 1 - t * t;
  }
  if (!p.score_mod.alibi_slopes.empty()) {
    s += static_cast<double>(p.score_mod.alibi_slopes[h]) * (j - (i + p.seqlen_k - p.seqlen_q));
  }
  if (derivative != nullptr) *derivative = slope;
  return s;
}

void for_each_head(const Problem& p, const std::function<void(int b, int h)>& task) {
  const int tasks = p.batch * p.heads;
  const int workers = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, tasks);
  std::atomic<int> next{0};
  const auto work = [&] {
    for (int n = next++; n < tasks; n = next++) task(n / p.heads, n % p.heads);
  };
  std::vector<std::jthread> threads;
  threads.reserve(workers - 1);
  for (int t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
}

VisibleKeys visible_keys(const Problem& p, int b, int h, int i, std::span<std::uint8_t> visible) {
  VisibleKeys keys{p.seqlen_k, -1};
  for (int j = 0; j < p.seqlen_k; ++j) {
    visible[j] = key_visible(p, b, h, i, j);
    if (visible[j]) {
      keys.first = std::min(keys.first, j);
      keys.last = j;
    }
  }
  return keys;
}

RowExp exponentiate_row(std::span<const std::uint8_t> visible, VisibleKeys keys,
                        std::span<double> s, std::span<float> s_low, double sink) {
  RowExp row{sink, 0, 0, 0, 0};
  float max_low = static_cast<float>(sink);
  for (int j = keys.first; j <= keys.last; ++j) {
    if (!visible[j]) continue;
    row.max = std::max(row.max, s[j]);
    max_low = std::max(max_low, s_low[j]);
  }
  for (int j = keys.first; j <= keys.last; ++j) {
    if (!visible[j]) continue;
    s[j] = std::exp(s[j] - row.max);
    s_low[j] = std::exp(s_low[j] - max_low);
    row.sum += s[j];
    row.sum_low += s_low[j];
  }
  if (sink != kNegInf) {
    row.sink = std::exp(sink - row.max);
    row.sink_low = std::exp(static_cast<float>(sink) - max_low);
    row.sum += row.sink;
    row.sum_low += row.sink_low;
  }
  return row;
}

double sink_of(const Problem& p, int h) {
  return p.sinks.empty() ? kNegInf : static_cast<double>(p.sinks[h]);
}

namespace {

/// Computes rows of one (batch, query head) pair into `ref`. Scores are accumulated as
/// s[j] += q[d] * kT[d][j] so that the inner loops vectorize without reordering sums.
void attend_head(const Problem& p, std::span<const float> q, std::span<const float> k,
                 std::span<const float> v, int b, int h, Reference& ref) {
  const int sq = p.seqlen_q, sk = p.seqlen_k, d_qk = p.head_dim, d_v = p.head_dim_v;
  const int kvh = h / (p.heads / p.kv_heads);
  const auto k_at = [&](int j, int d) {
    return k[((static_cast<std::size_t>(b) * sk + j) * p.kv_heads + kvh) * d_qk + d];
  };
  const auto v_row = [&](int j) {
    return v.subspan(((static_cast<std::size_t>(b) * sk + j) * p.kv_heads + kvh) * d_v, d_v);
  };
  std::vector<double> kt(static_cast<std::size_t>(d_qk) * sk);
  std::vector<float> kt_low(kt.size());
  for (int d = 0; d < d_qk; ++d) {
    for (int j = 0; j < sk; ++j) {
      kt[static_cast<std::size_t>(d) * sk + j] = k_at(j, d);
      kt_low[static_cast<std::size_t>(d) * sk + j] = k_at(j, d);
    }
  }
  std::vector<std::uint8_t> visible(sk);
  std::vector<double> s(sk), acc(d_v);
  std::vector<float> s_low(sk), acc_low(d_v);
  for (int i = 0; i < sq; ++i) {
    const std::size_t out_base = ((static_cast<std::size_t>(b) * sq + i) * p.heads + h) * d_v;
    const std::size_t lse_index = (static_cast<std::size_t>(b) * p.heads + h) * sq + i;
    // Scores are computed for keys [first, last], the span of visible keys only.
    const VisibleKeys keys = visible_keys(p, b, h, i, visible);
    const int first = keys.first, last = keys.last;
    if (last < 0) {
      ref.lse[lse_index] = sink_of(p, h);
      continue;  // out and out_lowp stay 0
    }
    const auto q_row =
        q.subspan(((static_cast<std::size_t>(b) * sq + i) * p.heads + h) * d_qk, d_qk);
    std::fill(s.begin() + first, s.begin() + last + 1, 0.0);
    std::fill(s_low.begin() + first, s_low.begin() + last + 1, 0.0f);
    for (int d = 0; d < d_qk; ++d) {
      const double qd = q_row[d];
      const float qd_low = q_row[d];
      const double* kt_row = &kt[static_cast<std::size_t>(d) * sk];
      const float* kt_low_row = &kt_low[static_cast<std::size_t>(d) * sk];
      for (int j = first; j <= last; ++j) s[j] += qd * kt_row[j];
      for (int j = first; j <= last; ++j) s_low[j] += qd_low * kt_low_row[j];
    }
    for (int j = first; j <= last; ++j) {
      if (!visible[j]) continue;
      // The low-precision path applies the modifiers in fp32, as a fused kernel would.
      s[j] = modified_score(p, h, i, j, s[j] * p.softmax_scale);
      s_low[j] = static_cast<float>(modified_score(p, h, i, j, s_low[j] * p.softmax_scale));
    }
    const RowExp row = exponentiate_row(visible, keys, s, s_low, sink_of(p, h));
    const double sum = row.sum;
    const float sum_low = row.sum_low;
    ref.lse[lse_index] = row.max + std::log(sum);
    std::fill(acc.begin(), acc.end(), 0.0);
    std::fill(acc_low.begin(), acc_low.end(), 0.0f);
    for (int j = first; j <= last; ++j) {
      if (!visible[j]) continue;
      const double weight = s[j] / sum;
      const float weight_low = round_to(p.dtype, s_low[j] / sum_low);
      const auto row = v_row(j);
      for (int d = 0; d < d_v; ++d) acc[d] += weight * row[d];
      for (int d = 0; d < d_v; ++d) acc_low[d] += weight_low * row[d];
    }
    for (int d = 0; d < d_v; ++d) {
      ref.out[out_base + d] = acc[d];
      ref.out_lowp[out_base + d] = round_to(p.dtype, acc_low[d]);
    }
  }
}

std::string format_verdict(bool passed) {
  return passed ? "passed" : "FAILED";
}

}  // namespace

Reference reference_forward(const Problem& p, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v) {
  check_problem("reference_forward", p, q, k, v);
  Reference ref;
  const std::size_t out_size =
      static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads * p.head_dim_v;
  ref.out.assign(out_size, 0.0);
  ref.out_lowp.assign(out_size, 0.0f);
  ref.lse.assign(static_cast<std::size_t>(p.batch) * p.heads * p.seqlen_q, 0.0);
  for_each_head(p, [&](int b, int h) { attend_head(p, q, k, v, b, h, ref); });
  return ref;
}

Comparison compare_output(std::span<const float> got, const Reference& ref, DType dtype) {
  if (got.size() != ref.out.size()) {
    throw_field_error("compare_output: output size", fmt::to_string(got.size()),
                      fmt::format("the reference's {} values", ref.out.size()));
  }
  // atol is a floor for outputs the low-precision emulation happens to get (nearly) exact.
  // With O(1) inputs it is about a quarter of a unit in the last place at magnitude 1 for bf16
  // (2^-7 ≈ 7.8e-3) and half of one for fp16 (2^-10 ≈ 9.8e-4): one extra rounding of an
  // output near 1 fits, a wrong mask or a dropped key block does not.
  const double atol = dtype == DType::bf16 ? 2e-3 : 5e-4;
  const double rtol_l2 = dtype == DType::bf16 ? 2e-2 : 5e-3;
  Comparison c;
  c.count = static_cast<std::int64_t>(got.size());
  double diff_sq = 0, ref_sq = 0;
  for (std::size_t n = 0; n < got.size(); ++n) {
    c.baseline_max_abs_err = std::max(c.baseline_max_abs_err,
                                      std::abs(static_cast<double>(ref.out_lowp[n]) - ref.out[n]));
    if (!std::isfinite(got[n])) {
      ++c.nonfinite;
      continue;
    }
    const double diff = static_cast<double>(got[n]) - ref.out[n];
    c.max_abs_err = std::max(c.max_abs_err, std::abs(diff));
    diff_sq += diff * diff;
    ref_sq += ref.out[n] * ref.out[n];
  }
  c.rel_l2_err = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  const double limit = 2 * c.baseline_max_abs_err + atol;
  c.passed = c.nonfinite == 0 && c.max_abs_err <= limit && c.rel_l2_err <= rtol_l2;
  c.summary = fmt::format(
      "output {} {}: max_abs_err={:.3e} (limit 2*baseline {:.3e} + atol {:.1e} = {:.3e}), "
      "rel_l2_err={:.3e} (limit {:.1e}), nonfinite={} of {}",
      name_of(dtype), format_verdict(c.passed), c.max_abs_err, c.baseline_max_abs_err, atol, limit,
      c.rel_l2_err, rtol_l2, c.nonfinite, c.count);
  return c;
}

Comparison compare_lse(std::span<const float> got, const Reference& ref) {
  if (got.size() != ref.lse.size()) {
    throw_field_error("compare_lse: lse size", fmt::to_string(got.size()),
                      fmt::format("the reference's {} values", ref.lse.size()));
  }
  Comparison c;
  c.count = static_cast<std::int64_t>(got.size());
  std::int64_t inf_mismatches = 0, out_of_tolerance = 0;
  double diff_sq = 0, ref_sq = 0;
  for (std::size_t n = 0; n < got.size(); ++n) {
    const double expected = ref.lse[n];
    const double value = got[n];
    if (std::isinf(expected)) {
      if (value != expected) ++inf_mismatches;
      continue;
    }
    if (!std::isfinite(value)) {
      ++c.nonfinite;
      continue;
    }
    const double diff = std::abs(value - expected);
    c.max_abs_err = std::max(c.max_abs_err, diff);
    if (diff > 1e-3 + 1e-4 * std::abs(expected)) ++out_of_tolerance;
    diff_sq += diff * diff;
    ref_sq += expected * expected;
  }
  c.rel_l2_err = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  c.passed = c.nonfinite == 0 && inf_mismatches == 0 && out_of_tolerance == 0;
  c.summary = fmt::format(
      "lse {}: max_abs_err={:.3e} (limit 1e-3 + 1e-4*|ref| per value, {} over), "
      "rel_l2_err={:.3e}, nonfinite={}, -inf mismatches={} of {}",
      format_verdict(c.passed), c.max_abs_err, out_of_tolerance, c.rel_l2_err, c.nonfinite,
      inf_mismatches, c.count);
  return c;
}

}  // namespace attnjit::testing
