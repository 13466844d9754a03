// Names and the text printer of the lowering IR.
#include "compiler/ir/lowering.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit {

std::string_view name_of(IntervalVector vector) {
  switch (vector) {
    case IntervalVector::lts:
      return "LTS";
    case IntervalVector::lte:
      return "LTE";
    case IntervalVector::uts:
      return "UTS";
    case IntervalVector::ute:
      return "UTE";
  }
  throw InternalError("unknown IntervalVector");
}

std::string_view name_of(KernelFamily family) {
  switch (family) {
    case KernelFamily::sm80:
      return "sm80";
    case KernelFamily::sm90a:
      return "sm90a";
  }
  throw InternalError("unknown KernelFamily");
}

std::string_view name_of(BackwardLayout layout) {
  switch (layout) {
    case BackwardLayout::key_slabs:
      return "slabs";
    case BackwardLayout::warp_grid:
      return "grid";
    case BackwardLayout::warpgroup:
      return "wgmma";
  }
  throw InternalError("unknown BackwardLayout");
}

std::string_view name_of(KernelRole role) {
  switch (role) {
    case KernelRole::flashmask_minmax:
      return "flashmask_minmax";
    case KernelRole::predicate_blocks:
      return "predicate_blocks";
    case KernelRole::cta_order:
      return "cta_order";
    case KernelRole::forward:
      return "forward";
    case KernelRole::backward_preprocess:
      return "backward_preprocess";
    case KernelRole::backward:
      return "backward";
    case KernelRole::backward_dq:
      return "backward_dq";
    case KernelRole::backward_convert_dq:
      return "backward_convert_dq";
    case KernelRole::backward_reduce_dkdv:
      return "backward_reduce_dkdv";
  }
  throw InternalError("unknown KernelRole");
}

const KernelDesc* KernelPlan::find(KernelRole role) const {
  for (const KernelDesc& kernel : kernels) {
    if (kernel.role == role) return &kernel;
  }
  return nullptr;
}

std::string score_mod_tag(const AttentionSpec& spec) {
  return fmt::format("{}{}", spec.softcap ? "_softcap" : "", spec.alibi ? "_alibi" : "");
}

std::string to_string(const Lowering& lowering) {
  std::string out = fmt::format("attention {{{}}}\n", to_string(lowering.spec));
  if (lowering.mask) {
    const MaskLowering& mask = *lowering.mask;
    std::string vectors;
    for (IntervalVector vector : mask.vectors) {
      vectors += fmt::format("{}{}", vectors.empty() ? "" : ",", name_of(vector));
    }
    std::string predicate;
    if (mask.element_predicate) {
      predicate = fmt::format(" predicate={} table_rows=[{}{}]", lowering.spec.mask.predicate,
                              mask.table_per_batch ? "b" : "1", mask.table_per_head ? ",h" : ",1");
    }
    out +=
        fmt::format("  mask_lowering {{causal={} window={} vectors=[{}] minmax={}{}}}\n",
                    mask.causal_by_index ? "index" : "none",
                    mask.window_by_index ? "index" : "none", vectors, mask.needs_minmax, predicate);
  }
  if (lowering.target) {
    const TargetInfo& target = *lowering.target;
    out += fmt::format("  target {{arch={} family={} max_dynamic_smem={}}}\n", name_of(target.arch),
                       name_of(target.family), target.max_dynamic_smem_bytes);
  }
  if (lowering.tiles) {
    const TileConfig& tiles = *lowering.tiles;
    out += fmt::format(
        "  tiles {{block_m={} block_n={} warps={} kv_stages={} q_in_registers={} "
        "smem_bytes={}{}}}\n",
        tiles.block_m, tiles.block_n, tiles.warps, tiles.kv_stages, tiles.q_in_registers,
        tiles.smem_bytes, tiles.warpgroup ? " layout=warpgroup" : "");
  }
  if (lowering.backward_tiles) {
    const BackwardTiles& t = *lowering.backward_tiles;
    out += fmt::format(
        "  backward_tiles {{layout={} block_m={} block_n={} warps={} dim_warps={} smem_bytes={} "
        "dq_block_m={} dq_block_n={} dq_warps={} dq_smem_bytes={}}}\n",
        name_of(t.layout), t.block_m, t.block_n, t.warps, t.dim_warps, t.smem_bytes, t.dq_block_m,
        t.dq_block_n, t.dq_warps, t.dq_smem_bytes);
  }
  if (lowering.plan) {
    for (const KernelDesc& kernel : lowering.plan->kernels) {
      out += fmt::format(
          "  kernel @{} {{role={} template=\"{}\" threads={} dynamic_smem={}{} grid={}}}\n",
          kernel.name, name_of(kernel.role), kernel.template_header, kernel.threads,
          kernel.dynamic_smem_bytes,
          (kernel.block_m ? fmt::format(" block_m={}", kernel.block_m) : std::string()) +
              (kernel.block_n ? fmt::format(" block_n={}", kernel.block_n) : std::string()) +
              (kernel.key_rows ? std::string(" key_rows") : std::string()) +
              (kernel.role == KernelRole::cta_order
                   ? fmt::format(" orders={}", name_of(kernel.orders))
                   : std::string()),
          kernel.grid);
    }
  }
  return out;
}

}  // namespace attnjit
