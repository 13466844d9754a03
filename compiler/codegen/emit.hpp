// Code generation: one CUDA C++ translation unit per planned kernel. The generated code
// only binds constants and picks the template hooks; the logic lives in templates/.
#pragma once

#include <string>

#include "compiler/ir/lowering.hpp"

namespace attnjit {

/// The source of `kernel`, one of ir.plan's kernels (ir must have gone through the pipeline).
std::string emit_kernel(const Lowering& ir, const KernelDesc& kernel);

/// A plain fp32 reference attention for checking the fused kernels (templates/reference.cuh).
struct ReferenceKernel {
  std::string name;
  std::string source;
  int threads = 0;
  PredicateLaunch predicate;  ///< the inputs a predicate mask reads
};

/// The reference kernel computing the same function as `spec`'s forward kernels.
ReferenceKernel emit_reference_kernel(const AttentionSpec& spec);

}  // namespace attnjit
