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

KernelDesc minmax_kernel(const AttentionSpec& spec, int block_n) {
  constexpr int kWarpsPerBlock = 4;  // one warp per key block
  KernelDesc minmax;
  minmax.role = KernelRole::flashmask_minmax;
  minmax.name = fmt::format("attnjit_flashmask_minmax_c{}_bn{}", spec.mask.columns, block_n);
  minmax.template_header = "attnjit/flashmask_minmax.cuh";
  minmax.threads = kWarpsPerBlock * 32;
  minmax.block_n = block_n;
  minmax.grid = fmt::format("(ceil(B*Hm*ceil(Sk/{})/{}), 1, 1)", block_n, kWarpsPerBlock);
  return minmax;
}

// One CTA per tile of block_m x block_n of every (batch row, head row) of the table; the
// element bits of partial tiles by key rows (key_rows) or query rows.
KernelDesc predicate_blocks_kernel(int block_m, int block_n, bool key_rows) {
  KernelDesc blocks;
  blocks.role = KernelRole::predicate_blocks;
  blocks.name = fmt::format("attnjit_predicate_blocks_bm{}_bn{}{}", block_m, block_n,
                            key_rows ? "_key_rows" : "");
  blocks.key_rows = key_rows;
  blocks.template_header = "attnjit/predicate_blocks.cuh";
  blocks.threads = 256;
  blocks.block_m = block_m;
  blocks.block_n = block_n;
  blocks.grid = fmt::format("(rows*ceil(Sq/{})*ceil(Sk/{}), 1, 1)", block_m, block_n);
  return blocks;
}

// Under a data-dependent mask (FlashMask vectors, predicate tables) the CTAs of the attention
// kernel `orders` (tiles block_m x block_n) are sorted by their tiles before it runs
// (cta_order.cuh): phase 0 one warp per CTA, phase 1 one CTA.
bool needs_cta_order(const Lowering& in) {
  return in.mask->needs_minmax || in.mask->element_predicate;
}

KernelDesc cta_order_kernel(const MaskSpec& mask, KernelRole orders, int block_m, int block_n) {
  KernelDesc order;
  order.role = KernelRole::cta_order;
  order.orders = orders;
  order.name = fmt::format("attnjit_cta_order_{}_{}_bm{}_bn{}", name_of(orders), mask_tag(mask),
                           block_m, block_n);
  order.template_header = "attnjit/cta_order.cuh";
  order.threads = 1024;
  order.block_m = block_m;
  order.block_n = block_n;
  order.grid = "(ceil(CTAs/32), 1, 1) then (1, 1, 1)";
  return order;
}

KernelDesc row_kernel(KernelRole role, std::string name, std::string grid) {
  constexpr int kRowsPerBlock = 4;  // bwd_rows.cuh: one warp per row
  KernelDesc kernel;
  kernel.role = role;
  kernel.name = std::move(name);
  kernel.template_header = "attnjit/bwd_rows.cuh";
  kernel.threads = kRowsPerBlock * 32;
  kernel.grid = std::move(grid);
  return kernel;
}

KernelPlan plan_forward(const Lowering& in) {
  const AttentionSpec& spec = in.spec;
  const TileConfig& tiles = *in.tiles;
  KernelPlan plan;
  if (in.mask->needs_minmax) plan.kernels.push_back(minmax_kernel(spec, tiles.block_n));
  if (in.mask->element_predicate) {
    plan.kernels.push_back(predicate_blocks_kernel(tiles.block_m, tiles.block_n, false));
  }
  if (needs_cta_order(in)) {
    plan.kernels.push_back(
        cta_order_kernel(spec.mask, KernelRole::forward, tiles.block_m, tiles.block_n));
  }
  KernelDesc forward;
  forward.role = KernelRole::forward;
  forward.name =
      fmt::format("attnjit_fwd_{}_d{}_{}{}{}", name_of(spec.dtype), spec.head_dim_qk,
                  mask_tag(spec.mask), score_mod_tag(spec), spec.return_lse ? "_lse" : "");
  forward.template_header = "attnjit/fwd_sm80.cuh";
  if (tiles.warpgroup) {
    forward.name += "_sm90a";
    forward.template_header = "attnjit/fwd_sm90a.cuh";
    forward.family = KernelFamily::sm90a;
  }
  forward.threads = tiles.threads();
  forward.dynamic_smem_bytes = tiles.smem_bytes;
  forward.grid = fmt::format("(2*ceil(Sq/{}), ceil(H/2), B)", tiles.block_m);
  plan.kernels.push_back(forward);
  return plan;
}

