// Help texts shared by attnc's subcommands: the spec syntax with its keys (read from the spec
// parser's own key table, so that the help lists what parse_spec accepts), run's and bench's
// KV cache options, the --arch option, and the version report of --version and `attnc version`.
#include <fmt/format.h>

#include <algorithm>

#include "attnjit/attnjit.h"
#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/nvrtc.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

constexpr std::size_t kHelpWidth = 100;

// `text` broken at spaces into lines of at most kHelpWidth columns, each after `indent`
// columns (the first line's indent is already written).
std::string wrapped(std::string_view text, std::size_t indent) {
  std::string out;
  std::size_t column = indent;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
    if (column > indent && column + 1 + word.size() > kHelpWidth) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out;
}

}  // namespace

std::string spec_help() {
  const std::vector<attnjit::SpecKey> keys = attnjit::spec_keys();
  std::size_t width = 0;
  for (const attnjit::SpecKey& key : keys) width = std::max(width, key.name.size());
  std::string out =
      "SPEC is key=value words separated by spaces (docs/spec.md), e.g.\n"
      "  --spec \"dtype=bf16 head_dim=128 mask=causal\"\n"
      "  --spec \"dtype=fp16 head_dim=64 mask=flashmask(causal=false,columns=2) "
      "direction=backward\"\n"
      "Keys and their values:\n";
  for (const attnjit::SpecKey& key : keys) {
    out += fmt::format("  {:<{}}  {}\n", key.name, width, wrapped(key.accepted, width + 4));
  }
  return out;
}

std::string kv_cache_help() {
  return "\nWith kv_cache=contiguous|paged in the spec (decoding), q holds --seqlen-q new tokens "
         "per sequence\n(default 1), the last of its --kv-cache-len cached keys, in random caches "
         "of --kv-capacity keys\n(paged: pages of --page-size keys, shuffled in the block table). "
         "FlashMask vectors\n(--mask-data) are drawn over the cache's positions, a new token's "
         "row being its own key's\nindex. GB/s is reported too; run has no reference to --check "
         "against there, e.g.\n"
         "  attnc bench --spec \"dtype=bf16 head_dim=128 mask=causal kv_cache=paged\" --batch 8 "
         "--heads 32\n    --kv-heads 8 --kv-cache-len 8192 --page-size 16\n";
}

std::string arch_help() {
  return fmt::format(
      "Target: sm_80, sm_86, sm_89, sm_90, sm_90a (default: the spec's target, else the current "
      "GPU's, else {} when there is no GPU)",
      attnjit::name_of(kNoDeviceArch));
}

std::string version_report() {
  std::string out = fmt::format("attnjit      {}\n", attnjit_version());
  out += fmt::format("NVRTC        {}\n", attnjit::runtime::nvrtc_version());
  try {
    int version = 0;
    attnjit::runtime::check(attnjit::runtime::driver().cuDriverGetVersion(&version),
                            "cuDriverGetVersion");
    out += fmt::format("CUDA driver  {}.{}", version / 1000, version % 1000 / 10);
  } catch (const attnjit::DeviceError& error) {
    const std::string_view reason = error.what();
    out += fmt::format("CUDA driver  not available ({})", reason.substr(0, reason.find('\n')));
  }
  return out;
}

void add_version(CLI::App& app) {
  app.set_version_flag("--version", version_report,
                       "Print the attnjit, NVRTC and CUDA driver versions and exit");
  auto* cmd = app.add_subcommand("version", "Print the attnjit, NVRTC and CUDA driver versions");
  cmd->callback([] { fmt::print("{}\n", version_report()); });
}

}  // namespace attnc
