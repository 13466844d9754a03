// The CPU reference attention backward: exact float64 gradients, PyTorch's bf16/fp16 math
// attention under autograd as the low-precision baseline, and the gradient comparison.
#include "support/reference_backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "support/half_round.hpp"

namespace attnjit::testing {
namespace {

/// The inputs of one backward, with the problem they belong to.
struct Inputs {
  const Problem& p;
  std::span<const float> q, k, v, d_o;
};

/// dK and dV of every query head before the GQA sum: [B, H, Sk, D] and [B, H, Sk, Dv]. Each
/// (batch, query head) task owns its slice, so tasks run concurrently without sharing writes.
struct PerHeadGradients {
  std::vector<double> dk, dv;
  std::vector<float> dk_lowp, dv_lowp;  ///< each rounded to the dtype
  /// Each head's bounds of Gradients::dq_cancellation and dk_cancellation, [B, H].
  std::vector<double> dq_cancellation, dk_cancellation;
  /// With sinks, each (batch, head)'s share of Gradients::d_sinks, d_sinks_lowp and of the
  /// bound d_sinks_cancellation, [B, H].
  std::vector<double> d_sinks, d_sinks_bound;
  std::vector<float> d_sinks_lowp;
};

/// The relative fp32 rounding of a sum over `terms` terms, as Gradients::dq_cancellation
/// models it: 4 sqrt(terms) 2^-24.
double fp32_sum_rounding(int terms) {
  return 4 * std::sqrt(static_cast<double>(terms)) * 0x1p-24;
}

/// max_d |x[d]| of each of the `rows` rows of a transposed [cols][rows] matrix.
std::vector<double> row_max_abs(const std::vector<double>& transposed, int rows, int cols) {
  std::vector<double> out(rows, 0.0);
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < rows; ++r) {
      out[r] = std::max(out[r], std::abs(transposed[static_cast<std::size_t>(c) * rows + r]));
    }
  }
  return out;
}

/// Offset of element 0 of row `s` of head `h` in a contiguous [B, seqlen, heads, dim] tensor.
std::size_t row_offset(int b, int s, int seqlen, int h, int heads, int dim) {
  return ((static_cast<std::size_t>(b) * seqlen + s) * heads + h) * dim;
}

/// The [rows][cols] matrix of (batch `b`, head `h`) in `x` [B, rows, heads, cols], transposed to
/// [cols][rows] so that dot products with every row accumulate over cols in vectorizable loops.
template <typename T>
std::vector<T> transposed_head(std::span<const float> x, int b, int rows, int h, int heads,
                               int cols) {
  std::vector<T> t(static_cast<std::size_t>(cols) * rows);
  for (int r = 0; r < rows; ++r) {
    const std::size_t base = row_offset(b, r, rows, h, heads, cols);
    for (int c = 0; c < cols; ++c) t[static_cast<std::size_t>(c) * rows + r] = x[base + c];
  }
  return t;
}

