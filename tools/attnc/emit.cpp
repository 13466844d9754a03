// attnc emit: the IR, the IR after every pass, the generated CUDA C++ (with --expand: with the
// embedded headers it includes expanded, the whole text NVRTC compiles) or the PTX of a spec.
#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "embedded.hpp"
#include "runtime/jit/nvrtc.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

using attnjit::Lowering;

void print_after_pass(std::FILE* out, std::string_view pass, const Lowering& ir, double ms) {
  fmt::print(out, "// -----// IR after {} ({:.3f} ms) //----- //\n{}\n", pass, ms,
             attnjit::to_string(ir));
}

void emit(const std::string& spec_text, const std::optional<std::string>& arch,
          const std::string& stage, bool print_after_all, bool expand) {
  if (expand && stage != "cuda") {
    throw attnjit::Error(
        fmt::format("--expand: given with --stage {}; accepted: --stage cuda", stage));
  }
  const attnjit::AttentionSpec spec = spec_for_emission(spec_text, arch);
  attnjit::PipelineOptions options;
  if (stage == "ir-after-all") {
    options.after_pass = [](std::string_view pass, const Lowering& ir, double ms) {
      print_after_pass(stdout, pass, ir, ms);
    };
  } else if (print_after_all) {
    options.after_pass = [](std::string_view pass, const Lowering& ir, double ms) {
      print_after_pass(stderr, pass, ir, ms);
    };
  }
  const Lowering ir = attnjit::lower(spec, options);
  if (stage == "ir") {
    fmt::print("{}", attnjit::to_string(ir));
    return;
  }
  if (stage == "ir-after-all") return;
  std::vector<attnjit::runtime::NvrtcHeader> headers;
  for (const auto& file : attnjit::templates::all()) headers.push_back({file.name, file.source});
  for (const attnjit::KernelDesc& kernel : ir.plan->kernels) {
    const std::string source = attnjit::emit_kernel(ir, kernel);
    if (stage == "cuda") {
      fmt::print("// ===== kernel @{} ({}) =====\n{}\n", kernel.name, name_of(kernel.role),
                 expand ? attnjit::templates::expand_includes(source) : source);
    } else {
      const attnjit::runtime::NvrtcOutput out = attnjit::runtime::nvrtc_compile(
          source, kernel.name + ".cu", headers, name_of(spec.target), {}, kernel.name);
      fmt::print("// ===== kernel @{} ({}) =====\n{}\n", kernel.name, name_of(kernel.role),
                 out.ptx);
    }
  }
}

}  // namespace

void add_emit(CLI::App& app) {
  auto* cmd = app.add_subcommand("emit", "Print the IR, the IR after every pass, CUDA or PTX");
  static std::string spec_text, stage;
  static std::optional<std::string> arch;
  static bool print_after_all = false, expand = false;
  cmd->add_option("--spec", spec_text, "Attention spec (SPEC below)")->required();
  cmd->add_option("--stage", stage, "What to print")
      ->required()
      ->check(CLI::IsMember({"ir", "ir-after-all", "cuda", "ptx"}));
  cmd->add_option("--arch", arch, arch_help());
  cmd->add_flag("--print-after-all", print_after_all,
                "Also print the IR after every pass, with its time, to stderr");
  cmd->add_flag("--expand", expand,
                "With --stage cuda: expand every included attnjit header, once each, into one "
                "source that compiles by itself");
  cmd->footer(spec_help());
  cmd->callback([] { emit(spec_text, arch, stage, print_after_all, expand); });
}

}  // namespace attnc
