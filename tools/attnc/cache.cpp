// attnc cache: where the disk cache lives, what it holds, and clearing it. Listing and clearing
// go on past entries they cannot read or remove, report each on stderr, and then fail with the
// environment's exit status.
#include <fmt/format.h>

#include <cstdio>

#include "attnjit/jit.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

std::string_view entries(std::size_t count) {
  return count == 1 ? "entry" : "entries";
}

void list() {
  const std::string dir = attnjit::jit::cache_dir();
  const auto listing = attnjit::jit::list_disk_cache();
  std::size_t unreadable = 0;
  for (const auto& entry : listing) {
    fmt::print("{}  {:>9} B  {}\n", entry.key, entry.bytes, entry.spec_text);
    if (!entry.problem.empty()) ++unreadable;
  }
  fmt::print("{} {} in {}\n", listing.size(), entries(listing.size()), dir);
  if (unreadable == 0) return;
  for (const auto& entry : listing) {
    if (!entry.problem.empty()) fmt::print(stderr, "attnc: cache list: {}\n", entry.problem);
  }
  throw EnvironmentFailure(
      fmt::format("cache list: {} of the {} {} in '{}' could not be read (each named above)",
                  unreadable, listing.size(), entries(listing.size()), dir));
}

void clear() {
  const std::string dir = attnjit::jit::cache_dir();
  const attnjit::jit::CacheClearReport report = attnjit::jit::clear_disk_cache();
  fmt::print("removed {} {} from {}\n", report.removed, entries(report.removed), dir);
  if (report.problems.empty()) return;
  for (const std::string& problem : report.problems) {
    fmt::print(stderr, "attnc: cache clear: {}\n", problem);
  }
  throw EnvironmentFailure(
      fmt::format("cache clear: {} {} in '{}' could not be removed (each "
                  "named above)",
                  report.problems.size(), report.problems.size() == 1 ? "file" : "files", dir));
}

}  // namespace

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
      list();
    } else {
      clear();
    }
  });
}

}  // namespace attnc
