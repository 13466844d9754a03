// attnc cache: where the disk cache lives, what it holds, and clearing it.
#include <fmt/format.h>

#include "attnjit/jit.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {

void add_cache(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "Show, list or clear the disk kernel cache");
  static std::string action;
  cmd->add_option("action", action, "path, list or clear")
      ->required()
      ->check(CLI::IsMember({"path", "list", "clear"}));
  cmd->callback([] {
    if (action == "path") {
      fmt::print("{}\n", attnjit::jit::cache_dir());
    } else if (action == "list") {
      const auto entries = attnjit::jit::list_disk_cache();
      for (const auto& entry : entries) {
        fmt::print("{}  {:>9} B  {}\n", entry.key, entry.bytes, entry.spec_text);
      }
      fmt::print("{} {} in {}\n", entries.size(), entries.size() == 1 ? "entry" : "entries",
                 attnjit::jit::cache_dir());
    } else {
      const std::size_t removed = attnjit::jit::clear_disk_cache();
      fmt::print("removed {} {} from {}\n", removed, removed == 1 ? "entry" : "entries",
                 attnjit::jit::cache_dir());
    }
  });
}

}  // namespace attnc
