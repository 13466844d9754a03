// The GPU test runner: exits 77 (CTest: skipped) when there is no CUDA driver or device, so
// GPU tests never count as passed on machines without one. Otherwise compiles every kernel
// of the sweeps in parallel first (NVRTC is thread-safe per program; skipped with
// ATTNJIT_GPU_TESTS_LAZY=1, for runs of a few tests), then runs Catch2. ATTNJIT_TEST_SEED
// (gpu_case.hpp's run_seed) gives the cases fresh random data and masks.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "attnjit/jit.hpp"
#include "gpu/gpu_case.hpp"
#include "runtime/jit/driver.hpp"
#include "support/catch_session.hpp"

namespace {

void compile_sweep_in_parallel() {
  std::vector<attnjit::AttentionSpec> specs;
  auto add = [&](const attnjit::AttentionSpec& spec) {
    if (std::find(specs.begin(), specs.end(), spec) == specs.end()) specs.push_back(spec);
  };
  std::vector<attnjit::gpu_test::Case> cases = attnjit::gpu_test::sweep_cases();
  for (attnjit::gpu_test::Case& c : attnjit::gpu_test::score_mod_cases()) {
    cases.push_back(std::move(c));
  }
  for (const attnjit::gpu_test::Case& c : cases) {
    attnjit::AttentionSpec spec = c.spec;
    spec.return_lse = true;
    add(spec);
    spec.return_lse = false;
    spec.direction = attnjit::Direction::backward;
    for (bool deterministic : {false, true}) {
      spec.deterministic = deterministic;
      add(spec);
    }
  }
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::future<void>> running;
  for (const attnjit::AttentionSpec& spec : specs) {
    if (running.size() >= workers) {
      running.front().get();
      running.erase(running.begin());
    }
    running.push_back(std::async(std::launch::async, [spec] { attnjit::jit::compile(spec); }));
  }
  for (auto& job : running) job.get();
}

}  // namespace

int main(int argc, char** argv) {
  // The cases' data: their fixed seeds, or fresh ones mixed from ATTNJIT_TEST_SEED.
  try {
    const std::uint64_t run_seed = attnjit::gpu_test::run_seed();
    if (run_seed == 0) {
      std::printf("GPU test data: the cases' fixed seeds (ATTNJIT_TEST_SEED=random: fresh data)\n");
    } else {
      std::printf("GPU test data: run seed %llu (ATTNJIT_TEST_SEED=%llu repeats this run)\n",
                  static_cast<unsigned long long>(run_seed),
                  static_cast<unsigned long long>(run_seed));
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "attnjit GPU tests: %s\n", error.what());
    return 2;
  }
  try {
    attnjit::runtime::ensure_context();
  } catch (const std::exception& error) {
    std::printf("attnjit GPU tests skipped: %s\n", error.what());
    return 77;
  }
  // ATTNJIT_GPU_TESTS_LAZY=1: each case compiles its kernels when it runs (for a few cases).
  const char* lazy = std::getenv("ATTNJIT_GPU_TESTS_LAZY");
  if (lazy == nullptr || std::string_view(lazy) != "1") compile_sweep_in_parallel();
  const int failed = attnjit::testing::run_catch_session(argc, argv);
  // Which attention kernels the cases ran, by kernel-registry row (family and layout).
  std::printf("attention kernels run, by registry row (cases):\n");
  for (const auto& [row, cases] : attnjit::gpu_test::rows_run()) {
    std::printf("  %-28s %d\n", row.c_str(), cases);
  }
  return failed;
}
