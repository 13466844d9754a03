// The throwing helpers of attnjit/error.hpp.
#include "attnjit/error.hpp"

#include <fmt/format.h>

namespace attnjit {

void throw_field_error(std::string_view field, std::string_view value, std::string_view accepted) {
  throw Error(fmt::format("{}: got '{}'; accepted: {}", field, value, accepted));
}

void internal_check(bool condition, std::string_view what) {
  if (!condition) throw InternalError(fmt::format("attnjit internal error: {}", what));
}

}  // namespace attnjit
