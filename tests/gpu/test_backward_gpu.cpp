// Backward kernels against the CPU float64 reference gradients (FlashAttention's criterion):
// every dtype, head dim and mask kind, GQA/MQA, mask heads, lengths that are not tile
// multiples, Sq != Sk, padded strides, atomic and deterministic mode (the sweep sampled
// pairwise unless ATTNJIT_GPU_EXHAUSTIVE=1); bitwise repeatability
// of the deterministic mode; zero gradients (never NaN) for rows that see no key.
#include <catch2/catch.hpp>

#include <cmath>
#include <utility>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"

using namespace attnjit;
using gpu_test::BackwardRun;
using gpu_test::Case;
using gpu_test::check_backward;
using gpu_test::make_case;

TEST_CASE("backward matches the reference gradients over the sweep", "[gpu][backward]") {
  // Each (dtype, head dim, mask) appears twice in the sweep: once per mode (a feature of the
  // sample too).
  const std::vector<Case> cases = gpu_test::sweep_cases();
  std::vector<testing::Features> items;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    items.push_back(gpu_test::features(cases[i]));
    items.back().push_back(i % 2 == 1 ? "deterministic" : "atomic");
  }
  std::vector<BackwardRun> runs;
  for (std::size_t i : gpu_test::sample(items)) {
    runs.push_back(BackwardRun::in_mode(cases[i], /*deterministic=*/i % 2 == 1));
  }
  gpu_test::check_backwards(runs);
}

TEST_CASE("every backward layout, forced by its tiles, matches the reference", "[gpu][backward]") {
  // The sweep runs the shapes select_tiles picks for the device: on an H100 (sm_90a) the TMA
  // backward at d64 and d128, key slabs elsewhere. Explicit shapes force each row of
  // the registry: the TMA backward (sm_90a devices), key slabs and the grid at those head
  // dims, and the grid at other shapes (16-query warp tiles at d256, 2 x 2 grids with 4
  // warps); every case checks that its row ran.
  struct Layout {
    int head_dim;
    TileShape tiles;
    const char* row;
  };
  constexpr TileLayout kSlabs = TileLayout::slabs;
  constexpr TileLayout kGrid = TileLayout::grid;
  std::vector<Layout> layouts{
      {128, {64, 128, 8}, "backward_slabs.sm80"},         // a bare shape: key slabs, whole head dim
      {64, {64, 128, 8, kSlabs}, "backward_slabs.sm80"},  // key slabs at d64
      {128, {64, 128, 8, kGrid}, "backward_grid.sm80"},   // 4 key warps x 2 query/head-dim warps
      {64, {64, 128, 8, kGrid}, "backward_grid.sm80"},    // the same at d64
      {64, {64, 64, 4, kGrid}, "backward_grid.sm80"},     // 2 key warps x 2 query/head-dim warps
      {256, {64, 64, 8, kGrid}, "backward_grid.sm80"},    // 2 x 4: 16 queries, 64 head-dim columns
      {128, {32, 64, 4, kGrid}, "backward_grid.sm80"},    // dQ by one row of warps
  };
  if (jit::current_device_arch() == Arch::sm_90a) {
    layouts.push_back({64, {64, 128, 12, TileLayout::warpgroups}, "backward.sm90a"});
    layouts.push_back({128, {64, 128, 12, TileLayout::warpgroups}, "backward.sm90a"});
  } else {
    WARN("not an sm_90a device: backward.sm90a is not run");
  }
  const MaskSpec masks[] = {{MaskKind::causal, false, 0},
                            {MaskKind::sliding_window, false, 0},
                            {MaskKind::flashmask, false, 2}};
  std::uint64_t seed = 500;
  std::vector<BackwardRun> runs;
  for (const Layout& layout : layouts) {
    for (const MaskSpec& mask : masks) {
      for (bool deterministic : {false, true}) {
        Case c = make_case(mask, seed % 2 == 0 ? DType::bf16 : DType::fp16, layout.head_dim, 2, 4,
                           2, 211, 181, seed + 1);
        c.spec.tiles = layout.tiles;
        c.expect_row = layout.row;
        if (mask.kind == MaskKind::sliding_window) {
          c.window_left = 40;
          c.window_right = 9;
        }
        c.padded_strides = seed % 3 == 0;
        ++seed;
        if (mask.kind == MaskKind::flashmask) {
          c.intervals = dsl::random_intervals(false, 2, c.batch, c.kv_heads, c.seqlen_q, c.seqlen_k,
                                              gpu_test::data_seed(seed));
        }
        runs.push_back(BackwardRun::in_mode(c, deterministic));
      }
    }
  }
  gpu_test::check_backwards(runs);
}

TEST_CASE("deterministic backward is bitwise repeatable", "[gpu][backward]") {
  for (MaskSpec mask :
       {MaskSpec{MaskKind::causal, false, 0}, MaskSpec{MaskKind::flashmask, true, 1}}) {
    Case c = make_case(mask, DType::bf16, 128, 2, 4, 2, 1000, 1000, 77);
    if (mask.kind == MaskKind::flashmask) {
      std::vector<dsl::IntervalVectors> samples{
          dsl::random_documents(true, 1000, 2, 6, gpu_test::data_seed(5)),
          dsl::random_documents(true, 1000, 2, 6, gpu_test::data_seed(6))};
      c.intervals = dsl::stack(samples);
    }
    gpu_test::check_deterministic_repeatable(c);
  }
}

TEST_CASE("rows that see no key get zero gradients, never NaN", "[gpu][backward]") {
  for (bool deterministic : {false, true}) {
    SECTION(deterministic ? "deterministic" : "atomic") {
      // Rows 0 .. 229 see no key (bottom-right causal, Sq = 300, Sk = 70).
      const Case c = make_case({MaskKind::causal, false, 0}, DType::fp16, 64, 1, 2, 2, 300, 70, 91);
      const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
      const std::vector<float> d_o = gpu_test::make_d_o(c);
      const gpu_test::BackwardOutputs got =
          gpu_test::run_backward_on_gpu(c, inputs, d_o, deterministic);
      for (int h = 0; h < 2; ++h) {
        for (int row = 0; row < 230; ++row) {
          for (int d = 0; d < 64; ++d) {
            REQUIRE(got.dq[(static_cast<std::size_t>(row) * 2 + h) * 64 + d] == 0.f);
          }
        }
      }
      for (float x : got.dk) REQUIRE(std::isfinite(x));
      for (float x : got.dv) REQUIRE(std::isfinite(x));
      check_backward(c, deterministic);
    }
  }
}

TEST_CASE("backward with odd head counts: the last head pair has one member", "[gpu][backward]") {
  // The kernels take heads in pairs (templates/attnjit/common/schedule.cuh); an odd count leaves a
  // CTA without a head, which must write nothing.
  for (const auto& [heads, kv_heads] : {std::pair{1, 1}, std::pair{3, 3}, std::pair{3, 1}}) {
    for (bool deterministic : {false, true}) {
      Case c = make_case({MaskKind::causal, false, 0}, DType::bf16, 64, 2, heads, kv_heads, 333,
                         333, 17 + heads);
      c.padded_strides = true;
      check_backward(c, deterministic);
    }
  }
}
