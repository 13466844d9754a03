// Register fragments (templates/attnjit/common/fragment.cuh) on the device: operands loaded and
// results stored through the coordinate functions of the mma.sync A, B and C layouts and of the
// wgmma m64 accumulator give the host's products, and an accumulator converted to the 16-bit
// A operand (P reuse) multiplies as its rounded values do.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/vocabulary_gpu.hpp"
#include "support/half_round.hpp"

using namespace attnjit;
using gpu_test::Operand16;

namespace {

/// Checks out[i][j] (rows x cols, row-major) against sum_k a(i, k) b(k, j) over `depth` terms,
/// within fp32 accumulation error of the absolute sum.
template <class A, class B>
void check_product(const std::vector<float>& out, int rows, int cols, int depth, A a, B b) {
  int bad = 0;
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int k = 0; k < depth; ++k) {
        sum += static_cast<double>(a(i, k)) * b(k, j);
        magnitude += std::abs(static_cast<double>(a(i, k)) * b(k, j));
      }
      const double got = out[static_cast<std::size_t>(i) * cols + j];
      if (!(std::abs(got - sum) <= 1e-5 * magnitude + 1e-6)) {
        if (bad++ < 5)
          UNSCOPED_INFO("element (" << i << ", " << j << "): " << got << " vs " << sum);
      }
    }
  }
  CHECK(bad == 0);
}

float round_to(DType dtype, float x) {
  return testing::round_to(dtype, x);
}

}  // namespace

TEST_CASE("mma.sync fragments: A, B and C coordinates and P reuse", "[gpu][vocabulary][fragment]") {
  const runtime::LoadedModule module = gpu_test::load_vocabulary_program("fragment_test.cu");
  std::mt19937 rng(11);
  for (DType dtype : {DType::bf16, DType::fp16}) {
    INFO(name_of(dtype));
    const Operand16 a = gpu_test::random_operand(dtype, 32 * 32, rng);
    const Operand16 b = gpu_test::random_operand(dtype, 32 * 32, rng);
    const Operand16 b2 = gpu_test::random_operand(dtype, 32 * 16, rng);
    const runtime::DeviceBuffer d_a = gpu_test::upload(a.bits), d_b = gpu_test::upload(b.bits),
                                d_b2 = gpu_test::upload(b2.bits);
    runtime::DeviceBuffer d_c = gpu_test::poisoned_floats(32 * 32);
    runtime::DeviceBuffer d_o = gpu_test::poisoned_floats(32 * 16);
    gpu_test::launch_on_buffers(
        module.function(dtype == DType::bf16 ? "fragment_bf16" : "fragment_fp16", 0), 32,
        {&d_a, &d_b, &d_b2, &d_c, &d_o});
    const std::vector<float> c = gpu_test::download_floats(d_c, 32 * 32);
    const std::vector<float> o = gpu_test::download_floats(d_o, 32 * 16);
    check_product(
        c, 32, 32, 32, [&](int i, int k) { return a.values[i * 32 + k]; },
        [&](int k, int j) { return b.values[k * 32 + j]; });
    // O = C B2 with C rounded to the dtype, as to_operand_a packs it.
    check_product(
        o, 32, 16, 32, [&](int i, int k) { return round_to(dtype, c[i * 32 + k]); },
        [&](int k, int j) { return b2.values[k * 16 + j]; });
  }
}

TEST_CASE("wgmma m64 accumulators: coordinates and P reuse as the register A operand",
          "[gpu][vocabulary][fragment][sm90a]") {
  if (!gpu_test::device_runs_sm90a()) {
    WARN("skipped: wgmma needs an sm_90 device");
    return;
  }
  const runtime::LoadedModule module = gpu_test::load_vocabulary_program("wgmma_fragment_test.cu");
  std::mt19937 rng(12);
  for (const auto& [dtype, n, entry] : {std::tuple{DType::bf16, 64, "wgmma_fragment_bf16_n64"},
                                        std::tuple{DType::fp16, 128, "wgmma_fragment_fp16_n128"}}) {
    INFO(entry);
    const Operand16 q = gpu_test::random_operand(dtype, 64 * 64, rng);
    const Operand16 k = gpu_test::random_operand(dtype, n * 64, rng);
    const Operand16 v = gpu_test::random_operand(dtype, n * 64, rng);
    const runtime::DeviceBuffer d_q = gpu_test::upload(q.bits), d_k = gpu_test::upload(k.bits),
                                d_v = gpu_test::upload(v.bits);
    runtime::DeviceBuffer d_s = gpu_test::poisoned_floats(64 * n);
    runtime::DeviceBuffer d_o = gpu_test::poisoned_floats(64 * 64);
    const int smem = 1024 + 64 * 64 * 2 + 2 * n * 64 * 2;
    gpu_test::launch_on_buffers(module.function(entry, smem), 128, {&d_q, &d_k, &d_v, &d_s, &d_o},
                                smem);
    const std::vector<float> s = gpu_test::download_floats(d_s, 64 * n);
    const std::vector<float> o = gpu_test::download_floats(d_o, 64 * 64);
    // S = Q K^T.
    check_product(
        s, 64, n, 64, [&](int i, int d) { return q.values[i * 64 + d]; },
        [&](int d, int j) { return k.values[j * 64 + d]; });
    // O = S V with S rounded to the dtype.
    check_product(
        o, 64, 64, n, [&](int i, int j) { return round_to(dtype, s[i * n + j]); },
        [&](int j, int d) { return v.values[j * 64 + d]; });
  }
}
