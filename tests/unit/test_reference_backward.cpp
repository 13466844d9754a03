// Unit tests of the CPU reference attention backward (tests/support/reference_backward):
// gradients against central differences of the reference forward for every mask kind and the
// score modifiers, fully masked rows, GQA against MHA, the low-precision baseline and the
// gradient comparison.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "attnjit/error.hpp"
#include "dsl/builders.hpp"
#include "support/half_round.hpp"
#include "support/reference.hpp"
#include "support/reference_backward.hpp"
#include "support/reference_problems.hpp"

using attnjit::DType;
using attnjit::Error;
using attnjit::MaskKind;
using attnjit::dsl::IntervalVectors;
using namespace attnjit::testing;
using Catch::Matchers::Contains;

namespace {

struct Inputs {
  std::vector<float> q, k, v, d_o;
};

/// Random inputs in [-1, 1]: multiples of 1/8 (exact in every dtype and after small
/// perturbations in float) when `eighths`, otherwise uniform values rounded to p.dtype.
Inputs random_inputs(const Problem& p, std::uint32_t seed, bool eighths) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> eighth(-8, 8);
  const auto fill = [&](std::size_t count) {
    if (!eighths) return random_values(rng, count, p.dtype);
    std::vector<float> values(count);
    for (float& x : values) x = static_cast<float>(eighth(rng)) / 8;
    return values;
  };
  Inputs in;
  in.q = fill(q_size(p));
  in.k = fill(k_size(p));
  in.v = fill(v_size(p));
  in.d_o = fill(o_size(p));
  return in;
}

Gradients run(const Problem& p, const Inputs& in) {
  return reference_backward(p, in.q, in.k, in.v, in.d_o);
}

/// L = sum(O * dO) in float64, the loss whose gradients reference_backward computes.
double loss(const Problem& p, const Inputs& in) {
  const auto ref = reference_forward(p, in.q, in.k, in.v);
  double sum = 0;
  for (std::size_t n = 0; n < ref.out.size(); ++n) sum += ref.out[n] * in.d_o[n];
  return sum;
}

/// Checks `grad` against central differences of loss() over every element of `in`.*member.
/// The step 2^-14 keeps x +- step exact in float for multiples of 1/8 in [-1, 1]; the
/// truncation error step^2/6 * L''' is about 1e-9 and the float64 cancellation error about
/// 1e-16 * |L| / step = 1e-11, both far below the 1e-6 relative tolerance.
void check_against_differences(const Problem& p, Inputs in, std::vector<float> Inputs::*member,
                               const std::vector<double>& grad, const char* name) {
  constexpr float step = 0x1p-14f;
  std::vector<float>& x = in.*member;
  REQUIRE(grad.size() == x.size());
  for (std::size_t n = 0; n < x.size(); ++n) {
    const float saved = x[n];
    x[n] = saved + step;
    const double up = loss(p, in);
    x[n] = saved - step;
    const double down = loss(p, in);
    x[n] = saved;
    INFO(name << "[" << n << "]");
    CHECK((up - down) / (2.0 * step) == Approx(grad[n]).epsilon(1e-6).margin(1e-9));
  }
}

/// 5 x 7, 2 query heads on 1 KV head, D = 4, Dv = 3: small enough to difference every input.
Problem difference_problem() {
  return make_problem(1, 5, 7, 2, 1, 4, 3, 0.5f);
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  double diff_sq = 0, ref_sq = 0;
  for (std::size_t n = 0; n < ref.size(); ++n) {
    diff_sq += (got[n] - ref[n]) * (got[n] - ref[n]);
    ref_sq += ref[n] * ref[n];
  }
  return std::sqrt(diff_sq / ref_sq);
}

bool all_finite(const Gradients& g) {
  const auto finite_double = [](const std::vector<double>& x) {
    return std::all_of(x.begin(), x.end(), [](double value) { return std::isfinite(value); });
  };
  const auto finite_float = [](const std::vector<float>& x) {
    return std::all_of(x.begin(), x.end(), [](float value) { return std::isfinite(value); });
  };
  return finite_double(g.dq) && finite_double(g.dk) && finite_double(g.dv) &&
         finite_float(g.dq_lowp) && finite_float(g.dk_lowp) && finite_float(g.dv_lowp);
}

