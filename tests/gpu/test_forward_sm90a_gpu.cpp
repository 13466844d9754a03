// The sm90a forward (templates/attnjit/sm90a/forward.cuh), forced by an explicit
// tiles=BMxBNxW:warpgroups (the registry's shape for the spec) on target sm_90a, against the CPU
// float64 reference: the forward sweep (every mask kind, head dims 64/96/128/192/256, both
// dtypes, GQA/MQA, mask heads, ragged lengths, Sq != Sk, padded strides; sampled pairwise
// unless ATTNJIT_GPU_EXHAUSTIVE=1), three consumer warpgroups and one on every mask, rows that
// see no key, odd head counts, score modifiers, predicate masks, large problems against the
// GPU reference kernel, and determinism. Each kernel's name and threads are printed the first
// time it runs, so the log shows the family ran.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "gpu/checks.hpp"
#include "gpu/gpu_case.hpp"
#include "gpu/sm90_kernel.hpp"
#include "runtime/launch/plan_launch.hpp"
#include "support/sm90a_tiles.hpp"

using namespace attnjit;
using gpu_test::Case;
using gpu_test::make_case;
using gpu_test::predicate_case;

namespace {

/// Forces the case onto the sm90a forward; false for head dims it does not take.
bool force_sm90a(Case& c) {
  if (c.spec.head_dim_qk == 32) return false;
  c.spec = testing::sm90a_forward_spec(c.spec);
  c.expect_row = testing::kSm90aForwardRow;
  return true;
}

/// Compiles the cases' specs in parallel (the checks then find them in the memory cache) and
/// prints each sm90a kernel's name and resources once.
void compile_and_report(const std::vector<Case>& cases) {
  std::vector<AttentionSpec> specs;
  for (const Case& c : cases) {
    AttentionSpec spec = c.spec;
    spec.return_lse = true;
    if (std::find(specs.begin(), specs.end(), spec) == specs.end()) specs.push_back(spec);
  }
  std::vector<std::future<jit::CompileInfo>> infos;
  const std::size_t workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<jit::CompileInfo> done;
  for (const AttentionSpec& spec : specs) {
    if (infos.size() >= workers) {
      done.push_back(infos.front().get());
      infos.erase(infos.begin());
    }
    infos.push_back(std::async(std::launch::async, [spec] { return jit::compile(spec).info(); }));
  }
  for (auto& info : infos) done.push_back(info.get());
  static std::mutex mutex;
  static std::set<std::string> printed;
  const std::lock_guard lock(mutex);
  for (const jit::CompileInfo& info : done) {
    const jit::KernelReport& kernel = info.kernels.back();
    if (!printed.insert(kernel.name + std::to_string(kernel.threads)).second) continue;
    std::printf(
        "sm90a forward kernel ran: %s (%d threads, %d registers, %d spill bytes, %d bytes smem)\n",
        kernel.name.c_str(), kernel.threads, kernel.registers, kernel.spill_bytes,
        kernel.dynamic_smem_bytes);
  }
}

std::vector<Case> forced(std::vector<Case> cases) {
  std::vector<Case> out;
  for (Case& c : cases) {
    if (force_sm90a(c)) out.push_back(std::move(c));
  }
  compile_and_report(out);
  return out;
}

}  // namespace

TEST_CASE("sm90a forward matches the reference over the sweep", "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward sweep")) return;
  for (const Case& c : forced(gpu_test::sampled(gpu_test::sweep_cases()))) {
    gpu_test::check_forward(c);
  }
}

TEST_CASE("sm90a forward: CTAs that take many works each match the reference",
          "[gpu][sm90a][forward]") {
  // Under FlashMask (and predicate) masks the kernel is persistent up to head dim 128: with
  // its grid capped at a few CTAs, each takes many query blocks from the work counter, heavy
  // and light, across heads and batches, through the Q tile's phases and the rings running on
  // from work to work. The other cases (d192, d256) run one CTA per work as before.
  if (!gpu_test::sm90_device_or_skip("sm90a forward, many works per CTA")) return;
  struct Reset {
    ~Reset() { jit::detail::set_sm_count_limit(0); }
  } reset;
  std::vector<Case> cases;
  for (const Case& c : gpu_test::sweep_cases()) {
    const bool tables =
        c.spec.mask.kind == MaskKind::flashmask || c.spec.mask.kind == MaskKind::predicate;
    if (tables && c.batch * c.heads * ((c.seqlen_q + 127) / 128) >= 4) cases.push_back(c);
  }
  REQUIRE(cases.size() >= 10);
  cases = gpu_test::sampled(cases);
  for (int ctas : {1, 3}) {
    INFO("CTAs: " << ctas);
    jit::detail::set_sm_count_limit(ctas);
    for (const Case& c : forced(cases)) gpu_test::check_forward(c);
  }
}

