// Lookup, digest and include expansion of the embedded CUDA headers.
#include "embedded.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <set>
#include <string>

namespace attnjit::templates {

std::span<const EmbeddedFile> all() {
  return {detail::kFiles, detail::kFileCount};
}

std::string_view hash() {
  static const std::string digest = [] {
    XXH3_state_t* state = XXH3_createState();
    XXH3_64bits_reset(state);
    for (const EmbeddedFile& file : all()) {
      XXH3_64bits_update(state, file.name.data(), file.name.size());
      XXH3_64bits_update(state, "\0", 1);
      XXH3_64bits_update(state, file.source.data(), file.source.size());
      XXH3_64bits_update(state, "\0", 1);
    }
    const XXH64_hash_t value = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    return fmt::format("{:016x}", value);
  }();
  return digest;
}

const EmbeddedFile* find(std::string_view name) {
  const auto files = all();
  const auto found = std::find_if(files.begin(), files.end(),
                                  [&](const EmbeddedFile& file) { return file.name == name; });
  return found != files.end() ? &*found : nullptr;
}

namespace {

// The NAME of a line `#include "NAME"` (spaces allowed around `#` and `include`), else empty.
std::string_view quoted_include(std::string_view line) {
  const auto skip = [&] {
    line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
  };
  skip();
  if (!line.starts_with('#')) return {};
  line.remove_prefix(1);
  skip();
  if (!line.starts_with("include")) return {};
  line.remove_prefix(7);
  skip();
  if (!line.starts_with('"')) return {};
  const std::size_t close = line.find('"', 1);
  return close == std::string_view::npos ? std::string_view{} : line.substr(1, close - 1);
}

bool is_pragma_once(std::string_view line) {
  line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
  if (!line.starts_with('#')) return false;
  line.remove_prefix(1);
  line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
  if (!line.starts_with("pragma")) return false;
  line.remove_prefix(6);
  line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
  line.remove_suffix(line.size() - std::min(line.find_last_not_of(" \t\r") + 1, line.size()));
  return line == "once";
}

void expand_into(std::string_view source, bool header, std::set<std::string_view>& seen,
                 std::string& out) {
  while (!source.empty()) {
    const std::size_t end = std::min(source.find('\n'), source.size());
    const std::string_view line = source.substr(0, end);
    source.remove_prefix(std::min(end + 1, source.size()));
    if (header && is_pragma_once(line)) continue;
    const EmbeddedFile* file = find(quoted_include(line));
    if (file == nullptr) {
      out.append(line);
      out += '\n';
      continue;
    }
    if (!seen.insert(file->name).second) continue;
    out += fmt::format("// ----- begin {} -----\n", file->name);
    expand_into(file->source, true, seen, out);
    out += fmt::format("// ----- end {} -----\n", file->name);
  }
}

}  // namespace

std::string expand_includes(std::string_view source) {
  std::set<std::string_view> seen;
  std::string out;
  expand_into(source, false, seen, out);
  return out;
}

}  // namespace attnjit::templates
