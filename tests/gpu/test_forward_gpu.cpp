// Forward kernels against the CPU float64 reference: every dtype, head dim and mask kind,
// GQA/MQA, mask heads, lengths that are not tile multiples, Sq != Sk, padded strides (the
// sweeps sampled pairwise unless ATTNJIT_GPU_EXHAUSTIVE=1); plus fully masked rows,
// determinism, and large problems against the GPU reference kernel.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"

using namespace attnjit;
using gpu_test::Case;

namespace {

Case base_case(MaskSpec mask, int head_dim = 128, DType dtype = DType::bf16) {
  Case c;
  c.spec.dtype = dtype;
  c.spec.head_dim_qk = c.spec.head_dim_v = head_dim;
  c.spec.mask = mask;
  c.spec.return_lse = true;
  return c;
}

}  // namespace

TEST_CASE("forward matches the reference over the sweep", "[gpu][forward]") {
  gpu_test::check_forwards(gpu_test::sampled(gpu_test::sweep_cases()));
}

TEST_CASE("the sm80 forward matches the reference over the sweep", "[gpu][forward]") {
  // The automatic forward of an sm_90a device is the sm90a kernel; an sm_90 target (whose
  // code runs on every compute capability 9.0 device) takes the sm80 family, so the sweep runs
  // the mma.sync forward too.
  const Arch device = jit::current_device_arch();
  if (device != Arch::sm_90a && device != Arch::sm_90) {
    WARN("not a compute capability 9.0 device: the sweep above ran the sm80 forward already");
    return;
  }
  std::vector<Case> cases = gpu_test::sampled(gpu_test::sweep_cases());
  for (Case& c : cases) {
    c.spec.target = Arch::sm_90;
    c.expect_row = "forward.sm80";
  }
  gpu_test::check_forwards(cases);
}

TEST_CASE("the sm80 forward, forced by its tiles, matches the reference", "[gpu][forward]") {
  // Explicit shapes of the forward.sm80 row: Q in registers (q_registers), Q re-read from
  // shared memory (q_shared), a bare shape, one- and two-slab warps; each case checks that the
  // row ran.
  struct Forced {
    int head_dim;
    TileShape tiles;
  };
  const Forced shapes[] = {{64, {64, 64, 4, TileLayout::q_registers}},
                           {64, {128, 64, 4, TileLayout::q_shared}},
                           {128, {128, 32, 4, TileLayout::q_shared}},
                           {128, {128, 64, 8, TileLayout::q_registers}},
                           {256, {64, 32, 4}}};
  std::uint64_t seed = 900;
  std::vector<Case> cases;
  for (const Forced& forced : shapes) {
    for (MaskSpec mask :
         {MaskSpec{MaskKind::causal, false, 0}, MaskSpec{MaskKind::flashmask, false, 4}}) {
      Case c = base_case(mask, forced.head_dim, seed % 2 ? DType::fp16 : DType::bf16);
      c.spec.tiles = forced.tiles;
      c.expect_row = "forward.sm80";
      c.batch = 2;
      c.heads = 4;
      c.kv_heads = 2;
      c.seqlen_q = 177;
      c.seqlen_k = 203;
      c.seed = ++seed;
      if (mask.kind == MaskKind::flashmask) {
        c.intervals = dsl::random_intervals(false, 4, c.batch, c.kv_heads, c.seqlen_q, c.seqlen_k,
                                            gpu_test::data_seed(seed));
      }
      cases.push_back(c);
    }
  }
  gpu_test::check_forwards(cases);
}

TEST_CASE("rows with no visible key give O = 0 and LSE = -inf", "[gpu][forward]") {
  SECTION("causal with Sq > Sk: the first Sq - Sk rows see nothing") {
    Case c = base_case({MaskKind::causal, false, 0});
    c.batch = 1;
    c.heads = c.kv_heads = 2;
    c.seqlen_q = 200;
    c.seqlen_k = 70;
    c.seed = 7;
    gpu_test::check_forward(c);
  }
  SECTION("flashmask masking every key for a band of rows") {
    Case c = base_case({MaskKind::flashmask, false, 4});
    c.batch = 1;
    c.heads = c.kv_heads = 2;
    c.seqlen_q = c.seqlen_k = 190;
    dsl::IntervalVectors m;
    m.causal = false;
    m.columns = 4;
    m.batch = 1;
    m.heads = 1;
    m.seqlen_q = m.seqlen_k = 190;
    for (int j = 0; j < 190; ++j) {
      // Rows [40, 150) masked in every column; rows >= 180 masked for odd columns.
      m.data.insert(m.data.end(), {40, 150, j % 2 ? 180 : 0, j % 2 ? 190 : 0});
    }
    c.intervals = m;
    c.seed = 8;
    gpu_test::check_forward(c);
  }
  SECTION("sliding window whose diagonal leaves the keys") {
    Case c = base_case({MaskKind::sliding_window, false, 0});
    c.seqlen_q = 300;
    c.seqlen_k = 64;
    c.window_left = 3;
    c.window_right = 0;  // row i sees keys [i - 239, i - 236]: rows below 236 see nothing
    c.seed = 9;
    gpu_test::check_forward(c);
  }
}

