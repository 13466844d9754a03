// Lookup and digest of the embedded CUDA headers.
#include "embedded.hpp"

#include <fmt/format.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

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

}  // namespace attnjit::templates