/// Gradients of one (batch `b`, query head `h`) pair: its dq rows into `out`, its dK and dV
/// contributions into its own slice of `heads`. Per row i with visible keys J, with m the
/// score modifiers (modified_score) and m' their derivative:
/// P = softmax(m(scale * q_i K_J^T)), dV_j += P_j dO_i, dP_j = dO_i . v_j, D = sum_j P_j dP_j,
/// dS_j = P_j (dP_j - D) m'_j, dq_i = scale * sum_j dS_j k_j, dK_j += scale * dS_j q_i; with a
/// sink t (in P's denominator), d t -= P_sink D. Masked keys are skipped (their P is 0), so rows
/// with no visible key leave everything 0 (their O is 0, so D = 0).
void backward_head(const Inputs& in, int b, int h, Gradients& out, PerHeadGradients& heads) {
  const Problem& p = in.p;
  const int sq = p.seqlen_q, sk = p.seqlen_k, d_qk = p.head_dim, d_v = p.head_dim_v;
  const int kvh = h / (p.heads / p.kv_heads);
  const double scale = p.softmax_scale;
  const float scale_low = p.softmax_scale;
  const auto to_dtype = [&](float x) { return round_to(p.dtype, x); };
  const auto kt = transposed_head<double>(in.k, b, sk, kvh, p.kv_heads, d_qk);
  const auto kt_low = transposed_head<float>(in.k, b, sk, kvh, p.kv_heads, d_qk);
  const auto vt = transposed_head<double>(in.v, b, sk, kvh, p.kv_heads, d_v);
  const auto vt_low = transposed_head<float>(in.v, b, sk, kvh, p.kv_heads, d_v);
  const std::size_t head = static_cast<std::size_t>(b) * p.heads + h;
  double* dk = &heads.dk[head * sk * d_qk];
  double* dv = &heads.dv[head * sk * d_v];
  float* dk_low = &heads.dk_lowp[head * sk * d_qk];
  float* dv_low = &heads.dv_lowp[head * sk * d_v];
  // The cancellation bounds (Gradients::dq_cancellation): |K_j| and, per key, dK's sum.
  const std::vector<double> k_max = row_max_abs(kt, sk, d_qk);
  std::vector<double> dk_bound(sk, 0.0), magnitude(sk);
  double dq_bound = 0;
  const double rounding = fp32_sum_rounding(d_v);
  const double unit_roundoff = p.dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
  const double sink = sink_of(p, h);
  std::vector<std::uint8_t> visible(sk);
  std::vector<double> prob(sk), ds(sk), dq(d_qk), grad_mod(sk);
  std::vector<float> prob_low(sk), ds_low(sk), dq_low(d_qk), grad_mod_low(sk);
  for (int i = 0; i < sq; ++i) {
    const VisibleKeys keys = visible_keys(p, b, h, i, visible);
    const int first = keys.first, last = keys.last;
    if (last < 0) continue;  // dq stays 0 and the row adds nothing to dK, dV
    const auto q_row = in.q.subspan(row_offset(b, i, sq, h, p.heads, d_qk), d_qk);
    const auto do_row = in.d_o.subspan(row_offset(b, i, sq, h, p.heads, d_v), d_v);
    // Scores into prob, dP into ds, over keys [first, last].
    std::fill(prob.begin() + first, prob.begin() + last + 1, 0.0);
    std::fill(prob_low.begin() + first, prob_low.begin() + last + 1, 0.0f);
    std::fill(ds.begin() + first, ds.begin() + last + 1, 0.0);
    std::fill(ds_low.begin() + first, ds_low.begin() + last + 1, 0.0f);
    std::fill(magnitude.begin() + first, magnitude.begin() + last + 1, 0.0);
    for (int d = 0; d < d_qk; ++d) {
      const double* kt_row = &kt[static_cast<std::size_t>(d) * sk];
      const float* kt_low_row = &kt_low[static_cast<std::size_t>(d) * sk];
      for (int j = first; j <= last; ++j) prob[j] += q_row[d] * kt_row[j];
      for (int j = first; j <= last; ++j) prob_low[j] += q_row[d] * kt_low_row[j];
    }
    for (int d = 0; d < d_v; ++d) {
      const double* vt_row = &vt[static_cast<std::size_t>(d) * sk];
      const float* vt_low_row = &vt_low[static_cast<std::size_t>(d) * sk];
      for (int j = first; j <= last; ++j) ds[j] += do_row[d] * vt_row[j];
      for (int j = first; j <= last; ++j) magnitude[j] += std::abs(do_row[d] * vt_row[j]);
      for (int j = first; j <= last; ++j) ds_low[j] += do_row[d] * vt_low_row[j];
    }
    for (int j = first; j <= last; ++j) {
      if (!visible[j]) continue;
      // The low-precision path rounds S and applies the modifiers to it in fp32.
      prob[j] = modified_score(p, h, i, j, prob[j] * scale, &grad_mod[j]);
      double grad_low = 1;
      prob_low[j] = static_cast<float>(
          modified_score(p, h, i, j, to_dtype(prob_low[j] * scale_low), &grad_low));
      grad_mod_low[j] = static_cast<float>(grad_low);
    }
    const RowExp row = exponentiate_row(visible, keys, prob, prob_low, sink);
    const double sum = row.sum;
    const float sum_low = row.sum_low;
    double row_dot = 0;
    float row_dot_low = 0;
    for (int j = first; j <= last; ++j) {
      if (!visible[j]) continue;
      prob[j] /= sum;
      prob_low[j] = to_dtype(prob_low[j] / sum_low);
      ds_low[j] = to_dtype(ds_low[j]);
      row_dot += prob[j] * ds[j];
      row_dot_low += prob_low[j] * ds_low[j];
    }
    // dP_j and D's rounding in a kernel: of sum_d |dO_d v_jd| and of sum_j P_j of it.
    double row_magnitude = 0;
    double q_max = 0;
    for (int j = first; j <= last; ++j) {
      if (visible[j]) row_magnitude += prob[j] * magnitude[j];
    }
    if (sink != -std::numeric_limits<double>::infinity()) {
      const double sink_prob = row.sink / sum;
      heads.d_sinks[head] -= sink_prob * row_dot;
      heads.d_sinks_lowp[head] -= to_dtype(row.sink_low / sum_low) * row_dot_low;
      // sum_d |dO_d O_d| <= sum_j P_j sum_d |dO_d v_jd|, the row's magnitude.
      heads.d_sinks_bound[head] += sink_prob * (unit_roundoff + rounding) * row_magnitude;
    }
    for (int d = 0; d < d_qk; ++d) q_max = std::max(q_max, std::abs(static_cast<double>(q_row[d])));
    double dq_row_bound = 0;
    std::fill(dq.begin(), dq.end(), 0.0);
    std::fill(dq_low.begin(), dq_low.end(), 0.0f);
    for (int j = first; j <= last; ++j) {
      if (!visible[j]) continue;
      const double ds_error =
          rounding * prob[j] * (magnitude[j] + row_magnitude) * std::abs(grad_mod[j]);
      dq_row_bound += ds_error * k_max[j];
      dk_bound[j] += ds_error * q_max;
      ds[j] = prob[j] * (ds[j] - row_dot) * grad_mod[j];
      ds_low[j] = to_dtype(prob_low[j] * (ds_low[j] - row_dot_low) * grad_mod_low[j]);
      const auto k_row = in.k.subspan(row_offset(b, j, sk, kvh, p.kv_heads, d_qk), d_qk);
      for (int d = 0; d < d_qk; ++d) dq[d] += ds[j] * k_row[d];
      for (int d = 0; d < d_qk; ++d) dq_low[d] += ds_low[j] * k_row[d];
      double* dk_row = dk + static_cast<std::size_t>(j) * d_qk;
      float* dk_low_row = dk_low + static_cast<std::size_t>(j) * d_qk;
      for (int d = 0; d < d_qk; ++d) dk_row[d] += ds[j] * q_row[d];
      for (int d = 0; d < d_qk; ++d) dk_low_row[d] += ds_low[j] * q_row[d];
      double* dv_row = dv + static_cast<std::size_t>(j) * d_v;
      float* dv_low_row = dv_low + static_cast<std::size_t>(j) * d_v;
      for (int d = 0; d < d_v; ++d) dv_row[d] += prob[j] * do_row[d];
      for (int d = 0; d < d_v; ++d) dv_low_row[d] += prob_low[j] * do_row[d];
    }
    dq_bound = std::max(dq_bound, scale * dq_row_bound);
    const std::size_t dq_base = row_offset(b, i, sq, h, p.heads, d_qk);
    for (int d = 0; d < d_qk; ++d) {
      out.dq[dq_base + d] = scale * dq[d];
      out.dq_lowp[dq_base + d] = to_dtype(scale_low * dq_low[d]);
    }
  }
  heads.dq_cancellation[head] = dq_bound;
  heads.dk_cancellation[head] = scale * *std::max_element(dk_bound.begin(), dk_bound.end());
  for (std::size_t n = 0; n < static_cast<std::size_t>(sk) * d_qk; ++n) {
    dk[n] *= scale;
    dk_low[n] = to_dtype(scale_low * dk_low[n]);
  }
  for (std::size_t n = 0; n < static_cast<std::size_t>(sk) * d_v; ++n) {
    dv_low[n] = to_dtype(dv_low[n]);
  }
}

