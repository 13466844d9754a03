// Learnable sinks (sinks=true) on the GPU: O, LSE, dQ, dK, dV and the sinks' gradient against
// the CPU float64 references (FlashAttention's criterion), both kernel families forced by their
// tiles (forward.sm80 and forward.sm90a, the sm80 backward layouts and backward.sm90a), causal
// with more queries than keys (rows that see no key: O = 0, LSE = the sink) and a FlashMask
// document mask, GQA, both dtypes, sinks far above the scores (no overflow) and far below;
// atomic and deterministic modes, the deterministic sinks' gradient bitwise repeatable; the
// fp32 GPU reference kernel; new sink values on the cached kernel. The sm90a rows run on sm_90a
// devices only.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"
#include "support/sm90a_tiles.hpp"

using namespace attnjit;
using gpu_test::BackwardRun;
using gpu_test::Case;

namespace {

bool on_sm90a() {
  return jit::current_device_arch() == Arch::sm_90a;
}

/// One sink logit per query head, drawn from `seed`: mostly within the scores' range, and in
/// turn one far above it (100: the sink takes nearly all of each row, and 2^(100 log2 e) is
/// beyond fp32) and one far below (-30: no effect).
std::vector<float> sink_logits(int heads, std::uint64_t seed) {
  std::mt19937_64 rng(gpu_test::data_seed(seed));
  std::uniform_real_distribution<float> near(-2.0f, 3.0f);
  std::vector<float> sinks(heads);
  for (float& t : sinks) t = near(rng);
  sinks[seed % heads] = seed % 2 == 0 ? 100.0f : -30.0f;
  return sinks;
}

/// A case with sinks: causal with more queries than keys (the first Sq - Sk rows see no key),
/// or a FlashMask document mask over Sq = Sk, 4 query heads on 2 KV heads.
Case sinks_case(bool documents, DType dtype, int head_dim, std::uint64_t seed) {
  const MaskSpec mask =
      documents ? MaskSpec{MaskKind::flashmask, true, 1} : MaskSpec{MaskKind::causal, false, 0};
  const int seqlen_q = documents ? 203 : 219;
  const int seqlen_k = documents ? 203 : 171;
  Case c = gpu_test::make_case(mask, dtype, head_dim, 2, 4, 2, seqlen_q, seqlen_k, seed);
  c.spec.sinks = true;
  c.sinks = sink_logits(c.heads, seed);
  if (documents) {
    dsl::IntervalVectors vectors =
        dsl::random_documents(true, seqlen_q, 1, 5, gpu_test::data_seed(seed));
    // One batch row of vectors per batch.
    vectors.batch = c.batch;
    const std::vector<std::int32_t> row = vectors.data;
    for (int b = 1; b < c.batch; ++b)
      vectors.data.insert(vectors.data.end(), row.begin(), row.end());
    c.intervals = std::move(vectors);
  }
  return c;
}

/// The forward families: forward.sm80 forced by a q_registers shape, and on sm_90a devices
/// forward.sm90a by its registry shape.
std::vector<Case> forward_cases() {
  std::vector<Case> cases;
  std::uint64_t seed = 1300;
  for (int head_dim : {64, 128}) {
    for (bool documents : {false, true}) {
      const DType dtype = seed % 2 == 0 ? DType::bf16 : DType::fp16;
      Case sm80 = sinks_case(documents, dtype, head_dim, ++seed);
      sm80.spec.tiles = head_dim == 64 ? TileShape{64, 64, 4, TileLayout::q_registers}
                                       : TileShape{128, 64, 8, TileLayout::q_registers};
      sm80.expect_row = "forward.sm80";
      cases.push_back(sm80);
      if (on_sm90a()) {
        Case sm90a = sinks_case(documents, dtype, head_dim, ++seed);
        sm90a.spec = testing::sm90a_forward_spec(sm90a.spec);
        sm90a.expect_row = testing::kSm90aForwardRow;
        cases.push_back(sm90a);
      }
    }
  }
  return cases;
}

/// The backward families: the sm80 grid and key-slab layouts, and on sm_90a devices
/// backward.sm90a.
std::vector<Case> backward_cases() {
  struct Layout {
    int head_dim;
    TileShape tiles;
    const char* row;
  };
  std::vector<Layout> layouts{{64, {64, 128, 8, TileLayout::grid}, "backward_grid.sm80"},
                              {128, {64, 128, 8, TileLayout::slabs}, "backward_slabs.sm80"}};
  if (on_sm90a()) {
    layouts.push_back({64, {64, 128, 12, TileLayout::warpgroups}, "backward.sm90a"});
    layouts.push_back({128, {64, 128, 12, TileLayout::warpgroups}, "backward.sm90a"});
  }
  std::vector<Case> cases;
  std::uint64_t seed = 1400;
  for (const Layout& layout : layouts) {
    for (bool documents : {false, true}) {
      const DType dtype = seed % 2 == 0 ? DType::bf16 : DType::fp16;
      Case c = sinks_case(documents, dtype, layout.head_dim, ++seed);
      c.spec.tiles = layout.tiles;
      c.expect_row = layout.row;
      cases.push_back(c);
    }
  }
  return cases;
}

}  // namespace

