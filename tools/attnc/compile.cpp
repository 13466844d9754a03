// attnc compile: compile a spec through the kernel cache and report what was built.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "attnjit/jit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

void compile(const std::string& spec_text, const std::optional<std::string>& arch, bool json,
             bool print_after_all) {
  const attnjit::AttentionSpec spec = spec_for_emission(spec_text, arch);
  if (print_after_all) {
    attnjit::PipelineOptions options;
    options.after_pass = [](std::string_view pass, const attnjit::Lowering& ir, double ms) {
      fmt::print(stderr, "// -----// IR after {} ({:.3f} ms) //----- //\n{}\n", pass, ms,
                 attnjit::to_string(ir));
    };
    attnjit::lower(spec, options);
  }
  const attnjit::jit::Kernel kernel = attnjit::jit::compile(spec);
  const attnjit::jit::CompileInfo& info = kernel.info();
  int registers = 0, spill_bytes = 0, smem_bytes = 0;
  for (const auto& k : info.kernels) {
    registers = std::max(registers, k.registers);
    spill_bytes += k.spill_bytes;
    smem_bytes = std::max(smem_bytes, k.static_smem_bytes + k.dynamic_smem_bytes);
  }
  if (json) {
    nlohmann::json out;
    out["key"] = info.key;
    out["spec"] = info.spec_text;
    out["cache"] = attnjit::jit::name_of(info.cache);
    out["compile_ms"] = info.compile_ms;
    out["registers"] = registers;
    out["spill_bytes"] = spill_bytes;
    out["smem_bytes"] = smem_bytes;
    out["kernels"] = nlohmann::json::array();
    for (const auto& k : info.kernels) {
      out["kernels"].push_back({{"name", k.name},
                                {"role", k.role},
                                {"registers", k.registers},
                                {"spill_bytes", k.spill_bytes},
                                {"stack_bytes", k.stack_bytes},
                                {"static_smem_bytes", k.static_smem_bytes},
                                {"dynamic_smem_bytes", k.dynamic_smem_bytes},
                                {"threads", k.threads}});
    }
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print("key      {}\nspec     {}\ncache    {}\ncompile  {:.2f} ms\n", info.key,
             info.spec_text, attnjit::jit::name_of(info.cache), info.compile_ms);
  for (const auto& k : info.kernels) {
    fmt::print(
        "kernel   {} ({}): {} registers, {} spill bytes, {} stack bytes, {} B smem, {} threads\n",
        k.name, k.role, k.registers, k.spill_bytes, k.stack_bytes,
        k.static_smem_bytes + k.dynamic_smem_bytes, k.threads);
  }
}

}  // namespace

void add_compile(CLI::App& app) {
  auto* cmd = app.add_subcommand("compile", "Compile a spec through the kernel cache");
  static std::string spec_text;
  static std::optional<std::string> arch;
  static bool json = false, print_after_all = false;
  cmd->add_option("--spec", spec_text, "Attention spec")->required();
  cmd->add_option("--arch", arch, "Target: sm_80, sm_86, sm_89, sm_90, sm_90a");
  cmd->add_flag("--json", json, "Print one JSON object");
  cmd->add_flag("--print-after-all", print_after_all,
                "Print the IR after every pass, with its time, to stderr");
  cmd->callback([] { compile(spec_text, arch, json, print_after_all); });
}

}  // namespace attnc
