// Loading libcuda at run time, contexts, the device query and the RAII device helpers.
#include "runtime/jit/driver.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"

namespace attnjit::runtime {
namespace {

/// The entry points are requested as CUDA 12.0 defines them, so e.g. "cuMemAlloc" resolves
/// to the 64-bit cuMemAlloc_v2 on every driver from 12.0 on.
constexpr int kRequestedCudaVersion = 12000;

using GetProcAddress = CUresult (*)(const char* symbol, void** pfn, int cuda_version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult* status);

/// The outcome of the one attempt to load the driver.
struct LoadState {
  DriverApi api;
  std::string error;  ///< empty on success
};

/// Set once the driver is loaded; read by destructors, which must not trigger a load.
std::atomic<const DriverApi*> g_loaded_driver{nullptr};
/// Set by an exit handler registered right after cuInit. Exit handlers and static destructors
/// run in reverse order of registration, so when this is set the objects still to be destroyed
/// were created before the driver was loaded, and libcuda may already have shut down.
std::atomic<bool> g_process_exiting{false};

void mark_process_exiting() {
  g_process_exiting.store(true);
}

std::string error_name(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* description = nullptr;
  if (api.cuGetErrorName == nullptr || api.cuGetErrorName(result, &name) != CUDA_SUCCESS ||
      name == nullptr) {
    return fmt::format("CUresult {}", static_cast<int>(result));
  }
  if (api.cuGetErrorString(result, &description) != CUDA_SUCCESS || description == nullptr) {
    return name;
  }
  return fmt::format("{} ({})", name, description);
}

template <class Function>
bool resolve(GetProcAddress get_proc, Function& slot, const char* symbol, const std::string& file,
             std::string& error) {
  void* address = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  const CUresult result =
      get_proc(symbol, &address, kRequestedCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || address == nullptr) {
    error = fmt::format(
        "CUDA driver too old or broken: {} has no entry point {} for CUDA 12.0 "
        "(cuGetProcAddress returned {}, status {})",
        file, symbol, static_cast<int>(result), static_cast<int>(status));
    return false;
  }
  slot = reinterpret_cast<std::remove_reference_t<Function>>(address);
  return true;
}

// The driver library: $ATTNJIT_LIBCUDA when set (a path or a library name), else
// libcuda.so.1 from the loader's search path.
std::string driver_library() {
  const char* name = std::getenv("ATTNJIT_LIBCUDA");
  return name != nullptr && *name != '\0' ? name : "libcuda.so.1";
}

// The file the loader opened for `library` (a name may resolve anywhere on the search path).
std::string loaded_file(void* library, const std::string& name) {
  link_map* map = nullptr;
  if (dlinfo(library, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      *map->l_name != '\0') {
    return map->l_name;
  }
  return name;
}

// Why a loaded library without cuGetProcAddress_v2 cannot serve: an old driver, or a file that
// is no CUDA driver at all.
std::string not_a_driver(void* library, const std::string& name, const std::string& file) {
  const bool configured = name != "libcuda.so.1";
  if (dlsym(library, "cuInit") != nullptr) {
    return fmt::format(
        "CUDA driver too old: {} has no cuGetProcAddress_v2 (a driver for CUDA 12.0 or newer "
        "is required)",
        file);
  }
  if (configured) {
    return fmt::format(
        "ATTNJIT_LIBCUDA: got '{}', which loaded {}: not a CUDA driver library (it has no "
        "cuInit); accepted: the NVIDIA driver's libcuda.so.1, as a path or a library name",
        name, file);
  }
  return fmt::format(
      "no CUDA driver: libcuda.so.1 loaded {}, which is not a CUDA driver library (it has no "
      "cuInit)",
      file);
}

LoadState load_driver() {
  LoadState state;
  const std::string name = driver_library();
  dlerror();
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    state.error = fmt::format("no CUDA driver: cannot open {} ({})", name,
                              reason != nullptr ? reason : "unknown reason");
    return state;
  }
  // The library stays loaded for the life of the process: the table points into it.
  const std::string file = loaded_file(library, name);
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    state.error = not_a_driver(library, name, file);
    return state;
  }
  DriverApi& api = state.api;
  // `#name` keeps the Driver API name while `api.name` follows cuda.h's versioning macros.
#define ATTNJIT_RESOLVE(name) \
  if (!resolve(get_proc, api.name, #name, file, state.error)) return state
  ATTNJIT_RESOLVE(cuGetErrorName);
  ATTNJIT_RESOLVE(cuGetErrorString);
  ATTNJIT_RESOLVE(cuInit);
  ATTNJIT_RESOLVE(cuDriverGetVersion);
  ATTNJIT_RESOLVE(cuDeviceGet);
  ATTNJIT_RESOLVE(cuDeviceGetCount);
  ATTNJIT_RESOLVE(cuDeviceGetName);
  ATTNJIT_RESOLVE(cuDeviceGetAttribute);
  ATTNJIT_RESOLVE(cuDevicePrimaryCtxRetain);
  ATTNJIT_RESOLVE(cuDevicePrimaryCtxRelease);
  ATTNJIT_RESOLVE(cuCtxGetCurrent);
  ATTNJIT_RESOLVE(cuCtxSetCurrent);
  ATTNJIT_RESOLVE(cuCtxGetDevice);
  ATTNJIT_RESOLVE(cuCtxSynchronize);
  ATTNJIT_RESOLVE(cuModuleLoadData);
  ATTNJIT_RESOLVE(cuModuleUnload);
  ATTNJIT_RESOLVE(cuModuleGetFunction);
  ATTNJIT_RESOLVE(cuFuncSetAttribute);
  ATTNJIT_RESOLVE(cuFuncGetAttribute);
  ATTNJIT_RESOLVE(cuLaunchKernel);
  ATTNJIT_RESOLVE(cuLaunchKernelEx);
  ATTNJIT_RESOLVE(cuMemAlloc);
  ATTNJIT_RESOLVE(cuMemFree);
  ATTNJIT_RESOLVE(cuMemAllocAsync);
  ATTNJIT_RESOLVE(cuMemFreeAsync);
  ATTNJIT_RESOLVE(cuMemcpyHtoD);
  ATTNJIT_RESOLVE(cuMemcpyDtoH);
  ATTNJIT_RESOLVE(cuMemcpyDtoD);
  ATTNJIT_RESOLVE(cuMemsetD8);
  ATTNJIT_RESOLVE(cuMemsetD8Async);
  ATTNJIT_RESOLVE(cuMemsetD32Async);
  ATTNJIT_RESOLVE(cuStreamCreate);
  ATTNJIT_RESOLVE(cuStreamDestroy);
  ATTNJIT_RESOLVE(cuStreamSynchronize);
  ATTNJIT_RESOLVE(cuEventCreate);
  ATTNJIT_RESOLVE(cuEventDestroy);
  ATTNJIT_RESOLVE(cuEventRecord);
  ATTNJIT_RESOLVE(cuEventSynchronize);
  ATTNJIT_RESOLVE(cuEventElapsedTime);
  ATTNJIT_RESOLVE(cuPointerGetAttribute);
  ATTNJIT_RESOLVE(cuMemGetInfo);
  ATTNJIT_RESOLVE(cuTensorMapEncodeTiled);
#undef ATTNJIT_RESOLVE

  const CUresult init = api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    state.error = fmt::format(
        "{}: cuInit failed with {}",
        init == CUDA_ERROR_NO_DEVICE ? "no CUDA device" : "cannot initialise the CUDA driver",
        error_name(api, init));
  }
  return state;
}

const LoadState& load_state() {
  // Never destroyed: destructors of other static objects may still need the table at exit.
  static const LoadState* const state = [] {
    auto* loaded = new LoadState(load_driver());
    if (loaded->error.empty()) {
      std::atexit(mark_process_exiting);
      g_loaded_driver.store(&loaded->api);
    }
    return loaded;
  }();
  return *state;
}

/// The ordinal named by $ATTNJIT_DEVICE (0 when unset or empty), checked against the count.
int device_ordinal_from_env(const DriverApi& api) {
  int count = 0;
  check(api.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count <= 0) throw DeviceError("no CUDA device: cuDeviceGetCount reports 0 devices");
  const char* text = std::getenv("ATTNJIT_DEVICE");
  if (text == nullptr || *text == '\0') return 0;
  const std::string_view value(text);
  int ordinal = -1;
  const auto [end, errc] = std::from_chars(value.data(), value.data() + value.size(), ordinal);
  if (errc != std::errc() || end != value.data() + value.size() || ordinal < 0 ||
      ordinal >= count) {
    throw Error(fmt::format("ATTNJIT_DEVICE: got '{}'; accepted: a device ordinal from 0 to {}",
                            value, count - 1));
  }
  return ordinal;
}

/// The primary context of `ordinal`, retained once and kept for the life of the process.
CUcontext retained_primary_context(const DriverApi& api, int ordinal) {
  static std::mutex mutex;
  static std::map<int, CUcontext> retained;
  const std::lock_guard lock(mutex);
  if (const auto found = retained.find(ordinal); found != retained.end()) return found->second;
  CUdevice device = 0;
  check(api.cuDeviceGet(&device, ordinal), "cuDeviceGet");
  CUcontext context = nullptr;
  check(api.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  retained.emplace(ordinal, context);
  return context;
}

int device_attribute(const DriverApi& api, CUdevice device, CUdevice_attribute attribute,
                     std::string_view what) {
  int value = 0;
  check(api.cuDeviceGetAttribute(&value, attribute, device),
        fmt::format("cuDeviceGetAttribute({})", what));
  return value;
}

DeviceInfo query_device(const DriverApi& api, CUdevice device) {
  DeviceInfo info;
  info.ordinal = static_cast<int>(device);
  char name[256] = {};
  check(api.cuDeviceGetName(name, static_cast<int>(sizeof(name)), device), "cuDeviceGetName");
  info.name = name;
  info.major = device_attribute(api, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "major");
  info.minor = device_attribute(api, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "minor");
  info.sm_count =
      device_attribute(api, device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count");
  info.max_smem_optin =
      device_attribute(api, device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                       "max shared memory per block (opt-in)");
  info.l2_bytes = device_attribute(api, device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size");
  return info;
}

void check_transfer(std::string_view what, std::size_t requested, std::size_t available) {
  if (requested > available) {
    throw Error(fmt::format("DeviceBuffer::{}: got {} bytes; accepted: at most the buffer's {}",
                            what, requested, available));
  }
}

}  // namespace

const DriverApi& driver() {
  const LoadState& state = load_state();
  if (!state.error.empty()) throw DeviceError(state.error);
  return state.api;
}

bool driver_available() noexcept {
  try {
    return load_state().error.empty();
  } catch (...) {
    return false;
  }
}

void check(CUresult result, std::string_view call) {
  if (result == CUDA_SUCCESS) return;
  const DriverApi* api = g_loaded_driver.load();
  const std::string name =
      api != nullptr ? error_name(*api, result) : fmt::format("CUresult {}", int(result));
  throw DeviceError(fmt::format("{} failed: {}", call, name));
}

void ensure_context() {
  const DriverApi& api = driver();
  CUcontext current = nullptr;
  check(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != nullptr) return;
  const CUcontext context = retained_primary_context(api, device_ordinal_from_env(api));
  check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

CUcontext primary_context(int ordinal) {
  const DriverApi& api = driver();
  int count = 0;
  check(api.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    throw Error(
        fmt::format("device: got {}; accepted: a device ordinal from 0 to {}", ordinal, count - 1));
  }
  return retained_primary_context(api, ordinal);
}

DeviceScope::DeviceScope(int ordinal) {
  if (ordinal < 0) return;
  const DriverApi& api = driver();
  CUcontext current = nullptr;
  check(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != nullptr) {
    // Any context of the right device is kept, the caller's own included.
    CUdevice device = -1;
    if (api.cuCtxGetDevice(&device) == CUDA_SUCCESS && static_cast<int>(device) == ordinal) return;
  }
  check(api.cuCtxSetCurrent(primary_context(ordinal)), "cuCtxSetCurrent");
  previous_ = current;
  switched_ = true;
}

DeviceScope::~DeviceScope() {
  if (!switched_) return;
  // A destructor cannot report a failure; the caller's context is restored when it can be.
  if (const DriverApi* api = detail::driver_for_cleanup()) api->cuCtxSetCurrent(previous_);
}

int device_of_pointer(const void* pointer) noexcept {
  if (pointer == nullptr || !driver_available()) return -1;
  const DriverApi& api = *g_loaded_driver.load();
  int ordinal = -1;
  const CUresult result = api.cuPointerGetAttribute(
      &ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(pointer)));
  return result == CUDA_SUCCESS ? ordinal : -1;
}

DeviceInfo current_device() {
  ensure_context();
  const DriverApi& api = driver();
  CUdevice device = 0;
  check(api.cuCtxGetDevice(&device), "cuCtxGetDevice");
  static std::mutex mutex;
  static std::unordered_map<int, DeviceInfo> cache;
  {
    const std::lock_guard lock(mutex);
    if (const auto found = cache.find(static_cast<int>(device)); found != cache.end()) {
      return found->second;
    }
  }
  DeviceInfo info = query_device(api, device);
  const std::lock_guard lock(mutex);
  return cache.emplace(info.ordinal, std::move(info)).first->second;
}

namespace detail {
const DriverApi* driver_for_cleanup() noexcept {
  return g_process_exiting.load() ? nullptr : g_loaded_driver.load();
}
}  // namespace detail

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  ensure_context();
  check(driver().cuMemAlloc(&ptr_, bytes), fmt::format("cuMemAlloc({} bytes)", bytes));
  bytes_ = bytes;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

void DeviceBuffer::release() noexcept {
  if (ptr_ != 0) {
    // Errors are ignored: a destructor cannot report them and the memory is gone either way.
    if (const DriverApi* api = detail::driver_for_cleanup()) api->cuMemFree(ptr_);
  }
  ptr_ = 0;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  check_transfer("upload", bytes, bytes_);
  if (bytes == 0) return;
  check(driver().cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  check_transfer("download", bytes, bytes_);
  if (bytes == 0) return;
  check(driver().cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(std::uint8_t value) {
  if (bytes_ == 0) return;
  check(driver().cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
}

EventTimer::EventTimer() {
  ensure_context();
  const DriverApi& api = driver();
  check(api.cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
  const CUresult result = api.cuEventCreate(&stop_, CU_EVENT_DEFAULT);
  if (result != CUDA_SUCCESS) {
    release();
    check(result, "cuEventCreate");
  }
}

EventTimer::EventTimer(EventTimer&& other) noexcept
    : start_(std::exchange(other.start_, nullptr)), stop_(std::exchange(other.stop_, nullptr)) {}

EventTimer& EventTimer::operator=(EventTimer&& other) noexcept {
  if (this != &other) {
    release();
    start_ = std::exchange(other.start_, nullptr);
    stop_ = std::exchange(other.stop_, nullptr);
  }
  return *this;
}

EventTimer::~EventTimer() {
  release();
}

void EventTimer::release() noexcept {
  if (const DriverApi* api = detail::driver_for_cleanup()) {
    if (start_ != nullptr) api->cuEventDestroy(start_);
    if (stop_ != nullptr) api->cuEventDestroy(stop_);
  }
  start_ = nullptr;
  stop_ = nullptr;
}

void EventTimer::start(CUstream stream) {
  check(driver().cuEventRecord(start_, stream), "cuEventRecord(start)");
}

void EventTimer::stop(CUstream stream) {
  check(driver().cuEventRecord(stop_, stream), "cuEventRecord(stop)");
}

float EventTimer::milliseconds() const {
  const DriverApi& api = driver();
  check(api.cuEventSynchronize(stop_), "cuEventSynchronize");
  float milliseconds = 0.0f;
  check(api.cuEventElapsedTime(&milliseconds, start_, stop_), "cuEventElapsedTime");
  return milliseconds;
}

}  // namespace attnjit::runtime

namespace attnjit::jit {

Arch current_device_arch() {
  // Per call, not once per process: each device of the process resolves to its own arch
  // (current_device() caches the query per ordinal).
  const Arch arch = [] {
    const runtime::DeviceInfo device = runtime::current_device();
    const int cc = device.major * 10 + device.minor;
    if (cc == 80) return Arch::sm_80;
    if (cc == 86 || cc == 87) return Arch::sm_86;
    if (cc == 89) return Arch::sm_89;
    // An sm_90a CUBIN runs on compute capability 9.0 only, which is the device's own: its
    // wgmma kernels are what Hopper adds over sm_90.
    if (cc == 90) return Arch::sm_90a;
    throw DeviceError(fmt::format(
        "device {} has compute capability {}.{}; this version of attnjit supports sm_80, "
        "sm_86, sm_89 and sm_90 (pass an explicit target to compile for one of them)",
        device.name, device.major, device.minor));
  }();
  return arch;
}

}  // namespace attnjit::jit
