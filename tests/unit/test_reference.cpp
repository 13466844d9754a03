// Unit tests of the CPU reference attention (tests/support/reference) and of the half-precision
// rounding it uses: hand-checkable cases, masking, GQA, and the pass/fail comparisons.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "attnjit/error.hpp"
#include "dsl/builders.hpp"
#include "support/half_round.hpp"
#include "support/reference.hpp"
#include "support/reference_problems.hpp"

using attnjit::DType;
using attnjit::Error;
using attnjit::MaskKind;
using namespace attnjit::testing;
using Catch::Matchers::Contains;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs random_inputs(const Problem& p, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.q = random_values(rng, q_size(p), p.dtype);
  in.k = random_values(rng, k_size(p), p.dtype);
  in.v = random_values(rng, v_size(p), p.dtype);
  return in;
}

Reference run(const Problem& p, const Inputs& in) {
  return reference_forward(p, in.q, in.k, in.v);
}

/// A problem with zero queries (so every visible key gets the same score) and v[j][d] = j + d.
Inputs uniform_score_inputs(const Problem& p) {
  Inputs in;
  in.q.assign(q_size(p), 0.0f);
  in.k.assign(k_size(p), 1.0f);
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < p.seqlen_k; ++j) {
      for (int g = 0; g < p.kv_heads; ++g) {
        for (int d = 0; d < p.head_dim_v; ++d) in.v.push_back(static_cast<float>(j + d + 10 * g));
      }
    }
  }
  return in;
}

void check_close(const std::vector<double>& got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  for (std::size_t n = 0; n < got.size(); ++n) CHECK(got[n] == Approx(expected[n]).margin(1e-12));
}

Problem small_problem(int seqlen_q, int seqlen_k) {
  return make_problem(1, seqlen_q, seqlen_k, 1, 1, 4, 3, 1.0f);
}

}  // namespace

