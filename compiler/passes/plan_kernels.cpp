// plan_kernels: the kernels of the spec, their names and launch shapes.
#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {
namespace {

std::string mask_tag(const MaskSpec& mask) {
  if (mask.kind != MaskKind::flashmask) return std::string(name_of(mask.kind));
  return fmt::format("flashmask{}_c{}", mask.causal ? "_causal" : "", mask.columns);
}

}  // namespace

Lowering plan_kernels(const Lowering& in) {
  internal_check(in.mask && in.target && in.tiles, "plan_kernels runs after select_tiles");
  const AttentionSpec& spec = in.spec;
  const TileConfig& tiles = *in.tiles;
  KernelPlan plan;
  if (in.mask->needs_minmax) {
    constexpr int kWarpsPerBlock = 4;  // one warp per key block
    KernelDesc minmax;
    minmax.role = KernelRole::flashmask_minmax;
    minmax.name =
        fmt::format("attnjit_flashmask_minmax_c{}_bn{}", spec.mask.columns, tiles.block_n);
    minmax.template_header = "attnjit/flashmask_minmax.cuh";
    minmax.threads = kWarpsPerBlock * 32;
    minmax.dynamic_smem_bytes = 0;
    minmax.grid = fmt::format("(ceil(B*Hm*ceil(Sk/{})/{}), 1, 1)", tiles.block_n, kWarpsPerBlock);
    plan.kernels.push_back(minmax);
  }
  KernelDesc forward;
  forward.role = KernelRole::forward;
  forward.name = fmt::format("attnjit_fwd_{}_d{}_{}{}", name_of(spec.dtype), spec.head_dim_qk,
                             mask_tag(spec.mask), spec.return_lse ? "_lse" : "");
  forward.template_header = "attnjit/fwd_sm80.cuh";
  forward.threads = tiles.threads();
  forward.dynamic_smem_bytes = tiles.smem_bytes;
  forward.grid = fmt::format("(ceil(Sq/{}), H, B)", tiles.block_m);
  plan.kernels.push_back(forward);
  Lowering out = in;
  out.plan = plan;
  return out;
}

}  // namespace attnjit
