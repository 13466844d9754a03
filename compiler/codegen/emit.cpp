// Emitters: an attention kernel binds its registry row's Config constants, the mask policy
// and the score modifiers and calls the row's mainloop; the utility kernels instantiate
// their templates with the plan's constants.
#include "compiler/codegen/emit.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit_common.hpp"
#include "compiler/registry/kernel_registry.hpp"

namespace attnjit {
namespace {

using namespace codegen;

// `static constexpr ...` lines of the Config an attention template reads.
std::vector<std::string> config_lines(const KernelRow& row, const KernelTiles& tiles,
                                      const Lowering& ir) {
  const AttentionSpec& spec = ir.spec;
  std::vector<std::string> lines;
  const auto constant = [&](std::string_view type, std::string_view name, auto value) {
    lines.push_back(fmt::format("static constexpr {} {} = {};", type, name, value));
  };
  for (ConfigField field : row.config) {
    switch (field) {
      case ConfigField::head_dim:
        constant("int", "kHeadDim", spec.head_dim_qk);
        break;
      case ConfigField::head_dims_qk_v:
        constant("int", "kHeadDimQK", spec.head_dim_qk);
        constant("int", "kHeadDimV", spec.head_dim_v);
        break;
      case ConfigField::block_m:
        constant("int", "kBlockM", tiles.block_m);
        break;
      case ConfigField::block_n:
        constant("int", "kBlockN", tiles.block_n);
        break;
      case ConfigField::warps:
        constant("int", "kWarps", tiles.warps);
        break;
      case ConfigField::dim_warps:
        constant("int", "kDimWarps", tiles.dim_warps);
        break;
      case ConfigField::kv_stages:
        constant("int", "kStages", tiles.kv_stages);
        break;
      case ConfigField::q_in_registers:
        constant("bool", "kQInRegisters", tiles.q_in_registers);
        break;
      case ConfigField::return_lse:
        constant("bool", "kReturnLse", spec.return_lse);
        break;
      case ConfigField::atomic_dq:
        constant("bool", "kAtomicDq", !spec.deterministic);
        break;
      case ConfigField::ping_pong:
        // Up to head dim 128 a warpgroup's softmax is long enough to hide behind the other's
        // products (FA3's rule).
        constant("bool", "kPingPong", spec.head_dim_qk <= 128);
        break;
      case ConfigField::register_split: {
        // Each thread starts with 65536 registers over the threads of the CTAs an SM holds,
        // in multiples of 8 (168 of one CTA of 384 threads, 128 of one of 512 or of two of
        // 256); the producer warpgroup keeps what its row says and the consumer warpgroups
        // take the rest, in multiples of 8: together they must not exceed what they started
        // with, else setmaxnreg.inc waits forever.
        const int producer = row.producer_registers(tiles, ir.spec, *ir.mask);
        const int warpgroups = tiles.warps / 4;
        const int ctas = std::max(1, min_blocks_per_sm(row, tiles));
        const int start = std::min(65536 / (ctas * tiles.threads()) / 8 * 8, 255 / 8 * 8);
        constant("int", "kProducerRegisters", producer);
        constant("int", "kConsumerRegisters",
                 (warpgroups * start - producer) / (warpgroups - 1) / 8 * 8);
        break;
      }
      case ConfigField::persistent:
        constant("bool", "kPersistent", row.persistent(tiles, ir.spec, *ir.mask));
        break;
      case ConfigField::kv_cache:
        constant("int", "kKvCache",
                 spec.kv_cache == KvCache::paged ? "attnjit::kKvPaged" : "attnjit::kKvContiguous");
        break;
      case ConfigField::kv_element:
        lines.push_back(
            fmt::format("typedef {} KvElement;", element_type(spec.kv_dtype.value_or(spec.dtype))));
        break;
      case ConfigField::packed:
        constant("bool", "kPacked", spec.varlen != VarlenMode::off);
        break;
    }
  }
  return lines;
}

// The member of a TMA kernel's template that names the box of `tensor`'s map (tma.cuh's TmaBox).
std::string_view box_member(MapTensor tensor) {
  switch (tensor) {
    case MapTensor::q:
      return "kQBox";
    case MapTensor::k:
      return "kKBox";
    case MapTensor::v:
      return "kVBox";
    case MapTensor::o:
      return "kOBox";
    case MapTensor::d_o:
      return "kDoBox";
    case MapTensor::dq_accum:
      return "kDqAccumBox";
    case MapTensor::d_k:
      return "kDkBox";
    case MapTensor::d_v:
      return "kDvBox";
    case MapTensor::dk_sum:
      return "kDkSumBox";
    case MapTensor::dv_sum:
      return "kDvSumBox";
  }
  throw InternalError("unknown MapTensor");
}

// The Config struct an attention template takes: the element type and the row's fields.
void emit_config(SourceWriter& w, const KernelRow& row, const KernelTiles& tiles,
                 const Lowering& ir) {
  w.line("struct Config {{");
  w.indent();
  w.line("typedef {} Element;", element_type(ir.spec.dtype));
  for (const std::string& line : config_lines(row, tiles, ir)) w.line("{}", line);
  w.dedent();
  w.line("}};");
  w.blank();
}

// An attention kernel's translation unit: the header with the row's defines, the row's prelude,
// `struct Config`, the mask policy, the score modifiers, checks that the template's shared
// memory is the planned kernel.dynamic_smem_bytes and its TMA boxes the planned ones, and the
// entry calling the row's mainloop (with the row's tensor maps where it copies by TMA).
std::string emit_attention(const Lowering& ir, const KernelDesc& kernel) {
  const KernelRow& row = kernel_row(kernel.row);
  const KernelTiles& tiles = ir.tiles_of(kernel.role);
  SourceWriter w;
  emit_header(w, ir, kernel,
              row.header_defines ? row.header_defines(tiles, ir.spec) : std::vector<std::string>{});
  if (row.prelude) w.text(row.prelude(tiles, ir.spec));
  w.line("namespace {{");
  w.blank();
  emit_config(w, row, tiles, ir);
  emit_mask_policy(w, ir, kernel);
  w.blank();
  emit_score_mod(w, ir.spec, kernel.role);
  w.line("static_assert(attnjit::{}<Config, Mask>::kSmemBytes == {},", row.kernel_struct,
         kernel.dynamic_smem_bytes);
  w.line("              \"the plan and the template disagree on shared memory\");");
  for (const TensorMapBox& box : kernel.tensor_maps) {
    w.line("static_assert(attnjit::{}<Config, Mask>::{} == attnjit::TmaBox{{{}, {}, {}}},",
           row.kernel_struct, box_member(box.tensor), box.rows, box.cols, box.swizzle_bytes);
    w.line("              \"the plan and the template disagree on the {} box\");",
           name_of(box.tensor));
  }
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  // With TMA maps both parameters are __grid_constant__: the copies take their addresses.
  const bool maps = kernel.params == ParamBlock::attention_tma;
  emit_entry(
      w, kernel, params_type(ir, kernel),
      fmt::format("attnjit::{}<Config, Mask{}>({});", row.body,
                  score_mod_argument(ir.spec, kernel.role), maps ? "params, maps" : "params"),
      min_blocks_per_sm(row, tiles),
      maps ? fmt::format("const __grid_constant__ attnjit::{} maps", row.tensor_maps_type) : "");
  return w.str();
}

// The VarlenMask enumerator (varlen_intervals.cuh) of the rows a varlen spec's mask lets each
// key see in its sequence (a FlashMask's vectors hide more of them).
std::string_view varlen_mask_name(const MaskSpec& mask) {
  switch (mask.kind) {
    case MaskKind::none:
      return "None";
    case MaskKind::causal:
      return "Causal";
    case MaskKind::sliding_window:
      return "Window";
    case MaskKind::flashmask:
      return mask.causal ? "Causal" : "None";
    case MaskKind::predicate:
      break;
  }
  throw InternalError("varlen: predicates build no vectors");
}

// The packed batch's vectors from cu_seqlens and the user's vectors, in the columns of the
// attention kernels' Mask (varlen_intervals.cuh).
std::string emit_varlen_intervals(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_mask_policy(w, ir, kernel);
  w.blank();
  const int user_columns = ir.spec.mask.kind == MaskKind::flashmask ? ir.spec.mask.columns : 0;
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::varlen_intervals<attnjit::kVarlen{}, /*kUserColumns=*/{}, "
                         "Mask>(params);",
                         varlen_mask_name(ir.spec.mask), user_columns));
  return w.str();
}

