// The sm90a backward (backward.sm90a: TMA producer, mbarrier ring, two wgmma consumers),
// forced by tiles=64x128x12:warpgroups (64x64x12:warpgroups at head dims 192 and 256), against the
// CPU float64 reference gradients, in the atomic and the deterministic mode (dQ reductions taking
// turns): the sweep's cases at head dims 64 to 256 (every mask kind, both dtypes, GQA/MQA, mask
// heads, lengths that are not tile multiples, Sq != Sk, padded strides), longer sequences whose
// key blocks visit many query blocks (the ring wraps), the score modifiers, rows that see no
// key, odd head counts, CTAs that walk every query head of their KV head; and bitwise
// repeatability of the deterministic mode where the atomic mode's order varies.
// Skipped on devices other than sm_90a.
#include <catch2/catch.hpp>

#include <cmath>
#include <utility>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"
#include "runtime/launch/plan_launch.hpp"

using namespace attnjit;
using gpu_test::BackwardRun;
using gpu_test::Case;
using gpu_test::check_backward;
using gpu_test::make_case;

namespace {

constexpr const char* kRow = "backward.sm90a";

bool on_sm90a() {
  if (jit::current_device_arch() == Arch::sm_90a) return true;
  WARN("not an sm_90a device: backward.sm90a is not run");
  return false;
}

// The case forced onto the row: 64 keys per CTA at head dims 192 and 256 (the consumers split
// the head dim).
Case forced(Case c) {
  c.spec.tiles = {64, c.spec.head_dim_qk > 128 ? 64 : 128, 12, TileLayout::warpgroups};
  c.expect_row = kRow;
  return c;
}

}  // namespace

TEST_CASE("the sm90a backward matches the reference gradients over the sweep",
          "[gpu][backward][sm90a]") {
  if (!on_sm90a()) return;
  std::vector<Case> cases;
  for (const Case& c : gpu_test::sweep_cases()) {
    if (c.spec.head_dim_qk != 32) cases.push_back(forced(c));
  }
  std::vector<BackwardRun> runs;
  for (const Case& c : gpu_test::sampled(cases)) runs.push_back({c});
  gpu_test::check_backwards(runs);
}

TEST_CASE("the sm90a backward over many query blocks per key block", "[gpu][backward][sm90a]") {
  if (!on_sm90a()) return;
  // 1000 x 1000 (16 query blocks: the two-stage ring wraps eight times), 1000 x 700 and
  // 700 x 1000, documents and random intervals, GQA.
  const MaskSpec masks[] = {{MaskKind::none, false, 0},           {MaskKind::causal, false, 0},
                            {MaskKind::sliding_window, false, 0}, {MaskKind::flashmask, true, 1},
                            {MaskKind::flashmask, true, 2},       {MaskKind::flashmask, false, 2},
                            {MaskKind::flashmask, false, 4}};
  const std::pair<int, int> lengths[] = {{1000, 1000}, {1000, 700}, {700, 1000}};
  std::uint64_t seed = 9100;
  int rotation = 0;
  std::vector<BackwardRun> runs;
  for (int d : {64, 128, 192, 256}) {
    for (const MaskSpec& mask : masks) {
      const auto [sq, sk] = lengths[rotation % 3];
      Case c = make_case(mask, rotation % 2 == 0 ? DType::bf16 : DType::fp16, d, 2, 4,
                         rotation % 2 == 0 ? 2 : 4, sq, sk, ++seed);
      c.padded_strides = rotation % 3 == 1;
      if (mask.kind == MaskKind::sliding_window) {
        c.window_left = 150;
        c.window_right = 30;
      }
      if (mask.kind == MaskKind::flashmask) {
        // Documents take LTS (causal) or LTS and UTE: the other masks draw random intervals.
        const bool documents = sq == sk && mask.columns == (mask.causal ? 1 : 2);
        if (documents) {
          std::vector<dsl::IntervalVectors> samples{
              dsl::random_documents(mask.causal, sq, 2, 6, gpu_test::data_seed(seed)),
              dsl::random_documents(mask.causal, sq, 2, 6, gpu_test::data_seed(seed + 1))};
          c.intervals = dsl::stack(samples);
        } else {
          c.intervals = dsl::random_intervals(mask.causal, mask.columns, c.batch, c.kv_heads, sq,
                                              sk, gpu_test::data_seed(seed));
        }
      }
      ++rotation;
      runs.push_back({forced(c)});
    }
  }
  gpu_test::check_backwards(runs);
}

