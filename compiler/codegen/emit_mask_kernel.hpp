// The mask utility kernels NVRTC compiles besides the attention plans: one device builder per
// FlashMask family (templates/attnjit/masks/mask_builders.cuh) and the interval check
// (templates/attnjit/masks/interval_check.cuh). A mask kernel is named by one canonical text (which
// kernel, which target), the input of the shared cache-key derivation.
#pragma once

#include <string>

#include "attnjit/spec.hpp"

namespace attnjit {

/// Threads per block of every mask kernel.
inline constexpr int kMaskKernelThreads = 256;

/// Which mask kernel, for which target: the device builder `build_<family>` of a FlashMask
/// family (by its name in the family table), or the interval check when `family` is empty.
struct MaskKernelSpec {
  std::string family;
  Arch target = Arch::auto_detect;

  bool operator==(const MaskKernelSpec&) const = default;
};

/// The canonical text, e.g. `mask_kernel=build_causal_document target=sm_90` or
/// `mask_kernel=check_intervals target=sm_80`.
std::string to_string(const MaskKernelSpec& spec);

/// A mask kernel's entry point, generated source and block size.
struct MaskKernelSource {
  std::string role;  ///< "mask_builder" or "interval_check"
  std::string name;
  std::string source;
  int threads = kMaskKernelThreads;
};

MaskKernelSource emit_mask_kernel(const MaskKernelSpec& spec);

}  // namespace attnjit
