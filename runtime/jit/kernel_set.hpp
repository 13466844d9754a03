// Compiled kernels as the runtime holds them: the cached binaries and the modules loaded into
// each CUDA context on demand, and for an attention spec also its plan (the launch contract).
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "attnjit/jit.hpp"
#include "compiler/ir/lowering.hpp"
#include "runtime/jit/disk_cache.hpp"
#include "runtime/jit/module.hpp"

namespace attnjit::jit::detail {

/// A kernel of the set, loaded into one context.
struct LoadedKernel {
  CUfunction function = nullptr;
  int threads = 0;
  int dynamic_smem_bytes = 0;
};

/// Compiled binaries, loaded into each CUDA context on first use there.
struct CompiledSet {
  runtime::CacheEntry entry;  ///< binaries in launch order

  /// The kernels loaded into the current context (loading them the first time).
  const std::vector<LoadedKernel>& kernels_in_current_context() const;

 private:
  struct PerContext {
    CUcontext context = nullptr;
    std::vector<runtime::LoadedModule> modules;
    std::vector<LoadedKernel> kernels;
  };
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<PerContext>> loaded_;
};

/// The compiled kernels of one attention spec.
struct KernelSet : CompiledSet {
  AttentionSpec spec;              ///< canonical, target resolved
  std::optional<KernelPlan> plan;  ///< absent for the reference kernel
  PredicateLaunch predicate;       ///< the inputs a predicate mask reads (both kinds)
};

}  // namespace attnjit::jit::detail
