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

Case base_case(MaskSpec mask, int head_dim = 128, DType dtype = DType::bf16) {
  Case c;
  c.spec.dtype = dtype;
  c.spec.head_dim_qk = c.spec.head_dim_v = head_dim;
  c.spec.mask = mask;
  c.spec.return_lse = true;
  return c;
}

/// A predicate mask case: the literals lifted into scalar slots, as the user API does.
Case predicate_case(const std::string& text, std::vector<PredicateTensor> tensors, DType dtype,
                    int head_dim, int batch, int heads, int kv_heads, int seqlen_q, int seqlen_k,
                    std::uint64_t seed) {
  Case c = base_case({MaskKind::predicate, false, 0}, head_dim, dtype);
  std::vector<std::int32_t> scalars;
  c.spec.mask.predicate = to_string(lift_literals(parse_predicate(text), scalars));
  c.batch = batch;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.seqlen_q = seqlen_q;
  c.seqlen_k = seqlen_k;
  c.seed = seed;
  c.predicate.scalars = scalars;
  c.predicate.tensors = std::move(tensors);
  return c;
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
  Case causal = base_case({MaskKind::causal, false, 0});
  causal.heads = causal.kv_heads = 2;
  causal.seqlen_q = 200;
  causal.seqlen_k = 70;
  causal.seed = 7;
  cases.push_back(causal);
  // FlashMask masking every key for rows [40, 150), and rows >= 180 for odd columns.
  Case band = base_case({MaskKind::flashmask, false, 4}, 64, DType::fp16);
  band.heads = band.kv_heads = 2;
  band.seqlen_q = band.seqlen_k = 190;
  dsl::IntervalVectors m;
  m.causal = false;
  m.columns = 4;
  m.batch = 1;
  m.heads = 1;
  m.seqlen_q = m.seqlen_k = 190;
  for (int j = 0; j < 190; ++j)
    m.data.insert(m.data.end(), {40, 150, j % 2 ? 180 : 0, j % 2 ? 190 : 0});
  band.intervals = m;
  band.seed = 8;
  cases.push_back(band);
  // FlashMask masking every key for rows [100, 190) at d128: the query block of rows 128 and up
  // visits no key block (the producer's stage without a block, with the vectors' arrivals).
  Case empty_block = base_case({MaskKind::flashmask, false, 4}, 128, DType::bf16);
  empty_block.heads = 3;
  empty_block.kv_heads = 1;
  empty_block.seqlen_q = empty_block.seqlen_k = 190;
  m.data.clear();
  for (int j = 0; j < 190; ++j) m.data.insert(m.data.end(), {100, 190, 0, 0});
  empty_block.intervals = m;
  empty_block.seed = 10;
  cases.push_back(empty_block);
  // A sliding window whose diagonal leaves the keys: rows below 236 see nothing.
  Case window = base_case({MaskKind::sliding_window, false, 0}, 256);
  window.seqlen_q = 300;
  window.seqlen_k = 64;
  window.window_left = 3;
  window.window_right = 0;
  window.seed = 9;
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
  Case causal = base_case({MaskKind::causal, false, 0}, 64);
  causal.heads = causal.kv_heads = 2;
  causal.seqlen_q = 400;
  causal.seqlen_k = 150;
  causal.seed = 532;
  cases.push_back(causal);
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
    Case c = base_case({MaskKind::causal, false, 0}, 128, DType::fp16);
    c.batch = 3;
    c.heads = heads;
    c.kv_heads = kv_heads;
    c.seqlen_q = 259;
    c.seqlen_k = 301;
    c.padded_strides = true;
    c.seed = 29 + heads;
    cases.push_back(c);
  }
  for (const Case& c : forced(cases)) gpu_test::check_forward(c);
}

