// Names and the text printer of the lowering IR.
#include "compiler/ir/lowering.hpp"

#include <fmt/format.h>

#include <algorithm>

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
    case IntervalVector::visible_begin:
      return "VISIBLE_BEGIN";
    case IntervalVector::visible_end:
      return "VISIBLE_END";
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

std::string_view name_of(ParamBlock block) {
  switch (block) {
    case ParamBlock::attention:
      return "attention";
    case ParamBlock::attention_tma:
      return "attention_tma";
    case ParamBlock::minmax:
      return "minmax";
    case ParamBlock::predicate_blocks:
      return "predicate_blocks";
    case ParamBlock::cta_order:
      return "cta_order";
  }
  throw InternalError("unknown ParamBlock");
}

std::string_view name_of(MapTensor tensor) {
  switch (tensor) {
    case MapTensor::q:
      return "q";
    case MapTensor::k:
      return "k";
    case MapTensor::v:
      return "v";
    case MapTensor::o:
      return "o";
    case MapTensor::d_o:
      return "d_o";
    case MapTensor::dq_accum:
      return "dq_accum";
    case MapTensor::d_k:
      return "d_k";
    case MapTensor::d_v:
      return "d_v";
    case MapTensor::dk_sum:
      return "dk_sum";
    case MapTensor::dv_sum:
      return "dv_sum";
  }
  throw InternalError("unknown MapTensor");
}

std::string to_string(const TensorMapBox& box) {
  return fmt::format("{}={}x{}/{}B{}", name_of(box.tensor), box.rows, box.cols, box.swizzle_bytes,
                     box.page_rows ? "/page" : "");
}

std::string_view name_of(ParamField field) {
  switch (field) {
    case ParamField::minmax:
      return "minmax";
    case ParamField::minmax_dq:
      return "minmax_dq";
    case ParamField::predicate_bits:
      return "predicate_bits";
    case ParamField::predicate_bits_dq:
      return "predicate_bits_dq";
    case ParamField::cta_order:
      return "cta_order";
    case ParamField::work_counter:
      return "work_counter";
    case ParamField::row_dot:
      return "row_dot";
    case ParamField::lse_log2:
      return "lse_log2";
    case ParamField::dq_accum:
      return "dq_accum";
    case ParamField::dq_turns:
      return "dq_turns";
    case ParamField::dk_partial:
      return "dk_partial";
    case ParamField::dv_partial:
      return "dv_partial";
    case ParamField::table_out:
      return "table";
    case ParamField::bits_out:
      return "bits";
    case ParamField::bits_used:
      return "bits_used";
    case ParamField::order_table:
      return "order_table";
    case ParamField::order_cost:
      return "cost";
    case ParamField::order_out:
      return "order";
    case ParamField::varlen_intervals:
      return "intervals";
    case ParamField::o_partial:
      return "o_partial";
    case ParamField::lse_partial:
      return "lse_partial";
  }
  throw InternalError("unknown ParamField");
}

std::string_view name_of(ParamScalar scalar) {
  switch (scalar) {
    case ParamScalar::num_key_blocks:
      return "num_key_blocks";
    case ParamScalar::table_batch:
      return "table_batch";
    case ParamScalar::table_heads:
      return "table_heads";
    case ParamScalar::blocks_m:
      return "blocks_m";
    case ParamScalar::blocks_n:
      return "blocks_n";
    case ParamScalar::bits_capacity:
      return "bits_capacity";
    case ParamScalar::grid_x:
      return "grid_x";
    case ParamScalar::grid_y:
      return "grid_y";
    case ParamScalar::grid_z:
      return "grid_z";
    case ParamScalar::max_cost:
      return "max_cost";
    case ParamScalar::group_pairs:
      return "group_pairs";
    case ParamScalar::phase:
      return "phase";
    case ParamScalar::num_splits:
      return "num_splits";
    case ParamScalar::head_group:
      return "head_group";
  }
  throw InternalError("unknown ParamScalar");
}

