// Unequal head dims (head_dim_qk != head_dim_v: every supported pair, MLA's (192, 128) first)
// against the CPU float64 reference: O and LSE of the forward, dQ, dK and dV of the backward in
// both modes, under causal, sliding-window and FlashMask masks, with GQA, both dtypes, lengths
// that are not tile multiples and Sq != Sk; the sm80 family runs them on every device, sm_90a
// included. Also the deterministic mode's bitwise repeatability, the score modifiers and the GPU
// reference kernel.
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"

using namespace attnjit;
using gpu_test::BackwardRun;
using gpu_test::Case;
using gpu_test::make_case;

namespace {

constexpr std::pair<int, int> kPairs[] = {{192, 128}, {128, 64}, {64, 128}, {256, 128}};

// A case of head dims `dims` under `mask`: 2 batches, 4 query heads on 2 KV heads (MQA, 1 KV
// head, every third case), 211 queries on 181 keys or the reverse, inputs drawn from `seed`.
Case pair_case(std::pair<int, int> dims, const MaskSpec& mask, DType dtype, std::uint64_t seed) {
  const bool longer_keys = seed % 2 == 0;
  Case c = make_case(mask, dtype, dims.first, 2, 4, seed % 3 == 0 ? 1 : 2, longer_keys ? 181 : 211,
                     longer_keys ? 211 : 181, seed);
  c.spec.head_dim_v = dims.second;
  c.padded_strides = seed % 4 == 1;
  if (mask.kind == MaskKind::sliding_window) {
    c.window_left = 40;
    c.window_right = 9;
  }
  if (mask.kind == MaskKind::flashmask) {
    c.intervals = dsl::random_intervals(mask.causal, mask.columns, c.batch, c.kv_heads, c.seqlen_q,
                                        c.seqlen_k, gpu_test::data_seed(seed));
  }
  return c;
}

// Every pair x both dtypes x causal, sliding window, causal FlashMask (1 column) and
// non-causal FlashMask (4 columns).
std::vector<Case> pair_cases() {
  const MaskSpec masks[] = {{MaskKind::causal, false, 0},
                            {MaskKind::sliding_window, false, 0},
                            {MaskKind::flashmask, true, 1},
                            {MaskKind::flashmask, false, 4}};
  std::vector<Case> cases;
  std::uint64_t seed = 7100;
  for (const auto& dims : kPairs) {
    for (DType dtype : {DType::bf16, DType::fp16}) {
      for (const MaskSpec& mask : masks) cases.push_back(pair_case(dims, mask, dtype, ++seed));
    }
  }
  return cases;
}

}  // namespace

TEST_CASE("unequal head dims: the forward matches the reference", "[gpu][forward][head_dims]") {
  std::vector<Case> cases = pair_cases();
  for (Case& c : cases) c.expect_row = "forward.sm80";
  gpu_test::check_forwards(cases);
}

TEST_CASE("unequal head dims: the backward matches the reference gradients in both modes",
          "[gpu][backward][head_dims]") {
  std::vector<BackwardRun> runs;
  for (const Case& c : pair_cases()) runs.push_back({c, /*atomic=*/true, /*deterministic=*/true});
  gpu_test::check_backwards(runs);
}

TEST_CASE("unequal head dims: forced sm80 backward layouts match the reference",
          "[gpu][backward][head_dims]") {
  // The grid layout at (128, 64), a key-slab shape splitting both dims over 4 warps per slab.
  struct Forced {
    std::pair<int, int> dims;
    TileShape tiles;
    const char* row;
  };
  const Forced shapes[] = {{{128, 64}, {64, 128, 8, TileLayout::grid}, "backward_grid.sm80"},
                           {{128, 64}, {64, 32, 8, TileLayout::slabs}, "backward_slabs.sm80"},
                           {{192, 128}, {64, 64, 8, TileLayout::slabs}, "backward_slabs.sm80"}};
  std::uint64_t seed = 7300;
  std::vector<BackwardRun> runs;
  for (const Forced& forced : shapes) {
    Case c = pair_case(forced.dims, {MaskKind::causal, false, 0}, DType::bf16, ++seed);
    c.spec.tiles = forced.tiles;
    c.expect_row = forced.row;
    runs.push_back(BackwardRun::in_mode(c, /*deterministic=*/false));
  }
  gpu_test::check_backwards(runs);
}

TEST_CASE("unequal head dims with soft-capping and ALiBi match the reference", "[gpu][head_dims]") {
  std::uint64_t seed = 7400;
  std::vector<Case> cases;
  for (const auto& dims : {std::pair{192, 128}, std::pair{64, 128}}) {
    Case c = pair_case(dims, {MaskKind::causal, false, 0}, DType::bf16, ++seed);
    c.spec.softcap = true;
    c.spec.alibi = true;
    c.score_mod.softcap = 5.0f;
    c.score_mod.alibi_slopes = gpu_test::alibi_slopes(c.heads);
    cases.push_back(c);
  }
  gpu_test::check_forwards(cases);
  std::vector<BackwardRun> runs;
  for (const Case& c : cases) runs.push_back({c, /*atomic=*/true, /*deterministic=*/true});
  gpu_test::check_backwards(runs);
}

TEST_CASE("unequal head dims: the deterministic backward is bitwise repeatable",
          "[gpu][backward][head_dims]") {
  Case c = make_case({MaskKind::flashmask, true, 1}, DType::bf16, 192, 2, 4, 2, 700, 700, 7500);
  c.spec.head_dim_v = 128;
  std::vector<dsl::IntervalVectors> samples{
      dsl::random_documents(true, 700, 2, 6, gpu_test::data_seed(7501)),
      dsl::random_documents(true, 700, 2, 6, gpu_test::data_seed(7502))};
  c.intervals = dsl::stack(samples);
  gpu_test::check_deterministic_repeatable(c);
}

TEST_CASE("unequal head dims: the GPU reference kernel agrees with the CPU reference",
          "[gpu][reference][head_dims]") {
  for (const auto& dims : kPairs) {
    const Case c = pair_case(dims, {MaskKind::flashmask, false, 2}, DType::bf16, 7600);
    gpu_test::check_forward(c, /*reference_kernel=*/true);
  }
}
