// The two launches of a CTA-order kernel.
#include "runtime/cta_order_launch.hpp"

#include <cstdint>

#include "attnjit/error.hpp"
#include "runtime/module.hpp"

namespace attnjit::jit::detail {

template <class Params>
const int* order_ctas(const LoadedKernel& kernel, const KernelDesc& desc, const Params& params,
                      const int* table, const std::array<unsigned, 3>& grid, CUstream stream,
                      std::vector<std::unique_ptr<StreamScratch>>& scratch) {
  internal_check(desc.role == KernelRole::cta_order && kernel.threads == 1024,
                 "order_ctas: a cta_order kernel of 1024 threads");
  const std::int64_t count = static_cast<std::int64_t>(grid[0]) * grid[1] * grid[2];
  if (count == 0) return nullptr;
  internal_check(count <= INT32_MAX, "order_ctas: the grid's CTAs fit in int32");
  scratch.push_back(
      std::make_unique<StreamScratch>(static_cast<std::size_t>(count) * 2 * sizeof(int), stream));
  CtaOrderParams<Params> order{};
  order.attention = params;
  order.table = table;
  order.cost = scratch.back()->template as<int>();
  order.order = order.cost + count;
  order.grid_x = static_cast<int>(grid[0]);
  order.grid_y = static_cast<int>(grid[1]);
  order.grid_z = static_cast<int>(grid[2]);
  // Each walked block costs at most 5 (cta_order.cuh), plus 2 per CTA.
  const int walked = desc.orders == KernelRole::backward
                         ? static_cast<int>(ceil_div(params.seqlen_q, desc.block_m))
                         : static_cast<int>(ceil_div(params.seqlen_k, desc.block_n));
  order.max_cost = 5 * walked + 2;
  runtime::LaunchConfig config;
  void* args[] = {&order};
  // Phase 0: one warp per CTA, 8 warps per block so that small grids still spread over the
  // SMs; phase 1: one block of the kernel's 1024 threads.
  constexpr int kCostWarps = 8;
  order.phase = 0;
  config.block[0] = kCostWarps * 32;
  config.grid[0] = ceil_div(count, kCostWarps);
  runtime::launch(kernel.function, config, stream, args);
  order.phase = 1;
  config.block[0] = static_cast<unsigned>(kernel.threads);
  config.grid[0] = 1;
  runtime::launch(kernel.function, config, stream, args);
  return order.order;
}

template const int* order_ctas(const LoadedKernel&, const KernelDesc&, const FwdParams&, const int*,
                               const std::array<unsigned, 3>&, CUstream,
                               std::vector<std::unique_ptr<StreamScratch>>&);
template const int* order_ctas(const LoadedKernel&, const KernelDesc&, const BwdParams&, const int*,
                               const std::array<unsigned, 3>&, CUstream,
                               std::vector<std::unique_ptr<StreamScratch>>&);

}  // namespace attnjit::jit::detail