TEST_CASE("sm90a forward: rows with no visible key give O = 0 and LSE = -inf",
          "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward masked rows")) return;
  std::vector<Case> cases;
  // Causal with Sq > Sk: the first Sq - Sk rows see nothing.
  cases.push_back(make_case({MaskKind::causal, false, 0}, DType::bf16, 128, 1, 2, 2, 200, 70, 7));
  // FlashMask masking every key for rows [40, 150), and rows >= 180 for odd columns.
  Case band = make_case({MaskKind::flashmask, false, 4}, DType::fp16, 64, 1, 2, 2, 190, 190, 8);
  band.intervals = gpu_test::four_column_intervals(190, [](int j) {
    return std::array{40, 150, j % 2 ? 180 : 0, j % 2 ? 190 : 0};
  });
  cases.push_back(band);
  // FlashMask masking every key for rows [100, 190) at d128: the query block of rows 128 and up
  // visits no key block (the producer's stage without a block, with the vectors' arrivals).
  Case empty_block =
      make_case({MaskKind::flashmask, false, 4}, DType::bf16, 128, 1, 3, 1, 190, 190, 10);
  empty_block.intervals = gpu_test::four_column_intervals(190, [](int) {
    return std::array{100, 190, 0, 0};
  });
  cases.push_back(empty_block);
  // A sliding window whose diagonal leaves the keys: rows below 236 see nothing.
  Case window =
      make_case({MaskKind::sliding_window, false, 0}, DType::bf16, 256, 1, 1, 1, 300, 64, 9);
  window.window_left = 3;
  window.window_right = 0;
  cases.push_back(window);
  // A predicate hiding every third row and all of batch 1 past row 40.
  cases.push_back(predicate_case("q % 3 != 1 && (b == 0 || q < 40) && k <= q", {}, DType::bf16, 128,
                                 2, 2, 2, 200, 200, 31));
  for (const Case& c : forced(cases)) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward with three consumer warpgroups matches the reference",
          "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward three consumers")) return;
  // tiles=192xBNx16:warpgroups (head dims 64 and 96) on every mask kind, the score modifiers and
  // predicates, not only on the masks the registry gives it (no mask, causal).
  std::vector<Case> cases;
  for (const Case& c : gpu_test::sampled(gpu_test::sweep_cases())) {
    if (c.spec.head_dim_qk == 64 || c.spec.head_dim_qk == 96) cases.push_back(c);
  }
  for (const Case& c : gpu_test::score_mod_cases()) {
    if (c.spec.head_dim_qk == 64) cases.push_back(c);
  }
  cases.push_back(predicate_case("((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0", {},
                                 DType::fp16, 64, 1, 4, 1, 257, 400, 502));
  cases.push_back(predicate_case("q % 3 != 1 && (b == 0 || q < 40) && k <= q", {}, DType::bf16, 64,
                                 2, 2, 2, 450, 450, 531));
  // Rows past 192 with nothing visible (causal, Sq > Sk), two CTAs per head.
  cases.push_back(make_case({MaskKind::causal, false, 0}, DType::bf16, 64, 1, 2, 2, 400, 150, 532));
  for (Case& c : cases) {
    c.spec.target = Arch::sm_90a;
    const int block_n = c.spec.head_dim_qk == 96 ? 96 : c.spec.softcap || c.spec.alibi ? 112 : 128;
    c.spec.tiles = {192, block_n, 16, TileLayout::warpgroups};
    c.expect_row = testing::kSm90aForwardRow;
  }
  compile_and_report(cases);
  for (const Case& c : cases) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward with one consumer warpgroup (two CTAs per SM) matches the reference",
          "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward one consumer")) return;
  // tiles=64xBNx8:warpgroups on every mask kind at head dims 64 to 128, score modifiers and
  // predicates, not only on the masks the registry gives it (sliding windows by index at d64).
  std::vector<Case> cases;
  for (const Case& c : gpu_test::sampled(gpu_test::sweep_cases())) {
    if (c.spec.head_dim_qk >= 64 && c.spec.head_dim_qk <= 128) cases.push_back(c);
  }
  for (const Case& c : gpu_test::score_mod_cases()) cases.push_back(c);
  cases.push_back(predicate_case("((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0", {},
                                 DType::fp16, 64, 1, 4, 1, 257, 400, 502));
  cases.push_back(predicate_case("q % 3 != 1 && (b == 0 || q < 40) && k <= q", {}, DType::bf16, 128,
                                 2, 2, 2, 450, 450, 533));
  for (Case& c : cases) {
    c.spec.target = Arch::sm_90a;
    c.spec.tiles = {64, c.spec.head_dim_qk <= 96 ? 128 : 64, 8, TileLayout::warpgroups};
    c.expect_row = testing::kSm90aForwardRow;
  }
  compile_and_report(cases);
  for (const Case& c : cases) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward with odd head counts and padded strides", "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward odd heads")) return;
  std::vector<Case> cases;
  for (const auto& [heads, kv_heads] : {std::pair{1, 1}, std::pair{3, 3}, std::pair{5, 1}}) {
    Case c = make_case({MaskKind::causal, false, 0}, DType::fp16, 128, 3, heads, kv_heads, 259, 301,
                       29 + heads);
    c.padded_strides = true;
    cases.push_back(c);
  }
  for (const Case& c : forced(cases)) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward with FlashMask vectors off a 16-byte boundary", "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward misaligned vectors")) return;
  // The producer copies a block's values 16 bytes at a time where they start 16-byte aligned,
  // else 4 bytes at a time: the same masks with the tensor at offsets 0, 1 and 3 ints, one,
  // two and four columns, Sk odd and even, random intervals.
  std::vector<Case> cases;
  int seed = 900;
  for (const auto& [columns, causal] :
       {std::pair{1, true}, std::pair{2, true}, std::pair{2, false}, std::pair{4, false}}) {
    for (const int offset : {0, 1, 3}) {
      for (const int seqlen_k : {333, 512}) {
        Case c = make_case({MaskKind::flashmask, causal, columns}, DType::bf16,
                           columns == 4 ? 64 : 128, 2, 4, 2, 301, seqlen_k, ++seed);
        c.intervals = dsl::random_intervals(causal, columns, c.batch, c.kv_heads, c.seqlen_q,
                                            c.seqlen_k, gpu_test::data_seed(c.seed));
        c.intervals_offset = offset;
        cases.push_back(c);
      }
    }
  }
  for (const Case& c : forced(cases)) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward with score modifiers matches the reference", "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward score modifiers")) return;
  for (const Case& c : forced(gpu_test::score_mod_cases())) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward with predicate masks matches the reference", "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward predicates")) return;
  const auto documents = [](int length, int size) {
    PredicateTensor t{"doc", 1, length, {}};
    for (int i = 0; i < length; ++i) t.values.push_back(i / size);
    return t;
  };
  std::vector<Case> cases{
      predicate_case("q >= k && doc[q] == doc[k]", {documents(400, 77)}, DType::bf16, 128, 2, 4, 2,
                     300, 300, 501),
      predicate_case("((q / 128 + k / 128) % 2 == 0) && (q + k) % 3 != 0", {}, DType::fp16, 64, 1,
                     4, 1, 257, 400, 502),
      predicate_case("(k + h) % 3 != 0 && abs(q - k) < 40 * (h + 1)", {}, DType::bf16, 256, 2, 2, 2,
                     333, 130, 503),
      predicate_case("k % 7 == 0 || q == k", {}, DType::fp16, 192, 1, 3, 3, 129, 129, 504),
  };
  for (const Case& c : forced(cases)) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward: large problems match the GPU reference kernel",
          "[gpu][sm90a][forward][large]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward large")) return;
  for (const Case& c : forced(gpu_test::large_cases())) gpu_test::check_against_reference_kernel(c);
}

