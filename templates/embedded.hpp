// The CUDA headers of templates/attnjit/, embedded into the library at build time.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace attnjit::templates {

/// One embedded header: its include name (e.g. "attnjit/sm80/forward.cuh") and its text.
struct EmbeddedFile {
  std::string_view name;
  std::string_view source;
};

/// Every embedded header, sorted by name.
std::span<const EmbeddedFile> all();

/// Hex digest over all names and contents; part of every cache key.
std::string_view hash();

namespace detail {
extern const EmbeddedFile kFiles[];
extern const std::size_t kFileCount;
}  // namespace detail

}  // namespace attnjit::templates
