// Cached compilation and launch of the mask utility kernels (their source: compiler/codegen).
#include "runtime/masks/mask_kernels.hpp"

#include <fmt/format.h>

#include <chrono>

#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/memory_cache.hpp"
#include "runtime/jit/module.hpp"

namespace attnjit::runtime {
namespace {

MemoryCache<jit::detail::CompiledSet>& memory_cache() {
  static MemoryCache<jit::detail::CompiledSet> cache;
  return cache;
}

}  // namespace

const jit::detail::LoadedKernel& MaskKernel::loaded() const {
  return set->kernels_in_current_context().front();
}

MaskKernel compile_mask_kernel(const MaskKernelSpec& spec, bool use_disk) {
  const auto start = std::chrono::steady_clock::now();
  MaskKernelSpec resolved = spec;
  if (resolved.target == Arch::auto_detect) resolved.target = jit::current_device_arch();
  const std::string text = to_string(resolved);
  const std::string key = cache_key("mask_kernel", text);
  jit::CacheLevel level = jit::CacheLevel::memory;
  auto result = memory_cache().get_or_build(key, [&] {
    auto set = std::make_shared<jit::detail::CompiledSet>();
    const MaskKernelSource source = emit_mask_kernel(resolved);
    set->entry = load_or_build(key, text, use_disk, level,
                               {{source.role, source.name, source.source, source.threads, 0}},
                               resolved.target);
    return std::shared_ptr<const jit::detail::CompiledSet>(std::move(set));
  });
  const double milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return {result.value, compile_info(result.value->entry,
                                     result.built ? level : jit::CacheLevel::memory, milliseconds)};
}

void clear_mask_kernel_memory_cache() {
  memory_cache().clear();
}

void launch_mask_kernel(const MaskKernel& kernel, const unsigned (&grid)[3], void* params,
                        CUstream stream) {
  const jit::detail::LoadedKernel& loaded = kernel.loaded();
  LaunchConfig config;
  for (int axis = 0; axis < 3; ++axis) config.grid[axis] = grid[axis];
  config.block[0] = static_cast<unsigned>(loaded.threads);
  void* args[] = {params};
  launch(loaded.function, config, stream, args);
}

FirstErrorSlot::FirstErrorSlot(CUstream stream)
    : scratch_(sizeof(unsigned long long), stream), stream_(stream) {
  check(driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(device()), 0xffffffffu, 2, stream),
        "cuMemsetD32Async(mask kernel error slot)");
}

std::optional<unsigned long long> FirstErrorSlot::wait_and_read() const {
  const DriverApi& api = driver();
  check(api.cuStreamSynchronize(stream_), "cuStreamSynchronize(mask check)");
  unsigned long long code = 0;
  check(api.cuMemcpyDtoH(&code, reinterpret_cast<CUdeviceptr>(device()), sizeof(code)),
        "cuMemcpyDtoH(mask kernel error slot)");
  if (code == ~0ull) return std::nullopt;
  return code;
}

void check_int32_tensor(std::string_view name, const TensorView& t, int rank,
                        int contiguous_dims) {
  const int first_contiguous = contiguous_dims < 0 ? 0 : rank - contiguous_dims;
  if (t.data == nullptr) {
    throw Error(fmt::format("{}: data is null; accepted: a device pointer", name));
  }
  if (t.dtype != ScalarType::int32) {
    throw_field_error(fmt::format("{}.dtype", name), name_of(t.dtype), "int32");
  }
  if (t.rank != rank) {
    throw_field_error(fmt::format("{}.rank", name), std::to_string(t.rank), std::to_string(rank));
  }
  if (reinterpret_cast<std::uintptr_t>(t.data) % sizeof(int) != 0) {
    throw_field_error(fmt::format("{}.data", name), fmt::format("{}", t.data),
                      "a 4-byte aligned address");
  }
  std::int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (t.shape[d] < 0) {
      throw_field_error(fmt::format("{}.shape[{}]", name, d), std::to_string(t.shape[d]), ">= 0");
    }
    if (d >= first_contiguous && t.shape[d] > 1 && t.stride[d] != expected) {
      throw_field_error(fmt::format("{}.stride[{}]", name, d), std::to_string(t.stride[d]),
                        fmt::format("{} (the tensor must be contiguous)", expected));
    }
    expected *= t.shape[d];
  }
}

int read_device_int(const void* values, long long index) {
  int value = 0;
  const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(values) + index * sizeof(int);
  check(driver().cuMemcpyDtoH(&value, address, sizeof(value)), "cuMemcpyDtoH(mask parameter)");
  return value;
}

}  // namespace attnjit::runtime