std::string_view name_of(KernelRole role) {
  switch (role) {
    case KernelRole::varlen_intervals:
      return "varlen_intervals";
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
    case KernelRole::backward_sinks:
      return "backward_sinks";
    case KernelRole::backward:
      return "backward";
    case KernelRole::backward_dq:
      return "backward_dq";
    case KernelRole::backward_convert_dq:
      return "backward_convert_dq";
    case KernelRole::backward_reduce_dkdv:
      return "backward_reduce_dkdv";
    case KernelRole::decode:
      return "decode";
    case KernelRole::decode_combine:
      return "decode_combine";
    case KernelRole::kv_append:
      return "kv_append";
    case KernelRole::prefill:
      return "prefill";
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

namespace {

std::string phase_text(const LaunchPhase& phase) {
  std::string scalars;
  for (const ScalarBinding& scalar : phase.scalars) {
    scalars += fmt::format(" {}={}", name_of(scalar.field), scalar.value.to_string());
  }
  return fmt::format("grid={} threads={}{}", phase.grid.to_string(), phase.threads, scalars);
}

std::string kernel_text(const KernelDesc& kernel, const KernelPlan& plan) {
  std::string out = fmt::format(
      "  kernel @{} {{role={} row={} family={} template=\"{}\" params={} threads={} "
      "dynamic_smem={}",
      kernel.name, name_of(kernel.role), kernel.row, name_of(kernel.family), kernel.template_header,
      name_of(kernel.params), kernel.threads, kernel.dynamic_smem_bytes);
  if (kernel.block_m) out += fmt::format(" block_m={}", kernel.block_m);
  if (kernel.block_n) out += fmt::format(" block_n={}", kernel.block_n);
  if (kernel.key_rows) out += " key_rows";
  if (kernel.dependent_launch) out += " dependent_launch";
  if (kernel.role == KernelRole::cta_order)
    out += fmt::format(" orders={}", name_of(kernel.orders));
  if (!kernel.tensor_maps.empty()) {
    std::string maps;
    for (const TensorMapBox& box : kernel.tensor_maps) {
      maps += fmt::format("{}{}", maps.empty() ? "" : " ", to_string(box));
    }
    out += fmt::format(" tensor_maps=[{}]", maps);
  }
  if (kernel.phases.size() == 1 && kernel.phases.front().threads == kernel.threads &&
      kernel.phases.front().scalars.empty()) {
    out += fmt::format(" grid={}", kernel.phases.front().grid.to_string());
  } else {
    for (std::size_t i = 0; i < kernel.phases.size(); ++i) {
      out += fmt::format(" phase{}=[{}]", i, phase_text(kernel.phases[i]));
    }
  }
  for (const ScalarBinding& scalar : kernel.scalars) {
    out += fmt::format(" {}={}", name_of(scalar.field), scalar.value.to_string());
  }
  for (const BufferBinding& buffer : kernel.buffers) {
    out += fmt::format(" {}=%{}", name_of(buffer.field), plan.scratch[buffer.buffer].name);
  }
  return out + "}\n";
}

}  // namespace

std::string to_string(const KernelTiles& t) {
  return fmt::format(
      "tiles @{} {{row={} block_m={} block_n={} warps={} dim_warps={} kv_stages={} "
      "q_in_registers={} smem_bytes={}}}",
      name_of(t.role), t.row, t.block_m, t.block_n, t.warps, t.dim_warps, t.kv_stages,
      t.q_in_registers, t.smem_bytes);
}

bool TargetInfo::chooses(KernelRole role) const {
  return std::ranges::any_of(families, [&](const FamilyChoice& c) { return c.role == role; });
}

KernelFamily TargetInfo::family_of(KernelRole role) const {
  for (const FamilyChoice& choice : families) {
    if (choice.role == role) return choice.family;
  }
  throw InternalError(fmt::format("target: no family chosen for {}", name_of(role)));
}

const KernelTiles& Lowering::tiles_of(KernelRole role) const {
  for (const KernelTiles& t : tiles) {
    if (t.role == role) return t;
  }
  throw InternalError(fmt::format("lowering: no tiles chosen for {}", name_of(role)));
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
      predicate = fmt::format(" predicate={} table_rows=[{}{}]{}", lowering.spec.mask.predicate,
                              mask.table_per_batch ? "b" : "1", mask.table_per_head ? ",h" : ",1",
                              mask.varlen ? " sequences=cu_seqlens" : "");
      if (mask.decode_table) predicate += " decode_table";
    }
    out += fmt::format("  mask_lowering {{causal={} window={} vectors=[{}]{} minmax={}{}}}\n",
                       mask.causal_by_index ? "index" : "none",
                       mask.window_by_index ? "index" : "none", vectors,
                       mask.builds_varlen_vectors() ? " from=cu_seqlens" : "", mask.needs_minmax, predicate);
  }
  if (lowering.target) {
    const TargetInfo& target = *lowering.target;
    std::string families;
    for (const FamilyChoice& choice : target.families) {
      families += fmt::format("{}{}:{}", families.empty() ? "" : ",", name_of(choice.role),
                              name_of(choice.family));
    }
    out += fmt::format("  target {{arch={} max_dynamic_smem={} families=[{}]}}\n",
                       name_of(target.arch), target.max_dynamic_smem_bytes, families);
  }
  for (const KernelTiles& t : lowering.tiles) out += fmt::format("  {}\n", to_string(t));
  if (lowering.plan) {
    const KernelPlan& plan = *lowering.plan;
    for (const ScratchBuffer& buffer : plan.scratch) {
      out += fmt::format("  scratch %{} {{bytes={}{}}}\n", buffer.name, buffer.bytes.to_string(),
                         buffer.zeroed ? " zeroed" : "");
    }
    for (const KernelDesc& kernel : plan.kernels) out += kernel_text(kernel, plan);
  }
  return out;
}

}  // namespace attnjit
