// Emitters for the forward kernel, the FlashMask min/max kernel and the reference kernel.
#include "compiler/codegen/emit.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ranges>

#include "attnjit/error.hpp"
#include "compiler/codegen/writer.hpp"

namespace attnjit {
namespace {

std::string_view element_type(DType dtype) {
  return dtype == DType::bf16 ? "attnjit::bf16" : "attnjit::fp16";
}

// Column of `vector` in startend_row_indices, or -1.
int column_of(const MaskLowering& mask, IntervalVector vector) {
  for (std::size_t i = 0; i < mask.vectors.size(); ++i) {
    if (mask.vectors[i] == vector) return static_cast<int>(i);
  }
  return -1;
}

void emit_header(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel) {
  w.line("// attnjit generated kernel: {} ({} family)", name_of(kernel.role),
         name_of(ir.target->family));
  w.line("// spec:  {}", to_string(ir.spec));
  const TileConfig& t = *ir.tiles;
  w.line("// tiles: block_m={} block_n={} warps={} kv_stages={} q_in_registers={}", t.block_m,
         t.block_n, t.warps, t.kv_stages, t.q_in_registers);
  w.line("#include \"{}\"", kernel.template_header);
  w.blank();
}

std::string emit_forward(const Lowering& ir, const KernelDesc& kernel) {
  const AttentionSpec& spec = ir.spec;
  const TileConfig& tiles = *ir.tiles;
  const MaskLowering& mask = *ir.mask;
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  w.line("struct Config {{");
  w.indent();
  w.line("typedef {} Element;", element_type(spec.dtype));
  w.line("static constexpr int kHeadDimQK = {};", spec.head_dim_qk);
  w.line("static constexpr int kHeadDimV = {};", spec.head_dim_v);
  w.line("static constexpr int kBlockM = {};", tiles.block_m);
  w.line("static constexpr int kBlockN = {};", tiles.block_n);
  w.line("static constexpr int kWarps = {};", tiles.warps);
  w.line("static constexpr int kStages = {};", tiles.kv_stages);
  w.line("static constexpr bool kQInRegisters = {};", tiles.q_in_registers);
  w.line("static constexpr bool kReturnLse = {};", spec.return_lse);
  w.dedent();
  w.line("}};");
  w.blank();
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
  w.blank();
  w.line("static_assert(attnjit::ForwardSm80<Config, Mask>::kSmemBytes == {},", tiles.smem_bytes);
  w.line("              \"the plan and the template disagree on shared memory\");");
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  w.line("extern \"C\" __global__ void __launch_bounds__({})", kernel.threads);
  w.line("{}(const attnjit::FwdParams params) {{", kernel.name);
  w.indent();
  w.line("attnjit::forward_sm80<Config, Mask>(params);");
  w.dedent();
  w.line("}}");
  return w.str();
}

std::string emit_minmax(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line(
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const attnjit::MinMaxParams params) "
      "{{",
      kernel.threads, kernel.name);
  w.indent();
  w.line("attnjit::flashmask_minmax</*kColumns=*/{}, /*kBlockN=*/{}>(params);",
         ir.mask->vectors.size(), ir.tiles->block_n);
  w.dedent();
  w.line("}}");
  return w.str();
}

}  // namespace

std::string emit_kernel(const Lowering& ir, const KernelDesc& kernel) {
  internal_check(ir.mask && ir.target && ir.tiles && ir.plan, "emit_kernel needs a planned IR");
  switch (kernel.role) {
    case KernelRole::forward:
      return emit_forward(ir, kernel);
    case KernelRole::flashmask_minmax:
      return emit_minmax(ir, kernel);
  }
  throw InternalError("emit_kernel: unknown role");
}

ReferenceKernel emit_reference_kernel(const AttentionSpec& spec) {
  int mask_kind = 0;
  switch (spec.mask.kind) {
    case MaskKind::none:
      mask_kind = 0;
      break;
    case MaskKind::causal:
      mask_kind = 1;
      break;
    case MaskKind::sliding_window:
      mask_kind = 2;
      break;
    case MaskKind::flashmask:
      mask_kind = 3;
      break;
  }
  ReferenceKernel out;
  out.name = fmt::format(
      "attnjit_reference_{}_d{}_{}", name_of(spec.dtype), spec.head_dim_qk,
      mask_kind == 3
          ? fmt::format("flashmask{}_c{}", spec.mask.causal ? "_causal" : "", spec.mask.columns)
          : std::string(name_of(spec.mask.kind)));
  out.threads = 128;
  SourceWriter w;
  w.line("// attnjit reference kernel (fp32, unfused) for: {}", to_string(spec));
  w.line("#include \"attnjit/reference.cuh\"");
  w.blank();
  w.line(
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const attnjit::FwdParams params) {{",
      out.threads, out.name);
  w.indent();
  w.line("attnjit::reference_attention<{}, /*kHeadDim=*/{}, /*kMask=*/{}, /*kFlashCausal=*/{},",
         element_type(spec.dtype), spec.head_dim_qk, mask_kind, spec.mask.causal);
  w.line("                             /*kColumns=*/{}, /*kLse=*/true>(params);",
         spec.mask.columns);
  w.dedent();
  w.line("}}");
  out.source = w.str();
  return out;
}

}  // namespace attnjit
