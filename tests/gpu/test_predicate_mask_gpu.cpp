// Attention with predicate masks (mask=predicate) against the CPU float64 references: forward
// and backward (atomic and deterministic), predicates that FlashMask intervals can express and
// ones they cannot (checkerboards with per-element conditions, head- and batch-dependent
// predicates, whole rows masked), bf16 and fp16, head dims 64 and 128, lengths that are not
// tile multiples, Sq != Sk, GQA; new scalar values and tensor contents reuse the kernel.
// Partial tiles are masked from their stored element bits, or by evaluating the predicate
// when the bit budget (ATTNJIT_PREDICATE_BITS_MIB) leaves them no slot: both are checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "attnjit/jit.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"
#include "support/env_override.hpp"

using namespace attnjit;
using gpu_test::BackwardRun;
using gpu_test::Case;
using gpu_test::check_backward;
using gpu_test::check_forward;

namespace {

/// A predicate as a user writes it, with its tensors (named, [rows, length]).
struct PredicateSource {
  std::string text;
  std::vector<PredicateTensor> tensors;
};

/// The case of `source` on the given problem: the spec holds the lifted structure and the
/// lifted literals become the scalar values.
Case predicate_case(const PredicateSource& source, DType dtype, int head_dim, int batch, int heads,
                    int kv_heads, int seqlen_q, int seqlen_k, std::uint64_t seed) {
  return gpu_test::predicate_case(source.text, source.tensors, dtype, head_dim, batch, heads,
                                  kv_heads, seqlen_q, seqlen_k, seed);
}

/// Document ids of `length` positions in documents of `size` tokens, one row per batch
/// (each row shifted so the rows differ).
PredicateTensor documents(std::string name, int rows, int length, int size) {
  PredicateTensor t{std::move(name), rows, length, {}};
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < length; ++i) t.values.push_back((i + 37 * r) / size);
  }
  return t;
}

/// Segment ids per batch row, -1 (a row that sees nothing) on every 9th position.
PredicateTensor segments(int batch, int length) {
  PredicateTensor t{"seg", batch, length, {}};
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < length; ++i) t.values.push_back(i % 9 == 4 ? -1 : (i + 50 * b) / 90);
  }
  return t;
}

/// The predicates of the sweep, for lengths up to `length`.
std::vector<PredicateSource> sources(int batch, int length) {
  return {
      {"q >= k && doc[q] == doc[k]", {documents("doc", 1, length, 77)}},
      {"q - k < 100 && q >= k", {}},
      {"((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0", {}},
      {"k % 7 == 0 || q == k", {}},
      {"(k + h) % 3 != 0 && abs(q - k) < 40 * (h + 1)", {}},
      {"seg[q] == seg[k] && seg[q] >= 0", {segments(batch, length)}},
      {"q % 3 != 1 && k <= q + b", {}},
  };
}

struct Shape {
  int batch, heads, kv_heads, seqlen_q, seqlen_k;
};

// Lengths that are not tile multiples, Sq != Sk both ways, MHA / GQA / MQA.
constexpr Shape kShapes[] = {
    {2, 4, 2, 300, 300}, {1, 4, 1, 257, 400}, {2, 2, 2, 333, 130}, {1, 3, 3, 129, 129}};

std::vector<Case> sweep() {
  std::vector<Case> cases;
  std::uint64_t seed = 500;
  int rotation = 0;
  for (DType dtype : {DType::bf16, DType::fp16}) {
    for (int head_dim : {64, 128}) {
      for (const Shape& s : kShapes) {
        const int length = std::max(s.seqlen_q, s.seqlen_k);
        const std::vector<PredicateSource> all = sources(s.batch, length);
        // Two predicates per shape, rotating, so each (dtype, head dim) sees all of them.
        for (int i = 0; i < 2; ++i) {
          const PredicateSource& source = all[rotation++ % all.size()];
          cases.push_back(predicate_case(source, dtype, head_dim, s.batch, s.heads, s.kv_heads,
                                         s.seqlen_q, s.seqlen_k, ++seed));
        }
      }
    }
  }
  return cases;
}

