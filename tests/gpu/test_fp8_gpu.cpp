// dtype=e4m3 forward (the sm90a family): e4m3 q, k, v with descale factors, bf16 o, against the
// float64 reference on the values the e4m3 inputs stand for (each byte times its descale).
// The kernel rounds P = exp(s - m) to e4m3 before O += P V, as FlashAttention-3 does; the
// output's limit is a small multiple of the error of a plain emulation of that rounding (fp32
// scores, the row's final max, P rounded to e4m3, fp32 sums) plus a floor, the LSE's the
// reference's (its scores are exact products of the e4m3 values, summed in fp32).
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/gpu_case.hpp"
#include "gpu/sm90_kernel.hpp"
#include "runtime/jit/driver.hpp"
#include "support/half_round.hpp"
#include "support/reference.hpp"

using namespace attnjit;

namespace {

struct Fp8Case {
  int head_dim = 128;
  MaskKind mask = MaskKind::causal;
  int batch = 2, heads = 4, kv_heads = 2, seqlen_q = 300, seqlen_k = 300;
  int window_left = -1, window_right = 0;
  bool q_per_tensor = false;  ///< q_descale [1] (else [B, Hkv], as k's and v's)
  /// Small integers scaled by powers of two: every product and sum of S is exact, also in the
  /// tensor cores' FP8 accumulation, which keeps fewer bits than fp32 (about 14 of mantissa);
  /// else normal values of a different magnitude per (batch, KV head).
  bool exact = false;
  std::uint64_t seed = 1;
  TileShape tiles;  ///< forced tiles (default: the registry's)
  /// mask=flashmask: the vectors, [B or 1, Hkv or 1, Sk, columns] (their causal flag and columns
  /// give the spec's).
  std::optional<dsl::IntervalVectors> intervals;
};

// e4m3 bytes of `values` over their descale (value / descale rounded), and the values they stand
// for (byte's value * descale), [B, S, Hx, D] with descale[b * Hkv + kv head of h].
struct Quantized {
  std::vector<std::uint8_t> bytes;
  std::vector<float> values;
};

Quantized quantize(const std::vector<float>& x, const std::vector<float>& descale, int batch,
                   int seqlen, int heads, int dim, int group) {
  Quantized out{std::vector<std::uint8_t>(x.size()), std::vector<float>(x.size())};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int h = static_cast<int>(i / dim % heads);
    const int b = static_cast<int>(i / (static_cast<std::size_t>(dim) * heads * seqlen));
    const float scale = descale.size() == 1 ? descale[0] : descale[b * (heads / group) + h / group];
    out.bytes[i] = testing::float_to_e4m3_bits(x[i] / scale);
    out.values[i] = testing::e4m3_bits_to_float(out.bytes[i]) * scale;
  }
  return out;
}