TEST_CASE("the sm90a backward with 80-row query blocks matches the reference gradients",
          "[gpu][backward][sm90a][bm80]") {
  if (!on_sm90a()) return;
  // tiles=80x128x12:warpgroups (head dim 128 without a mask or soft-capping: dQ^T = K^T dS^T, the
  // dS tile written by transposing stmatrix, the row statistics loaded by a warp of their own): the
  // sweep's cases of that kind, both modes; then lengths that 80 does not divide (and shorter than
  // one block), GQA and MQA, padded strides, ALiBi, many query blocks per key block (the ring
  // wraps).
  const auto eighty = [](Case c) {
    c.spec.tiles = {80, 128, 12, TileLayout::warpgroups};
    c.expect_row = kRow;
    return c;
  };
  std::vector<BackwardRun> runs;
  for (const Case& c : gpu_test::sweep_cases()) {
    if (c.spec.head_dim_qk != 128 || c.spec.mask.kind != MaskKind::none || c.spec.softcap) {
      continue;
    }
    runs.push_back({eighty(c)});
  }
  REQUIRE(!runs.empty());
  const std::pair<int, int> lengths[] = {{1000, 1000}, {1001, 700}, {79, 1000},
                                         {161, 81},    {2000, 333}, {81, 2049}};
  std::uint64_t seed = 9300;
  for (const auto& [sq, sk] : lengths) {
    Case c;
    c.spec.dtype = seed % 2 == 0 ? DType::bf16 : DType::fp16;
    c.spec.head_dim_qk = c.spec.head_dim_v = 128;
    c.spec.alibi = seed % 3 == 2;
    c.batch = 2;
    c.heads = 4;
    c.kv_heads = seed % 3 == 0 ? 1 : seed % 2 == 0 ? 2 : 4;
    c.seqlen_q = sq;
    c.seqlen_k = sk;
    c.padded_strides = seed % 3 == 1;
    c.seed = ++seed;
    if (c.spec.alibi) c.score_mod.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
    runs.push_back({eighty(c)});
  }
  // Without tiles= the backward at head dim 128 without a mask takes this layout.
  Case automatic;
  automatic.spec.dtype = DType::bf16;
  automatic.spec.head_dim_qk = automatic.spec.head_dim_v = 128;
  automatic.batch = 1;
  automatic.heads = automatic.kv_heads = 3;
  automatic.seqlen_q = automatic.seqlen_k = 555;
  automatic.seed = 9400;
  automatic.expect_row = kRow;
  runs.push_back({automatic});
  gpu_test::check_backwards(runs);
}

TEST_CASE("the sm90a deterministic backward with 80-row query blocks is bitwise repeatable",
          "[gpu][backward][sm90a][bm80]") {
  if (!on_sm90a()) return;
  Case c = make_case({}, DType::bf16, 128, 2, 4, 2, 1900, 2000, 9500);
  c.spec.tiles = {80, 128, 12, TileLayout::warpgroups};
  c.expect_row = kRow;
  gpu_test::check_deterministic_repeatable(c, /*repeats=*/3);
  const int differing = gpu_test::atomic_dq_variations(c, /*repeats=*/3);
  WARN(c.describe() << ": atomic dQ differed from its first run in " << differing << " of 3 runs");
}

TEST_CASE("the sm90a backward with score modifiers matches the reference gradients",
          "[gpu][backward][sm90a][score_mod]") {
  if (!on_sm90a()) return;
  int index = 0;
  std::vector<BackwardRun> runs;
  for (const Case& c : gpu_test::score_mod_cases()) {
    const bool deterministic = index++ % 2 == 1;
    runs.push_back(BackwardRun::in_mode(forced(c), deterministic));
    // Every third case again at head dim 256, the next at 192 (the wide layout).
    if (index % 3 != 0) {
      Case wide = c;
      wide.spec.head_dim_qk = wide.spec.head_dim_v = index % 3 == 1 ? 256 : 192;
      runs.push_back(BackwardRun::in_mode(forced(wide), deterministic));
    }
  }
  gpu_test::check_backwards(runs);
}

