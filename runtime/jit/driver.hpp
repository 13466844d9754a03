// The CUDA Driver API, loaded at run time: libcuda.so.1 is dlopen'ed on first use and its
// entry points are resolved through cuGetProcAddress, so attnjit starts (and compiles) on
// machines without an NVIDIA driver. Also: contexts, the device query and RAII helpers for
// device memory and event timing.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnjit::runtime {

/// Entry points of libcuda. The members are named after the Driver API functions; cuda.h's
/// versioning macros (cuMemAlloc -> cuMemAlloc_v2, ...) rename the member and every use of it
/// alike, so `driver().cuMemAlloc(&ptr, bytes)` calls the 64-bit entry point.
struct DriverApi {
  decltype(&::cuInit) cuInit = nullptr;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;
  decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
  decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
  decltype(&::cuDeviceGetName) cuDeviceGetName = nullptr;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) cuDevicePrimaryCtxRelease = nullptr;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice = nullptr;
  decltype(&::cuCtxSynchronize) cuCtxSynchronize = nullptr;
  decltype(&::cuModuleLoadData) cuModuleLoadData = nullptr;
  decltype(&::cuModuleUnload) cuModuleUnload = nullptr;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction = nullptr;
  decltype(&::cuFuncSetAttribute) cuFuncSetAttribute = nullptr;
  decltype(&::cuFuncGetAttribute) cuFuncGetAttribute = nullptr;
  decltype(&::cuLaunchKernel) cuLaunchKernel = nullptr;
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx = nullptr;
  decltype(&::cuMemAlloc) cuMemAlloc = nullptr;
  decltype(&::cuMemFree) cuMemFree = nullptr;
  decltype(&::cuMemAllocAsync) cuMemAllocAsync = nullptr;
  decltype(&::cuMemFreeAsync) cuMemFreeAsync = nullptr;
  decltype(&::cuMemcpyHtoD) cuMemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) cuMemcpyDtoH = nullptr;
  decltype(&::cuMemcpyDtoD) cuMemcpyDtoD = nullptr;
  decltype(&::cuMemsetD8) cuMemsetD8 = nullptr;
  decltype(&::cuMemsetD8Async) cuMemsetD8Async = nullptr;
  decltype(&::cuMemsetD32Async) cuMemsetD32Async = nullptr;
  decltype(&::cuStreamCreate) cuStreamCreate = nullptr;
  decltype(&::cuStreamDestroy) cuStreamDestroy = nullptr;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  decltype(&::cuEventCreate) cuEventCreate = nullptr;
  decltype(&::cuEventDestroy) cuEventDestroy = nullptr;
  decltype(&::cuEventRecord) cuEventRecord = nullptr;
  decltype(&::cuEventSynchronize) cuEventSynchronize = nullptr;
  decltype(&::cuEventElapsedTime) cuEventElapsedTime = nullptr;
  decltype(&::cuGetErrorName) cuGetErrorName = nullptr;
  decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
  decltype(&::cuPointerGetAttribute) cuPointerGetAttribute = nullptr;
  decltype(&::cuMemGetInfo) cuMemGetInfo = nullptr;
  decltype(&::cuTensorMapEncodeTiled) cuTensorMapEncodeTiled = nullptr;
};

/// The loaded driver. The first call opens libcuda.so.1, resolves every entry point and
/// calls cuInit(0); it throws DeviceError with a one-line reason when that fails (no
/// libcuda.so.1, a missing symbol, no device). The outcome is remembered: later calls return
/// the same table or rethrow the same message without trying again. Thread-safe.
const DriverApi& driver();

/// True iff driver() succeeds. Never throws.
bool driver_available() noexcept;

/// Throws DeviceError("<call> failed: CUDA_ERROR_NAME (description)") unless `result` is
/// CUDA_SUCCESS.
void check(CUresult result, std::string_view call);

/// Makes a context current on the calling thread. A context that is already current (e.g.
/// PyTorch's) is kept; otherwise the primary context of device $ATTNJIT_DEVICE (default 0) is
/// retained, kept for the life of the process, and set current. Throws Error for a bad
/// ATTNJIT_DEVICE and DeviceError when there is no driver or device.
void ensure_context();

/// The primary context of device `ordinal`, retained on first use and kept for the life of the
/// process (the context PyTorch and the CUDA runtime use on that device). Throws Error naming
/// `device` when the ordinal is out of range, DeviceError when there is no driver.
CUcontext primary_context(int ordinal);

/// Runs a scope on one device: when the context current on the calling thread does not belong
/// to device `ordinal`, makes that device's primary context current and restores the previous
/// context at the end of the scope. A negative ordinal leaves the current context alone. The
/// common case (the right device is current) costs two driver queries and no switch.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal);
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope();

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

/// The ordinal of the device holding `pointer` (device or managed memory the driver knows),
/// or -1 when there is no driver or the driver does not know the pointer. Never throws.
int device_of_pointer(const void* pointer) noexcept;

/// What the runtime needs to know about a device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0;  ///< compute capability
  int minor = 0;
  int sm_count = 0;        ///< streaming multiprocessors
  int max_smem_optin = 0;  ///< largest dynamic shared memory per block after opting in
  int l2_bytes = 0;
};

/// The device of the current context (after ensure_context()); cached per ordinal.
DeviceInfo current_device();

/// Device memory owned by one object: allocated with cuMemAlloc in the current context,
/// freed in the destructor. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `bytes` bytes (none for 0) after ensure_context().
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  /// The device address as a pointer (nullptr when empty), ready for kernel arguments.
  void* data() const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr_)); }
  std::size_t bytes() const { return bytes_; }

  /// Copies `bytes` bytes from the host to the start of the buffer (synchronous).
  void upload(const void* host, std::size_t bytes);
  /// Copies `bytes` bytes from the start of the buffer to the host (synchronous).
  void download(void* host, std::size_t bytes) const;
  /// Sets every byte of the buffer to `value`.
  void fill_bytes(std::uint8_t value);

 private:
  void release() noexcept;

  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

/// Times work on a stream with a pair of events. Move-only.
class EventTimer {
 public:
  EventTimer();
  EventTimer(EventTimer&& other) noexcept;
  EventTimer& operator=(EventTimer&& other) noexcept;
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer();

  void start(CUstream stream);
  void stop(CUstream stream);
  /// Waits for the stop event and returns the time between start and stop.
  float milliseconds() const;

 private:
  void release() noexcept;

  CUevent start_ = nullptr;
  CUevent stop_ = nullptr;
};

namespace detail {
/// The driver table when it was loaded successfully and the process is not yet tearing down
/// the objects created before it, else nullptr. For destructors: never loads, never throws.
const DriverApi* driver_for_cleanup() noexcept;
}  // namespace detail

}  // namespace attnjit::runtime