/// Checks the gradients of `p` on `in` (all finite) against central differences of the loss.
void check_gradients_against_differences(const Problem& p, const Inputs& in) {
  const Gradients g = run(p, in);
  CHECK(all_finite(g));
  check_against_differences(p, in, &Inputs::q, g.dq, "dq");
  check_against_differences(p, in, &Inputs::k, g.dk, "dk");
  check_against_differences(p, in, &Inputs::v, g.dv, "dv");
}

/// For dq, dk and dv of `g`: the low-precision baseline compared with itself passes with a
/// nonzero baseline error; `more(name, exact, lowp, comparison)`, if given, checks the rest.
void check_baselines_pass(
    const Gradients& g, DType dtype,
    const std::function<void(const char*, const std::vector<double>&, const std::vector<float>&,
                             const Comparison&)>& more = {}) {
  for (const auto& [name, exact, lowp] :
       {std::tuple{"dq", &g.dq, &g.dq_lowp}, std::tuple{"dk", &g.dk, &g.dk_lowp},
        std::tuple{"dv", &g.dv, &g.dv_lowp}}) {
    const Comparison c = compare_gradient(name, *lowp, *exact, *lowp, dtype);
    INFO(c.summary);
    CHECK(c.passed);
    CHECK(c.baseline_max_abs_err > 0);
    if (more) more(name, *exact, *lowp, c);
  }
}

/// 2 batches, 9 x 11, 4 query heads on 2 KV heads, D = 8, Dv = 6.
Problem gqa_problem() {
  return make_problem(2, 9, 11, 4, 2, 8, 6, 0.35f);
}

/// `x` [B, Sk, Hkv, dim] with every KV head repeated for the query heads of its group.
std::vector<float> repeat_kv_heads(const Problem& p, const std::vector<float>& x, int dim) {
  const int group = p.heads / p.kv_heads;
  std::vector<float> repeated;
  for (std::size_t row = 0; row < static_cast<std::size_t>(p.batch) * p.seqlen_k; ++row) {
    for (int h = 0; h < p.heads; ++h) {
      const auto first = x.begin() + (row * p.kv_heads + h / group) * dim;
      repeated.insert(repeated.end(), first, first + dim);
    }
  }
  return repeated;
}

/// Checks GQA dK or dV [B, Sk, Hkv, dim] against the MHA ones [B, Sk, H, dim] summed over each
/// group: float64 to rounding, the low-precision ones exactly (fp32 sum, one rounding).
void check_group_sums(const Problem& p, int dim, const std::vector<double>& gqa,
                      const std::vector<float>& gqa_low, const std::vector<double>& mha,
                      const std::vector<float>& mha_low) {
  const int group = p.heads / p.kv_heads;
  for (std::size_t row = 0; row < static_cast<std::size_t>(p.batch) * p.seqlen_k; ++row) {
    for (int g = 0; g < p.kv_heads; ++g) {
      for (int d = 0; d < dim; ++d) {
        double sum = 0;
        float sum_low = 0;
        for (int h = g * group; h < (g + 1) * group; ++h) {
          sum += mha[(row * p.heads + h) * dim + d];
          sum_low += mha_low[(row * p.heads + h) * dim + d];
        }
        const std::size_t n = (row * p.kv_heads + g) * dim + d;
        CHECK(gqa[n] == Approx(sum).margin(1e-12));
        CHECK(gqa_low[n] == round_to(p.dtype, sum_low));
      }
    }
  }
}

}  // namespace