/// On an sm_90a device (else a warning), check_backwards of `runs_of(no_bits)`: with the
/// predicate's stored bits at their default budget, then with none
/// (ATTNJIT_PREDICATE_BITS_MIB=0: the predicate evaluated per element).
void check_sm90a_with_and_without_bits(
    const std::function<std::vector<BackwardRun>(bool no_bits)>& runs_of) {
  if (jit::current_device_arch() != Arch::sm_90a) {
    WARN("not an sm_90a device: backward.sm90a is not run");
    return;
  }
  for (const char* budget : {static_cast<const char*>(nullptr), "0"}) {
    const testing::EnvOverride bits("ATTNJIT_PREDICATE_BITS_MIB", budget);
    gpu_test::check_backwards(runs_of(budget != nullptr));
  }
}

}  // namespace

TEST_CASE("predicate masks: forward matches the reference", "[gpu][predicate]") {
  gpu_test::check_forwards(sweep());
}

TEST_CASE("predicate masks: backward matches the reference gradients", "[gpu][predicate]") {
  int index = 0;
  std::vector<BackwardRun> runs;
  for (const Case& c : sweep()) {
    runs.push_back(BackwardRun::in_mode(c, /*deterministic=*/index++ % 2 == 1));
  }
  gpu_test::check_backwards(runs);
}

TEST_CASE("predicate masks: the sm90a backward, forced, matches the reference gradients",
          "[gpu][predicate][sm90a]") {
  // backward.sm90a by its tiles (the automatic choice there too), both modes, the stored
  // bits and, with no slots left, the predicate evaluated per element.
  check_sm90a_with_and_without_bits([](bool no_bits) {
    int index = 0;
    std::vector<BackwardRun> runs;
    for (Case c : sweep()) {
      if (no_bits && index++ % 3 != 0) continue;
      c.spec.tiles = {64, 128, 12, TileLayout::warpgroups};
      c.expect_row = "backward.sm90a";
      runs.push_back({c});
    }
    return runs;
  });
}

TEST_CASE(
    "predicate masks: the sm90a backward at head dims 192 and 256 matches the reference "
    "gradients",
    "[gpu][predicate][sm90a][wide]") {
  // The sweep's d128 cases at head dims 256 and 192, alternating (the wide layout: 64 keys per
  // CTA, each consumer reading its word of a key row's stored bits), both modes, the stored
  // bits and, for every other case, the predicate evaluated per element.
  check_sm90a_with_and_without_bits([](bool no_bits) {
    int index = 0;
    std::vector<BackwardRun> runs;
    for (Case c : sweep()) {
      if (c.spec.head_dim_qk != 128 || (no_bits && index++ % 2 != 0)) continue;
      c.spec.head_dim_qk = c.spec.head_dim_v = c.seed % 2 == 0 ? 256 : 192;
      c.spec.tiles = {64, 64, 12, TileLayout::warpgroups};
      c.expect_row = "backward.sm90a";
      runs.push_back({c});
    }
    return runs;
  });
}

TEST_CASE("predicate masks: rows that see no key give O = 0, LSE = -inf, zero dQ",
          "[gpu][predicate]") {
  // Rows q % 3 == 1 see nothing; every row of batch 1 with q >= 40 sees nothing either.
  const PredicateSource source{"q % 3 != 1 && (b == 0 || q < 40) && k <= q", {}};
  const Case c = predicate_case(source, DType::bf16, 64, 2, 2, 2, 200, 200, 31);
  INFO(c.describe());
  const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
  const gpu_test::Outputs got = gpu_test::run_on_gpu(c, inputs);
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 2; ++h) {
      for (int q = 0; q < 200; ++q) {
        if (q % 3 != 1 && (b == 0 || q < 40)) continue;
        REQUIRE(got.lse[(static_cast<std::size_t>(b) * 2 + h) * 200 + q] == -INFINITY);
        for (int d = 0; d < 64; ++d) {
          REQUIRE(got.out[((static_cast<std::size_t>(b) * 200 + q) * 2 + h) * 64 + d] == 0.f);
        }
      }
    }
  }
  check_forward(c);
  for (bool deterministic : {false, true}) {
    const std::vector<float> d_o = gpu_test::make_d_o(c);
    const gpu_test::BackwardOutputs grads =
        gpu_test::run_backward_on_gpu(c, inputs, d_o, deterministic);
    for (int q = 1; q < 200; q += 3) {
      for (int d = 0; d < 64; ++d)
        REQUIRE(grads.dq[static_cast<std::size_t>(q) * 2 * 64 + d] == 0.f);
    }
    check_backward(c, deterministic);
  }
}