std::string emit_minmax(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::flashmask_minmax</*kColumns=*/{}, /*kBlockN=*/{}>(params);",
                         ir.mask->vectors.size(), kernel.block_n));
  return w.str();
}

std::string emit_predicate_blocks(const Lowering& ir, const KernelDesc& kernel) {
  internal_check(ir.predicate.has_value(), "a predicate mask was parsed by validate");
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  emit_predicate_visible(w, ir.spec.mask, *ir.predicate);
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::predicate_blocks<Visible, /*kBlockM=*/{}, /*kBlockN=*/{}, "
                         "/*kPerBatch=*/{}, /*kPerHead=*/{}, /*kKeyRows=*/{}{}>(params);",
                         kernel.block_m, kernel.block_n, ir.mask->table_per_batch,
                         ir.mask->table_per_head, kernel.key_rows, predicate_flags(ir)));
  return w.str();
}

// The CTA order of the kernel `orders`, with that kernel's mask policy and tiles.
std::string emit_cta_order(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  emit_mask_policy(w, ir, kernel);
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::cta_order<Mask, /*kBlockM=*/{}, /*kBlockN=*/{}, "
                         "/*kKeyBlocks=*/{}>(params);",
                         kernel.block_m, kernel.block_n, kernel.orders == KernelRole::backward));
  return w.str();
}