TEST_CASE("gradients match central differences of the forward for every mask", "[reference]") {
  Problem p = difference_problem();
  const Inputs in = random_inputs(p, 21, true);
  // Every FlashMask arity: causal with 1 or 2 columns, non-causal with 2 or 4. The generator
  // lays out runs of key columns for kernel tiles, so at 5 x 7 most seeds mask all or nothing;
  // these seeds give rows that are partly masked beyond causal, and a fully masked row for
  // causal C=2 (row 0) and C=4 (row 2).
  std::vector<IntervalVectors> vectors;
  for (const auto& [causal, columns, seed] :
       {std::tuple{true, 1, 28}, std::tuple{true, 2, 17}, std::tuple{false, 2, 384},
        std::tuple{false, 4, 90}}) {
    vectors.push_back(
        attnjit::dsl::random_intervals(causal, columns, 1, 1, p.seqlen_q, p.seqlen_k, seed));
    const auto dense = attnjit::dsl::dense_mask(vectors.back(), 0, 0);
    const auto masked = std::count(dense.begin(), dense.end(), std::uint8_t{1});
    const int causal_only = 4 + 3 + 2 + 1;  // keys j > i + 2 for rows 0..3
    REQUIRE(masked > (causal ? causal_only : 0));
    REQUIRE(masked < p.seqlen_q * p.seqlen_k);
  }
  const std::vector<std::pair<std::string, MaskRef>> masks = {
      {"none", {MaskKind::none, -1, 0, nullptr}},
      {"causal, Sq < Sk", {MaskKind::causal, -1, 0, nullptr}},
      {"sliding window 2 left, 1 right", {MaskKind::sliding_window, 2, 1, nullptr}},
      {"flashmask causal C=1", {MaskKind::flashmask, -1, 0, &vectors[0]}},
      {"flashmask causal C=2", {MaskKind::flashmask, -1, 0, &vectors[1]}},
      {"flashmask C=2", {MaskKind::flashmask, -1, 0, &vectors[2]}},
      {"flashmask C=4", {MaskKind::flashmask, -1, 0, &vectors[3]}}};
  for (const auto& [name, mask] : masks) {
    INFO(name);
    p.mask = mask;
    check_gradients_against_differences(p, in);
  }
}

TEST_CASE("gradients through soft-capping and ALiBi match central differences", "[reference]") {
  Problem p = difference_problem();
  const Inputs in = random_inputs(p, 23, true);
  const IntervalVectors vectors =
      attnjit::dsl::random_intervals(true, 2, 1, 1, p.seqlen_q, p.seqlen_k, 17);
  // |s| <= 2 here: a cap of 0.75 saturates the larger scores (1 - tanh^2 down to 0.03).
  const std::vector<std::pair<std::string, ScoreModRef>> modifiers = {
      {"softcap", {0.75f, {}}}, {"alibi", {0, {0.5f, -0.25f}}}, {"both", {1.5f, {0.3f, 0.7f}}}};
  const std::vector<std::pair<std::string, MaskRef>> masks = {
      {"none", {MaskKind::none, -1, 0, nullptr}},
      {"causal, Sq < Sk", {MaskKind::causal, -1, 0, nullptr}},
      {"flashmask causal C=2", {MaskKind::flashmask, -1, 0, &vectors}}};
  for (const auto& [modifier, score_mod] : modifiers) {
    for (const auto& [name, mask] : masks) {
      INFO(modifier << ", " << name);
      p.score_mod = score_mod;
      p.mask = mask;
      check_gradients_against_differences(p, in);
    }
  }
  // The differences above come from reference_forward, whose modified scores the forward
  // tests pin by hand; a backward that ignored the modifiers would differ from them.
  p.score_mod = {};
  p.mask = masks[0].second;
  const Gradients plain = run(p, in);
  p.score_mod = modifiers[0].second;
  CHECK(run(p, in).dq != plain.dq);
}

TEST_CASE("gradients with sinks, and the sinks' own, match central differences", "[reference]") {
  Problem p = difference_problem();
  const Inputs in = random_inputs(p, 29, true);
  const IntervalVectors vectors =
      attnjit::dsl::random_intervals(true, 2, 1, 1, p.seqlen_q, p.seqlen_k, 17);
  const std::vector<std::pair<std::string, MaskRef>> masks = {
      {"none", {MaskKind::none, -1, 0, nullptr}},
      {"causal, Sq < Sk", {MaskKind::causal, -1, 0, nullptr}},
      {"flashmask causal C=2 (a row sees no key)", {MaskKind::flashmask, -1, 0, &vectors}}};
  for (const auto& [name, mask] : masks) {
    INFO(name);
    p.mask = mask;
    p.sinks = {0.5f, -0.75f};
    p.score_mod = {};
    check_gradients_against_differences(p, in);
    const Gradients g = run(p, in);
    REQUIRE(g.d_sinks.size() == 2);
    REQUIRE(g.d_sinks_lowp.size() == 2);
    for (int h = 0; h < p.heads; ++h) {
      INFO("d_sinks[" << h << "]");
      constexpr float step = 0x1p-14f;
      const float saved = p.sinks[h];
      p.sinks[h] = saved + step;
      const double up = loss(p, in);
      p.sinks[h] = saved - step;
      const double down = loss(p, in);
      p.sinks[h] = saved;
      CHECK((up - down) / (2.0 * step) == Approx(g.d_sinks[h]).epsilon(1e-6).margin(1e-9));
      CHECK(g.d_sinks[h] != 0);
    }
    // With the score modifiers too.
    p.score_mod = {1.5f, {0.3f, 0.7f}};
    check_gradients_against_differences(p, in);
  }
  // Without sinks the gradient is empty; a sink moves the other gradients.
  p.mask = masks[0].second;
  p.score_mod = {};
  p.sinks = {};
  const Gradients plain = run(p, in);
  CHECK(plain.d_sinks.empty());
  p.sinks = {0.5f, -0.75f};
  CHECK(run(p, in).dq != plain.dq);
}