TEST_CASE("half rounding is round-to-nearest-even", "[reference]") {
  using namespace attnjit::testing;
  CHECK(round_to_bf16(1.0f + 0x1p-8f) == 1.0f);
  CHECK(round_to_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
  CHECK(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
  CHECK(std::isinf(round_to_bf16(3.4028235e38f)));
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(round_to_fp16(1.0f + 0x1p-11f) == 1.0f);
  CHECK(round_to_fp16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
  CHECK(round_to_fp16(65504.0f) == 65504.0f);
  CHECK(round_to_fp16(65519.0f) == 65504.0f);
  CHECK(std::isinf(round_to_fp16(65520.0f)));
  CHECK(round_to_fp16(-0x1p-24f) == -0x1p-24f);
  CHECK(round_to_fp16(0x1p-25f) == 0.0f);
  CHECK(round_to_fp16(3 * 0x1p-25f) == 0x1p-23f);
  CHECK(round_to_fp16(0x1p-14f - 0x1p-26f) == 0x1p-14f);
  CHECK(std::isnan(round_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto b16 = static_cast<std::uint16_t>(bits);
    const float bf = bf16_bits_to_float(b16);
    if (!std::isnan(bf)) CHECK(float_to_bf16_bits(bf) == b16);
    const float h = fp16_bits_to_float(b16);
    if (!std::isnan(h)) CHECK(float_to_fp16_bits(h) == b16);
  }
  // Every rounded value is at least as close as both neighbours of the result.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(0x1p-20f, 60000.0f);
  for (int n = 0; n < 20000; ++n) {
    const float x = value(rng) * (n % 2 == 0 ? 1.0f : 0x1p-10f);
    const std::uint16_t h = float_to_fp16_bits(x);
    const double err = std::abs(static_cast<double>(fp16_bits_to_float(h)) - x);
    CHECK(err <= std::abs(static_cast<double>(fp16_bits_to_float(h + 1)) - x));
    if (h > 0) CHECK(err <= std::abs(static_cast<double>(fp16_bits_to_float(h - 1)) - x));
    const std::uint16_t bf = float_to_bf16_bits(x);
    const double bf_err = std::abs(static_cast<double>(bf16_bits_to_float(bf)) - x);
    CHECK(bf_err <= std::abs(static_cast<double>(bf16_bits_to_float(bf + 1)) - x));
    CHECK(bf_err <= std::abs(static_cast<double>(bf16_bits_to_float(bf - 1)) - x));
  }
}

TEST_CASE("one visible key: O is its value row and LSE its score", "[reference]") {
  Problem p = small_problem(2, 1);
  p.softmax_scale = 0.5f;
  const Inputs in{{1, 2, 3, 4, -1, 0, 0.5f, 2}, {1, -1, 2, 0.25f}, {3, -2, 0.5f}};
  const Reference ref = run(p, in);
  CHECK(ref.out == std::vector<double>{3, -2, 0.5, 3, -2, 0.5});
  CHECK(ref.lse[0] == Approx(0.5 * (1 - 2 + 6 + 1)));
  CHECK(ref.lse[1] == Approx(0.5 * (-1 + 0 + 1 + 0.5)));
  CHECK(ref.out_lowp == std::vector<float>{3, -2, 0.5f, 3, -2, 0.5f});
}

TEST_CASE("uniform scores average V; Sq != Sk causal is bottom-right aligned", "[reference]") {
  Problem p = small_problem(2, 5);
  const Inputs in = uniform_score_inputs(p);
  SECTION("no mask: every row is the mean of V") {
    const Reference ref = run(p, in);
    check_close(ref.out, std::vector<double>{2, 3, 4, 2, 3, 4});
    CHECK(ref.lse[0] == Approx(std::log(5.0)));
  }
  SECTION("causal: row 0 sees keys 0..3, row 1 sees all five") {
    p.mask.kind = MaskKind::causal;
    const Reference ref = run(p, in);
    check_close(ref.out, std::vector<double>{1.5, 2.5, 3.5, 2, 3, 4});
    CHECK(ref.lse[0] == Approx(std::log(4.0)));
    CHECK(ref.lse[1] == Approx(std::log(5.0)));
  }
  SECTION("sliding window of one key on each side of the shifted diagonal") {
    p.mask = {MaskKind::sliding_window, 1, 1, nullptr};
    const Reference ref = run(p, in);
    // Row 0's diagonal is key 3 (keys 2..4), row 1's is key 4 (keys 3..4).
    check_close(ref.out, std::vector<double>{3, 4, 5, 3.5, 4.5, 5.5});
  }
}

TEST_CASE("a row with no visible key gives O = 0 and LSE = -inf", "[reference]") {
  SECTION("flashmask") {
    Problem p = small_problem(3, 4);
    // Non-causal, 2 columns: UTE = 1 hides row 0 from every key; LTS = 3 (Sq) masks nothing.
    attnjit::dsl::IntervalVectors m{false, 2, 1, 1, 3, 4, {3, 1, 3, 1, 3, 1, 3, 1}};
    p.mask = {MaskKind::flashmask, -1, 0, &m};
    const Reference ref = run(p, uniform_score_inputs(p));
    CHECK(ref.lse[0] == kNegInf);
    CHECK(ref.lse[1] == Approx(std::log(4.0)));
    CHECK(ref.out == std::vector<double>{0, 0, 0, 1.5, 2.5, 3.5, 1.5, 2.5, 3.5});
    CHECK(ref.out_lowp == std::vector<float>{0, 0, 0, 1.5f, 2.5f, 3.5f, 1.5f, 2.5f, 3.5f});
  }
  SECTION("causal with more queries than keys") {
    Problem p = small_problem(4, 2);
    p.mask.kind = MaskKind::causal;
    const Reference ref = run(p, uniform_score_inputs(p));
    CHECK(ref.lse[0] == kNegInf);
    CHECK(ref.lse[1] == kNegInf);
    CHECK(ref.lse[2] == Approx(0.0).margin(1e-12));
    CHECK(ref.out == std::vector<double>{0, 0, 0, 0, 0, 0, 0, 1, 2, 0.5, 1.5, 2.5});
  }
}

TEST_CASE("soft-capping bounds the scores and ALiBi adds the aligned distance", "[reference]") {
  SECTION("softcap: one key's LSE is its capped score, two keys weigh by capped scores") {
    Problem p = small_problem(1, 2);
    p.softmax_scale = 1.0f;
    p.score_mod.softcap = 5.0f;
    // Scores 16 and -8: capped to 5 tanh(3.2) and 5 tanh(-1.6).
    const Inputs in{{4, 4, 4, 4}, {1, 1, 1, 1, -0.5f, -0.5f, -0.5f, -0.5f}, {1, 0, 2, 3, 1, -1}};
    const Reference ref = run(p, in);
    const double s0 = 5 * std::tanh(3.2), s1 = 5 * std::tanh(-1.6);
    const double w0 = 1 / (1 + std::exp(s1 - s0)), w1 = 1 - w0;
    check_close(ref.out, {w0 * 1 + w1 * 3, w0 * 0 + w1 * 1, w0 * 2 + w1 * -1});
    CHECK(ref.lse[0] == Approx(s0 + std::log(1 + std::exp(s1 - s0))).epsilon(1e-12));
    p.seqlen_k = 1;
    const Reference one = run(p, {in.q, {1, 1, 1, 1}, {1, 0, 2}});
    CHECK(one.lse[0] == Approx(5 * std::tanh(3.2)).epsilon(1e-12));
  }
  SECTION("alibi: zero scores weigh key j of row i by exp(slope (j - (i + Sk - Sq)))") {
    Problem p = small_problem(2, 5);
    p.score_mod.alibi_slopes = {0.5f};
    const Inputs in = uniform_score_inputs(p);
    for (const MaskKind kind : {MaskKind::none, MaskKind::causal}) {
      INFO(attnjit::name_of(kind));
      p.mask.kind = kind;
      const Reference ref = run(p, in);
      std::vector<double> expected;
      for (int i = 0; i < 2; ++i) {
        double sum = 0, acc[3] = {0, 0, 0};
        for (int j = 0; j < 5; ++j) {
          if (kind == MaskKind::causal && j > i + 3) continue;
          const double w = std::exp(0.5 * (j - (i + 3)));
          sum += w;
          for (int d = 0; d < 3; ++d) acc[d] += w * (j + d);
        }
        for (int d = 0; d < 3; ++d) expected.push_back(acc[d] / sum);
        CHECK(ref.lse[i] == Approx(std::log(sum)).epsilon(1e-12));
      }
      check_close(ref.out, expected);
    }
  }
  SECTION("both: soft-capping first, then the bias; the derivative is 1 - tanh^2") {
    Problem p = small_problem(3, 4);
    p.heads = 2;
    p.kv_heads = 1;
    p.score_mod = {2.0f, {0.25f, -1.0f}};
    double derivative = 0;
    // Head 1, row 0, key 3: distance 3 - (0 + 1) = 2.
    CHECK(modified_score(p, 1, 0, 3, 3.0, &derivative) ==
          Approx(2 * std::tanh(1.5) - 2.0).epsilon(1e-15));
    CHECK(derivative == Approx(1 - std::tanh(1.5) * std::tanh(1.5)).epsilon(1e-15));
    CHECK(modified_score(p, 0, 2, 0, -1.0) ==
          Approx(2 * std::tanh(-0.5) + 0.25 * -3).epsilon(1e-15));
    p.score_mod.softcap = 0;
    CHECK(modified_score(p, 0, 2, 0, -1.0, &derivative) == -1.75);
    CHECK(derivative == 1);
  }
  SECTION("bad modifiers are rejected") {
    Problem p = small_problem(2, 2);
    const Inputs in = uniform_score_inputs(p);
    p.score_mod.softcap = -1;
    CHECK_THROWS_WITH(run(p, in), Contains("score_mod.softcap: got '-1'"));
    p.score_mod.softcap = 0;
    p.score_mod.alibi_slopes = {1, 2};
    CHECK_THROWS_WITH(run(p, in), Contains("score_mod.alibi_slopes size: got '2'"));
    p.score_mod.alibi_slopes = {std::numeric_limits<float>::infinity()};
    CHECK_THROWS_WITH(run(p, in), Contains("score_mod.alibi_slopes: got 'inf'"));
  }
}

TEST_CASE("GQA maps query heads to KV heads and mask heads", "[reference]") {
  Problem p = small_problem(2, 3);
  p.heads = 4;
  p.kv_heads = 2;
  const Inputs in = uniform_score_inputs(p);
  const auto out_at = [&](const Reference& ref, int i, int h, int d) {
    return ref.out[(static_cast<std::size_t>(i) * p.heads + h) * p.head_dim_v + d];
  };
  const Reference ref = run(p, in);
  for (int h = 0; h < 4; ++h) {
    // KV head 0 holds v = j + d, KV head 1 holds v = j + d + 10; the mean over j is 1 + d.
    CHECK(out_at(ref, 0, h, 0) == Approx(h < 2 ? 1.0 : 11.0));
    CHECK(out_at(ref, 1, h, 2) == Approx(h < 2 ? 3.0 : 13.0));
  }
  // Two mask heads for four query heads: mask head 0 (query heads 0, 1) hides row 0.
  attnjit::dsl::IntervalVectors m{false, 2, 1, 2, 2, 3, {2, 1, 2, 1, 2, 1, 2, 0, 2, 0, 2, 0}};
  p.mask = {MaskKind::flashmask, -1, 0, &m};
  const Reference masked = run(p, in);
  for (int h = 0; h < 4; ++h) {
    const double lse_row0 = masked.lse[static_cast<std::size_t>(h) * p.seqlen_q];
    if (h < 2) {
      CHECK(lse_row0 == kNegInf);
    } else {
      CHECK(lse_row0 == Approx(std::log(3.0)));
    }
  }
}

TEST_CASE("flashmask masks agree with the equivalent built-in masks", "[reference]") {
  Problem p = make_problem(2, 45, 45, 2, 1, 16, 8, 0.25f);
  const Inputs in = random_inputs(p, 5);
  // A causal sliding window of 7 keys is window_left = 6, window_right = 0.
  const attnjit::dsl::IntervalVectors one = attnjit::dsl::sliding_window(45, 7);
  const std::vector<attnjit::dsl::IntervalVectors> samples = {one, one};
  const attnjit::dsl::IntervalVectors both = attnjit::dsl::stack(samples);
  p.mask = {MaskKind::flashmask, -1, 0, &both};
  const Reference from_vectors = run(p, in);
  p.mask = {MaskKind::sliding_window, 6, 0, nullptr};
  const Reference from_window = run(p, in);
  CHECK(from_vectors.out == from_window.out);
  CHECK(from_vectors.lse == from_window.lse);
  CHECK(from_vectors.out_lowp == from_window.out_lowp);
}

TEST_CASE("out_lowp is close to out and passes the comparison", "[reference]") {
  for (const DType dtype : {DType::bf16, DType::fp16}) {
    const Problem p = lowp_problem(dtype);
    const Reference ref = run(p, random_inputs(p, 7));
    const auto c = compare_output(ref.out_lowp, ref, dtype);
    INFO(c.summary);
    CHECK(c.passed);
    CHECK(c.baseline_max_abs_err > 0);
    CHECK(c.baseline_max_abs_err < (dtype == DType::bf16 ? 2e-2 : 3e-3));
    CHECK(c.max_abs_err == c.baseline_max_abs_err);
    CHECK(c.count == static_cast<std::int64_t>(ref.out.size()));
    CHECK_THAT(c.summary, Contains("passed") && Contains("rel_l2_err="));
    const std::vector<float> exact(ref.out.begin(), ref.out.end());
    CHECK(compare_output(exact, ref, dtype).passed);
  }
}

TEST_CASE("compare_output fails on a perturbed output, a NaN and a wrong mask", "[reference]") {
  Problem p = make_problem(1, 30, 30, 2, 1, 32, 32, 0.2f);
  p.mask.kind = MaskKind::causal;
  const Inputs in = random_inputs(p, 9);
  const Reference ref = run(p, in);
  std::vector<float> got = ref.out_lowp;
  got[100] += 0.05f;
  const auto perturbed = compare_output(got, ref, DType::bf16);
  CHECK_FALSE(perturbed.passed);
  CHECK(perturbed.max_abs_err > 0.04);
  CHECK_THAT(perturbed.summary, Contains("FAILED"));
  got = ref.out_lowp;
  got[7] = std::numeric_limits<float>::quiet_NaN();
  const auto nan = compare_output(got, ref, DType::bf16);
  CHECK_FALSE(nan.passed);
  CHECK(nan.nonfinite == 1);
  CHECK_THAT(nan.summary, Contains("nonfinite=1 of 1920"));
  p.mask.kind = MaskKind::none;
  const Reference unmasked = run(p, in);
  CHECK_FALSE(compare_output(unmasked.out_lowp, ref, DType::bf16).passed);
  CHECK_THROWS_AS(compare_output(std::vector<float>(5), ref, DType::bf16), Error);
}

TEST_CASE("compare_lse matches -inf exactly and finite values within tolerance", "[reference]") {
  Problem p = small_problem(4, 2);
  p.mask.kind = MaskKind::causal;
  const Reference ref = run(p, random_inputs(p, 3));
  REQUIRE(ref.lse[0] == kNegInf);
  const std::vector<float> exact(ref.lse.begin(), ref.lse.end());
  const auto same = compare_lse(exact, ref);
  INFO(same.summary);
  CHECK(same.passed);
  std::vector<float> got = exact;
  got[0] = 0.0f;
  CHECK_FALSE(compare_lse(got, ref).passed);
  got = exact;
  got[3] = -std::numeric_limits<float>::infinity();
  const auto missing = compare_lse(got, ref);
  CHECK_FALSE(missing.passed);
  CHECK(missing.nonfinite == 1);
  got = exact;
  got[2] += 5e-3f;
  const auto off = compare_lse(got, ref);
  CHECK_FALSE(off.passed);
  CHECK_THAT(off.summary, Contains("1 over"));
  got = exact;
  got[2] += 5e-4f;
  CHECK(compare_lse(got, ref).passed);
}

TEST_CASE("reference_forward rejects inconsistent problems", "[reference]") {
  Problem p = small_problem(2, 3);
  const Inputs in = uniform_score_inputs(p);
  Inputs short_q = in;
  short_q.q.pop_back();
  CHECK_THROWS_WITH(run(p, short_q), Contains("q size: got '7'; accepted: B*Sq*H*D = 8"));
  Problem gqa = p;
  gqa.heads = 3;
  gqa.kv_heads = 2;
  CHECK_THROWS_WITH(run(gqa, in), Contains("kv_heads: got '2'; accepted: a divisor of heads"));
  Problem no_vectors = p;
  no_vectors.mask.kind = MaskKind::flashmask;
  CHECK_THROWS_WITH(run(no_vectors, in), Contains("mask.intervals"));
  attnjit::dsl::IntervalVectors m = attnjit::dsl::sliding_window(3, 2);
  Problem wrong_lengths = p;
  wrong_lengths.mask = {MaskKind::flashmask, -1, 0, &m};
  CHECK_THROWS_WITH(run(wrong_lengths, in), Contains("mask.intervals->seqlen_q: got '3'"));
}

TEST_CASE("a predicate mask gives the reference of the mask it describes", "[reference]") {
  Problem p = small_problem(2, 5);
  const Inputs in = random_inputs(p, 11);
  p.mask.kind = MaskKind::causal;
  const Reference causal = run(p, in);
  // Bottom-right causal with Sk - Sq = 3, written over the row q and the column k.
  const attnjit::PredicateEvaluator evaluator(attnjit::parse_predicate("k <= q + $0"), {{}, {3}});
  p.mask = {MaskKind::predicate, -1, 0, nullptr, &evaluator};
  const Reference predicate = run(p, in);
  CHECK(predicate.out == causal.out);
  CHECK(predicate.lse == causal.lse);
  CHECK(predicate.out_lowp == causal.out_lowp);
  p.mask.predicate = nullptr;
  CHECK_THROWS_WITH(run(p, in), Contains("mask.predicate: got 'null'"));
}

TEST_CASE("a sink joins each row's denominator: O shrinks by exp(L0 - L), LSE grows",
          "[reference]") {
  // Causal with Sq > Sk: rows 0 and 1 see no key; 2 query heads with their own sinks.
  Problem p = make_problem(2, 6, 4, 2, 1, 8, 5, 0.4f);
  p.mask.kind = MaskKind::causal;
  const Inputs in = random_inputs(p, 71);
  const Reference plain = run(p, in);
  p.sinks = {0.75f, -1.5f};
  const Reference sinks = run(p, in);
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads; ++h) {
      for (int i = 0; i < p.seqlen_q; ++i) {
        INFO("b=" << b << " h=" << h << " i=" << i);
        const std::size_t row = (static_cast<std::size_t>(b) * p.heads + h) * p.seqlen_q + i;
        const double t = p.sinks[h];
        const double l0 = plain.lse[row];
        // L = log(exp(L0) + exp(t)); a row with no visible key has L = t.
        const double expected = l0 == kNegInf ? t : std::log(std::exp(l0) + std::exp(t));
        CHECK(sinks.lse[row] == Approx(expected).margin(1e-12));
        const double shrink = l0 == kNegInf ? 0.0 : std::exp(l0 - expected);
        for (int d = 0; d < p.head_dim_v; ++d) {
          const std::size_t n =
              ((static_cast<std::size_t>(b) * p.seqlen_q + i) * p.heads + h) * p.head_dim_v + d;
          CHECK(sinks.out[n] == Approx(plain.out[n] * shrink).margin(1e-12));
        }
      }
    }
  }
  CHECK(sinks.lse[0] == 0.75);  // b = 0, h = 0, row 0 sees no key
  CHECK(compare_output(sinks.out_lowp, sinks, p.dtype).passed);

  // A sink of -inf is no sink; a sink far above the scores overflows nothing.
  p.sinks = {-std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  const Reference none = run(p, in);
  CHECK(none.out == plain.out);
  CHECK(none.lse == plain.lse);
  p.sinks = {800.0f, 800.0f};
  const Reference huge = run(p, in);
  for (const double lse : huge.lse) CHECK(lse == Approx(800.0));
  for (const double o : huge.out) CHECK(std::abs(o) < 1e-300);
  for (const float o : huge.out_lowp) CHECK(o == 0.0f);
}

TEST_CASE("reference_forward checks the sinks' count and values", "[reference]") {
  Problem p = small_problem(2, 3);
  const Inputs in = uniform_score_inputs(p);
  p.sinks = {0.5f, 0.5f};
  CHECK_THROWS_WITH(run(p, in), Contains("sinks size: got '2'; accepted: 0 or heads (1)"));
  p.sinks = {std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_WITH(run(p, in), Contains("sinks: got 'nan'; accepted: finite numbers or -inf"));
}
