// attnc compile: compile a spec through the kernel cache and report what was built; with
// --ptx-out, also write the PTX of every kernel to a file and count its tensor-core, ldmatrix
// and cp.async instructions (what the no-GPU demo shows instead of the whole PTX).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <string_view>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

/// Instructions of a kernel's PTX that say which hardware paths it takes.
struct PtxCounts {
  int mma = 0;       ///< mma.sync (warp-level tensor-core MMAs)
  int wgmma = 0;     ///< wgmma.mma_async (warpgroup MMAs, sm_90a)
  int ldmatrix = 0;  ///< ldmatrix (shared memory to MMA fragments)
  int cp_async = 0;  ///< cp.async copies (not their commit/wait)
  int lines = 0;
};

PtxCounts count_instructions(std::string_view ptx) {
  PtxCounts counts;
  while (!ptx.empty()) {
    const std::size_t end = std::min(ptx.find('\n'), ptx.size());
    std::string_view line = ptx.substr(0, end);
    ptx.remove_prefix(std::min(end + 1, ptx.size()));
    ++counts.lines;
    line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
    if (!line.empty() && line.front() == '@') {  // a guard predicate, e.g. "@%p1 "
      line.remove_prefix(std::min(line.find_first_of(" \t"), line.size()));
      line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
    }
    if (line.starts_with("mma.sync")) {
      ++counts.mma;
    } else if (line.starts_with("wgmma.mma_async")) {
      ++counts.wgmma;
    } else if (line.starts_with("ldmatrix")) {
      ++counts.ldmatrix;
    } else if (line.starts_with("cp.async.") && !line.starts_with("cp.async.commit_group") &&
               !line.starts_with("cp.async.wait_")) {
      ++counts.cp_async;
    }
  }
  return counts;
}

/// Writes every kernel's PTX to `path` and prints each kernel's instruction counts.
void write_ptx(const attnjit::jit::Kernel& kernel, const std::string& path) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw_write_failure("--ptx-out", path, errno);
  const std::vector<std::string> ptx = kernel.ptx();
  const auto& reports = kernel.info().kernels;
  int lines = 0;
  for (std::size_t i = 0; i < ptx.size(); ++i) {
    const std::string& name = i < reports.size() ? reports[i].name : std::string("?");
    const std::string& role = i < reports.size() ? reports[i].role : std::string("?");
    out << "// ===== kernel @" << name << " (" << role << ") =====\n" << ptx[i] << "\n";
    const PtxCounts counts = count_instructions(ptx[i]);
    lines += counts.lines;
    fmt::print("ptx      {}: {} mma.sync, {} wgmma, {} ldmatrix, {} cp.async ({} lines)\n", name,
               counts.mma, counts.wgmma, counts.ldmatrix, counts.cp_async, counts.lines);
  }
  errno = 0;
  out.close();
  if (!out) throw_write_failure("--ptx-out", path, errno);
  fmt::print("ptx      {} kernels, {} lines, written to {}\n", ptx.size(), lines, path);
}

void compile(const std::string& spec_text, const std::optional<std::string>& arch, bool json,
             bool print_after_all, const std::string& ptx_out) {
  if (json && !ptx_out.empty()) {
    throw attnjit::Error(
        fmt::format("--ptx-out: given with --json; accepted: the text output "
                    "(leave out --json)"));
  }
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
  if (!ptx_out.empty()) write_ptx(kernel, ptx_out);
}

}  // namespace

void add_compile(CLI::App& app) {
  auto* cmd = app.add_subcommand("compile", "Compile a spec through the kernel cache");
  static std::string spec_text, ptx_out;
  static std::optional<std::string> arch;
  static bool json = false, print_after_all = false;
  cmd->add_option("--spec", spec_text, "Attention spec (SPEC below)")->required();
  cmd->add_option("--arch", arch, arch_help());
  cmd->add_flag("--json", json, "Print one JSON object");
  cmd->add_flag("--print-after-all", print_after_all,
                "Print the IR after every pass, with its time, to stderr");
  cmd->add_option("--ptx-out", ptx_out,
                  "Write every kernel's PTX to this file and print its count of mma.sync, "
                  "wgmma, ldmatrix and cp.async instructions (text output only)");
  cmd->footer(spec_help());
  cmd->callback([] { compile(spec_text, arch, json, print_after_all, ptx_out); });
}

}  // namespace attnc