void check_fp8_forward(const Fp8Case& c) {
  AttentionSpec spec;
  spec.dtype = DType::e4m3;
  spec.head_dim_qk = spec.head_dim_v = c.head_dim;
  spec.mask.kind = c.intervals ? MaskKind::flashmask : c.mask;
  if (c.intervals) {
    spec.mask.causal = c.intervals->causal;
    spec.mask.columns = c.intervals->columns;
  }
  spec.return_lse = true;
  spec.target = Arch::sm_90a;
  spec.tiles = c.tiles;
  const std::uint64_t seed = gpu_test::data_seed(c.seed);
  INFO(fmt::format("{} B={} H={}/{} Sq={} Sk={} window=({}, {}) q per tensor {} seed {}",
                   to_string(spec), c.batch, c.heads, c.kv_heads, c.seqlen_q, c.seqlen_k,
                   c.window_left, c.window_right, c.q_per_tensor, seed));
  const jit::Kernel kernel = jit::compile(spec);
  gpu_test::note_rows(kernel, KernelRole::forward, "forward.sm90a");

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> spread(0.5f, 4.f);
  const int d = c.head_dim;
  const std::size_t q_count = std::size_t(c.batch) * c.seqlen_q * c.heads * d;
  const std::size_t kv_count = std::size_t(c.batch) * c.seqlen_k * c.kv_heads * d;
  // Values of a different magnitude per (batch, KV head), and descales that map each one's
  // largest magnitude near e4m3's largest finite value (448).
  std::vector<float> magnitude(std::size_t(c.batch) * c.kv_heads);
  std::uniform_int_distribution<int> small(-3, 3);
  std::uniform_int_distribution<int> power(-2, 1);
  for (float& m : magnitude) m = c.exact ? std::ldexp(1.f, power(rng)) : spread(rng);
  const auto draw = [&](std::size_t count, int seqlen, int heads) {
    std::vector<float> x(count);
    const int group = heads / c.kv_heads;
    for (std::size_t i = 0; i < count; ++i) {
      const int h = static_cast<int>(i / d % heads);
      const int b = static_cast<int>(i / (std::size_t(d) * heads * seqlen));
      const float unit = c.exact ? static_cast<float>(small(rng)) : normal(rng);
      x[i] = unit * magnitude[b * c.kv_heads + h / group];
    }
    return x;
  };
  std::vector<float> q = draw(q_count, c.seqlen_q, c.heads);
  std::vector<float> k = draw(kv_count, c.seqlen_k, c.kv_heads);
  std::vector<float> v = draw(kv_count, c.seqlen_k, c.kv_heads);
  // Exact: the magnitudes themselves (powers of two), so that the bytes hold the integers.
  std::vector<float> kv_descale(magnitude.size());
  for (std::size_t i = 0; i < magnitude.size(); ++i) {
    kv_descale[i] = c.exact ? magnitude[i] : 5.f * magnitude[i] / 448.f;
  }
  const std::vector<float> q_descale =
      c.q_per_tensor ? std::vector<float>{c.exact ? 0.25f : 5.f * 4.f / 448.f} : kv_descale;
  // Exact: a scale that keeps the scores' spread moderate (integer products reach 9 x d).
  const float softmax_scale = c.exact ? 1.f / 64.f : 1.f / std::sqrt(static_cast<float>(d));
  const Quantized q8 =
      quantize(q, q_descale, c.batch, c.seqlen_q, c.heads, d, c.heads / c.kv_heads);
  const Quantized k8 = quantize(k, kv_descale, c.batch, c.seqlen_k, c.kv_heads, d, 1);
  const Quantized v8 = quantize(v, kv_descale, c.batch, c.seqlen_k, c.kv_heads, d, 1);

  runtime::DeviceBuffer q_dev(q_count), k_dev(kv_count), v_dev(kv_count);
  runtime::DeviceBuffer o_dev(q_count * 2),
      lse_dev(std::size_t(c.batch) * c.heads * c.seqlen_q * 4);
  runtime::DeviceBuffer qd_dev(q_descale.size() * 4), kd_dev(kv_descale.size() * 4);
  q_dev.upload(q8.bytes.data(), q_count);
  k_dev.upload(k8.bytes.data(), kv_count);
  v_dev.upload(v8.bytes.data(), kv_count);
  qd_dev.upload(q_descale.data(), q_descale.size() * 4);
  kd_dev.upload(kv_descale.data(), kv_descale.size() * 4);
  o_dev.fill_bytes(0xff);
  lse_dev.fill_bytes(0xff);

  ForwardArgs args;
  args.q = contiguous_view(q_dev.data(), ScalarType::e4m3, {c.batch, c.seqlen_q, c.heads, d});
  args.k = contiguous_view(k_dev.data(), ScalarType::e4m3, {c.batch, c.seqlen_k, c.kv_heads, d});
  args.v = contiguous_view(v_dev.data(), ScalarType::e4m3, {c.batch, c.seqlen_k, c.kv_heads, d});
  args.o = contiguous_view(o_dev.data(), ScalarType::bf16, {c.batch, c.seqlen_q, c.heads, d});
  args.lse = contiguous_view(lse_dev.data(), ScalarType::fp32, {c.batch, c.heads, c.seqlen_q});
  args.q_descale = c.q_per_tensor
                       ? contiguous_view(qd_dev.data(), ScalarType::fp32, {1})
                       : contiguous_view(qd_dev.data(), ScalarType::fp32, {c.batch, c.kv_heads});
  args.k_descale = contiguous_view(kd_dev.data(), ScalarType::fp32, {c.batch, c.kv_heads});
  args.v_descale = args.k_descale;
  args.softmax_scale = softmax_scale;
  args.window_left = c.window_left;
  args.window_right = c.window_right;
  runtime::DeviceBuffer vectors(c.intervals ? c.intervals->data.size() * 4 : 4);
  if (c.intervals) {
    const dsl::IntervalVectors& m = *c.intervals;
    vectors.upload(m.data.data(), m.data.size() * 4);
    args.startend_row_indices =
        contiguous_view(static_cast<std::int32_t*>(vectors.data()), ScalarType::int32,
                        {m.batch, m.heads, m.seqlen_k, m.columns});
  }
  kernel.forward(args, nullptr);
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");

  std::vector<std::uint16_t> o_bits(q_count);
  std::vector<float> lse(std::size_t(c.batch) * c.heads * c.seqlen_q);
  o_dev.download(o_bits.data(), q_count * 2);
  lse_dev.download(lse.data(), lse.size() * 4);

  testing::Problem problem;
  problem.batch = c.batch;
  problem.seqlen_q = c.seqlen_q;
  problem.seqlen_k = c.seqlen_k;
  problem.heads = c.heads;
  problem.kv_heads = c.kv_heads;
  problem.head_dim = problem.head_dim_v = d;
  problem.softmax_scale = softmax_scale;
  problem.mask.kind = spec.mask.kind;
  problem.mask.intervals = c.intervals ? &*c.intervals : nullptr;
  problem.mask.window_left = c.window_left;
  problem.mask.window_right = c.window_right;
  const testing::Reference ref =
      testing::reference_forward(problem, q8.values, k8.values, v8.values);

  // The emulation of the kernel's rounding of P, row by row, against the row's max; and per row
  // the largest scale * sum_i |q_i k_i| over its keys, which bounds what the FP8 accumulation of
  // S loses. The kernel rounds P against a running max that may lie up to 2^8 below the row's
  // (a lazy step keeps its max while every P stays within 2^8): its P of the row's largest
  // score is then rounded too (the emulation's is 1, exact), which in a row that one key
  // dominates moves O by up to that P's rounding. `rounding` bounds that difference per
  // element: 2^-4 (e4m3's largest relative rounding of a normal value) of sum_j p_j |v_j| /
  // sum_j p_j.
  std::vector<float> emulated(q_count, 0.f);
  std::vector<double> rounding(q_count, 0.0);
  std::vector<double> magnitude_of_row(lse.size(), 0.0);
  const int group = c.heads / c.kv_heads;
  testing::for_each_head(problem, [&](int b, int h) {
    std::vector<std::uint8_t> visible(c.seqlen_k);
    std::vector<float> s(c.seqlen_k);
    for (int i = 0; i < c.seqlen_q; ++i) {
      const testing::VisibleKeys keys = testing::visible_keys(problem, b, h, i, visible);
      const std::size_t q_row = ((std::size_t(b) * c.seqlen_q + i) * c.heads + h) * d;
      float max = -INFINITY;
      for (int j = keys.first; j <= keys.last; ++j) {
        if (!visible[j]) continue;
        const std::size_t k_row = ((std::size_t(b) * c.seqlen_k + j) * c.kv_heads + h / group) * d;
        float dot = 0.f;
        double total = 0.0;
        for (int x = 0; x < d; ++x) {
          dot += q8.values[q_row + x] * k8.values[k_row + x];
          total += std::abs(double(q8.values[q_row + x]) * k8.values[k_row + x]);
        }
        double& row_magnitude = magnitude_of_row[(std::size_t(b) * c.heads + h) * c.seqlen_q + i];
        row_magnitude = std::max(row_magnitude, total * problem.softmax_scale);
        s[j] = dot * problem.softmax_scale;
        max = std::max(max, s[j]);
      }
      float sum = 0.f;
      std::vector<float> acc(d, 0.f);
      std::vector<double> magnitude(d, 0.0);
      for (int j = keys.first; j <= keys.last; ++j) {
        if (!visible[j]) continue;
        const float p = std::exp(s[j] - max);
        sum += p;
        const float rounded = testing::e4m3_bits_to_float(testing::float_to_e4m3_bits(p));
        const std::size_t v_row = ((std::size_t(b) * c.seqlen_k + j) * c.kv_heads + h / group) * d;
        for (int x = 0; x < d; ++x) {
          acc[x] += rounded * v8.values[v_row + x];
          magnitude[x] += p * std::abs(double(v8.values[v_row + x]));
        }
      }
      for (int x = 0; x < d; ++x) {
        emulated[q_row + x] = sum > 0.f ? acc[x] / sum : 0.f;
        rounding[q_row + x] = sum > 0.f ? std::ldexp(magnitude[x] / sum, -4) : 0.0;
      }
    }
  });

  double max_err = 0, emulated_err = 0, err2 = 0, emulated2 = 0, ref2 = 0;
  std::int64_t nonfinite = 0;
  for (std::size_t n = 0; n < q_count; ++n) {
    const double got = testing::bf16_bits_to_float(o_bits[n]);
    if (!std::isfinite(got)) {
      ++nonfinite;
      continue;
    }
    // The error beyond what rounding against an older max may add (`rounding`), whose largest
    // the checks compare with the emulation's.
    max_err = std::max(max_err, std::abs(got - ref.out[n]) - rounding[n]);
    emulated_err = std::max(emulated_err, std::abs(emulated[n] - ref.out[n]));
    err2 += (got - ref.out[n]) * (got - ref.out[n]);
    emulated2 += (emulated[n] - ref.out[n]) * (emulated[n] - ref.out[n]);
    ref2 += ref.out[n] * ref.out[n];
  }
  const double rel_l2 = std::sqrt(err2 / ref2);
  const double emulated_rel_l2 = std::sqrt(emulated2 / ref2);
  INFO(
      fmt::format("o: max_abs_err past `rounding` {:.3e} (emulation {:.3e}), rel_l2 {:.3e} "
                  "(emulation {:.3e})",
                  max_err, emulated_err, rel_l2, emulated_rel_l2));
  CHECK(nonfinite == 0);
  if (c.exact) {
    // S exact: what remains is P's rounding (and O's to bf16). The kernel rounds P against
    // each block's running max, the emulation against the row's final one: the same size of
    // error in other places, whose largest may be twice the emulation's (2.06x seen).
    CHECK(max_err <= 3 * emulated_err + 4e-3);
    CHECK(rel_l2 <= 2 * emulated_rel_l2 + 2e-3);
    const testing::Comparison lse_check = testing::compare_lse(lse, ref);
    INFO(lse_check.summary);
    CHECK(lse_check.passed);
    return;
  }
  // S loses bits in the FP8 accumulation: each row's LSE may move by 2^-10 of its scores'
  // magnitude (16 roundings at the 14th bit), and O with its scores.
  CHECK(max_err <= 4 * emulated_err + 1e-2);
  CHECK(rel_l2 <= 3 * emulated_rel_l2 + 2e-3);
  std::int64_t lse_wrong = 0;
  double lse_max_err = 0;
  for (std::size_t n = 0; n < lse.size(); ++n) {
    if (std::isinf(ref.lse[n])) {
      lse_wrong += !(std::isinf(lse[n]) && lse[n] < 0);
      continue;
    }
    const double err = std::abs(lse[n] - ref.lse[n]);
    lse_max_err = std::max(lse_max_err, err);
    lse_wrong += !(err <= 1e-3 + std::ldexp(magnitude_of_row[n], -10));
  }
  INFO(fmt::format("lse: max_abs_err {:.3e}, {} of {} rows past their limit", lse_max_err,
                   lse_wrong, lse.size()));
  CHECK(lse_wrong == 0);
}

}  // namespace

