// The online softmax step (templates/attnjit/common/softmax.cuh) on the device, over the mma.sync
// slabs of two warps and the m64 wgmma fragment of a warpgroup: three key blocks of scores with
// O += P V after each step, against a float64 softmax on the host. Rows with nothing visible
// (O = 0, LSE = -inf), rows whose first blocks are fully masked (the -inf guard), a row with a
// single visible key, scattered masked elements; raw scores (exponent scale softmax_scale *
// log2 e) and modified ones (scale 1); the step that rescales O and the one that leaves it to
// rescale().
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/vocabulary_gpu.hpp"

using namespace attnjit;

namespace {

constexpr int kRows = 64, kBlockN = 32, kBlocks = 3, kCols = kBlockN * kBlocks, kD = 32;
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Scores with the masked patterns above; values spread so that exp2 spans a wide range.
std::vector<float> make_scores(std::mt19937& rng, float spread) {
  std::uniform_real_distribution<float> value(-spread, spread);
  std::uniform_int_distribution<int> pick(0, 3);
  std::vector<float> s(kRows * kCols);
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kCols; ++j) {
      float x = value(rng);
      if (i == 5) x = -kInf;                                                // nothing visible
      if (i >= 10 && i < 20 && j < kBlockN) x = -kInf;                      // first block masked
      if (i == 20 && (j < 2 * kBlockN || j != 2 * kBlockN + 7)) x = -kInf;  // one key
      if (i >= 30 && i < 50 && pick(rng) == 0) x = -kInf;                   // scattered
      if (i == 40 && j >= 2 * kBlockN) x = -kInf;                           // last block masked
      s[i * kCols + j] = x;
    }
  }
  return s;
}

struct Expected {
  std::vector<double> o, lse;
};

Expected softmax_reference(const std::vector<float>& s, const std::vector<float>& v, double scale) {
  Expected out{std::vector<double>(kRows * kD, 0.0), std::vector<double>(kRows, -INFINITY)};
  for (int i = 0; i < kRows; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < kCols; ++j) m = std::max(m, s[i * kCols + j] * scale);
    if (m == -INFINITY) continue;
    double l = 0.0;
    for (int j = 0; j < kCols; ++j) {
      const double p = std::exp2(s[i * kCols + j] * scale - m);
      l += p;
      for (int d = 0; d < kD; ++d) out.o[i * kD + d] += p * v[j * kD + d];
    }
    for (int d = 0; d < kD; ++d) out.o[i * kD + d] /= l;
    out.lse[i] = (m + std::log2(l)) * std::log(2.0);
  }
  return out;
}

struct Variant {
  const char* entry;
  DType dtype;
  bool raw;  ///< exponent scale softmax_scale * log2 e, else 1 (modified scores)
  int threads;
};

}  // namespace

TEST_CASE("the online softmax step over mma and wgmma fragments matches a float64 softmax",
          "[gpu][vocabulary][softmax]") {
  const runtime::LoadedModule module = gpu_test::load_vocabulary_program("softmax_test.cu");
  std::mt19937 rng(13);
  const float scale_log2 = 0.125f * 1.4426950408889634f;
  for (const Variant& variant : {Variant{"softmax_mma_raw", DType::bf16, true, 64},
                                 Variant{"softmax_mma_modified_split", DType::fp16, false, 64},
                                 Variant{"softmax_wgmma_raw_split", DType::fp16, true, 128},
                                 Variant{"softmax_wgmma_modified", DType::bf16, false, 128}}) {
    INFO(variant.entry);
    const std::vector<float> scores = make_scores(rng, variant.raw ? 60.f : 9.f);
    const gpu_test::Operand16 v = gpu_test::random_operand(variant.dtype, kCols * kD, rng);
    const runtime::DeviceBuffer d_scores = gpu_test::upload(scores), d_v = gpu_test::upload(v.bits);
    runtime::DeviceBuffer d_o = gpu_test::poisoned_floats(kRows * kD);
    runtime::DeviceBuffer d_lse = gpu_test::poisoned_floats(kRows);
    struct {
      float scale_log2;
    } params{scale_log2};
    void* ps = d_scores.data();
    void* pv = d_v.data();
    void* po = d_o.data();
    void* pl = d_lse.data();
    void* args[] = {&params, &ps, &pv, &po, &pl};
    gpu_test::launch_one_block(module.function(variant.entry, 0), variant.threads, args);
    const std::vector<float> o = gpu_test::download_floats(d_o, kRows * kD);
    const std::vector<float> lse = gpu_test::download_floats(d_lse, kRows);

    const Expected ref = softmax_reference(scores, v.values, variant.raw ? scale_log2 : 1.0);
    // P is rounded to the dtype before P V: each weight is off by at most half an ulp.
    const double tolerance = variant.dtype == DType::bf16 ? 6e-3 : 1e-3;
    int bad = 0;
    for (int i = 0; i < kRows; ++i) {
      for (int d = 0; d < kD; ++d) {
        const double got = o[i * kD + d], want = ref.o[i * kD + d];
        const bool ok = i == 5 ? got == 0.0 : std::abs(got - want) <= tolerance;
        if (!ok && bad++ < 5)
          UNSCOPED_INFO("O(" << i << ", " << d << ") " << got << " vs " << want);
      }
      const bool lse_ok =
          i == 5 ? lse[i] == -kInf
                 : std::abs(lse[i] - ref.lse[i]) <= 1e-4 * (1.0 + std::abs(ref.lse[i]));
      if (!lse_ok && bad++ < 5)
        UNSCOPED_INFO("LSE(" << i << ") " << lse[i] << " vs " << ref.lse[i]);
    }
    CHECK(bad == 0);
  }
}
