// Compiling a test's kernels on every core ahead of its cases, which then find them in the
// memory cache.
#pragma once

#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "attnjit/spec.hpp"

namespace attnjit::gpu_test {

/// Compiles `specs` (duplicates once) in the background, in their order, one spec per core
/// at a time, while the test runs its cases on its own thread: a case whose kernels are built
/// finds them in the memory cache, one whose build is under way waits for it (the cache builds
/// each key once), one not reached yet compiles them itself. A failed compile is left to the
/// case that needs the spec (the cache forgets a failed build, so that case's compile reports
/// the error where the test sees it). The destructor takes no further spec and waits for the
/// compiles in flight: declare it after any EnvOverride of its scope.
class CompileAhead {
 public:
  explicit CompileAhead(std::vector<AttentionSpec> specs);
  CompileAhead(const CompileAhead&) = delete;
  CompileAhead& operator=(const CompileAhead&) = delete;
  ~CompileAhead();

 private:
  void work();

  std::vector<AttentionSpec> specs_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::jthread> workers_;
};

}  // namespace attnjit::gpu_test
