// Canonical text and source of the mask utility kernels, and the names of the mask families.
#include "compiler/codegen/emit_mask_kernel.hpp"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "attnjit/error.hpp"
#include "compiler/codegen/writer.hpp"

namespace attnjit {
namespace {

constexpr std::array<std::pair<MaskFamily, std::string_view>, 10> kFamilyNames{{
    {MaskFamily::sliding_window, "sliding_window"},
    {MaskFamily::causal_document, "causal_document"},
    {MaskFamily::document, "document"},
    {MaskFamily::share_question, "share_question"},
    {MaskFamily::global_sliding_window, "global_sliding_window"},
    {MaskFamily::causal_blockwise, "causal_blockwise"},
    {MaskFamily::prefix_lm_causal, "prefix_lm_causal"},
    {MaskFamily::prefix_lm_document, "prefix_lm_document"},
    {MaskFamily::qk_sparse, "qk_sparse"},
    {MaskFamily::random_eviction, "random_eviction"},
}};

/// "build_<family>" or "check_intervals": the kernel's name in the canonical text, its entry
/// point (with an attnjit_ prefix) and its template function.
std::string kernel_word(const MaskKernelSpec& spec) {
  return spec.family ? fmt::format("build_{}", name_of(*spec.family)) : "check_intervals";
}

}  // namespace

std::string_view name_of(MaskFamily family) {
  for (const auto& [entry, name] : kFamilyNames) {
    if (entry == family) return name;
  }
  throw InternalError("MaskFamily without a name");
}

MaskFamily parse_mask_family(std::string_view text) {
  std::string accepted;
  for (const auto& [family, name] : kFamilyNames) {
    if (name == text) return family;
    accepted += accepted.empty() ? "" : ", ";
    accepted += name;
  }
  throw_field_error("family", text, accepted);
}

std::string to_string(const MaskKernelSpec& spec) {
  return fmt::format("mask_kernel={} target={}", kernel_word(spec), name_of(spec.target));
}

MaskKernelSource emit_mask_kernel(const MaskKernelSpec& spec) {
  const std::string word = kernel_word(spec);
  MaskKernelSource source;
  source.role = spec.family ? "mask_builder" : "interval_check";
  source.name = "attnjit_" + word;
  SourceWriter w;
  w.line("// attnjit generated kernel: {}", source.role);
  w.line("// {}", to_string(spec));
  w.line("#include \"attnjit/masks/{}.cuh\"", spec.family ? "mask_builders" : "interval_check");
  w.blank();
  w.line("extern \"C\" __global__ void __launch_bounds__({})", source.threads);
  w.line("{}(const attnjit::{} params) {{", source.name,
         spec.family ? "MaskBuildParams" : "IntervalCheckParams");
  w.indent();
  w.line("attnjit::{}(params);", word);
  w.dedent();
  w.line("}}");
  source.source = w.str();
  return source;
}

}  // namespace attnjit