/// Sums per-query-head gradients [B, H, Sk, dim] over each KV head's group into
/// [B, Sk, Hkv, dim], query heads in increasing order; the low-precision sum runs in fp32 and
/// is rounded once.
void sum_over_groups(const Problem& p, int dim, std::span<const double> per_head,
                     std::span<const float> per_head_low, std::vector<double>& out,
                     std::vector<float>& out_low) {
  const int group = p.heads / p.kv_heads;
  const int sk = p.seqlen_k;
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < sk; ++j) {
      for (int g = 0; g < p.kv_heads; ++g) {
        const std::size_t base = row_offset(b, j, sk, g, p.kv_heads, dim);
        for (int d = 0; d < dim; ++d) {
          double sum = 0;
          float sum_low = 0;
          for (int h = g * group; h < (g + 1) * group; ++h) {
            const std::size_t n = ((static_cast<std::size_t>(b) * p.heads + h) * sk + j) * dim + d;
            sum += per_head[n];
            sum_low += per_head_low[n];
          }
          out[base + d] = sum;
          out_low[base + d] = round_to(p.dtype, sum_low);
        }
      }
    }
  }
}

}  // namespace

Gradients reference_backward(const Problem& p, std::span<const float> q, std::span<const float> k,
                             std::span<const float> v, std::span<const float> d_o) {
  check_problem("reference_backward", p, q, k, v);
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads;
  check_size("reference_backward", "d_o", d_o.size(), rows * p.head_dim_v, "B*Sq*H*Dv");
  Gradients out;
  out.dq.assign(rows * p.head_dim, 0.0);
  out.dq_lowp.assign(rows * p.head_dim, 0.0f);
  const std::size_t keys = static_cast<std::size_t>(p.batch) * p.seqlen_k;
  out.dk.resize(keys * p.kv_heads * p.head_dim);
  out.dk_lowp.resize(out.dk.size());
  out.dv.resize(keys * p.kv_heads * p.head_dim_v);
  out.dv_lowp.resize(out.dv.size());
  PerHeadGradients heads;
  heads.dk.assign(keys * p.heads * p.head_dim, 0.0);
  heads.dk_lowp.assign(heads.dk.size(), 0.0f);
  heads.dv.assign(keys * p.heads * p.head_dim_v, 0.0);
  heads.dv_lowp.assign(heads.dv.size(), 0.0f);
  const Inputs in{p, q, k, v, d_o};
  heads.dq_cancellation.assign(static_cast<std::size_t>(p.batch) * p.heads, 0.0);
  heads.dk_cancellation.assign(heads.dq_cancellation.size(), 0.0);
  heads.d_sinks.assign(heads.dq_cancellation.size(), 0.0);
  heads.d_sinks_bound.assign(heads.dq_cancellation.size(), 0.0);
  heads.d_sinks_lowp.assign(heads.dq_cancellation.size(), 0.0f);
  for_each_head(p, [&](int b, int h) { backward_head(in, b, h, out, heads); });
  if (!p.sinks.empty()) {
    out.d_sinks.assign(p.heads, 0.0);
    out.d_sinks_lowp.assign(p.heads, 0.0f);
    for (int h = 0; h < p.heads; ++h) {
      double bound = 0;
      for (int b = 0; b < p.batch; ++b) {
        const std::size_t n = static_cast<std::size_t>(b) * p.heads + h;
        out.d_sinks[h] += heads.d_sinks[n];
        out.d_sinks_lowp[h] += heads.d_sinks_lowp[n];
        bound += heads.d_sinks_bound[n];
      }
      out.d_sinks_cancellation = std::max(out.d_sinks_cancellation, bound);
    }
  }
  // A key's dK adds the group's heads: their bounds add (at most the group times the largest).
  out.dq_cancellation =
      *std::max_element(heads.dq_cancellation.begin(), heads.dq_cancellation.end());
  out.dk_cancellation = (p.heads / p.kv_heads) * *std::max_element(heads.dk_cancellation.begin(),
                                                                   heads.dk_cancellation.end());
  sum_over_groups(p, p.head_dim, heads.dk, heads.dk_lowp, out.dk, out.dk_lowp);
  sum_over_groups(p, p.head_dim_v, heads.dv, heads.dv_lowp, out.dv, out.dv_lowp);
  return out;
}

