// Shared emitter pieces.
#include "compiler/codegen/emit_common.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ranges>

#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"

namespace attnjit::codegen {
namespace {

// Column of `vector` in startend_row_indices, or -1.
int column_of(const MaskLowering& mask, IntervalVector vector) {
  for (std::size_t i = 0; i < mask.vectors.size(); ++i) {
    if (mask.vectors[i] == vector) return static_cast<int>(i);
  }
  return -1;
}

// The sink joins the forward's softmax only; the backward's kernels read an LSE that has it.
bool takes_sinks(const AttentionSpec& spec, KernelRole role) {
  return spec.sinks &&
         (role == KernelRole::forward || role == KernelRole::decode || role == KernelRole::prefill);
}

}  // namespace

std::string_view element_type(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "attnjit::bf16";
    case DType::e4m3:
      return "attnjit::e4m3";
    case DType::fp16:
      break;
  }
  return "attnjit::fp16";
}

std::string params_type(const Lowering& ir, const KernelDesc& kernel) {
  const std::string_view attention =
      ir.spec.direction == Direction::forward ? "attnjit::FwdParams" : "attnjit::BwdParams";
  switch (kernel.params) {
    case ParamBlock::attention:
      return std::string(attention);
    case ParamBlock::attention_tma:
      return fmt::format("__grid_constant__ {}", attention);
    case ParamBlock::minmax:
      return "attnjit::MinMaxParams";
    case ParamBlock::predicate_blocks:
      return "attnjit::PredicateBlocksParams";
    case ParamBlock::cta_order:
      return fmt::format("attnjit::CtaOrderParams<{}>", attention);
  }
  throw InternalError("unknown ParamBlock");
}

void emit_header(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel,
                 const std::vector<std::string>& defines) {
  w.line("// attnjit generated kernel: {} ({} family, {})", name_of(kernel.role),
         name_of(kernel.family), kernel.row);
  w.line("// spec:  {}", to_string(ir.spec));
  for (const KernelTiles& t : ir.tiles) w.line("// {}", to_string(t));
  for (const std::string& define : defines) w.line("#define {}", define);
  w.line("#include \"{}\"", kernel.template_header);
  w.blank();
}

void emit_predicate_visible(SourceWriter& w, const MaskSpec& mask, const Predicate& predicate) {
  const PredicateInfo used = info(predicate);
  w.line("// mask={}: key k is visible to query q of (batch b, query head h) iff the",
         to_string(mask));
  w.line("// expression is true; tensor_at reads row b of a tensor, 0 outside its length.");
  w.line("struct Visible {{");
  w.indent();
  w.line(
      "static __device__ __forceinline__ bool visible(const attnjit::PredicateInputs& in, int b,");
  w.line("                                               int h, int q, int k) {{");
  w.indent();
  w.line("using namespace attnjit;");
  if (!used.tensors.empty()) {
    w.line("const auto tensor_at = [&](int slot, int index) {{");
    w.line("  return predicate_tensor_at(in, slot, b, index);");
    w.line("}};");
  }
  if (used.scalar_count > 0)
    w.line("const auto scalar_at = [&](int slot) {{ return in.scalars[slot]; }};");
  w.line("return {};", emit_cuda_expression(predicate));
  w.dedent();
  w.line("}}");
  w.dedent();
  w.line("}};");
}

std::string predicate_flags(const Lowering& ir) {
  if (ir.mask->varlen) return ", /*kVarlen=*/true";
  if (ir.spec.kv_cache != KvCache::none) return ", /*kVarlen=*/false, /*kKvCache=*/true";
  return "";
}

void emit_mask_policy(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel) {
  const AttentionSpec& spec = ir.spec;
  const MaskLowering& mask = *ir.mask;
  if (mask.element_predicate) {
    internal_check(ir.predicate.has_value(), "a predicate mask was parsed by validate");
    emit_predicate_visible(w, spec.mask, *ir.predicate);
    w.line("typedef attnjit::PredicatePolicy<Visible, /*kTableBlockM=*/{}, /*kTableBlockN=*/{},",
           kernel.block_m, kernel.block_n);
    w.line("                                 /*kPerBatch=*/{}, /*kPerHead=*/{}{}>",
           mask.table_per_batch, mask.table_per_head,
           kernel.role == KernelRole::decode && !mask.decode_table ? "" : predicate_flags(ir));
    w.line("    Mask;");
    return;
  }
  w.line(
      "// mask={}: causal by {}, window by {}, vectors [{}]", to_string(spec.mask),
      mask.causal_by_index ? "index" : "-", mask.window_by_index ? "index" : "-",
      fmt::join(mask.vectors | std::views::transform([](IntervalVector v) { return name_of(v); }),
                ","));
  w.line("typedef attnjit::MaskPolicy</*kCausal=*/{}, /*kWindow=*/{}, /*kLts=*/{}, /*kLte=*/{},",
         mask.causal_by_index, mask.window_by_index, column_of(mask, IntervalVector::lts),
         column_of(mask, IntervalVector::lte));
  const int visible_begin = column_of(mask, IntervalVector::visible_begin);
  const int visible_end = column_of(mask, IntervalVector::visible_end);
  if (visible_begin < 0 && visible_end < 0) {
    w.line("                            /*kUts=*/{}, /*kUte=*/{}>",
           column_of(mask, IntervalVector::uts), column_of(mask, IntervalVector::ute));
  } else {
    w.line("                            /*kUts=*/{}, /*kUte=*/{}, /*kVisibleBegin=*/{},",
           column_of(mask, IntervalVector::uts), column_of(mask, IntervalVector::ute),
           visible_begin);
    w.line("                            /*kVisibleEnd=*/{}>", visible_end);
  }
  w.line("    Mask;");
}

void emit_score_mod(SourceWriter& w, const AttentionSpec& spec, KernelRole role) {
  const bool sinks = takes_sinks(spec, role);
  if (!spec.softcap && !spec.alibi && !sinks) return;
  w.line("// score modifiers: softcap={} alibi={}{}", spec.softcap, spec.alibi,
         sinks ? " sinks=true" : "");
  w.line("typedef attnjit::ScoreMod</*kSoftcap=*/{}, /*kAlibi=*/{}{}> Score;", spec.softcap,
         spec.alibi, sinks ? ", /*kSinks=*/true" : "");
  w.blank();
}

std::string_view score_mod_argument(const AttentionSpec& spec, KernelRole role) {
  return spec.softcap || spec.alibi || takes_sinks(spec, role) ? ", Score" : "";
}

void emit_entry(SourceWriter& w, const KernelDesc& kernel, std::string_view params_type,
                std::string_view body, int min_blocks_per_sm, std::string_view extra_parameters) {
  if (min_blocks_per_sm > 0) {
    w.line("extern \"C\" __global__ void __launch_bounds__({}, {})", kernel.threads,
           min_blocks_per_sm);
  } else {
    w.line("extern \"C\" __global__ void __launch_bounds__({})", kernel.threads);
  }
  if (extra_parameters.empty()) {
    w.line("{}(const {} params) {{", kernel.name, params_type);
  } else {
    w.line("{}(const {} params, {}) {{", kernel.name, params_type, extra_parameters);
  }
  w.indent();
  w.line("{}", body);
  w.dedent();
  w.line("}}");
}

}  // namespace attnjit::codegen
