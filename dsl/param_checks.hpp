// The parameter checks the host builders share: a value at least a minimum, or inside a range.
// Internal to dsl/.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string_view>

#include "attnjit/error.hpp"

namespace attnjit::dsl {

inline void check_at_least(std::string_view field, std::int64_t value, std::int64_t minimum) {
  if (value < minimum) {
    throw_field_error(field, fmt::to_string(value), fmt::format(">= {}", minimum));
  }
}

inline void check_range(std::string_view field, std::int64_t value, std::int64_t lo,
                        std::int64_t hi, std::string_view hi_name) {
  if (value < lo || value > hi) {
    throw_field_error(field, fmt::to_string(value),
                      fmt::format("{} <= {} <= {} ({})", lo, field, hi, hi_name));
  }
}

}  // namespace attnjit::dsl
