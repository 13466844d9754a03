// Loading a compiled set's modules into the current context, once per context.
#include "runtime/jit/kernel_set.hpp"

#include "runtime/jit/driver.hpp"

namespace attnjit::jit::detail {

const std::vector<LoadedKernel>& CompiledSet::kernels_in_current_context() const {
  runtime::ensure_context();
  CUcontext context = nullptr;
  runtime::check(runtime::driver().cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  const std::lock_guard lock(mutex_);
  for (const auto& per_context : loaded_) {
    if (per_context->context == context) return per_context->kernels;
  }
  auto per_context = std::make_unique<PerContext>();
  per_context->context = context;
  for (const runtime::CompiledKernel& compiled : entry.kernels) {
    per_context->modules.push_back(runtime::LoadedModule::load(compiled.cubin));
    LoadedKernel kernel;
    kernel.function =
        per_context->modules.back().function(compiled.name, compiled.dynamic_smem_bytes);
    kernel.threads = compiled.threads;
    kernel.dynamic_smem_bytes = compiled.dynamic_smem_bytes;
    per_context->kernels.push_back(kernel);
  }
  loaded_.push_back(std::move(per_context));
  return loaded_.back()->kernels;
}

}  // namespace attnjit::jit::detail
