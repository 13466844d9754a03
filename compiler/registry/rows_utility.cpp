// The utility rows of the registry: the kernels around the attention kernels (the FlashMask
// min/max tables, a predicate's block classification, the CTA order, the backward's
// per-row kernels and its sink gradient). One row each, in every family's plans.
#include <algorithm>

#include "compiler/registry/rows.hpp"

namespace attnjit::registry {
namespace {

constexpr int kRowKernelThreads = 128;  // row_kernels.cuh: one warp per row, four rows per block

}  // namespace

KernelRow utility(std::string_view id, KernelRole role, std::string_view header, ParamBlock params,
                  int threads, decltype(KernelRow::launch) launch,
                  decltype(KernelRow::buffers) buffers) {
  KernelRow row;
  row.id = id;
  row.role = role;
  row.header = header;
  row.body = id;
  row.params = params;
  row.threads = threads;
  row.support.targets.assign(kAllArchs.begin(), kAllArchs.end());
  row.launch = launch;
  row.buffers = buffers;
  return row;
}

namespace {

// One thread per packed key of every mask head, and at least one block: the threads of the
// first head also check the sequence boundaries under ATTNJIT_DEBUG (B + 1 entries, read in a
// grid-stride loop).
RowLaunch varlen_intervals_launch(const KernelDesc& kernel, const Lowering&) {
  return single_phase(
      kernel, {ceil_div(LaunchExpr(Extent::seqlen_k) + 1, kernel.threads), Extent::mask_heads, 1});
}

// The vectors of every packed key of every mask head: int32 [Hm, total_k, C].
std::vector<BufferNeed> varlen_intervals_buffers(const KernelDesc&, const Lowering& ir) {
  const int columns = static_cast<int>(ir.mask->vectors.size());
  return {{ParamField::varlen_intervals,
           {"varlen_intervals", LaunchExpr(Extent::seqlen_k) * Extent::mask_heads * (columns * 4),
            false}}};
}

// One warp per key block of every (batch, mask head). Over a KV cache the launch runs the
// prefill kernel or the decode kernel: a table of key blocks that only one of them reads is
// built only when that one runs.
RowLaunch minmax_launch(const KernelDesc& kernel, const Lowering& ir) {
  const LaunchExpr key_blocks = ceil_div(Extent::seqlen_k, kernel.block_n);
  const LaunchExpr warps = LaunchExpr(Extent::batch) * Extent::mask_heads * key_blocks;
  LaunchExpr blocks = ceil_div(warps, kernel.threads / 32);
  const auto reads = [&](KernelRole role) {
    return std::ranges::any_of(ir.tiles, [&](const KernelTiles& tiles) {
      return tiles.role == role && tiles.block_n == kernel.block_n;
    });
  };
  const bool prefill = reads(KernelRole::prefill);
  if (prefill != reads(KernelRole::decode)) {
    blocks = only_where_run(blocks, prefill ? KernelRole::prefill : KernelRole::decode, ir);
  }
  RowLaunch launch = single_phase(kernel, {blocks, 1, 1});
  launch.scalars.push_back({ParamScalar::num_key_blocks, key_blocks});
  return launch;
}

std::vector<BufferNeed> minmax_buffers(const KernelDesc& kernel, const Lowering& ir) {
  return {{ParamField::table_out, minmax_table(kernel.block_n, ir)}};
}

// One CTA per tile of every (batch row, head row) of the table (predicate_tiles: none over a
// KV cache where the launch runs the decode kernel).
RowLaunch predicate_blocks_launch(const KernelDesc& kernel, const Lowering& ir) {
  const LaunchExpr table_batch = ir.mask->table_per_batch ? LaunchExpr(Extent::batch) : 1;
  const LaunchExpr table_heads = ir.mask->table_per_head ? LaunchExpr(Extent::heads) : 1;
  const LaunchExpr blocks_m = ceil_div(Extent::seqlen_q, kernel.block_m);
  const LaunchExpr blocks_n = ceil_div(Extent::seqlen_k, kernel.block_n);
  RowLaunch launch = single_phase(
      kernel, {predicate_tiles(kernel.orders, kernel.block_m, kernel.block_n, ir), 1, 1});
  launch.scalars = {
      {ParamScalar::table_batch, table_batch},
      {ParamScalar::table_heads, table_heads},
      {ParamScalar::blocks_m, blocks_m},
      {ParamScalar::blocks_n, blocks_n},
      {ParamScalar::bits_capacity,
       predicate_bits_capacity(kernel.orders, kernel.block_m, kernel.block_n, ir)},
  };
  return launch;
}

std::vector<BufferNeed> predicate_blocks_buffers(const KernelDesc& kernel, const Lowering& ir) {
  const int m = kernel.block_m;
  const int n = kernel.block_n;
  return {{ParamField::table_out, predicate_table(kernel.orders, m, n, ir)},
          {ParamField::bits_out, predicate_bits(kernel.orders, m, n, ir)},
          {ParamField::bits_used, predicate_bits_used(kernel.orders, m, n)}};
}

// The bytes of the operands that all CTAs of one head pair share (K and V in the forward, Q
// and dO in the backward): the sorted groups hold as many head pairs as fit in kGroupBytes
// of L2 (at least one), so that the CTAs running at once find their operands there.
constexpr std::int64_t kGroupBytes = 12 << 20;

// Phase 0: one warp per CTA of the ordered kernel, eight warps per block so that small grids
// still spread over the SMs, writes the costs; phase 1: one block per head pair and batch
// (those that start a group) sorts the group's costs.
RowLaunch cta_order_launch(const KernelDesc& kernel, const Lowering& ir) {
  constexpr int kCostWarps = 8;
  const LaunchGrid ordered = attention_grid(ir.tiles_of(kernel.orders), ir);
  const LaunchExpr ctas = ordered.x * ordered.y * ordered.z;
  RowLaunch launch;
  launch.phases = {
      {{ceil_div(ctas, kCostWarps), 1, 1}, kCostWarps * 32, {{ParamScalar::phase, 0}}},
      {{min(ctas, 1) * ordered.y, ordered.z, 1}, kernel.threads, {{ParamScalar::phase, 1}}},
  };
  const AttentionSpec& spec = ir.spec;
  const LaunchExpr shared_rows =
      kernel.orders == KernelRole::backward ? Extent::seqlen_q : Extent::seqlen_k;
  // Plus one byte, so that an empty sequence does not divide by zero.
  const LaunchExpr pair_bytes =
      shared_rows * (2 * (spec.head_dim_qk + spec.head_dim_v) * size_of(spec.dtype)) + 1;
  const LaunchExpr group_pairs = min(ordered.y, floor_div(kGroupBytes, pair_bytes) + 1);
  // Each tile the ordered CTA walks costs at most 5 (cta_order.cuh), plus 2 per CTA.
  const LaunchExpr walked = kernel.orders == KernelRole::backward
                                ? ceil_div(Extent::seqlen_q, kernel.block_m)
                                : ceil_div(Extent::seqlen_k, kernel.block_n);
  launch.scalars = {{ParamScalar::grid_x, ordered.x},
                    {ParamScalar::grid_y, ordered.y},
                    {ParamScalar::grid_z, ordered.z},
                    {ParamScalar::max_cost, 5 * walked + 2},
                    {ParamScalar::group_pairs, group_pairs}};
  // A head-grouping backward's CTAs are groups of query heads (cta_order.cuh's cta_cost).
  if (kernel.orders == KernelRole::backward && groups_heads(ir)) {
    launch.scalars.push_back({ParamScalar::head_group, Extent::head_group});
  }
  return launch;
}

std::vector<BufferNeed> cta_order_buffers(const KernelDesc& kernel, const Lowering& ir) {
  const KernelTiles& ordered = ir.tiles_of(kernel.orders);
  const ScratchBuffer table =
      ir.mask->element_predicate
          ? predicate_table(kernel.orders, ordered.block_m, ordered.block_n, ir)
          : minmax_table(ordered.block_n, ir);
  return {{ParamField::order_table, table},
          {ParamField::order_cost, cta_costs(kernel.orders, ir)},
          {ParamField::order_out, cta_order_buffer(kernel.orders, ir)}};
}

// One warp per query row of every (head, batch).
RowLaunch query_rows_launch(const KernelDesc& kernel, const Lowering&) {
  return single_phase(
      kernel, {ceil_div(Extent::seqlen_q, kernel.threads / 32), Extent::heads, Extent::batch});
}

std::vector<BufferNeed> preprocess_buffers(const KernelDesc&, const Lowering& ir) {
  std::vector<BufferNeed> needs{row_dot(ir), lse_log2(ir)};
  if (dq_accumulated(ir)) needs.push_back(dq_accum(ir));
  return needs;
}

// One block per query head: it sums the rows of every batch (backward_sinks.cuh).
RowLaunch sinks_launch(const KernelDesc& kernel, const Lowering&) {
  return single_phase(kernel, {Extent::heads, 1, 1});
}

std::vector<BufferNeed> sinks_buffers(const KernelDesc&, const Lowering& ir) {
  return {row_dot(ir), lse_log2(ir)};
}

std::vector<BufferNeed> convert_dq_buffers(const KernelDesc&, const Lowering& ir) {
  return {dq_accum(ir)};
}

// One warp per key row of every (KV head, batch), launched only where the main kernel leaves
// partials or sums (GQA, its CTAs not grouping the heads: dkdv_partials).
RowLaunch reduce_launch(const KernelDesc& kernel, const Lowering& ir) {
  return single_phase(kernel, {ceil_div(Extent::seqlen_k, kernel.threads / 32),
                               LaunchExpr(Extent::kv_heads) * dkdv_partials(ir), Extent::batch});
}

std::vector<BufferNeed> reduce_buffers(const KernelDesc&, const Lowering& ir) {
  return {dk_partial(ir), dv_partial(ir)};
}

}  // namespace

KernelRow varlen_intervals() {
  return utility("varlen_intervals", KernelRole::varlen_intervals,
                 "attnjit/masks/varlen_intervals.cuh", ParamBlock::attention, 256,
                 varlen_intervals_launch, varlen_intervals_buffers);
}

KernelRow flashmask_minmax() {
  return utility("flashmask_minmax", KernelRole::flashmask_minmax,
                 "attnjit/masks/flashmask_minmax.cuh", ParamBlock::minmax, 4 * 32, minmax_launch,
                 minmax_buffers);
}

KernelRow predicate_blocks() {
  return utility("predicate_blocks", KernelRole::predicate_blocks,
                 "attnjit/masks/predicate_blocks.cuh", ParamBlock::predicate_blocks, 256,
                 predicate_blocks_launch, predicate_blocks_buffers);
}

KernelRow cta_order() {
  return utility("cta_order", KernelRole::cta_order, "attnjit/masks/cta_order.cuh",
                 ParamBlock::cta_order, 1024, cta_order_launch, cta_order_buffers);
}

KernelRow backward_preprocess() {
  return utility("backward_preprocess", KernelRole::backward_preprocess,
                 "attnjit/common/backward_preprocess.cuh", ParamBlock::attention, kRowKernelThreads,
                 query_rows_launch, preprocess_buffers);
}

KernelRow backward_sinks() {
  return utility("backward_sinks", KernelRole::backward_sinks, "attnjit/common/backward_sinks.cuh",
                 ParamBlock::attention, 256, sinks_launch, sinks_buffers);
}

KernelRow backward_convert_dq() {
  return utility("backward_convert_dq", KernelRole::backward_convert_dq,
                 "attnjit/common/backward_convert_dq.cuh", ParamBlock::attention, kRowKernelThreads,
                 query_rows_launch, convert_dq_buffers);
}

KernelRow backward_reduce_dkdv() {
  return utility("backward_reduce_dkdv", KernelRole::backward_reduce_dkdv,
                 "attnjit/common/backward_reduce_dkdv.cuh", ParamBlock::attention,
                 kRowKernelThreads, reduce_launch, reduce_buffers);
}

}  // namespace attnjit::registry