TEST_CASE("sm90a forward is deterministic", "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward determinism")) return;
  Case c = make_case({MaskKind::flashmask, true, 1}, DType::bf16, 128, 2, 4, 4, 700, 700, 1);
  const std::vector<dsl::IntervalVectors> samples{
      dsl::random_documents(true, 700, 2, 6, gpu_test::data_seed(11)),
      dsl::random_documents(true, 700, 2, 6, gpu_test::data_seed(12))};
  c.intervals = dsl::stack(samples);
  force_sm90a(c);
  const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
  const gpu_test::Outputs first = gpu_test::run_on_gpu(c, inputs);
  const gpu_test::Outputs second = gpu_test::run_on_gpu(c, inputs);
  CHECK(std::memcmp(first.out.data(), second.out.data(), first.out.size() * 4) == 0);
  CHECK(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4) == 0);
}

TEST_CASE("sm90a forward: two small specs (the compute-sanitizer runs)",
          "[gpu][sm90a][forward][sanitizer]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward small specs")) return;
  const Case causal =
      make_case({MaskKind::causal, false, 0}, DType::bf16, 128, 1, 2, 1, 200, 260, 71);
  Case documents =
      make_case({MaskKind::flashmask, false, 4}, DType::fp16, 64, 1, 2, 2, 150, 170, 72);
  documents.intervals = dsl::random_intervals(false, 4, 1, 2, 150, 170, gpu_test::data_seed(72));
  documents.padded_strides = true;
  for (const Case& c : forced({causal, documents})) gpu_test::check_forward(c);
}