TEST_CASE("forward with sinks matches the reference on both families", "[gpu][sinks]") {
  if (!on_sm90a()) WARN("not an sm_90a device: forward.sm90a is not run");
  gpu_test::check_forwards(forward_cases());
}

TEST_CASE("forward with sinks and the score modifiers matches the reference", "[gpu][sinks]") {
  Case c = sinks_case(false, DType::bf16, 128, 1350);
  c.spec.softcap = c.spec.alibi = true;
  c.score_mod = {2.0f, gpu_test::alibi_slopes(c.heads)};
  gpu_test::check_forward(c);
  if (on_sm90a()) {
    c.spec = testing::sm90a_forward_spec(c.spec);
    c.expect_row = testing::kSm90aForwardRow;
    gpu_test::check_forward(c);
  }
}

TEST_CASE("backward with sinks matches the reference gradients and the sinks' gradient",
          "[gpu][sinks][backward]") {
  if (!on_sm90a()) WARN("not an sm_90a device: backward.sm90a is not run");
  std::vector<BackwardRun> runs;
  for (const Case& c : backward_cases()) runs.push_back({c});
  gpu_test::check_backwards(runs);
}

TEST_CASE("deterministic backward with sinks is bitwise repeatable, the sinks' gradient too",
          "[gpu][sinks][backward]") {
  std::vector<Case> cases;
  for (const Case& c : backward_cases()) {
    Case longer = c;
    longer.seqlen_q = longer.seqlen_k = 700;
    longer.spec.mask = {MaskKind::causal, false, 0};
    longer.intervals.reset();
    cases.push_back(longer);
  }
  gpu_test::check_deterministic_repeatable(cases, /*repeats=*/2);
}

TEST_CASE("the GPU reference kernel adds the sinks", "[gpu][sinks][reference]") {
  for (bool documents : {false, true}) {
    Case c = sinks_case(documents, DType::bf16, 64, 1500 + documents);
    gpu_test::check_forward(c, /*reference_kernel=*/true);
  }
}

TEST_CASE("new sink values run on the cached kernel", "[gpu][sinks][cache]") {
  Case c = sinks_case(false, DType::fp16, 64, 1600);
  const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
  const gpu_test::Outputs first = gpu_test::run_on_gpu(c, inputs);  // compiles if needed
  const jit::CacheStats before = jit::cache_stats();
  Case changed = c;
  for (float& t : changed.sinks) t = -t;
  INFO(changed.describe());
  const gpu_test::Outputs second = gpu_test::run_on_gpu(changed, inputs);
  gpu_test::check_forward(changed);
  const jit::CacheStats after = jit::cache_stats();
  CHECK(after.compiles == before.compiles);
  CHECK(after.memory_entries == before.memory_entries);
  CHECK(second.out != first.out);
  CHECK(second.lse != first.lse);
}
