// Score modifiers (soft-capping, ALiBi, both) on the GPU: forward and backward against the CPU
// float64 references (FlashAttention's criterion) over masks none, causal, sliding_window and
// a FlashMask document mask, both dtypes, head dims 64/128, GQA, ragged lengths, Sq != Sk,
// negative slopes, atomic and deterministic dQ; the fp32 GPU reference kernel against the CPU
// reference; and new caps and slopes running on the cached kernel without a compile.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attnjit/jit.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"

using namespace attnjit;
using gpu_test::Case;
using gpu_test::check_forward;

TEST_CASE("forward with score modifiers matches the reference", "[gpu][score_mod]") {
  gpu_test::check_forwards(gpu_test::score_mod_cases());
}

TEST_CASE("backward with score modifiers matches the reference gradients", "[gpu][score_mod]") {
  std::vector<gpu_test::BackwardRun> runs;
  for (const Case& c : gpu_test::score_mod_cases()) runs.push_back({c});
  gpu_test::check_backwards(runs);
}

TEST_CASE("deterministic backward with score modifiers is bitwise repeatable", "[gpu][score_mod]") {
  Case c;
  c.spec.dtype = DType::bf16;
  c.spec.head_dim_qk = c.spec.head_dim_v = 128;
  c.spec.mask = {MaskKind::causal, false, 0};
  c.spec.softcap = c.spec.alibi = true;
  c.batch = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.seqlen_q = c.seqlen_k = 700;
  c.seed = 81;
  c.score_mod = {2.0f, gpu_test::alibi_slopes(4)};
  gpu_test::check_deterministic_repeatable(c);
}

TEST_CASE("the GPU reference kernel applies the score modifiers", "[gpu][score_mod][reference]") {
  for (MaskSpec mask : {MaskSpec{MaskKind::causal, false, 0}, MaskSpec{MaskKind::none, false, 0}}) {
    Case c;
    c.spec.dtype = DType::bf16;
    c.spec.head_dim_qk = c.spec.head_dim_v = 64;
    c.spec.mask = mask;
    c.spec.return_lse = true;
    c.spec.softcap = c.spec.alibi = true;
    c.batch = 1;
    c.heads = 4;
    c.kv_heads = 2;
    c.seqlen_q = 150;
    c.seqlen_k = 170;
    c.seed = 23;
    c.score_mod = {1.5f, gpu_test::alibi_slopes(4)};
    check_forward(c, /*reference_kernel=*/true);
  }
}

TEST_CASE("new caps and slopes run on the cached kernel", "[gpu][score_mod][cache]") {
  Case c;
  c.spec.dtype = DType::fp16;
  c.spec.head_dim_qk = c.spec.head_dim_v = 64;
  c.spec.mask = {MaskKind::causal, false, 0};
  c.spec.return_lse = true;
  c.spec.softcap = c.spec.alibi = true;
  c.batch = 1;
  c.heads = c.kv_heads = 2;
  c.seqlen_q = c.seqlen_k = 190;
  c.seed = 61;
  c.score_mod = {1.5f, {0.25f, 0.5f}};
  const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
  const gpu_test::Outputs first = gpu_test::run_on_gpu(c, inputs);  // compiles if needed

  const jit::CacheStats before = jit::cache_stats();
  std::vector<gpu_test::Outputs> outputs;
  for (const testing::ScoreModRef& score_mod :
       {testing::ScoreModRef{8.0f, {0.25f, 0.5f}}, testing::ScoreModRef{1.5f, {-0.125f, 1.0f}}}) {
    Case changed = c;
    changed.score_mod = score_mod;
    INFO(changed.describe());
    outputs.push_back(gpu_test::run_on_gpu(changed, inputs));
    check_forward(changed);
  }
  const jit::CacheStats after = jit::cache_stats();
  CHECK(after.compiles == before.compiles);
  CHECK(after.disk_hits == before.disk_hits);
  CHECK(after.memory_entries == before.memory_entries);
  CHECK(after.memory_hits > before.memory_hits);
  // The new values were used: each output differs from the first run's.
  for (const gpu_test::Outputs& out : outputs) CHECK(out.out != first.out);
}
