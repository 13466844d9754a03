// The launches of a CTA-order kernel (templates/attnjit/cta_order.cuh): the CTAs of an
// attention kernel sorted by the tiles the mask leaves them, heaviest first.
#pragma once

#include <cuda.h>

#include <array>
#include <memory>
#include <vector>

#include "attnjit/params.cuh"
#include "compiler/ir/lowering.hpp"
#include "runtime/kernel_set.hpp"
#include "runtime/launch_support.hpp"

namespace attnjit::jit::detail {

/// Launches the cta_order kernel `desc` twice on `stream` (costs, then the sort) for the
/// attention kernel it orders, launched with `params` on `grid`, whose mask tables are
/// `table`; the buffers are new scratch appended to `scratch`. Returns the order, for the
/// attention kernel's `cta_order`. Params: FwdParams or BwdParams.
template <class Params>
const int* order_ctas(const LoadedKernel& kernel, const KernelDesc& desc, const Params& params,
                      const int* table, const std::array<unsigned, 3>& grid, CUstream stream,
                      std::vector<std::unique_ptr<StreamScratch>>& scratch);

}  // namespace attnjit::jit::detail