TEST_CASE("predicate masks: new scalars and tensor contents reuse the kernel", "[gpu][predicate]") {
  jit::clear_memory_cache();
  const PredicateSource first{"q - k < 50 && doc[q] == doc[k]", {documents("doc", 1, 300, 60)}};
  Case c = predicate_case(first, DType::bf16, 64, 1, 2, 2, 300, 300, 41);
  check_forward(c);
  const jit::CacheStats before = jit::cache_stats();

  // Other literals and other documents: the same lifted structure.
  const PredicateSource second{"q - k < 120 && doc[q] == doc[k]", {documents("doc", 1, 300, 25)}};
  const Case c2 = predicate_case(second, DType::bf16, 64, 1, 2, 2, 300, 300, 42);
  REQUIRE(c2.spec == c.spec);
  check_forward(c2);
  const jit::CacheStats after = jit::cache_stats();
  CHECK(after.compiles == before.compiles);
  CHECK(after.memory_hits > before.memory_hits);

  // A new structure compiles once, then hits the memory cache.
  const PredicateSource third{"q - k < 120 || doc[q] == doc[k]", {documents("doc", 1, 300, 25)}};
  const Case c3 = predicate_case(third, DType::bf16, 64, 1, 2, 2, 300, 300, 43);
  const std::uint64_t compiles = jit::cache_stats().compiles + jit::cache_stats().disk_hits;
  check_forward(c3);
  const std::uint64_t after_new = jit::cache_stats().compiles + jit::cache_stats().disk_hits;
  CHECK(after_new == compiles + 1);
  check_forward(c3);
  CHECK(jit::cache_stats().compiles + jit::cache_stats().disk_hits == after_new);
}

TEST_CASE("predicate masks: a large problem against the GPU reference kernel", "[gpu][predicate]") {
  const PredicateSource source{"((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0", {}};
  const Case c = predicate_case(source, DType::bf16, 128, 1, 2, 2, 2100, 2100, 51);
  INFO(c.describe());
  const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
  const gpu_test::Outputs got = gpu_test::run_on_gpu(c, inputs);
  const gpu_test::Outputs ref = gpu_test::run_on_gpu(c, inputs, /*reference_kernel=*/true);
  double max_err = 0;
  for (std::size_t i = 0; i < got.out.size(); ++i) {
    max_err = std::max(max_err, static_cast<double>(std::abs(got.out[i] - ref.out[i])));
  }
  CHECK(max_err < 2e-2);
  for (std::size_t i = 0; i < got.lse.size(); ++i) {
    REQUIRE((got.lse[i] == ref.lse[i] || std::abs(got.lse[i] - ref.lse[i]) < 1e-2));
  }
}

TEST_CASE("predicate masks: partial tiles without bit slots evaluate the predicate",
          "[gpu][predicate]") {
  // No slots at all: every partial tile takes the element-by-element path.
  {
    const testing::EnvOverride budget("ATTNJIT_PREDICATE_BITS_MIB", "0");
    const std::vector<Case> cases = sweep();
    std::vector<Case> forwards;
    std::vector<BackwardRun> runs;
    for (std::size_t i = 0; i < cases.size(); i += 3) {
      forwards.push_back(cases[i]);
      runs.push_back(BackwardRun::in_mode(cases[i], /*deterministic=*/i % 2 == 1));
    }
    gpu_test::check_forwards(forwards);
    gpu_test::check_backwards(runs);
  }
  // 1 MiB is 1024 slots of 128 x 64 bits (2048 of the dQ kernel's 64 x 64); a checkerboard
  // that depends on b and h has 16 table rows of about 81 (162) partial tiles at 1100, so
  // some tiles have bits and the rest evaluate the predicate.
  const testing::EnvOverride budget("ATTNJIT_PREDICATE_BITS_MIB", "1");
  const PredicateSource source{"((q / 128 + k / 128) % 2 == 0) && (q + k + h + b) % 3 != 0", {}};
  const Case c = predicate_case(source, DType::bf16, 128, 2, 8, 4, 1100, 1100, 61);
  check_forward(c);
  check_backward(c, /*deterministic=*/false);
  check_backward(c, /*deterministic=*/true);
}
