// Compiling and launching the small sm_90a kernels of the Hopper-layer tests (tma.cuh,
// mbarrier.cuh, pipeline.cuh, barrier.cuh, wgmma.cuh), which need an sm_90 device.
#pragma once

#include <cuda.h>

#include <string>
#include <string_view>
#include <vector>

#include "runtime/jit/module.hpp"
#include "runtime/jit/nvrtc.hpp"

namespace attnjit::gpu_test {

/// True when the current device is compute capability 9.0 (sm_90a code runs there only);
/// otherwise prints that `test` is skipped and returns false.
bool sm90_device_or_skip(std::string_view test);

/// A test kernel compiled for sm_90a (templates embedded, mbarrier waits bounded so a wrong
/// transaction count traps instead of hanging) and loaded.
struct Sm90Kernel {
  runtime::NvrtcOutput compiled;
  runtime::LoadedModule module;
  CUfunction function = nullptr;
};

/// Compiles `source` (which includes templates by name) and looks up entry `name` with
/// `dynamic_smem_bytes` of dynamic shared memory.
Sm90Kernel compile_sm90_kernel(std::string_view source, const std::string& name,
                               int dynamic_smem_bytes);

/// Launches and waits for the kernel; `args` as cuLaunchKernel takes them.
void run_sm90_kernel(const Sm90Kernel& kernel, unsigned grid, unsigned threads,
                     int dynamic_smem_bytes, std::vector<void*> args);

}  // namespace attnjit::gpu_test