TEST_CASE("lowp sink gradients pass the comparison, summed over the batches", "[reference]") {
  for (const DType dtype : {DType::bf16, DType::fp16}) {
    INFO(attnjit::name_of(dtype));
    Problem p = lowp_problem(dtype);
    p.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    const Inputs in = random_inputs(p, 57, false);
    const Gradients g = run(p, in);
    const Comparison c = compare_gradient("d_sinks", g.d_sinks_lowp, g.d_sinks, g.d_sinks_lowp,
                                          dtype, g.d_sinks_cancellation);
    INFO(c.summary);
    CHECK(c.passed);
    CHECK(c.baseline_max_abs_err > 0);
    CHECK(g.d_sinks_cancellation > 0);
    // The gradient of the two batches together is the sum of each batch's.
    Problem one = p;
    one.batch = 1;
    const std::size_t q_half = q_size(one), k_half = k_size(one), v_half = v_size(one),
                      o_half = o_size(one);
    const auto half = [](const std::vector<float>& x, std::size_t size, int b) {
      return std::vector<float>(x.begin() + b * size, x.begin() + (b + 1) * size);
    };
    std::vector<double> summed(p.heads, 0.0);
    for (int b = 0; b < 2; ++b) {
      const Inputs part{half(in.q, q_half, b), half(in.k, k_half, b), half(in.v, v_half, b),
                        half(in.d_o, o_half, b)};
      const Gradients gb = run(one, part);
      for (int h = 0; h < p.heads; ++h) summed[h] += gb.d_sinks[h];
    }
    for (int h = 0; h < p.heads; ++h) CHECK(g.d_sinks[h] == Approx(summed[h]).margin(1e-12));
  }
}

TEST_CASE("lowp gradients with score modifiers pass the comparison", "[reference]") {
  for (const DType dtype : {DType::bf16, DType::fp16}) {
    INFO(attnjit::name_of(dtype));
    // Scale 0.5: |s| up to ~8, so the cap of 3 saturates some scores.
    Problem p = make_problem(1, 37, 53, 2, 1, 64, 64, 0.5f);
    p.dtype = dtype;
    p.mask.kind = MaskKind::causal;
    p.score_mod = {3.0f, {0.5f, 0.125f}};
    check_baselines_pass(run(p, random_inputs(p, 53, false)), dtype);
  }
}

