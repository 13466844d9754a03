// Unequal head dims (head_dim_qk != head_dim_v: every supported pair, MLA's (192, 128) first)
// against the CPU float64 reference: O and LSE of the forward, dQ, dK and dV of the backward in
// both modes, under causal, sliding-window and FlashMask masks, with GQA, both dtypes, lengths
// that are not tile multiples and Sq != Sk; the sm80 family on every device (an sm_90 target on
// compute capability 9.0), the sm90a forward forced by its tiles on sm_90a devices (persistent
// CTAs taking many works, one consumer, a predicate with the score modifiers), and the sm90a
// backward forced per pair in both modes. Also the deterministic mode's bitwise repeatability,
// the score modifiers and the GPU reference kernel.
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"
#include "gpu/sm90_kernel.hpp"
#include "runtime/launch/plan_launch.hpp"
#include "support/sm90a_tiles.hpp"

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

// (192, 128) under a predicate with both score modifiers, over lengths that are not tile
// multiples.
Case modified_predicate_case(std::uint64_t seed) {
  Case c = gpu_test::predicate_case("q % 3 != 1 && k <= q + 17", {}, DType::bf16, 192, 2, 4, 2,
                                    203, 229, seed);
  c.spec.head_dim_v = 128;
  c.spec.softcap = true;
  c.spec.alibi = true;
  c.score_mod.softcap = 5.0f;
  c.score_mod.alibi_slopes = gpu_test::alibi_slopes(c.heads);
  return c;
}

}  // namespace

TEST_CASE("unequal head dims: the sm80 forward matches the reference",
          "[gpu][forward][head_dims]") {
  // On compute capability 9.0 an sm_90 target, whose code runs there, takes the sm80 family
  // (the automatic forward of an sm_90a device is the sm90a kernel).
  const Arch device = jit::current_device_arch();
  std::vector<Case> cases = pair_cases();
  for (Case& c : cases) {
    if (device == Arch::sm_90a || device == Arch::sm_90) c.spec.target = Arch::sm_90;
    c.expect_row = "forward.sm80";
  }
  gpu_test::check_forwards(cases);
}

TEST_CASE("unequal head dims: the sm90a forward matches the reference",
          "[gpu][sm90a][forward][head_dims]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward, unequal head dims")) return;
  // Every pair, both dtypes, causal, sliding window and FlashMask (persistent at (64, 128) and
  // (128, 64), O through a tile of its own at (64, 128)), forced onto the row's automatic
  // tiles; (192, 128) with a predicate and both score modifiers (112-key blocks).
  std::vector<Case> cases = pair_cases();
  cases.push_back(modified_predicate_case(7150));
  for (Case& c : cases) {
    c.spec = testing::sm90a_forward_spec(c.spec);
    c.expect_row = testing::kSm90aForwardRow;
  }
  gpu_test::check_forwards(cases);
}

