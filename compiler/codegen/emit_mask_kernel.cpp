// Canonical text and source of the mask utility kernels.
#include "compiler/codegen/emit_mask_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "compiler/codegen/writer.hpp"

namespace attnjit {
namespace {

/// "build_<family>" or "check_intervals": the kernel's name in the canonical text, its entry
/// point (with an attnjit_ prefix) and its template function.
std::string kernel_word(const MaskKernelSpec& spec) {
  const bool identifier = std::all_of(spec.family.begin(), spec.family.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
  internal_check(identifier, "emit_mask_kernel: a family name is an identifier");
  return spec.family.empty() ? "check_intervals" : fmt::format("build_{}", spec.family);
}

}  // namespace

std::string to_string(const MaskKernelSpec& spec) {
  return fmt::format("mask_kernel={} target={}", kernel_word(spec), name_of(spec.target));
}

MaskKernelSource emit_mask_kernel(const MaskKernelSpec& spec) {
  const std::string word = kernel_word(spec);
  const bool builder = !spec.family.empty();
  MaskKernelSource source;
  source.role = builder ? "mask_builder" : "interval_check";
  source.name = "attnjit_" + word;
  SourceWriter w;
  w.line("// attnjit generated kernel: {}", source.role);
  w.line("// {}", to_string(spec));
  w.line("#include \"attnjit/masks/{}.cuh\"", builder ? "mask_builders" : "interval_check");
  w.blank();
  w.line("extern \"C\" __global__ void __launch_bounds__({})", source.threads);
  w.line("{}(const attnjit::{} params) {{", source.name,
         builder ? "MaskBuildParams" : "IntervalCheckParams");
  w.indent();
  w.line("attnjit::{}(params);", word);
  w.dedent();
  w.line("}}");
  source.source = w.str();
  return source;
}

}  // namespace attnjit
