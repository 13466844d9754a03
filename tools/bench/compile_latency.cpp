// Compile latency of jit::compile: a cold compile (empty disk cache), a disk-cache hit (memory
// cache cleared) and a memory-cache hit, for each spec given on the command line. Needs no GPU
// when the specs name their target. Uses its own temporary cache directory.
//   compile_latency "dtype=bf16 head_dim=128 mask=causal target=sm_90" ...
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "attnjit/jit.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double time_ms(const attnjit::AttentionSpec& spec, attnjit::jit::CacheLevel expected) {
  const auto start = Clock::now();
  const attnjit::jit::Kernel kernel = attnjit::jit::compile(spec);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (kernel.info().cache != expected) {
    throw std::runtime_error(fmt::format("expected a {} compile, got {}",
                                         attnjit::jit::name_of(expected),
                                         attnjit::jit::name_of(kernel.info().cache)));
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: compile_latency SPEC...\n");
    return 2;
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("attnjit-latency-{}", static_cast<long>(::getpid()));
  setenv("ATTNJIT_CACHE_DIR", dir.c_str(), 1);
  using attnjit::jit::CacheLevel;
  fmt::print(
      "| spec | cold compile ms (median of 3) | disk hit ms (median of 10) | memory hit us (median "
      "of 100000) |\n");
  fmt::print("|---|---:|---:|---:|\n");
  try {
    for (int i = 1; i < argc; ++i) {
      const attnjit::AttentionSpec spec = attnjit::parse_spec(argv[i]);
      std::vector<double> cold, disk, memory;
      for (int r = 0; r < 3; ++r) {
        attnjit::jit::clear_disk_cache();
        attnjit::jit::clear_memory_cache();
        cold.push_back(time_ms(spec, CacheLevel::miss));
      }
      for (int r = 0; r < 10; ++r) {
        attnjit::jit::clear_memory_cache();
        disk.push_back(time_ms(spec, CacheLevel::disk));
      }
      for (int r = 0; r < 100000; ++r) memory.push_back(1e3 * time_ms(spec, CacheLevel::memory));
      fmt::print("| `{}` | {:.0f} | {:.2f} | {:.2f} |\n", argv[i], median(cold), median(disk),
                 median(memory));
    }
  } catch (const std::exception& error) {
    fmt::print(stderr, "compile_latency: {}\n", error.what());
    std::filesystem::remove_all(dir);
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}