TEST_CASE("the sm90a backward gives zero gradients to rows that see no key",
          "[gpu][backward][sm90a]") {
  if (!on_sm90a()) return;
  // Leading rows (bottom-right causal, Sq > Sk: rows 0 .. 229 of 300 see no key) and rows in
  // the middle (FlashMask [LTS, LTE) = [100, 260) for every key: query blocks 2 and 3 are
  // visited by no key block, 1 and 4 partly masked), both modes; d_q starts poisoned (NaN).
  for (int d : {64, 128, 192, 256}) {
    for (bool middle : {false, true}) {
      Case c;
      c.spec.dtype = middle ? DType::bf16 : DType::fp16;
      c.spec.head_dim_qk = c.spec.head_dim_v = d;
      c.batch = 1;
      c.heads = c.kv_heads = 2;
      c.seed = 93 + d + middle;
      int hidden_begin = 0, hidden_end = 230;
      if (middle) {
        hidden_begin = 100;
        hidden_end = 260;
        c.spec.mask = {MaskKind::flashmask, false, 4};
        c.seqlen_q = 333;
        c.seqlen_k = 200;
        dsl::IntervalVectors m;
        m.causal = false;
        m.columns = 4;
        m.batch = 1;
        m.heads = 1;
        m.seqlen_q = c.seqlen_q;
        m.seqlen_k = c.seqlen_k;
        for (int j = 0; j < c.seqlen_k; ++j) {
          for (int value : {hidden_begin, hidden_end, 0, 0}) m.data.push_back(value);
        }
        c.intervals = m;
      } else {
        c.spec.mask = {MaskKind::causal, false, 0};
        c.seqlen_q = 300;
        c.seqlen_k = 70;
      }
      c = forced(c);
      const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
      const std::vector<float> d_o = gpu_test::make_d_o(c);
      for (bool deterministic : {false, true}) {
        const gpu_test::BackwardOutputs got =
            gpu_test::run_backward_on_gpu(c, inputs, d_o, deterministic);
        for (int h = 0; h < 2; ++h) {
          for (int row = hidden_begin; row < hidden_end; ++row) {
            for (int i = 0; i < d; ++i) {
              REQUIRE(got.dq[(static_cast<std::size_t>(row) * 2 + h) * d + i] == 0.f);
            }
          }
        }
        for (float x : got.dq) REQUIRE(std::isfinite(x));
        for (float x : got.dk) REQUIRE(std::isfinite(x));
        for (float x : got.dv) REQUIRE(std::isfinite(x));
        check_backward(c, deterministic);
      }
    }
  }
}

TEST_CASE("the sm90a backward with odd head counts", "[gpu][backward][sm90a]") {
  if (!on_sm90a()) return;
  int index = 0;
  for (const auto& [heads, kv_heads] : {std::pair{1, 1}, std::pair{3, 3}, std::pair{3, 1}}) {
    const int head_dim = index == 1 ? 256 : index == 2 ? 192 : 128;
    ++index;
    Case c = make_case({MaskKind::causal, false, 0}, DType::bf16, head_dim, 2, heads, kv_heads, 333,
                       333, 170 + heads);
    c.padded_strides = true;
    for (bool deterministic : {false, true}) check_backward(forced(c), deterministic);
  }
}

TEST_CASE("the sm90a deterministic backward is bitwise repeatable", "[gpu][backward][sm90a]") {
  if (!on_sm90a()) return;
  // Sixteen key blocks add to every dQ tile of the full mask, both consumers to the same
  // columns at d64; the causal mask and random intervals skip blocks, so that the turns of a
  // query block's visitors are not their key-block indices.
  const MaskSpec masks[] = {{MaskKind::none, false, 0},
                            {MaskKind::causal, false, 0},
                            {MaskKind::flashmask, true, 1},
                            {MaskKind::flashmask, false, 2}};
  int index = 0;
  std::vector<Case> cases;
  for (int d : {64, 128, 192, 256}) {
    for (const MaskSpec& mask : masks) {
      Case c = make_case(mask, index % 2 == 0 ? DType::bf16 : DType::fp16, d, 2, 4, 2, 1900, 2000,
                         400 + index);
      ++index;
      if (mask.kind == MaskKind::flashmask) {
        c.intervals = dsl::random_intervals(mask.causal, mask.columns, c.batch, c.kv_heads,
                                            c.seqlen_q, c.seqlen_k, gpu_test::data_seed(c.seed));
      }
      cases.push_back(forced(c));
    }
  }
  // The atomic mode on the same inputs, for the log: what the turns take away.
  gpu_test::check_deterministic_repeatable(cases, /*repeats=*/3, /*atomic_repeats=*/3);
}