// The min/max kernel(s) or block classification kernel(s), the CTA orders, preprocess, main (dK, dV
// and atomic dQ), or main + dQ kernel when deterministic, then the dQ conversion (atomic mode) and
// the GQA reduction of dK/dV (launched only when H != Hkv).
KernelPlan plan_backward(const Lowering& in) {
  const AttentionSpec& spec = in.spec;
  const BackwardTiles& tiles = *in.backward_tiles;
  const std::string type = fmt::format("{}_d{}", name_of(spec.dtype), spec.head_dim_qk);
  KernelPlan plan;
  if (in.mask->needs_minmax) {
    plan.kernels.push_back(minmax_kernel(spec, tiles.block_n));
    if (spec.deterministic && tiles.dq_block_n != tiles.block_n) {
      plan.kernels.push_back(minmax_kernel(spec, tiles.dq_block_n));
    }
  }
  if (in.mask->element_predicate) {
    // The main kernel reads S^T (key rows), the dQ kernel S (query rows): separate tables.
    plan.kernels.push_back(predicate_blocks_kernel(tiles.block_m, tiles.block_n, true));
    if (spec.deterministic) {
      plan.kernels.push_back(predicate_blocks_kernel(tiles.dq_block_m, tiles.dq_block_n, false));
    }
  }
  if (needs_cta_order(in)) {
    plan.kernels.push_back(
        cta_order_kernel(spec.mask, KernelRole::backward, tiles.block_m, tiles.block_n));
    if (spec.deterministic) {
      plan.kernels.push_back(
          cta_order_kernel(spec.mask, KernelRole::backward_dq, tiles.dq_block_m, tiles.dq_block_n));
    }
  }
  plan.kernels.push_back(row_kernel(
      KernelRole::backward_preprocess,
      fmt::format("attnjit_bwd_preprocess_{}{}", type, spec.deterministic ? "" : "_zero_dq"),
      "(ceil(Sq/4), H, B)"));
  KernelDesc main;
  main.role = KernelRole::backward;
  main.name = fmt::format("attnjit_bwd_{}_{}{}{}", type, mask_tag(spec.mask), score_mod_tag(spec),
                          spec.deterministic ? "_deterministic" : "");
  switch (tiles.layout) {
    case BackwardLayout::key_slabs:
      main.template_header = "attnjit/bwd_sm80.cuh";
      break;
    case BackwardLayout::warp_grid:
      main.template_header = "attnjit/bwd_grid_sm80.cuh";
      break;
    case BackwardLayout::warpgroup:
      main.template_header = "attnjit/bwd_wgmma_sm90.cuh";
      main.family = KernelFamily::sm90a;
      break;
  }
  main.threads = tiles.warps * 32;
  main.dynamic_smem_bytes = tiles.smem_bytes;
  main.grid = fmt::format("(2*ceil(Sk/{}), ceil(H/2), B)", tiles.block_n);
  plan.kernels.push_back(main);
  if (spec.deterministic) {
    KernelDesc dq;
    dq.role = KernelRole::backward_dq;
    dq.name = fmt::format("attnjit_bwd_dq_{}_{}{}", type, mask_tag(spec.mask), score_mod_tag(spec));
    dq.template_header = "attnjit/bwd_dq_sm80.cuh";
    dq.threads = tiles.dq_warps * 32;
    dq.dynamic_smem_bytes = tiles.dq_smem_bytes;
    dq.grid = fmt::format("(2*ceil(Sq/{}), ceil(H/2), B)", tiles.dq_block_m);
    plan.kernels.push_back(dq);
  } else {
    plan.kernels.push_back(row_kernel(KernelRole::backward_convert_dq,
                                      fmt::format("attnjit_bwd_convert_dq_{}", type),
                                      "(ceil(Sq/4), H, B)"));
  }
  plan.kernels.push_back(row_kernel(KernelRole::backward_reduce_dkdv,
                                    fmt::format("attnjit_bwd_reduce_dkdv_{}", type),
                                    "(ceil(Sk/4), Hkv, B) when H != Hkv"));
  return plan;
}

}  // namespace

Lowering plan_kernels(const Lowering& in) {
  internal_check(in.mask && in.target && (in.tiles || in.backward_tiles),
                 "plan_kernels runs after select_tiles");
  Lowering out = in;
  out.plan = in.spec.direction == Direction::backward ? plan_backward(in) : plan_forward(in);
  return out;
}

}  // namespace attnjit
