// Compiling and launching the Hopper-layer test kernels.
#include "gpu/sm90_kernel.hpp"

#include <cstdio>
#include <utility>

#include "embedded.hpp"
#include "runtime/jit/driver.hpp"

namespace attnjit::gpu_test {

bool sm90_device_or_skip(std::string_view test) {
  const runtime::DeviceInfo device = runtime::current_device();
  if (device.major == 9 && device.minor == 0) return true;
  std::printf(
      "%.*s: skipped (sm_90a kernels need a compute capability 9.0 device; this is %d.%d)\n",
      static_cast<int>(test.size()), test.data(), device.major, device.minor);
  return false;
}

Sm90Kernel compile_sm90_kernel(std::string_view source, const std::string& name,
                               int dynamic_smem_bytes) {
  std::vector<runtime::NvrtcHeader> headers;
  for (const auto& file : templates::all()) headers.push_back({file.name, file.source});
  const std::vector<std::string> options{"-DATTNJIT_MBARRIER_SPIN_LIMIT=100000000"};
  runtime::NvrtcOutput compiled =
      runtime::nvrtc_compile(source, name + ".cu", headers, "sm_90a", options, name);
  runtime::LoadedModule module = runtime::LoadedModule::load(compiled.cubin);
  const CUfunction function = module.function(name, dynamic_smem_bytes);
  return Sm90Kernel{std::move(compiled), std::move(module), function};
}

void run_sm90_kernel(const Sm90Kernel& kernel, unsigned grid, unsigned threads,
                     int dynamic_smem_bytes, std::vector<void*> args) {
  runtime::LaunchConfig config;
  config.grid[0] = grid;
  config.block[0] = threads;
  config.dynamic_smem_bytes = static_cast<unsigned>(dynamic_smem_bytes);
  runtime::launch(kernel.function, config, nullptr, args.data());
  runtime::check(runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

}  // namespace attnjit::gpu_test
