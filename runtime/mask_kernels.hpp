// The mask utility kernels NVRTC compiles besides the attention kernels: one device builder per
// FlashMask family (templates/attnjit/mask_builders.cuh) and the interval check
// (templates/attnjit/interval_check.cuh). A mask kernel is named by one canonical text (which
// kernel, which target), the input of the shared cache-key derivation; the compiled kernels
// are cached in memory and on disk like attention kernels.
#pragma once

#include <cuda.h>

#include <memory>
#include <optional>
#include <string>

#include "attnjit/jit.hpp"
#include "attnjit/mask_builder.hpp"
#include "runtime/kernel_build.hpp"
#include "runtime/kernel_set.hpp"
#include "runtime/launch_support.hpp"

namespace attnjit::runtime {

/// Threads per block of every mask kernel.
inline constexpr int kMaskKernelThreads = 256;

/// Which mask kernel, for which target: a family's builder, or the interval check when
/// `family` is empty.
struct MaskKernelSpec {
  std::optional<MaskFamily> family;
  Arch target = Arch::auto_detect;

  bool operator==(const MaskKernelSpec&) const = default;
};

/// The canonical text, e.g. `mask_kernel=build_causal_document target=sm_90` or
/// `mask_kernel=check_intervals target=sm_80`.
std::string to_string(const MaskKernelSpec& spec);

/// The kernel's entry point, generated source and launch shape (role "mask_builder" or
/// "interval_check").
KernelSource mask_kernel_source(const MaskKernelSpec& spec);

/// A compiled mask kernel and what its compile call did.
struct MaskKernel {
  std::shared_ptr<const jit::detail::CompiledSet> set;
  jit::CompileInfo info;

  /// The kernel loaded into the current context (loaded there on first use).
  const jit::detail::LoadedKernel& loaded() const;
};

/// Compiles `spec` (an explicit target; auto resolves to the current device's arch) or finds
/// it in the memory cache, else (with `use_disk`) in the disk cache.
MaskKernel compile_mask_kernel(const MaskKernelSpec& spec, bool use_disk = true);

/// Forgets the mask kernels held in memory (kernels already handed out stay valid).
void clear_mask_kernel_memory_cache();

/// Launches `kernel` on `stream` with `grid` blocks of kMaskKernelThreads threads and the
/// parameter block `params` (MaskBuildParams or IntervalCheckParams).
void launch_mask_kernel(const MaskKernel& kernel, const unsigned (&grid)[3], void* params,
                        CUstream stream);

/// A device word in which a mask kernel keeps the smallest error code it found (atomicMin):
/// stream-ordered scratch memory set to all ones (none) on `stream`.
class FirstErrorSlot {
 public:
  explicit FirstErrorSlot(CUstream stream);

  unsigned long long* device() const { return scratch_.as<unsigned long long>(); }

  /// Waits for the stream; the smallest code reported, or nullopt when there was none.
  std::optional<unsigned long long> wait_and_read() const;

 private:
  jit::detail::StreamScratch scratch_;
  CUstream stream_;
};

/// values[index] of an int32 device array, copied to the host (synchronous).
int read_device_int(const void* values, long long index);

/// Throws Error naming `name` unless `t` is an int32 device tensor of rank `rank`: data not
/// null and 4-byte aligned, no negative extent, contiguous (row-major).
void check_int32_tensor(std::string_view name, const TensorView& t, int rank);

}  // namespace attnjit::runtime