TEST_CASE("e4m3 forward matches the float64 reference on the values its inputs stand for",
          "[gpu][sm90a][fp8]") {
  if (!gpu_test::sm90_device_or_skip("e4m3 forward")) return;
  std::uint64_t seed = 9100;
  const auto next = [&](Fp8Case c) {
    c.seed = ++seed;
    return c;
  };
  // Head dims 64, 128 and 256; every mask of this version; Sq != Sk and lengths that are no
  // tile multiples; GQA; descales per (batch, KV head) and q's per tensor.
  check_fp8_forward(next({128, MaskKind::causal, 2, 4, 2, 300, 300}));
  check_fp8_forward(next({128, MaskKind::none, 1, 2, 1, 200, 333}));
  check_fp8_forward(next({64, MaskKind::causal, 2, 4, 4, 257, 390}));
  check_fp8_forward(next({256, MaskKind::none, 1, 4, 2, 130, 270, -1, 0, true}));
  check_fp8_forward(next({256, MaskKind::causal, 2, 2, 1, 333, 200}));
  check_fp8_forward(next({128, MaskKind::sliding_window, 1, 4, 2, 500, 500, 100, 20, true}));
  // Exact scores: the kernel's P and O against the emulation's, the LSE to 1e-3.
  check_fp8_forward(next({128, MaskKind::causal, 2, 4, 2, 300, 300, -1, 0, false, true}));
  check_fp8_forward(next({64, MaskKind::none, 1, 2, 2, 200, 333, -1, 0, true, true}));
  check_fp8_forward(next({256, MaskKind::causal, 1, 4, 1, 270, 130, -1, 0, false, true}));
  // FlashMask (the producer's fed walk; the transposer follows the V stages' slots): the
  // families' vectors, then random intervals of every layout per (batch, KV head), lengths
  // that are no tile multiples, rows and blocks without a visible key.
  const auto with = [](Fp8Case c, dsl::IntervalVectors m) {
    c.intervals = std::move(m);
    return c;
  };
  const std::vector<int> documents{100, 1, 250, 49};
  const std::vector<int> answers{80, 0, 153};
  const std::vector<int> blocks{100, 90};
  const std::vector<int> halves{150, 150};
  const std::vector<int> prefixes{40, 0};
  const MaskKind fm = MaskKind::flashmask;
  // Vectors of every batch row: a family's sample twice.
  const auto twice = [](const dsl::IntervalVectors& m) {
    return dsl::stack(std::vector<dsl::IntervalVectors>{m, m});
  };
  check_fp8_forward(
      next(with({128, fm, 2, 4, 2, 400, 400}, twice(dsl::causal_document(documents)))));
  check_fp8_forward(next(with({64, fm, 1, 4, 2, 400, 400}, dsl::document(documents))));
  check_fp8_forward(next(with({256, fm, 1, 2, 1, 333, 333}, dsl::share_question(100, answers))));
  check_fp8_forward(next(with({128, fm, 1, 4, 4, 500, 500, -1, 0, true},
                              dsl::global_sliding_window(500, 30, 64, 16))));
  check_fp8_forward(
      next(with({128, fm, 2, 2, 1, 390, 390}, twice(dsl::causal_blockwise(blocks, 200)))));
  check_fp8_forward(
      next(with({64, fm, 1, 2, 2, 300, 300}, dsl::prefix_lm_document(halves, prefixes))));
  check_fp8_forward(next(with({128, fm, 2, 4, 2, 300, 300, -1, 0, false, true},
                              twice(dsl::causal_document(std::vector<int>{130, 170})))));
  for (const auto& [causal, columns] :
       {std::pair{true, 1}, std::pair{true, 2}, std::pair{false, 2}, std::pair{false, 4}}) {
    for (const int d : {64, 128, 256}) {
      check_fp8_forward(next(with({d, fm, 2, 4, 2, 270, 270},
                                  dsl::random_intervals(causal, columns, 2, 2, 270, 270,
                                                        gpu_test::data_seed(seed + 100)))));
    }
  }
  // Forced tiles: 192-key blocks (V^T in 64-byte swizzled panels) and 64-key blocks.
  const TileShape wide{128, 192, 12, TileLayout::warpgroups};
  const TileShape narrow{128, 64, 12, TileLayout::warpgroups};
  check_fp8_forward(next({128, MaskKind::causal, 2, 4, 2, 450, 450, -1, 0, false, true, 0, wide}));
  check_fp8_forward(next({128, MaskKind::none, 1, 4, 4, 300, 500, -1, 0, false, false, 0, wide}));
  check_fp8_forward(next({64, MaskKind::causal, 1, 4, 2, 390, 390, -1, 0, true, false, 0, wide}));
  check_fp8_forward(
      next({128, MaskKind::causal, 1, 4, 2, 333, 333, -1, 0, false, true, 0, narrow}));
}