TEST_CASE("sm90a forward with FlashMask vectors off a 16-byte boundary",
          "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward misaligned vectors")) return;
  // The producer copies a block's values 16 bytes at a time where they start 16-byte aligned,
  // else 4 bytes at a time: the same masks with the tensor at offsets 0, 1 and 3 ints, one,
  // two and four columns, Sk odd and even, random intervals.
  std::vector<Case> cases;
  int seed = 900;
  for (const auto& [columns, causal] : {std::pair{1, true}, std::pair{2, true},
                                        std::pair{2, false}, std::pair{4, false}}) {
    for (const int offset : {0, 1, 3}) {
      for (const int seqlen_k : {333, 512}) {
        Case c = base_case({MaskKind::flashmask, causal, columns}, columns == 4 ? 64 : 128);
        c.batch = 2;
        c.heads = 4;
        c.kv_heads = 2;
        c.seqlen_q = 301;
        c.seqlen_k = seqlen_k;
        c.seed = ++seed;
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
  struct Large {
    MaskSpec mask;
    int seqlen;
  };
  for (const Large& l :
       {Large{{MaskKind::none, false, 0}, 2000}, Large{{MaskKind::causal, false, 0}, 3001},
        Large{{MaskKind::flashmask, true, 1}, 4099},
        Large{{MaskKind::flashmask, false, 2}, 2500}}) {
    Case c = base_case(l.mask, 128);
    c.heads = 4;
    c.kv_heads = 1;
    c.seqlen_q = c.seqlen_k = l.seqlen;
    c.seed = 31 + l.seqlen;
    if (l.mask.kind == MaskKind::flashmask) {
      c.intervals =
          dsl::random_documents(l.mask.causal, l.seqlen, 3, 7, gpu_test::data_seed(c.seed));
    }
    force_sm90a(c);
    compile_and_report({c});
    INFO(c.describe());
    const gpu_test::Inputs inputs = gpu_test::make_inputs(c);
    const gpu_test::Outputs fused = gpu_test::run_on_gpu(c, inputs);
    const gpu_test::Outputs reference = gpu_test::run_on_gpu(c, inputs, /*reference_kernel=*/true);
    double max_err = 0, max_ref = 0, sq_err = 0, sq_ref = 0, lse_err = 0;
    for (std::size_t i = 0; i < fused.out.size(); ++i) {
      REQUIRE(std::isfinite(fused.out[i]));
      const double d = static_cast<double>(fused.out[i]) - reference.out[i];
      max_err = std::max(max_err, std::abs(d));
      max_ref = std::max(max_ref, std::abs(static_cast<double>(reference.out[i])));
      sq_err += d * d;
      sq_ref += static_cast<double>(reference.out[i]) * reference.out[i];
    }
    for (std::size_t i = 0; i < fused.lse.size(); ++i) {
      lse_err = std::max(lse_err, std::abs(static_cast<double>(fused.lse[i]) - reference.lse[i]));
    }
    INFO("max abs err " << max_err << " (max |ref| " << max_ref << "), rel l2 "
                        << std::sqrt(sq_err / sq_ref) << ", lse max err " << lse_err);
    CHECK(std::sqrt(sq_err / sq_ref) < 1e-2);
    CHECK(max_err < 2e-2 * std::max(1.0, max_ref));
    CHECK(lse_err < 1e-3 * std::log(static_cast<double>(l.seqlen)) + 1e-3);
  }
}

TEST_CASE("sm90a forward is deterministic", "[gpu][sm90a][forward]") {
  if (!gpu_test::sm90_device_or_skip("sm90a forward determinism")) return;
  Case c = base_case({MaskKind::flashmask, true, 1});
  c.batch = 2;
  c.heads = c.kv_heads = 4;
  c.seqlen_q = c.seqlen_k = 700;
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
  Case causal = base_case({MaskKind::causal, false, 0}, 128);
  causal.heads = 2;
  causal.kv_heads = 1;
  causal.seqlen_q = 200;
  causal.seqlen_k = 260;
  causal.seed = 71;
  Case documents = base_case({MaskKind::flashmask, false, 4}, 64, DType::fp16);
  documents.heads = documents.kv_heads = 2;
  documents.seqlen_q = 150;
  documents.seqlen_k = 170;
  documents.intervals = dsl::random_intervals(false, 4, 1, 2, 150, 170, gpu_test::data_seed(72));
  documents.padded_strides = true;
  documents.seed = 72;
  for (const Case& c : forced({causal, documents})) gpu_test::check_forward(c);
}
