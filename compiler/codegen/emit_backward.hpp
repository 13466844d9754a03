// Emitters for the backward kernels (preprocess, main, deterministic dQ, dQ conversion,
// GQA reduction). Internal to compiler/codegen; emit_kernel dispatches here.
#pragma once

#include <string>

#include "compiler/ir/lowering.hpp"

namespace attnjit::codegen {

/// The source of one of the backward roles of ir.plan.
std::string emit_backward_kernel(const Lowering& ir, const KernelDesc& kernel);

}  // namespace attnjit::codegen