// The backward's per-row kernels (row_kernels.cuh): element type and head dims (the dQ
// conversion's head_dim_qk only), for the preprocess whether it zeroes the dQ accumulator
// (dq_accumulated), for the GQA reduction whether the main kernel summed dK and dV per K/V head
// (dkdv_summed).
std::string emit_rows(const Lowering& ir, const KernelDesc& kernel) {
  const KernelRow& row = kernel_row(kernel.row);
  std::string arguments = fmt::format("{}, {}", element_type(ir.spec.dtype), ir.spec.head_dim_qk);
  if (kernel.role != KernelRole::backward_convert_dq) {
    arguments += fmt::format(", {}", ir.spec.head_dim_v);
  }
  if (kernel.role == KernelRole::backward_preprocess) {
    arguments += fmt::format(", /*kZeroDqAccum=*/{}", dq_accumulated(ir));
  }
  if (kernel.role == KernelRole::backward_reduce_dkdv && dkdv_summed(ir)) {
    arguments += ", /*kSummed=*/true";
  }
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::{}<{}>(params);", row.body, arguments));
  return w.str();
}

// The sinks' gradient: one block of the row's threads per query head (backward_sinks.cuh).
std::string emit_sinks(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::backward_sinks</*kThreads=*/{}>(params);", kernel.threads));
  return w.str();
}

// The decode kernel (decode.cuh): its Config, the mask's policy and the cache's layout as
// template arguments, the score modifiers' hook.
std::string emit_decode(const Lowering& ir, const KernelDesc& kernel) {
  const KernelRow& row = kernel_row(kernel.row);
  const KernelTiles& tiles = ir.tiles_of(kernel.role);
  const AttentionSpec& spec = ir.spec;
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  emit_config(w, row, tiles, ir);
  emit_mask_policy(w, ir, kernel);
  emit_score_mod(w, spec, kernel.role);
  const std::string arguments =
      fmt::format("Config, Mask, /*kPaged=*/{}{}", spec.kv_cache == KvCache::paged,
                  score_mod_argument(spec, kernel.role));
  w.line("static_assert(attnjit::{}<{}>::kSmemBytes == {},", row.kernel_struct, arguments,
         kernel.dynamic_smem_bytes);
  w.line("              \"the plan and the template disagree on shared memory\");");
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::{}<{}>(params);", row.body, arguments),
             min_blocks_per_sm(row, tiles));
  return w.str();
}

// The merge of the decode kernel's key splits (decode_combine.cuh).
std::string emit_decode_combine(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::decode_combine<{}, /*kHeadDimV=*/{}, /*kReturnLse=*/{}, "
                         "/*kSinks=*/{}>(params);",
                         element_type(ir.spec.dtype), ir.spec.head_dim_v, ir.spec.return_lse,
                         ir.spec.sinks));
  return w.str();
}

