// plan_kernels: the kernels of the spec in launch order, each with its name and, from its
// registry row, its template, launch phases, computed arguments and scratch buffers.
#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"
#include "compiler/registry/kernel_registry.hpp"

namespace attnjit {
namespace {

// The mask's part of the kernel names, without the packed batch's.
std::string padded_mask_tag(const MaskSpec& mask) {
  if (mask.kind != MaskKind::flashmask) return std::string(name_of(mask.kind));
  return fmt::format("flashmask{}_c{}", mask.causal ? "_causal" : "", mask.columns);
}

std::string mask_tag(const AttentionSpec& spec) {
  if (spec.varlen == VarlenMode::separate) return "varlen_" + padded_mask_tag(spec.mask);
  if (spec.varlen == VarlenMode::shared) return "varlen_shared_" + padded_mask_tag(spec.mask);
  return padded_mask_tag(spec.mask);
}

// The part of the kernel names the spec decides: dtype (bf16_kve4m3 over an FP8 cache) and head
// dims (d192v128 where they differ), and for attention kernels the mask and the score modifiers.
std::string type_tag(const AttentionSpec& spec) {
  const std::string dtype =
      spec.kv_dtype ? fmt::format("{}_kv{}", name_of(spec.dtype), name_of(*spec.kv_dtype))
                    : std::string(name_of(spec.dtype));
  if (spec.head_dim_v != spec.head_dim_qk) {
    return fmt::format("{}_d{}v{}", dtype, spec.head_dim_qk, spec.head_dim_v);
  }
  return fmt::format("{}_d{}", dtype, spec.head_dim_qk);
}

std::string attention_name(const Lowering& in, KernelRole role) {
  const AttentionSpec& spec = in.spec;
  const std::string mask = mask_tag(spec) + score_mod_tag(spec);
  switch (role) {
    case KernelRole::forward:
      return fmt::format("attnjit_fwd_{}_{}{}{}", type_tag(spec), mask, spec.sinks ? "_sinks" : "",
                         spec.return_lse ? "_lse" : "");
    case KernelRole::backward:
      return fmt::format("attnjit_bwd_{}_{}{}", type_tag(spec), mask,
                         spec.deterministic ? "_deterministic" : "");
    case KernelRole::backward_dq:
      return fmt::format("attnjit_bwd_dq_{}_{}", type_tag(spec), mask);
    case KernelRole::decode:
      return fmt::format("attnjit_decode_{}_{}{}_{}{}", type_tag(spec), mask,
                         spec.sinks ? "_sinks" : "", name_of(spec.kv_cache),
                         spec.return_lse ? "_lse" : "");
    case KernelRole::prefill:
      return fmt::format("attnjit_prefill_{}_{}{}_{}{}", type_tag(spec), mask,
                         spec.sinks ? "_sinks" : "", name_of(spec.kv_cache),
                         spec.return_lse ? "_lse" : "");
    default:
      break;
  }
  throw InternalError("attention_name: not an attention kernel");
}

// Builds the kernel of `row` from its fields set so far: the row's template, the launch, the
// TMA maps and the buffers (appended to the plan's scratch, shared by name).
void add_kernel(KernelPlan& plan, const Lowering& in, const KernelRow& row, KernelDesc kernel) {
  kernel.row = std::string(row.id);
  kernel.template_header = std::string(row.header);
  kernel.family = row.family;
  kernel.params = row.params;
  kernel.dependent_launch =
      row.dependent_launch && (in.target->arch == Arch::sm_90 || in.target->arch == Arch::sm_90a);
  if (kernel.threads == 0) kernel.threads = row.threads;
  RowLaunch launch = row.launch(kernel, in);
  kernel.phases = std::move(launch.phases);
  kernel.scalars = std::move(launch.scalars);
  if (row.tensor_maps) kernel.tensor_maps = row.tensor_maps(kernel, in);
  for (const BufferNeed& need : row.buffers(kernel, in)) {
    auto same_name = [&](const ScratchBuffer& b) { return b.name == need.buffer.name; };
    auto found = std::ranges::find_if(plan.scratch, same_name);
    if (found == plan.scratch.end()) {
      plan.scratch.push_back(need.buffer);
      found = plan.scratch.end() - 1;
    }
    internal_check(*found == need.buffer, "kernels sharing a scratch buffer agree on its size");
    kernel.buffers.push_back({need.field, static_cast<int>(found - plan.scratch.begin())});
  }
  plan.kernels.push_back(std::move(kernel));
}

void add_utility(KernelPlan& plan, const Lowering& in, KernelRole role, std::string name,
                 KernelDesc kernel = {}) {
  kernel.role = role;
  kernel.name = std::move(name);
  add_kernel(plan, in, utility_row(role), std::move(kernel));
}

// The mask's preprocessing for every attention kernel: the min/max tables (one per key-block
// size), or a block classification per tile shape (the backward main kernel's with key rows
// for its S^T), then the CTA orders.
void add_mask_kernels(KernelPlan& plan, const Lowering& in) {
  const MaskLowering& mask = *in.mask;
  std::vector<int> minmax_sizes;
  for (const KernelTiles& tiles : in.tiles) {
    if (!mask.needs_minmax || std::ranges::count(minmax_sizes, tiles.block_n) > 0) continue;
    minmax_sizes.push_back(tiles.block_n);
    KernelDesc minmax;
    minmax.block_n = tiles.block_n;
    add_utility(
        plan, in, KernelRole::flashmask_minmax,
        fmt::format("attnjit_flashmask_minmax_c{}_bn{}", mask.vectors.size(), tiles.block_n),
        minmax);
  }
  for (const KernelTiles& tiles : in.tiles) {
    if (!mask.element_predicate) break;
    // The decode kernel reads a table of 16 new tokens x its key blocks, unless the predicate
    // reads h (it then classifies its blocks itself).
    if (tiles.role == KernelRole::decode && !mask.decode_table) continue;
    KernelDesc blocks;
    blocks.orders = tiles.role;
    blocks.block_m = tiles.block_m;
    blocks.block_n = tiles.block_n;
    blocks.key_rows = tiles.role == KernelRole::backward;
    add_utility(plan, in, KernelRole::predicate_blocks,
                fmt::format("attnjit_predicate_blocks_bm{}_bn{}{}", tiles.block_m, tiles.block_n,
                            blocks.key_rows ? "_key_rows" : ""),
                blocks);
  }
  for (const KernelTiles& tiles : in.tiles) {
    // Under a data-dependent mask the CTAs of each attention kernel are sorted by their
    // tiles before it runs (cta_order.cuh), but for a backward that orders its dQ reductions.
    if (!runs_in_cta_order(in, tiles.role)) continue;
    KernelDesc order;
    order.orders = tiles.role;
    order.block_m = tiles.block_m;
    order.block_n = tiles.block_n;
    add_utility(plan, in, KernelRole::cta_order,
                fmt::format("attnjit_cta_order_{}_{}_bm{}_bn{}", name_of(tiles.role),
                            mask_tag(in.spec), tiles.block_m, tiles.block_n),
                order);
  }
}

// Under varlen every kernel that reads the FlashMask vectors reads those varlen_intervals
// wrote (in the buffer its row declared).
void bind_varlen_intervals(KernelPlan& plan) {
  const auto& writer = std::ranges::find_if(
      plan.kernels, [](const KernelDesc& k) { return k.role == KernelRole::varlen_intervals; });
  internal_check(writer != plan.kernels.end() && writer->buffers.size() == 1,
                 "a varlen plan starts with varlen_intervals and its buffer");
  const BufferBinding binding = writer->buffers.front();
  for (KernelDesc& kernel : plan.kernels) {
    switch (kernel.role) {
      case KernelRole::flashmask_minmax:
      case KernelRole::cta_order:
      case KernelRole::forward:
      case KernelRole::backward:
      case KernelRole::backward_dq:
        kernel.buffers.push_back(binding);
        break;
      default:
        break;
    }
  }
}

void add_attention(KernelPlan& plan, const Lowering& in, KernelRole role) {
  const KernelTiles& tiles = in.tiles_of(role);
  KernelDesc kernel;
  kernel.role = role;
  kernel.name = attention_name(in, role);
  kernel.threads = tiles.threads();
  kernel.dynamic_smem_bytes = tiles.smem_bytes;
  kernel.block_m = tiles.block_m;
  kernel.block_n = tiles.block_n;
  add_kernel(plan, in, kernel_row(tiles.row), std::move(kernel));
}

// Preprocess, the sinks' gradient (sinks=true), main (dK, dV and the dQ product into the fp32
// accumulator), or main and dQ kernel when deterministic on a row that does not order its dQ
// reductions, then the dQ conversion (accumulator) and the GQA reduction of dK/dV (launched
// only when H != Hkv).
void add_backward(KernelPlan& plan, const Lowering& in) {
  const AttentionSpec& spec = in.spec;
  const std::string type = type_tag(spec);
  const bool dq_kernel = spec.deterministic && !orders_dq_reductions(in);
  add_utility(plan, in, KernelRole::backward_preprocess,
              fmt::format("attnjit_bwd_preprocess_{}{}", type, dq_kernel ? "" : "_zero_dq"));
  if (spec.sinks) add_utility(plan, in, KernelRole::backward_sinks, "attnjit_bwd_sinks");
  add_attention(plan, in, KernelRole::backward);
  if (dq_kernel) {
    add_attention(plan, in, KernelRole::backward_dq);
  } else {
    add_utility(plan, in, KernelRole::backward_convert_dq,
                fmt::format("attnjit_bwd_convert_dq_{}", type));
  }
  add_utility(plan, in, KernelRole::backward_reduce_dkdv,
              fmt::format("attnjit_bwd_reduce_dkdv_{}", type));
}

}  // namespace

Lowering plan_kernels(const Lowering& in) {
  internal_check(in.mask && in.target && !in.tiles.empty(), "plan_kernels runs after select_tiles");
  Lowering out = in;
  KernelPlan plan;
  if (in.mask->builds_varlen_vectors()) {
    add_utility(plan, in, KernelRole::varlen_intervals,
                fmt::format("attnjit_varlen_intervals_{}_c{}", padded_mask_tag(in.spec.mask),
                            in.mask->vectors.size()));
  }
  add_mask_kernels(plan, in);
  if (in.spec.kv_cache != KvCache::none) {
    // The append of new keys (launched only when appending), then either the prefill kernel
    // (where planned, for calls with many new tokens) or the decode kernel and the merge of its
    // key splits (launched only when it splits them): the launch runs one of them.
    add_utility(
        plan, in, KernelRole::kv_append,
        fmt::format("attnjit_kv_append_{}_{}", type_tag(in.spec), name_of(in.spec.kv_cache)));
    if (in.target->chooses(KernelRole::prefill)) add_attention(plan, in, KernelRole::prefill);
    add_attention(plan, in, KernelRole::decode);
    add_utility(plan, in, KernelRole::decode_combine,
                fmt::format("attnjit_decode_combine_{}{}{}", type_tag(in.spec),
                            in.spec.sinks ? "_sinks" : "", in.spec.return_lse ? "_lse" : ""));
  } else if (in.spec.direction == Direction::backward) {
    add_backward(plan, in);
  } else {
    add_attention(plan, in, KernelRole::forward);
  }
  if (in.mask->builds_varlen_vectors()) bind_varlen_intervals(plan);
  if (in.predicate) {
    const PredicateInfo used = info(*in.predicate);
    plan.predicate.scalar_count = used.scalar_count;
    plan.predicate.tensors = used.tensors;
  }
  out.plan = std::move(plan);
  return out;
}

}  // namespace attnjit