TEST_CASE("forward is deterministic", "[gpu][forward]") {
  Case c = base_case({MaskKind::flashmask, true, 1});
  c.batch = 2;
  c.heads = c.kv_heads = 4;
  c.seqlen_q = c.seqlen_k = 700;
  std::vector<dsl::IntervalVectors> samples{
      dsl::random_documents(true, 700, 2, 6, gpu_test::data_seed(11)),
      dsl::random_documents(true, 700, 2, 6, gpu_test::data_seed(12))};
  c.intervals = dsl::stack(samples);
  const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
  const gpu_test::Outputs first = gpu_test::run_on_gpu(c, inputs);
  const gpu_test::Outputs second = gpu_test::run_on_gpu(c, inputs);
  CHECK(std::memcmp(first.out.data(), second.out.data(), first.out.size() * 4) == 0);
  CHECK(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4) == 0);
}

TEST_CASE("the GPU reference kernel agrees with the CPU reference", "[gpu][reference]") {
  for (MaskSpec mask :
       {MaskSpec{MaskKind::causal, false, 0}, MaskSpec{MaskKind::flashmask, false, 4}}) {
    Case c = base_case(mask, 64);
    c.batch = 1;
    c.heads = 4;
    c.kv_heads = 2;
    c.seqlen_q = 150;
    c.seqlen_k = 170;
    c.seed = 21;
    if (mask.kind == MaskKind::flashmask) {
      c.intervals = dsl::random_intervals(false, 4, 1, 2, 150, 170, gpu_test::data_seed(21));
    }
    INFO(c.describe());
    const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
    const gpu_test::Outputs got = gpu_test::run_on_gpu(c, inputs, /*reference_kernel=*/true);
    const testing::Reference ref = gpu_test::reference_of(c, inputs);
    const testing::Comparison out = testing::compare_output(got.out, ref, c.spec.dtype);
    const testing::Comparison lse = testing::compare_lse(got.lse, ref);
    INFO(out.summary << "\n" << lse.summary);
    CHECK(out.passed);
    CHECK(lse.passed);
  }
}

TEST_CASE("large problems match the GPU reference kernel", "[gpu][forward][large]") {
  struct Large {
    MaskSpec mask;
    int seqlen;
  };
  for (const Large& l :
       {Large{{MaskKind::none, false, 0}, 2000}, Large{{MaskKind::causal, false, 0}, 3001},
        Large{{MaskKind::flashmask, true, 1}, 4099},
        Large{{MaskKind::flashmask, false, 2}, 2500}}) {
    Case c = base_case(l.mask, 128);
    c.batch = 1;
    c.heads = 4;
    c.kv_heads = 1;
    c.seqlen_q = c.seqlen_k = l.seqlen;
    c.seed = 31 + l.seqlen;
    if (l.mask.kind == MaskKind::flashmask) {
      c.intervals =
          dsl::random_documents(l.mask.causal, l.seqlen, 3, 7, gpu_test::data_seed(c.seed));
    }
    INFO(c.describe());
    const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
    const gpu_test::Outputs fused = gpu_test::run_on_gpu(c, inputs);
    const gpu_test::Outputs reference = gpu_test::run_on_gpu(c, inputs, /*reference_kernel=*/true);
    double max_err = 0, max_ref = 0, sq_err = 0, sq_ref = 0;
    for (std::size_t i = 0; i < fused.out.size(); ++i) {
      const double d = static_cast<double>(fused.out[i]) - reference.out[i];
      REQUIRE(std::isfinite(fused.out[i]));
      max_err = std::max(max_err, std::abs(d));
      max_ref = std::max(max_ref, std::abs(static_cast<double>(reference.out[i])));
      sq_err += d * d;
      sq_ref += static_cast<double>(reference.out[i]) * reference.out[i];
    }
    double lse_err = 0;
    for (std::size_t i = 0; i < fused.lse.size(); ++i) {
      lse_err = std::max(lse_err, std::abs(static_cast<double>(fused.lse[i]) - reference.lse[i]));
    }
    INFO("max abs err " << max_err << " (max |ref| " << max_ref << "), rel l2 "
                        << std::sqrt(sq_err / sq_ref) << ", lse max err " << lse_err);
    // Both outputs are rounded to bf16 (2^-8 relative); P is rounded before P V in the
    // fused kernel only.
    CHECK(std::sqrt(sq_err / sq_ref) < 1e-2);
    CHECK(max_err < 2e-2 * std::max(1.0, max_ref));
    CHECK(lse_err < 1e-3 * std::log(static_cast<double>(l.seqlen)) + 1e-3);
  }
}

TEST_CASE("forward with odd head counts: the last head pair has one member", "[gpu][forward]") {
  // The kernel takes heads in pairs (templates/attnjit/common/schedule.cuh); an odd count leaves a
  // CTA without a head, which must write nothing (padded_strides poisons and checks o).
  for (const auto& [heads, kv_heads] : {std::pair{1, 1}, std::pair{3, 3}, std::pair{5, 1}}) {
    Case c;
    c.spec.dtype = DType::fp16;
    c.spec.head_dim_qk = c.spec.head_dim_v = 128;
    c.spec.mask = {MaskKind::causal, false, 0};
    c.batch = 3;
    c.heads = heads;
    c.kv_heads = kv_heads;
    c.seqlen_q = 259;
    c.seqlen_k = 301;
    c.padded_strides = true;
    c.seed = 29 + heads;
    gpu_test::check_forward(c);
  }
}