TEST_CASE("a fully masked row has zero dq and adds nothing to dk and dv", "[reference]") {
  Problem p = make_problem(1, 4, 6, 2, 1, 8, 5, 0.3f);
  // Non-causal, 2 columns (LTS, UTE): UTE = 1 hides row 0 from every key; key 3 is also hidden
  // from row 3 and key 5 from rows 2 and 3.
  const IntervalVectors row0{false, 2, 1, 1, 4, 6, {4, 1, 4, 1, 4, 1, 3, 1, 4, 1, 2, 1}};
  p.mask = {MaskKind::flashmask, -1, 0, &row0};
  const Inputs in = random_inputs(p, 31, false);
  const Gradients g = run(p, in);
  CHECK(all_finite(g));
  const auto dq_row0 = [&](const auto& dq, int h) {
    const auto first = dq.begin() + static_cast<std::ptrdiff_t>(h) * p.head_dim;
    return std::vector<double>(first, first + p.head_dim);
  };
  for (int h = 0; h < p.heads; ++h) {
    CHECK(dq_row0(g.dq, h) == std::vector<double>(p.head_dim, 0.0));
    CHECK(dq_row0(g.dq_lowp, h) == std::vector<double>(p.head_dim, 0.0));
  }
  CHECK(std::any_of(g.dq.begin(), g.dq.end(), [](double x) { return x != 0; }));
  // New q and dO for row 0 change nothing: the row contributes nothing to dK and dV.
  Inputs changed = in;
  for (std::size_t n = 0; n < static_cast<std::size_t>(p.heads) * p.head_dim; ++n) {
    changed.q[n] = 0.75f;
  }
  for (std::size_t n = 0; n < static_cast<std::size_t>(p.heads) * p.head_dim_v; ++n) {
    changed.d_o[n] = -0.5f;
  }
  const Gradients same = run(p, changed);
  CHECK(same.dq == g.dq);
  CHECK(same.dk == g.dk);
  CHECK(same.dv == g.dv);
  CHECK(same.dk_lowp == g.dk_lowp);
  CHECK(same.dv_lowp == g.dv_lowp);

  SECTION("causal with more queries than keys") {
    Problem causal = p;
    causal.seqlen_q = 6;
    causal.seqlen_k = 3;
    causal.mask = {MaskKind::causal, -1, 0, nullptr};
    const Gradients c = run(causal, random_inputs(causal, 32, false));
    CHECK(all_finite(c));
    // Rows 0..2 see no key (row i sees keys j <= i - 3).
    const std::size_t masked = 3 * static_cast<std::size_t>(causal.heads) * causal.head_dim;
    CHECK(std::all_of(c.dq.begin(), c.dq.begin() + masked, [](double x) { return x == 0; }));
    CHECK(
        std::all_of(c.dq_lowp.begin(), c.dq_lowp.begin() + masked, [](float x) { return x == 0; }));
  }
  SECTION("every row masked: all gradients are zero and only zeros pass") {
    const IntervalVectors all{false, 2, 1, 1, 4, 6, std::vector<std::int32_t>(12, 4)};
    p.mask = {MaskKind::flashmask, -1, 0, &all};
    const Gradients z = run(p, in);
    CHECK(std::all_of(z.dk.begin(), z.dk.end(), [](double x) { return x == 0; }));
    CHECK(std::all_of(z.dv.begin(), z.dv.end(), [](double x) { return x == 0; }));
    CHECK(std::all_of(z.dq.begin(), z.dq.end(), [](double x) { return x == 0; }));
    CHECK(z.dq_cancellation == 0);
    CHECK(z.dk_cancellation == 0);
    const auto zeros = compare_gradient("dk", z.dk_lowp, z.dk, z.dk_lowp, DType::bf16);
    INFO(zeros.summary);
    CHECK(zeros.passed);
    CHECK_THAT(zeros.summary, Contains("reference all zero"));
    std::vector<float> tiny = z.dk_lowp;
    tiny[3] = 1e-30f;
    CHECK_FALSE(compare_gradient("dk", tiny, z.dk, z.dk_lowp, DType::bf16).passed);
  }
}

TEST_CASE("GQA gradients are MHA gradients summed over each group", "[reference]") {
  Problem p = gqa_problem();
  const Inputs in = random_inputs(p, 41, false);
  // Two mask heads, one per KV head; seed 43 leaves one (batch, mask head) unmasked, masks two
  // fully and one partly.
  const IntervalVectors vectors = attnjit::dsl::random_intervals(false, 4, 2, 2, 9, 11, 43);
  for (const MaskKind kind : {MaskKind::causal, MaskKind::flashmask}) {
    INFO(attnjit::name_of(kind));
    p.mask = {kind, -1, 0, kind == MaskKind::flashmask ? &vectors : nullptr};
    const Gradients gqa = run(p, in);
    Problem mha = p;
    mha.kv_heads = p.heads;
    const Inputs repeated{in.q, repeat_kv_heads(p, in.k, p.head_dim),
                          repeat_kv_heads(p, in.v, p.head_dim_v), in.d_o};
    const Gradients ref = run(mha, repeated);
    CHECK(gqa.dq == ref.dq);
    CHECK(gqa.dq_lowp == ref.dq_lowp);
    check_group_sums(p, p.head_dim, gqa.dk, gqa.dk_lowp, ref.dk, ref.dk_lowp);
    check_group_sums(p, p.head_dim_v, gqa.dv, gqa.dv_lowp, ref.dv, ref.dv_lowp);
  }
}

