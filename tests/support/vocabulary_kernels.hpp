// Test kernels of the tile vocabulary of templates/attnjit/ (fragment.cuh, softmax.cuh, ...):
// small extern "C" kernels that exercise one primitive on data from global memory and write
// what it produced, for the GPU tests to compare with host computations and the unit tests to
// compile without a device.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/jit/nvrtc.hpp"

namespace attnjit::testing {

/// One test program: its source, its entry points, and whether it needs sm_90a (wgmma).
struct VocabularyKernel {
  std::string_view program;  ///< e.g. "fragment_test.cu"
  std::string_view source;
  std::vector<std::string> entries;
  bool needs_sm90a = false;
};

/// Every test program of the vocabulary.
std::span<const VocabularyKernel> vocabulary_kernels();

/// The test program named `program`.
const VocabularyKernel& vocabulary_kernel(std::string_view program);

/// The embedded template headers, for nvrtc_compile.
std::vector<runtime::NvrtcHeader> template_headers();

}  // namespace attnjit::testing