TEST_CASE("the deterministic sm90a backward at head dims 192 and 256 on long packed documents",
          "[gpu][backward][sm90a][wide]") {
  if (!on_sm90a()) return;
  // 8192 tokens in documents of 3374, 868, 1406, 2393 and 151 (the first sample of compare.py's
  // document family), 16 heads: key block 125 holds the last two documents' boundary, so its
  // partial tiles are slow while its turns come at once, and its consumers finish a block
  // before their writer warps have met them on the block before. With one dQ hand-over
  // barrier per consumer both arrivals fell into one round and the kernel hung (ATTNJIT_DEBUG
  // turns that into a trap); the barriers are per ring stage now. The run must complete and
  // repeat bitwise.
  const int lengths[] = {3374, 868, 1406, 2393, 151};
  std::vector<Case> cases;
  for (int d : {192, 256}) {
    for (bool causal : {false, true}) {
      Case c = make_case({MaskKind::flashmask, causal, causal ? 1 : 2}, DType::bf16, d, 1, 16, 16,
                         8192, 8192, 450 + causal + 2 * (d == 192));
      c.intervals = causal ? dsl::causal_document(lengths) : dsl::document(lengths);
      cases.push_back(forced(c));
    }
  }
  gpu_test::check_deterministic_repeatable(cases, /*repeats=*/1);
}

TEST_CASE("the sm90a backward with CTAs that walk every query head of their KV head",
          "[gpu][backward][sm90a][head_group]") {
  if (!on_sm90a()) return;
  struct Reset {
    ~Reset() { jit::detail::set_sm_count_limit(0); }
  } reset;
  // With the SM count capped at 1 every GQA launch below groups the heads of a KV head into one
  // CTA (Extent::head_group, checked for each case's shapes) in the atomic mode: dK and dV
  // summed in the CTA's registers, no partials, no reduction kernel. Groups of 2 to 8 heads,
  // MQA, an odd KV head count (the last head pair has one member), every mask kind with the
  // vectors shared by the heads of a KV head (mask heads 1 or Hkv), ALiBi (a slope per query
  // head) and soft-capping, head dims 64 to 256; every third case in the deterministic mode,
  // which does not group.
  jit::detail::set_sm_count_limit(1);
  struct Heads {
    int heads, kv_heads;
  };
  const Heads groups[] = {{4, 2}, {8, 1}, {6, 3}, {8, 4}, {4, 1}};
  const MaskSpec masks[] = {{MaskKind::none, false, 0},           {MaskKind::causal, false, 0},
                            {MaskKind::sliding_window, false, 0}, {MaskKind::flashmask, true, 1},
                            {MaskKind::flashmask, false, 4},      {MaskKind::flashmask, true, 2}};
  std::uint64_t seed = 9700;
  int index = 0;
  std::vector<BackwardRun> runs;
  for (int d : {64, 128, 192, 256}) {
    for (const MaskSpec& mask : masks) {
      const Heads h = groups[index % 5];
      const int sq = index % 3 == 0 ? 700 : 333;
      const int sk = index % 3 == 1 ? 1000 : 333;
      Case c = make_case(mask, index % 2 == 0 ? DType::bf16 : DType::fp16, d, 2, h.heads,
                         h.kv_heads, sq, sk, ++seed);
      c.padded_strides = index % 4 == 3;
      if (mask.kind == MaskKind::sliding_window) {
        c.window_left = 150;
        c.window_right = 30;
      }
      if (mask.kind == MaskKind::flashmask) {
        const int mask_heads = index % 2 == 0 ? 1 : c.kv_heads;
        c.intervals = dsl::random_intervals(mask.causal, mask.columns, c.batch, mask_heads, sq, sk,
                                            gpu_test::data_seed(seed));
      }
      if (index % 6 == 2) {
        c.spec.alibi = true;
        for (int i = 0; i < c.heads; ++i) c.score_mod.alibi_slopes.push_back(0.5f / (1 + i));
      }
      if (index % 6 == 5) {
        c.spec.softcap = true;
        c.score_mod.softcap = 20.f;
      }
      const int mask_heads = c.intervals ? c.intervals->heads : 1;
      const jit::detail::Shapes shapes{c.batch, sq, sk, c.heads, c.kv_heads, mask_heads};
      INFO(c.describe());
      REQUIRE(jit::detail::backward_head_group(shapes, 1) == c.heads / c.kv_heads);
      runs.push_back(BackwardRun::in_mode(forced(c), index % 3 == 2));
      ++index;
    }
  }
  gpu_test::check_backwards(runs);
}
