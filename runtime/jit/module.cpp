// Loading CUBINs, looking up kernels and launching them.
#include "runtime/jit/module.hpp"

#include <fmt/format.h>

#include <utility>

#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"

namespace attnjit::runtime {
namespace {

/// Kernels may use this much shared memory (static and dynamic) without opting in.
constexpr int kDefaultSmemLimit = 48 * 1024;

void check_dimension(std::string_view what, char axis, unsigned value, unsigned limit) {
  if (value == 0 || value > limit) {
    throw Error(fmt::format("launch {}.{}: got {}; accepted: 1 to {}", what, axis, value, limit));
  }
}

}  // namespace

LoadedModule LoadedModule::load(std::string_view cubin) {
  ensure_context();
  // cuModuleLoadData reads PTX up to a terminating NUL, which a string_view need not have.
  const std::string image(cubin);
  CUmodule module = nullptr;
  check(driver().cuModuleLoadData(&module, image.c_str()),
        fmt::format("cuModuleLoadData({} bytes)", image.size()));
  return LoadedModule(module);
}

LoadedModule::LoadedModule(LoadedModule&& other) noexcept
    : module_(std::exchange(other.module_, nullptr)) {}

LoadedModule& LoadedModule::operator=(LoadedModule&& other) noexcept {
  if (this != &other) {
    release();
    module_ = std::exchange(other.module_, nullptr);
  }
  return *this;
}

LoadedModule::~LoadedModule() {
  release();
}

void LoadedModule::release() noexcept {
  if (module_ != nullptr) {
    // Errors are ignored: a destructor cannot report them. At exit the driver may be gone;
    // driver_for_cleanup() then returns nullptr and the process releases the module.
    if (const DriverApi* api = detail::driver_for_cleanup()) api->cuModuleUnload(module_);
  }
  module_ = nullptr;
}

CUfunction LoadedModule::function(const std::string& name, int dynamic_smem_bytes) const {
  const DriverApi& api = driver();
  CUfunction function = nullptr;
  check(api.cuModuleGetFunction(&function, module_, name.c_str()),
        fmt::format("cuModuleGetFunction('{}')", name));
  // The 48 KiB without opt-in covers static and dynamic shared memory together.
  int static_smem_bytes = 0;
  if (dynamic_smem_bytes > 0) {
    check(api.cuFuncGetAttribute(&static_smem_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
          fmt::format("cuFuncGetAttribute(kernel '{}', SHARED_SIZE_BYTES)", name));
  }
  if (static_smem_bytes + dynamic_smem_bytes > kDefaultSmemLimit) {
    const DeviceInfo device = current_device();
    check(api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 dynamic_smem_bytes),
          fmt::format("cuFuncSetAttribute(kernel '{}', MAX_DYNAMIC_SHARED_SIZE_BYTES = {}, with {} "
                      "bytes of static shared memory; device {} '{}' allows at most {} together)",
                      name, dynamic_smem_bytes, static_smem_bytes, device.ordinal, device.name,
                      device.max_smem_optin));
  }
  return function;
}

void launch(CUfunction f, const LaunchConfig& cfg, CUstream stream, void** params) {
  check_dimension("grid", 'x', cfg.grid[0], 2147483647u);
  check_dimension("grid", 'y', cfg.grid[1], 65535u);
  check_dimension("grid", 'z', cfg.grid[2], 65535u);
  check_dimension("block", 'x', cfg.block[0], 1024u);
  check_dimension("block", 'y', cfg.block[1], 1024u);
  check_dimension("block", 'z', cfg.block[2], 64u);
  const unsigned long long threads = 1ull * cfg.block[0] * cfg.block[1] * cfg.block[2];
  if (threads > 1024) {
    throw Error(fmt::format("launch block: got {}x{}x{} = {} threads; accepted: at most 1024",
                            cfg.block[0], cfg.block[1], cfg.block[2], threads));
  }
  const auto where = [&](std::string_view call) {
    return fmt::format("{}(grid {}x{}x{}, block {}x{}x{}, {} bytes dynamic smem)", call,
                       cfg.grid[0], cfg.grid[1], cfg.grid[2], cfg.block[0], cfg.block[1],
                       cfg.block[2], cfg.dynamic_smem_bytes);
  };
  if (!cfg.dependent) {
    check(driver().cuLaunchKernel(f, cfg.grid[0], cfg.grid[1], cfg.grid[2], cfg.block[0],
                                  cfg.block[1], cfg.block[2], cfg.dynamic_smem_bytes, stream,
                                  params, nullptr),
          where("cuLaunchKernel"));
    return;
  }
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = cfg.grid[0];
  config.gridDimY = cfg.grid[1];
  config.gridDimZ = cfg.grid[2];
  config.blockDimX = cfg.block[0];
  config.blockDimY = cfg.block[1];
  config.blockDimZ = cfg.block[2];
  config.sharedMemBytes = cfg.dynamic_smem_bytes;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  check(driver().cuLaunchKernelEx(&config, f, params, nullptr),
        where("cuLaunchKernelEx(programmatic dependent launch)"));
}

}  // namespace attnjit::runtime
