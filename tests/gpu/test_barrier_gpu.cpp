// Named barriers and register reallocation (templates/attnjit/sm90a/barrier.cuh): in a kernel of
// three warpgroups whose first lowers its registers to 24 and the others raise theirs to 240
// (which ptxas honours: no C7508 info), the two consumer warpgroups take turns through two
// named barriers, as the forward kernel's ping-pong does: the turns alternate strictly and no
// thread of one warpgroup runs its turn while the other is inside its own.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gpu/sm90_kernel.hpp"
#include "runtime/jit/driver.hpp"

using namespace attnjit;

namespace {

constexpr const char* kSource = R"(#include "attnjit/sm90a/barrier.cuh"
using namespace attnjit;
extern "C" __global__ void __launch_bounds__(384, 1)
barrier_test(int* log, int* overlaps, int turns) {
  __shared__ int next;
  __shared__ int inside[3];
  if (threadIdx.x == 0) {
    next = 0;
    inside[1] = inside[2] = 0;
  }
  __syncthreads();
  const int wg = warpgroup_index();
  if (wg == 0) {
    warpgroup_registers_decrease<24>();
    return;
  }
  warpgroup_registers_increase<240>();
  const int other = 3 - wg;
  for (int turn = 0; turn < turns; ++turn) {
    // Warpgroup 1 takes the first turn without waiting; every later turn waits for the other
    // warpgroup's hand-over (barrier `wg`: these 128 threads and the other's 128 arrivals).
    if (wg == 2 || turn > 0) named_barrier_sync(wg, 256);
    atomicAdd(&inside[wg], 1);
    if (atomicAdd(&inside[other], 0) != 0) atomicAdd(overlaps, 1);
    if (warpgroup_thread() == 0) log[atomicAdd(&next, 1)] = wg;
    __threadfence_block();
    atomicSub(&inside[wg], 1);
    __threadfence_block();
    named_barrier_arrive(other, 256);
  }
  // The last hand-over to warpgroup 1 is taken, so no arrival stays pending at exit.
  if (wg == 1) named_barrier_sync(1, 256);
}
)";

}  // namespace

TEST_CASE("named barriers alternate two warpgroups with reallocated registers", "[gpu][sm90a]") {
  if (!gpu_test::sm90_device_or_skip("named barriers")) return;
  const gpu_test::Sm90Kernel kernel = gpu_test::compile_sm90_kernel(kSource, "barrier_test", 0);
  INFO(kernel.compiled.log);
  CHECK(kernel.compiled.log.find("C7508") == std::string::npos);
  constexpr int kTurns = 25;
  runtime::DeviceBuffer log(2 * kTurns * 4), overlaps(4);
  log.fill_bytes(0);
  overlaps.fill_bytes(0);
  void* log_ptr = log.data();
  void* overlaps_ptr = overlaps.data();
  int turns = kTurns;
  gpu_test::run_sm90_kernel(kernel, 4, 384, 0, {&log_ptr, &overlaps_ptr, &turns});
  std::vector<int> got(2 * kTurns);
  log.download(got.data(), got.size() * 4);
  int overlap_count = -1;
  overlaps.download(&overlap_count, 4);
  // Four CTAs write the same log; each writes 1, 2, 1, 2, ... (the last writer wins per slot,
  // and every writer writes the same sequence).
  std::vector<int> expected(2 * kTurns);
  for (int i = 0; i < 2 * kTurns; ++i) expected[i] = 1 + i % 2;
  CHECK(got == expected);
  CHECK(overlap_count == 0);
}