// The append of new keys and values to the cache (kv_append.cuh).
std::string emit_kv_append(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::kv_append</*kHeadDimQK=*/{}, /*kHeadDimV=*/{}, "
                         "/*kPaged=*/{}, /*kElementBytes=*/{}>(params);",
                         ir.spec.head_dim_qk, ir.spec.head_dim_v,
                         ir.spec.kv_cache == KvCache::paged, kv_element_size(ir.spec)));
  return w.str();
}

}  // namespace

std::string emit_kernel(const Lowering& ir, const KernelDesc& kernel) {
  internal_check(ir.mask && ir.target && !ir.tiles.empty() && ir.plan,
                 "emit_kernel needs a planned IR");
  switch (kernel.role) {
    case KernelRole::forward:
    case KernelRole::backward:
    case KernelRole::backward_dq:
    case KernelRole::prefill:
      return emit_attention(ir, kernel);
    case KernelRole::varlen_intervals:
      return emit_varlen_intervals(ir, kernel);
    case KernelRole::flashmask_minmax:
      return emit_minmax(ir, kernel);
    case KernelRole::predicate_blocks:
      return emit_predicate_blocks(ir, kernel);
    case KernelRole::cta_order:
      return emit_cta_order(ir, kernel);
    case KernelRole::backward_preprocess:
    case KernelRole::backward_convert_dq:
    case KernelRole::backward_reduce_dkdv:
      return emit_rows(ir, kernel);
    case KernelRole::backward_sinks:
      return emit_sinks(ir, kernel);
    case KernelRole::decode:
      return emit_decode(ir, kernel);
    case KernelRole::decode_combine:
      return emit_decode_combine(ir, kernel);
    case KernelRole::kv_append:
      return emit_kv_append(ir, kernel);
  }
  throw InternalError("emit_kernel: unknown role");
}

ReferenceKernel emit_reference_kernel(const AttentionSpec& spec) {
  const MaskKindInfo& mask = info_of(spec.mask.kind);
  ReferenceKernel out;
  out.name = fmt::format(
      "attnjit_reference_{}_d{}{}_{}{}{}", name_of(spec.dtype), spec.head_dim_qk,
      spec.head_dim_v != spec.head_dim_qk ? fmt::format("v{}", spec.head_dim_v) : "",
      mask.interval_vectors
          ? fmt::format("flashmask{}_c{}", spec.mask.causal ? "_causal" : "", spec.mask.columns)
          : std::string(mask.name),
      score_mod_tag(spec), spec.sinks ? "_sinks" : "");
  out.threads = 128;
  SourceWriter w;
  w.line("// attnjit reference kernel (fp32, unfused) for: {}", to_string(spec));
  w.line("#include \"attnjit/common/reference.cuh\"");
  w.blank();
  if (mask.predicate) {
    const Predicate predicate = parse_predicate(
        spec.mask.predicate, PredicateParseOptions{.allow_reserved_tensor_names = true});
    const PredicateInfo used = info(predicate);
    out.predicate = {used.scalar_count, used.tensors};
    emit_predicate_visible(w, spec.mask, predicate);
    w.blank();
  }
  KernelDesc entry;
  entry.name = out.name;
  entry.threads = out.threads;
  emit_entry(w, entry, "attnjit::FwdParams",
             fmt::format("attnjit::reference_attention<{}, /*kHeadDimQK=*/{}, /*kHeadDimV=*/{}, "
                         "/*kMask=*/{}, /*kFlashCausal=*/{}, /*kColumns=*/{}, /*kLse=*/true, "
                         "/*kSinks=*/{}, /*kSoftcap=*/{}, /*kAlibi=*/{}{}>(params);",
                         element_type(spec.dtype), spec.head_dim_qk, spec.head_dim_v,
                         mask.reference_mask, spec.mask.causal, spec.mask.columns, spec.sinks,
                         spec.softcap, spec.alibi, mask.predicate ? ", Visible" : ""));
  out.source = w.str();
  return out;
}

}  // namespace attnjit
