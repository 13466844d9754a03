// The C++ part of a launch's host time: attnjit_launch_run (the prepared launch the Python
// package calls) and jit::Kernel::forward, at B=1, S=128, H=1, d=64, bf16, mask none -- a
// launch-bound size. Each round enqueues 200 launches on one stream, timing only the enqueue,
// then waits; prints the median per-launch microseconds. tools/bench/host_overhead.py
// measures the Python and ctypes parts in one process with torch (docs/performance.md).
#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "attnjit/attnjit.h"
#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/driver.hpp"

namespace {

constexpr int kRounds = 25;
constexpr int kLaunches = 200;

template <class Launch>
double median_us(CUstream stream, Launch&& launch) {
  const auto& api = attnjit::runtime::driver();
  for (int i = 0; i < 50; ++i) launch();
  attnjit::runtime::check(api.cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<double> rounds;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i) launch();
    const auto stop = std::chrono::steady_clock::now();
    attnjit::runtime::check(api.cuStreamSynchronize(stream), "cuStreamSynchronize");
    rounds.push_back(std::chrono::duration<double, std::micro>(stop - start).count() / kLaunches);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

void check(int code) {
  if (code != ATTNJIT_OK) throw attnjit::Error(attnjit_last_error());
}

}  // namespace

int main() {
  try {
    using attnjit::ScalarType;
    attnjit::runtime::ensure_context();
    const auto& api = attnjit::runtime::driver();
    CUstream stream = nullptr;
    attnjit::runtime::check(api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    const std::int64_t elements = 1 * 128 * 1 * 64;
    attnjit::runtime::DeviceBuffer q(elements * 2), k(elements * 2), v(elements * 2),
        o(elements * 2);
    q.fill_bytes(0);
    k.fill_bytes(0);
    v.fill_bytes(0);

    const char* spec = "dtype=bf16 head_dim=64 mask=none";
    attnjit_kernel* kernel = nullptr;
    check(attnjit_compile(spec, &kernel));
    attnjit_tensor tensors[ATTNJIT_SLOT_COUNT] = {};
    for (int slot : {ATTNJIT_SLOT_Q, ATTNJIT_SLOT_K, ATTNJIT_SLOT_V, ATTNJIT_SLOT_O}) {
      tensors[slot] = attnjit_tensor{nullptr, ATTNJIT_BF16, 4, {1, 128, 1, 64}, {8192, 64, 64, 1}};
    }
    attnjit_launch* launch = nullptr;
    check(attnjit_launch_prepare(kernel, tensors, ATTNJIT_SLOT_COUNT, nullptr, 0.0f, -1, 0, 0.0f, 0,
                                 &launch));
    void* data[ATTNJIT_SLOT_COUNT] = {q.data(), k.data(), v.data(), o.data()};
    const double prepared = median_us(
        stream, [&] { check(attnjit_launch_run(launch, data, ATTNJIT_SLOT_COUNT, stream)); });

    const attnjit::jit::Kernel cpp = attnjit::jit::compile(attnjit::parse_spec(spec));
    attnjit::ForwardArgs args;
    args.q = attnjit::contiguous_view(q.data(), ScalarType::bf16, {1, 128, 1, 64});
    args.k = attnjit::contiguous_view(k.data(), ScalarType::bf16, {1, 128, 1, 64});
    args.v = attnjit::contiguous_view(v.data(), ScalarType::bf16, {1, 128, 1, 64});
    args.o = attnjit::contiguous_view(o.data(), ScalarType::bf16, {1, 128, 1, 64});
    const double forward = median_us(stream, [&] { cpp.forward(args, stream); });

    fmt::print("{}: {} kernel(s)\n", cpp.info().spec_text, cpp.info().kernels.size());
    fmt::print("attnjit_launch_run      {:.2f} us per launch (median of {} rounds of {})\n",
               prepared, kRounds, kLaunches);
    fmt::print("jit::Kernel::forward    {:.2f} us per launch\n", forward);
    attnjit_launch_release(launch);
    attnjit_release(kernel);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "launch_overhead: %s\n", error.what());
    return 1;
  }
}
