// The throwing helpers of attnjit/error.hpp.
#include "attnjit/error.hpp"

#include <fmt/format.h>

namespace attnjit {

std::string quoted_input(std::string_view text) {
  constexpr std::size_t kShown = 200;
  if (text.size() <= kShown) return std::string(text);
  // Cut at a UTF-8 character boundary (never before a continuation byte).
  std::size_t cut = kShown - 40;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return fmt::format("{}... ({} bytes in all)", text.substr(0, cut), text.size());
}

void throw_field_error(std::string_view field, std::string_view value, std::string_view accepted) {
  throw Error(fmt::format("{}: got '{}'; accepted: {}", field, quoted_input(value), accepted));
}

void internal_check(bool condition, std::string_view what) {
  if (!condition) throw InternalError(fmt::format("attnjit internal error: {}", what));
}

}  // namespace attnjit
