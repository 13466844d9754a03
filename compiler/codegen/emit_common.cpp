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

}  // namespace

std::pair<int, int> table_tile(const Lowering& ir, const KernelDesc& kernel) {
  switch (kernel.role) {
    case KernelRole::forward:
      return {ir.tiles->block_m, ir.tiles->block_n};
    case KernelRole::backward:
      return {ir.backward_tiles->block_m, ir.backward_tiles->block_n};
    case KernelRole::backward_dq:
      return {ir.backward_tiles->dq_block_m, ir.backward_tiles->dq_block_n};
    case KernelRole::predicate_blocks:
    case KernelRole::cta_order:
      return {kernel.block_m, kernel.block_n};
    default:
      break;
  }
  throw InternalError("table_tile: not an attention kernel");
}

std::string_view element_type(DType dtype) {
  return dtype == DType::bf16 ? "attnjit::bf16" : "attnjit::fp16";
}

void emit_header(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel) {
  w.line("// attnjit generated kernel: {} ({} family)", name_of(kernel.role),
         name_of(kernel.family));
  w.line("// spec:  {}", to_string(ir.spec));
  if (ir.tiles) {
    const TileConfig& t = *ir.tiles;
    w.line("// tiles: block_m={} block_n={} warps={} kv_stages={} q_in_registers={}{}", t.block_m,
           t.block_n, t.warps, t.kv_stages, t.q_in_registers,
           t.warpgroup ? " layout=warpgroup" : "");
  }
  if (ir.backward_tiles) {
    const BackwardTiles& t = *ir.backward_tiles;
    w.line("// tiles: layout={} block_m={} block_n={} warps={} dim_warps={} dq: {}x{}, {} warps",
           name_of(t.layout), t.block_m, t.block_n, t.warps, t.dim_warps, t.dq_block_m,
           t.dq_block_n, t.dq_warps);
  }
  w.line("#include \"{}\"", kernel.template_header);
  w.blank();
}

void emit_predicate_visible(SourceWriter& w, const AttentionSpec& spec) {
  const Predicate predicate = parse_predicate(
      spec.mask.predicate, PredicateParseOptions{.allow_reserved_tensor_names = true});
  const PredicateInfo used = info(predicate);
  w.line("// mask={}: key k is visible to query q of (batch b, query head h) iff the",
         to_string(spec.mask));
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

void emit_mask_policy(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel) {
  const AttentionSpec& spec = ir.spec;
  const MaskLowering& mask = *ir.mask;
  if (mask.element_predicate) {
    const std::pair<int, int> tile = table_tile(ir, kernel);
    emit_predicate_visible(w, spec);
    w.line("typedef attnjit::PredicatePolicy<Visible, /*kTableBlockM=*/{}, /*kTableBlockN=*/{},",
           tile.first, tile.second);
    w.line("                                 /*kPerBatch=*/{}, /*kPerHead=*/{}>",
           mask.table_per_batch, mask.table_per_head);
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
  w.line("                            /*kUts=*/{}, /*kUte=*/{}>",
         column_of(mask, IntervalVector::uts), column_of(mask, IntervalVector::ute));
  w.line("    Mask;");
}

void emit_score_mod(SourceWriter& w, const AttentionSpec& spec) {
  if (!spec.softcap && !spec.alibi) return;
  w.line("// score modifiers: softcap={} alibi={}", spec.softcap, spec.alibi);
  w.line("typedef attnjit::ScoreMod</*kSoftcap=*/{}, /*kAlibi=*/{}> Score;", spec.softcap,
         spec.alibi);
  w.blank();
}

std::string_view score_mod_argument(const AttentionSpec& spec) {
  return spec.softcap || spec.alibi ? ", Score" : "";
}

void emit_smem_check(SourceWriter& w, std::string_view kernel_type, int smem_bytes) {
  w.line("static_assert({}::kSmemBytes == {},", kernel_type, smem_bytes);
  w.line("              \"the plan and the template disagree on shared memory\");");
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

std::string emit_mainloop(const Lowering& ir, const KernelDesc& kernel,
                          const std::vector<std::string>& config_lines,
                          std::string_view kernel_type, std::string_view params_type,
                          std::string_view body, int min_blocks_per_sm,
                          std::string_view extra_parameters) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  w.line("struct Config {{");
  w.indent();
  w.line("typedef {} Element;", element_type(ir.spec.dtype));
  for (const std::string& line : config_lines) w.line("{}", line);
  w.dedent();
  w.line("}};");
  w.blank();
  emit_mask_policy(w, ir, kernel);
  w.blank();
  emit_score_mod(w, ir.spec);
  emit_smem_check(w, kernel_type, kernel.dynamic_smem_bytes);
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  emit_entry(w, kernel, params_type, body, min_blocks_per_sm, extra_parameters);
  return w.str();
}

}  // namespace attnjit::codegen
