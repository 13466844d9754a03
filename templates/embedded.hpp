// The CUDA headers of templates/attnjit/, embedded into the library at build time.
#pragma once

#include <cstddef>
#include <span>
#include <string>
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

/// The embedded header with this include name, or null.
const EmbeddedFile* find(std::string_view name);

/// `source` as one text: every `#include "NAME"` line naming an embedded header replaced by
/// that header's text, recursively, each header once, where it is first included (what its
/// `#pragma once` makes a compiler read; the pragma lines are dropped). Other includes
/// (toolkit headers such as cuda_bf16.h) stay as they are.
std::string expand_includes(std::string_view source);

namespace detail {
extern const EmbeddedFile kFiles[];
extern const std::size_t kFileCount;
}  // namespace detail

}  // namespace attnjit::templates
