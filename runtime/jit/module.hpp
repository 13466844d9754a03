// A CUBIN loaded into the current context, kernel lookup with the shared-memory opt-in, and
// kernel launch with the grid and block limits checked first.
#pragma once

#include <cuda.h>

#include <string>
#include <string_view>

namespace attnjit::runtime {

/// A module loaded with cuModuleLoadData; unloaded in the destructor. Move-only.
class LoadedModule {
 public:
  /// Loads `cubin` (or PTX text) into the current context, making one current first (see
  /// ensure_context()). Throws DeviceError when the driver rejects the image.
  static LoadedModule load(std::string_view cubin);

  LoadedModule(LoadedModule&& other) noexcept;
  LoadedModule& operator=(LoadedModule&& other) noexcept;
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  ~LoadedModule();

  /// The kernel `name`. When its static and dynamic shared memory exceed 48 KiB, raises its
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to `dynamic_smem_bytes`; throws
  /// DeviceError naming the kernel, the bytes and the device limit when that is refused.
  CUfunction function(const std::string& name, int dynamic_smem_bytes) const;

 private:
  explicit LoadedModule(CUmodule module) : module_(module) {}
  void release() noexcept;

  CUmodule module_ = nullptr;
};

/// Grid and block dimensions and the dynamic shared memory of one launch.
struct LaunchConfig {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem_bytes = 0;
  /// A programmatic dependent launch (sm_90 and later): the grid may start while the kernel
  /// before it on the stream finishes; the kernel waits in griddepcontrol.wait before it
  /// reads anything that kernel wrote.
  bool dependent = false;
};

/// Launches `f` on `stream` with the kernel arguments `params` (cuLaunchKernel's layout: one
/// pointer per argument). Throws Error naming the dimension when the grid or block is empty
/// or exceeds CUDA's limits (grid x <= 2^31-1, y and z <= 65535; block x, y <= 1024,
/// z <= 64, at most 1024 threads), DeviceError when the launch fails.
void launch(CUfunction f, const LaunchConfig& cfg, CUstream stream, void** params);

}  // namespace attnjit::runtime
