// The mask utility kernels (compiler/codegen/emit_mask_kernel.hpp) compiled, cached in memory
// and on disk like attention kernels, and launched.
#pragma once

#include <cuda.h>

#include <memory>
#include <optional>
#include <string>

#include "attnjit/jit.hpp"
#include "compiler/codegen/emit_mask_kernel.hpp"
#include "runtime/jit/kernel_build.hpp"
#include "runtime/jit/kernel_set.hpp"
#include "runtime/launch/launch_support.hpp"

namespace attnjit::runtime {

using attnjit::kMaskKernelThreads;
using attnjit::MaskKernelSpec;

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
/// null and 4-byte aligned, no negative extent, its last `contiguous_dims` dims contiguous
/// (row-major; all of them by default, the leading ones' strides free otherwise).
void check_int32_tensor(std::string_view name, const TensorView& t, int rank,
                        int contiguous_dims = -1);

}  // namespace attnjit::runtime
