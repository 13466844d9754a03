// The GPU test runner: exits 77 (CTest: skipped) when there is no CUDA driver or device, so
// GPU tests never count as passed on machines without one. Otherwise runs Catch2; the tests
// compile their kernels ahead on every core (gpu/compile_ahead.hpp). ATTNJIT_TEST_SEED
// (gpu_case.hpp's run_seed) gives the cases fresh random data and masks and the sweeps another
// sample; ATTNJIT_GPU_EXHAUSTIVE=1 runs every case of the sweeps (gpu_case.hpp's sample).
#include <cstdint>
#include <cstdio>
#include <exception>

#include "gpu/gpu_case.hpp"
#include "runtime/jit/driver.hpp"
#include "support/catch_session.hpp"

int main(int argc, char** argv) {
  // The cases' data: their fixed seeds, or fresh ones mixed from ATTNJIT_TEST_SEED; the sweeps:
  // a sample drawn with the same seed, or every case.
  try {
    const std::uint64_t run_seed = attnjit::gpu_test::run_seed();
    if (run_seed == 0) {
      std::printf("GPU test data: the cases' fixed seeds (ATTNJIT_TEST_SEED=random: fresh data)\n");
    } else {
      std::printf("GPU test data: run seed %llu (ATTNJIT_TEST_SEED=%llu repeats this run)\n",
                  static_cast<unsigned long long>(run_seed),
                  static_cast<unsigned long long>(run_seed));
    }
    if (attnjit::gpu_test::exhaustive()) {
      std::printf("GPU test sweeps: every case (ATTNJIT_GPU_EXHAUSTIVE=1)\n");
    } else {
      std::printf(
          "GPU test sweeps: a pairwise sample of each, drawn with seed %llu (every mask, dtype, "
          "head dim, shape, ... with each other; ATTNJIT_GPU_EXHAUSTIVE=1 runs every case)\n",
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
  const int failed = attnjit::testing::run_catch_session(argc, argv);
  // Which attention kernels the cases ran, by kernel-registry row (family and layout).
  std::printf("attention kernels run, by registry row (cases):\n");
  for (const auto& [row, cases] : attnjit::gpu_test::rows_run()) {
    std::printf("  %-28s %d\n", row.c_str(), cases);
  }
  return failed;
}