TEST_CASE("unequal head dims: sm90a forward CTAs that take many works each, and one consumer",
          "[gpu][sm90a][forward][head_dims]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward, unequal head dims, persistent")) return;
  struct Reset {
    ~Reset() { jit::detail::set_sm_count_limit(0); }
  } reset;
  // FlashMask at (64, 128) and (128, 64) (their automatic tiles) and at (192, 128)
  // (tiles=128x112x12:warpgroups): persistent, each CTA of a grid capped at 1 or 3 taking many
  // query blocks (2 batches x 4 heads x 2 blocks), its O tile's store running under the next
  // work.
  std::vector<Case> persistent;
  std::uint64_t seed = 7200;
  for (const auto& dims : {std::pair{64, 128}, std::pair{128, 64}, std::pair{192, 128}}) {
    for (const MaskSpec& mask :
         {MaskSpec{MaskKind::flashmask, true, 1}, MaskSpec{MaskKind::flashmask, false, 4}}) {
      ++seed;
      Case c = pair_case(dims, mask, seed % 2 ? DType::fp16 : DType::bf16, seed);
      c.spec = testing::sm90a_forward_spec(c.spec);
      if (dims.first == 192) c.spec.tiles = {128, 112, 12, TileLayout::warpgroups};
      c.expect_row = testing::kSm90aForwardRow;
      persistent.push_back(c);
    }
  }
  for (int ctas : {1, 3}) {
    INFO("CTAs: " << ctas);
    jit::detail::set_sm_count_limit(ctas);
    gpu_test::check_forwards(persistent);
  }
  jit::detail::set_sm_count_limit(0);
  // One consumer (tiles=64x64x8:warpgroups, two CTAs per SM) where both dims are at most 128.
  std::vector<Case> one;
  for (const auto& dims : {std::pair{64, 128}, std::pair{128, 64}}) {
    for (const MaskSpec& mask :
         {MaskSpec{MaskKind::sliding_window, false, 0}, MaskSpec{MaskKind::causal, false, 0}}) {
      Case c = pair_case(dims, mask, DType::bf16, ++seed);
      c.spec.target = Arch::sm_90a;
      c.spec.tiles = {64, 64, 8, TileLayout::warpgroups};
      c.expect_row = testing::kSm90aForwardRow;
      one.push_back(c);
    }
  }
  gpu_test::check_forwards(one);
}

TEST_CASE("unequal head dims: the sm80 backward matches the reference gradients in both modes",
          "[gpu][backward][head_dims]") {
  // On compute capability 9.0 an sm_90 target takes the sm80 family (the automatic backward of
  // an sm_90a device is the sm90a kernel).
  const Arch device = jit::current_device_arch();
  std::vector<BackwardRun> runs;
  for (Case c : pair_cases()) {
    if (device == Arch::sm_90a || device == Arch::sm_90) c.spec.target = Arch::sm_90;
    runs.push_back({c, /*atomic=*/true, /*deterministic=*/true});
  }
  gpu_test::check_backwards(runs);
}

TEST_CASE("unequal head dims: the sm90a backward matches the reference gradients in both modes",
          "[gpu][sm90a][backward][head_dims]") {
  if (!gpu_test::sm90_device_or_skip("sm90a backward, unequal head dims")) return;
  // Every pair forced by its tiles (tiles=64x64x12:warpgroups at (192, 128) and (256, 128), the
  // consumers splitting the head dims; 64x128x12 at (128, 64) and (64, 128), splitting the keys):
  // both dtypes, causal, sliding window and FlashMask (GQA and MQA, lengths that are not tile
  // multiples, Sq != Sk); (192, 128) with a predicate and both score modifiers, and over
  // 1000 x 700 and 700 x 1000 (the ring wraps) under FlashMask.
  std::vector<Case> cases = pair_cases();
  cases.push_back(modified_predicate_case(7160));
  std::uint64_t seed = 7170;
  for (const auto& [sq, sk] : {std::pair{1000, 700}, std::pair{700, 1000}}) {
    for (const MaskSpec& mask :
         {MaskSpec{MaskKind::flashmask, true, 1}, MaskSpec{MaskKind::flashmask, false, 4}}) {
      ++seed;
      Case c = make_case(mask, seed % 2 ? DType::fp16 : DType::bf16, 192, 2, 4, 2, sq, sk, seed);
      c.spec.head_dim_v = 128;
      c.intervals = dsl::random_intervals(mask.causal, mask.columns, c.batch, c.kv_heads,
                                          c.seqlen_q, c.seqlen_k, gpu_test::data_seed(seed));
      cases.push_back(c);
    }
  }
  std::vector<BackwardRun> runs;
  for (Case& c : cases) {
    c.spec.target = Arch::sm_90a;
    c.spec.tiles = {64, c.spec.head_dim_qk > 128 ? 64 : 128, 12, TileLayout::warpgroups};
    c.expect_row = "backward.sm90a";
    runs.push_back({c, /*atomic=*/true, /*deterministic=*/true});
  }
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