Comparison compare_gradient(std::string_view name, std::span<const float> got,
                            std::span<const double> ref, std::span<const float> ref_lowp,
                            DType dtype, double cancellation) {
  check_size("compare_gradient", fmt::format("{} (got)", name), got.size(), ref.size(),
             "the reference's size");
  if (!(cancellation >= 0) || !std::isfinite(cancellation)) {
    throw Error(fmt::format("compare_gradient: cancellation: got {}; accepted: a finite value >= 0",
                            cancellation));
  }
  check_size("compare_gradient", fmt::format("{} (ref_lowp)", name), ref_lowp.size(), ref.size(),
             "the reference's size");
  // atol is the one rounding a correct kernel cannot avoid: storing a gradient in the dtype
  // errs by up to u * |value| (u = 2^-8 for bf16, 2^-11 for fp16: half an ulp), so u * max|ref|
  // bounds it for every element. The baseline's own error where |ref| is largest can by chance
  // be about 0 (small problems, nearly representable values), and 2 * baseline alone would then
  // reject an exact result rounded once. A wrong mask, a dropped block or a missing GQA head
  // moves gradients by a sizeable fraction of max|ref|, far above one rounding.
  // rel_l2: bf16 gradients land between 1e-3 and 1e-2; dS = P (dP - D) cancels, so the limit
  // leaves 5x headroom; fp16 carries three more mantissa bits and gets 1e-2.
  const double unit_roundoff = dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
  const double rtol_l2 = dtype == DType::bf16 ? 5e-2 : 1e-2;
  double max_ref = 0;
  for (const double r : ref) max_ref = std::max(max_ref, std::abs(r));
  const double atol = unit_roundoff * max_ref;
  Comparison c;
  c.count = static_cast<std::int64_t>(got.size());
  double diff_sq = 0, ref_sq = 0;
  for (std::size_t n = 0; n < got.size(); ++n) {
    c.baseline_max_abs_err =
        std::max(c.baseline_max_abs_err, std::abs(static_cast<double>(ref_lowp[n]) - ref[n]));
    if (!std::isfinite(got[n])) {
      ++c.nonfinite;
      continue;
    }
    const double diff = static_cast<double>(got[n]) - ref[n];
    c.max_abs_err = std::max(c.max_abs_err, std::abs(diff));
    diff_sq += diff * diff;
    ref_sq += ref[n] * ref[n];
  }
  c.rel_l2_err = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  // An all-zero reference admits only exact zeros where every row is masked (cancellation 0),
  // else the rounding of a cancellation (every visible row sees one key: dS = 0 exactly).
  const bool all_zero = max_ref == 0;
  const double limit = (all_zero ? 0.0 : 2 * c.baseline_max_abs_err + atol) + cancellation;
  c.passed = c.nonfinite == 0 && c.max_abs_err <= limit && (all_zero || c.rel_l2_err <= rtol_l2);
  c.summary = fmt::format(
      "{} {} {}: max_abs_err={:.3e} (limit 2*baseline {:.3e} + atol {:.3e} + cancellation "
      "{:.3e} = {:.3e}{}), rel_l2_err={:.3e} (limit {:.1e}), max|ref|={:.3e}, nonfinite={} of {}",
      name, name_of(dtype), c.passed ? "passed" : "FAILED", c.max_abs_err, c.baseline_max_abs_err,
      atol, cancellation, limit,
      all_zero ? (cancellation > 0 ? "; reference all zero: got within the cancellation"
                                   : "; reference all zero: got must be too")
               : "",
      c.rel_l2_err, rtol_l2, max_ref, c.nonfinite, c.count);
  return c;
}

}  // namespace attnjit::testing
