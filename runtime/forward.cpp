// Kernel::forward: checks the tensors against the spec, fills FwdParams and launches the
// plan's kernels (FlashMask min/max or predicate block table, the CTA order, then the forward
// kernel) or the reference kernel.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "attnjit/params.cuh"
#include "runtime/cta_order_launch.hpp"
#include "runtime/driver.hpp"
#include "runtime/interval_check.hpp"
#include "runtime/kernel_set.hpp"
#include "runtime/launch_support.hpp"
#include "runtime/predicate_launch.hpp"
#include "runtime/tma.hpp"

namespace attnjit {

std::string_view name_of(ScalarType type) {
  switch (type) {
    case ScalarType::fp16:
      return "fp16";
    case ScalarType::bf16:
      return "bf16";
    case ScalarType::fp32:
      return "fp32";
    case ScalarType::int32:
      return "int32";
  }
  throw InternalError("unknown ScalarType");
}

TensorView contiguous_view(void* data, ScalarType dtype,
                           std::initializer_list<std::int64_t> shape) {
  if (shape.size() > 4)
    throw Error(fmt::format("tensor rank: got {}; accepted: 0 to 4", shape.size()));
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.rank = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t extent : shape) view.shape[i++] = extent;
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.stride[d] = stride;
    stride *= view.shape[d];
  }
  return view;
}

namespace jit {
namespace {

using detail::ceil_div;
using detail::check_args;
using detail::paired_head_grid;
using detail::Shapes;
using detail::StreamScratch;

FwdParams make_params(const AttentionSpec& spec, const ForwardArgs& a, const Shapes& s) {
  FwdParams p{};
  detail::fill_common_params(p, spec, a, s);
  return p;
}

void launch_reference(const detail::KernelSet& set, FwdParams& params, CUstream stream) {
  const detail::LoadedKernel& kernel = set.kernels_in_current_context().front();
  const std::int64_t smem = (static_cast<std::int64_t>(set.spec.head_dim_qk) + params.seqlen_k) * 4;
  const int limit = runtime::current_device().max_smem_optin;
  if (smem > limit) {
    throw_field_error(
        "k.shape[1] (seqlen_k) for the reference kernel", std::to_string(params.seqlen_k),
        fmt::format("at most {} keys on this device", limit / 4 - set.spec.head_dim_qk));
  }
  int current = 0;
  runtime::check(runtime::driver().cuFuncGetAttribute(
                     &current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.function),
                 "cuFuncGetAttribute");
  if (smem > current) {
    runtime::check(runtime::driver().cuFuncSetAttribute(
                       kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                       static_cast<int>(smem)),
                   "cuFuncSetAttribute(reference kernel shared memory)");
  }
  runtime::LaunchConfig config;
  config.grid[0] = static_cast<unsigned>(params.seqlen_q);
  config.grid[1] = static_cast<unsigned>(params.heads);
  config.grid[2] = static_cast<unsigned>(params.batch);
  config.block[0] = static_cast<unsigned>(kernel.threads);
  config.dynamic_smem_bytes = static_cast<unsigned>(smem);
  void* args[] = {&params};
  runtime::launch(kernel.function, config, stream, args);
}

}  // namespace

void Kernel::forward(const ForwardArgs& args, Stream stream_handle) const {
  const detail::KernelSet& set = *set_;
  if (set.spec.direction != Direction::forward) {
    throw Error(
        "forward: this kernel was compiled for direction=backward; accepted: a kernel compiled "
        "with direction=forward (call backward() on this one)");
  }
  const bool is_reference = !set.ir.has_value();
  const Shapes shapes = check_args(set.spec, args, set.spec.return_lse || is_reference);
  FwdParams params = make_params(set.spec, args, shapes);
  params.predicate = detail::predicate_inputs(set.spec, args.predicate, shapes.batch);
  if (shapes.batch == 0 || shapes.seqlen_q == 0 || shapes.heads == 0) return;
  CUstream stream = static_cast<CUstream>(stream_handle);
  detail::validate_intervals_on_request(args.validate_mask, set.spec.mask,
                                        args.startend_row_indices, shapes.seqlen_q, stream);
  if (is_reference) {
    launch_reference(set, params, stream);
    return;
  }

  const std::vector<detail::LoadedKernel>& kernels = set.kernels_in_current_context();
  const KernelPlan& plan = *set.ir->plan;
  const TileConfig& tiles = *set.ir->tiles;
  std::optional<StreamScratch> minmax;
  std::vector<std::unique_ptr<StreamScratch>> block_tables;
  const auto grid =
      paired_head_grid(ceil_div(shapes.seqlen_q, tiles.block_m), shapes.heads, shapes.batch);
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const KernelDesc& desc = plan.kernels[i];
    const detail::LoadedKernel& kernel = kernels[i];
    runtime::LaunchConfig config;
    config.block[0] = static_cast<unsigned>(kernel.threads);
    config.dynamic_smem_bytes = static_cast<unsigned>(kernel.dynamic_smem_bytes);
    if (desc.role == KernelRole::cta_order) {
      params.cta_order =
          detail::order_ctas(kernel, desc, params, params.minmax, grid, stream, block_tables);
    } else if (desc.role == KernelRole::predicate_blocks) {
      const detail::BlockTable table = detail::build_block_table(
          kernel, desc, *set.ir->mask, params.predicate, shapes, stream, block_tables);
      params.minmax = table.table;
      params.predicate_bits = table.bits;
    } else if (desc.role == KernelRole::flashmask_minmax) {
      const int key_blocks = static_cast<int>(ceil_div(shapes.seqlen_k, tiles.block_n));
      const std::int64_t warps =
          static_cast<std::int64_t>(shapes.batch) * shapes.mask_heads * key_blocks;
      const std::size_t bytes =
          static_cast<std::size_t>(warps) * 2 * set.spec.mask.columns * sizeof(int);
      if (warps == 0) continue;
      minmax.emplace(bytes, stream);
      params.minmax = minmax->as<int>();
      MinMaxParams mm{};
      mm.intervals = params.intervals;
      mm.minmax = minmax->as<int>();
      mm.batch = shapes.batch;
      mm.mask_heads = shapes.mask_heads;
      mm.seqlen_k = shapes.seqlen_k;
      mm.num_key_blocks = key_blocks;
      config.grid[0] = ceil_div(warps, kernel.threads / 32);
      void* mm_args[] = {&mm};
      runtime::launch(kernel.function, config, stream, mm_args);
    } else if (desc.family == KernelFamily::sm90a) {
      // The warpgroup kernel (fwd_sm90a.cuh) also takes the TMA tensor maps of q, k, v, o.
      std::copy(grid.begin(), grid.end(), config.grid);
      FwdTensorMaps maps = detail::forward_tensor_maps(args, tiles.block_m, tiles.block_n);
      void* fwd_args[] = {&params, &maps};
      runtime::launch(kernel.function, config, stream, fwd_args);
    } else {
      std::copy(grid.begin(), grid.end(), config.grid);
      void* fwd_args[] = {&params};
      runtime::launch(kernel.function, config, stream, fwd_args);
    }
  }
}

}  // namespace jit
}  // namespace attnjit
