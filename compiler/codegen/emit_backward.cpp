// Backward emitters: bind the tile constants and the mask policy, instantiate the templates.
#include "compiler/codegen/emit_backward.hpp"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit_common.hpp"

namespace attnjit::codegen {
namespace {

std::string emit_main(const Lowering& ir, const KernelDesc& kernel) {
  const BackwardTiles& tiles = *ir.backward_tiles;
  const bool slabs = tiles.layout == BackwardLayout::key_slabs;
  std::vector<std::string> config{
      fmt::format("static constexpr int kHeadDim = {};", ir.spec.head_dim_qk),
      fmt::format("static constexpr int kBlockM = {};", tiles.block_m),
      fmt::format("static constexpr int kBlockN = {};", tiles.block_n),
      fmt::format("static constexpr int kWarps = {};", tiles.warps)};
  // The other layouts derive their warps' work from the shape.
  if (slabs) config.push_back(fmt::format("static constexpr int kDimWarps = {};", tiles.dim_warps));
  config.push_back(fmt::format("static constexpr bool kAtomicDq = {};", !ir.spec.deterministic));
  std::string_view kernel_struct = "BackwardSm80";
  std::string_view body = "backward_sm80";
  if (tiles.layout == BackwardLayout::warp_grid) {
    kernel_struct = "BackwardGridSm80";
    body = "backward_grid_sm80";
  } else if (tiles.layout == BackwardLayout::warpgroup) {
    kernel_struct = "BackwardWgmmaSm90";
    body = "backward_wgmma_sm90";
  }
  return emit_mainloop(
      ir, kernel, config, fmt::format("attnjit::{}<Config, Mask>", kernel_struct),
      "attnjit::BwdParams",
      fmt::format("attnjit::{}<Config, Mask{}>(params);", body, score_mod_argument(ir.spec)),
      /*min_blocks_per_sm=*/1);
}

std::string emit_dq(const Lowering& ir, const KernelDesc& kernel) {
  const BackwardTiles& tiles = *ir.backward_tiles;
  return emit_mainloop(ir, kernel,
                       {fmt::format("static constexpr int kHeadDim = {};", ir.spec.head_dim_qk),
                        fmt::format("static constexpr int kBlockM = {};", tiles.dq_block_m),
                        fmt::format("static constexpr int kBlockN = {};", tiles.dq_block_n),
                        fmt::format("static constexpr int kWarps = {};", tiles.dq_warps)},
                       "attnjit::BackwardDqSm80<Config, Mask>", "attnjit::BwdParams",
                       fmt::format("attnjit::backward_dq_sm80<Config, Mask{}>(params);",
                                   score_mod_argument(ir.spec)),
                       /*min_blocks_per_sm=*/1);
}

std::string emit_rows(const Lowering& ir, const KernelDesc& kernel, std::string_view body) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, "attnjit::BwdParams", body);
  return w.str();
}

}  // namespace

std::string emit_backward_kernel(const Lowering& ir, const KernelDesc& kernel) {
  internal_check(ir.backward_tiles.has_value(), "backward kernels need backward tiles");
  const std::string element(element_type(ir.spec.dtype));
  const int d = ir.spec.head_dim_qk;
  switch (kernel.role) {
    case KernelRole::backward:
      return emit_main(ir, kernel);
    case KernelRole::backward_dq:
      return emit_dq(ir, kernel);
    case KernelRole::backward_preprocess:
      return emit_rows(
          ir, kernel,
          fmt::format("attnjit::backward_preprocess<{}, {}, /*kZeroDqAccum=*/{}>(params);", element,
                      d, !ir.spec.deterministic));
    case KernelRole::backward_convert_dq:
      return emit_rows(ir, kernel,
                       fmt::format("attnjit::backward_convert_dq<{}, {}>(params);", element, d));
    case KernelRole::backward_reduce_dkdv:
      return emit_rows(ir, kernel,
                       fmt::format("attnjit::backward_reduce_dkdv<{}, {}>(params);", element, d));
    case KernelRole::forward:
    case KernelRole::flashmask_minmax:
    case KernelRole::predicate_blocks:
    case KernelRole::cta_order:
      break;
  }
  throw InternalError("emit_backward_kernel: not a backward role");
}

}  // namespace attnjit::codegen