TEST_CASE("lowp gradients are close to the exact ones and pass the comparison", "[reference]") {
  for (const DType dtype : {DType::bf16, DType::fp16}) {
    INFO(attnjit::name_of(dtype));
    const Problem p = lowp_problem(dtype);
    const Gradients g = run(p, random_inputs(p, 51, false));
    const double max_rel_l2 = dtype == DType::bf16 ? 3e-2 : 5e-3;
    CHECK(rel_l2(g.dq_lowp, g.dq) < max_rel_l2);
    CHECK(rel_l2(g.dk_lowp, g.dk) < max_rel_l2);
    CHECK(rel_l2(g.dv_lowp, g.dv) < max_rel_l2);
    check_baselines_pass(g, dtype,
                         [&](const char* name, const std::vector<double>& exact,
                             const std::vector<float>& lowp, const Comparison& c) {
                           INFO(c.summary);
                           CHECK(c.max_abs_err == c.baseline_max_abs_err);
                           CHECK(c.count == static_cast<std::int64_t>(exact.size()));
                           CHECK_THAT(c.summary,
                                      Contains(std::string(name) + " " +
                                               std::string(attnjit::name_of(dtype)) + " passed") &&
                                          Contains("rel_l2_err=") && Contains("atol"));
                           const std::vector<float> rounded_exact(exact.begin(), exact.end());
                           CHECK(compare_gradient(name, rounded_exact, exact, lowp, dtype).passed);
                         });
  }
}

TEST_CASE("rows that see one key: dQ and dK cancel to zero; a kernel's fp32 rounding passes",
          "[reference]") {
  // Row i sees key i only (FlashMask LTS = i + 1, LTE = Sq, UTS = 0, UTE = i): P = 1, so dS =
  // dP - D = 0 exactly in the reference, while a kernel's fp32 sums for dP and D differ by
  // their rounding.
  Problem p = gqa_problem();
  p.seqlen_q = p.seqlen_k = 5;
  p.head_dim = 16;
  p.head_dim_v = 64;
  IntervalVectors diagonal{false, 4, 1, 1, 5, 5, {}};
  for (int j = 0; j < 5; ++j) diagonal.data.insert(diagonal.data.end(), {j + 1, 5, 0, j});
  p.batch = 1;
  p.mask = {MaskKind::flashmask, -1, 0, &diagonal};
  const Inputs in = random_inputs(p, 83, false);
  const Gradients g = run(p, in);
  CHECK(std::all_of(g.dq.begin(), g.dq.end(), [](double x) { return x == 0; }));
  CHECK(std::all_of(g.dk.begin(), g.dk.end(), [](double x) { return x == 0; }));
  double max_dv = 0;
  for (const double x : g.dv) max_dv = std::max(max_dv, std::abs(x));
  REQUIRE(max_dv > 0.1);
  CHECK(g.dq_cancellation > 0);
  CHECK(g.dk_cancellation > 0);
  CHECK(g.dq_cancellation < 1e-4 * max_dv);
  CHECK(g.dk_cancellation < 1e-4 * max_dv);

  // dQ as a kernel forms it in fp32: dP = dO . v_i summed upwards, D = dO . O (O = v_i) summed
  // downwards, dQ = scale (dP - D) k_i.
  std::vector<float> dq(g.dq.size());
  bool nonzero = false;
  for (int i = 0; i < 5; ++i) {
    for (int h = 0; h < p.heads; ++h) {
      const int kvh = h / (p.heads / p.kv_heads);
      const float* d_o = &in.d_o[(static_cast<std::size_t>(i) * p.heads + h) * p.head_dim_v];
      const float* v = &in.v[(static_cast<std::size_t>(i) * p.kv_heads + kvh) * p.head_dim_v];
      const float* k = &in.k[(static_cast<std::size_t>(i) * p.kv_heads + kvh) * p.head_dim];
      float d_p = 0, d = 0;
      for (int e = 0; e < p.head_dim_v; ++e) d_p += d_o[e] * v[e];
      for (int e = p.head_dim_v - 1; e >= 0; --e) d += d_o[e] * v[e];
      for (int e = 0; e < p.head_dim; ++e) {
        const float value = p.softmax_scale * (d_p - d) * k[e];
        dq[(static_cast<std::size_t>(i) * p.heads + h) * p.head_dim + e] = value;
        nonzero |= value != 0;
      }
    }
  }
  const auto rounded = compare_gradient("dq", dq, g.dq, g.dq_lowp, DType::bf16, g.dq_cancellation);
  INFO(rounded.summary);
  CHECK(rounded.passed);
  CHECK_THAT(rounded.summary, Contains("got within the cancellation"));
  // Without the bound the same rounding fails (the sums differ for these inputs).
  REQUIRE(nonzero);
  CHECK_FALSE(compare_gradient("dq", dq, g.dq, g.dq_lowp, DType::bf16).passed);
  // Twice the bound, or the gradients of another mask, fail.
  std::vector<float> over(g.dq.size(), 0.0f);
  over[7] = static_cast<float>(2 * g.dq_cancellation);
  CHECK_FALSE(compare_gradient("dq", over, g.dq, g.dq_lowp, DType::bf16, g.dq_cancellation).passed);
  Problem causal = p;
  causal.mask = {MaskKind::causal, -1, 0, nullptr};
  const Gradients other = run(causal, in);
  CHECK_FALSE(compare_gradient("dq", other.dq_lowp, g.dq, g.dq_lowp, DType::bf16, g.dq_cancellation)
                  .passed);
  CHECK_FALSE(compare_gradient("dk", other.dk_lowp, g.dk, g.dk_lowp, DType::bf16, g.dk_cancellation)
                  .passed);
  CHECK_THROWS_AS(compare_gradient("dq", dq, g.dq, g.dq_lowp, DType::bf16, -1.0), Error);
}

