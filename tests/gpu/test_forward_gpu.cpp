// Forward kernels against the CPU float64 reference: every dtype, head dim and mask kind,
// GQA/MQA, mask heads, lengths that are not tile multiples, Sq != Sk, padded strides (the
// sweeps sampled pairwise unless ATTNJIT_GPU_EXHAUSTIVE=1); plus fully masked rows,
// determinism, and large problems against the GPU reference kernel.
#include <catch2/catch.hpp>

#include <array>
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
using gpu_test::make_case;

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
      const DType dtype = seed % 2 ? DType::fp16 : DType::bf16;
      Case c = make_case(mask, dtype, forced.head_dim, 2, 4, 2, 177, 203, ++seed);
      c.spec.tiles = forced.tiles;
      c.expect_row = "forward.sm80";
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
    gpu_test::check_forward(
        make_case({MaskKind::causal, false, 0}, DType::bf16, 128, 1, 2, 2, 200, 70, 7));
  }
  SECTION("flashmask masking every key for a band of rows") {
    Case c = make_case({MaskKind::flashmask, false, 4}, DType::bf16, 128, 1, 2, 2, 190, 190, 8);
    // Rows [40, 150) masked in every column; rows >= 180 masked for odd columns.
    c.intervals = gpu_test::four_column_intervals(190, [](int j) {
      return std::array{40, 150, j % 2 ? 180 : 0, j % 2 ? 190 : 0};
    });
    gpu_test::check_forward(c);
  }
  SECTION("sliding window whose diagonal leaves the keys") {
    Case c = make_case({MaskKind::sliding_window, false, 0}, DType::bf16, 128, 1, 1, 1, 300, 64, 9);
    c.window_left = 3;
    c.window_right = 0;  // row i sees keys [i - 239, i - 236]: rows below 236 see nothing
    gpu_test::check_forward(c);
  }
}

TEST_CASE("forward is deterministic", "[gpu][forward]") {
  Case c = make_case({MaskKind::flashmask, true, 1}, DType::bf16, 128, 2, 4, 4, 700, 700, 1);
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
    Case c = make_case(mask, DType::bf16, 64, 1, 4, 2, 150, 170, 21);
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
  for (const Case& c : gpu_test::large_cases()) gpu_test::check_against_reference_kernel(c);
}

TEST_CASE("forward with odd head counts: the last head pair has one member", "[gpu][forward]") {
  // The kernel takes heads in pairs (templates/attnjit/common/schedule.cuh); an odd count leaves a
  // CTA without a head, which must write nothing (padded_strides poisons and checks o).
  for (const auto& [heads, kv_heads] : {std::pair{1, 1}, std::pair{3, 3}, std::pair{5, 1}}) {
    Case c = make_case({MaskKind::causal, false, 0}, DType::fp16, 128, 3, heads, kv_heads, 259, 301,
                       29 + heads);
    c.padded_strides = true;
    gpu_test::check_forward(c);
  }
}