TEST_CASE("compare_gradient fails on a perturbed value, a NaN and a wrong mask", "[reference]") {
  Problem p = gqa_problem();
  p.seqlen_q = 30;
  p.seqlen_k = 30;
  p.mask.kind = MaskKind::causal;
  const Inputs in = random_inputs(p, 61, false);
  const Gradients g = run(p, in);
  double max_dk = 0;
  for (const double x : g.dk) max_dk = std::max(max_dk, std::abs(x));
  std::vector<float> got = g.dk_lowp;
  got[17] += static_cast<float>(0.1 * max_dk);
  const auto perturbed = compare_gradient("dk", got, g.dk, g.dk_lowp, DType::bf16);
  INFO(perturbed.summary);
  CHECK_FALSE(perturbed.passed);
  CHECK(perturbed.max_abs_err > 0.09 * max_dk);
  CHECK_THAT(perturbed.summary, Contains("dk bf16 FAILED"));
  got = g.dq_lowp;
  got[5] = std::numeric_limits<float>::quiet_NaN();
  const auto nan = compare_gradient("dq", got, g.dq, g.dq_lowp, DType::bf16);
  CHECK_FALSE(nan.passed);
  CHECK(nan.nonfinite == 1);
  CHECK_THAT(nan.summary, Contains("nonfinite=1 of " + std::to_string(g.dq.size())));
  p.mask.kind = MaskKind::none;
  const Gradients unmasked = run(p, in);
  CHECK_FALSE(compare_gradient("dv", unmasked.dv_lowp, g.dv, g.dv_lowp, DType::bf16).passed);
  CHECK_THROWS_AS(compare_gradient("dv", std::vector<float>(5), g.dv, g.dv_lowp, DType::bf16),
                  Error);
}

TEST_CASE("reference_backward rejects inconsistent inputs", "[reference]") {
  Problem p = gqa_problem();
  Inputs in = random_inputs(p, 71, false);
  in.d_o.pop_back();
  CHECK_THROWS_WITH(run(p, in), Contains("reference_backward: d_o size: got '431'"));
  in = random_inputs(p, 71, false);
  in.k.pop_back();
  CHECK_THROWS_WITH(run(p, in), Contains("reference_backward: k size"));
}
