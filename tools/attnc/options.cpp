// Checks of attnc's numeric options: the text is checked before CLI11 converts it, so that a
// bad value gets attnjit's message (the option, the value and the accepted range) instead of
// CLI11's "Could not convert".
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

template <class Int>
bool parse_integer(const std::string& text, Int lo, Int hi) {
  Int value{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(first, last, value);
  return !text.empty() && error == std::errc() && end == last && value >= lo && value <= hi;
}

}  // namespace

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        if (parse_integer<std::int64_t>(text, lo, hi)) return {};
        return fmt::format("got '{}'; accepted: an integer from {} to {}", text.substr(0, 64), lo,
                           hi);
      },
      fmt::format("[{}, {}]", lo, hi));
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (parse_integer<std::uint64_t>(text, 0, UINT64_MAX)) return {};
        return fmt::format("got '{}'; accepted: an integer from 0 to {}", text.substr(0, 64),
                           UINT64_MAX);
      },
      fmt::format("[0, {}]", UINT64_MAX));
}

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size() && std::isfinite(value) &&
            std::abs(value) <= 3.4e38) {
          return {};
        }
        return fmt::format("got '{}'; accepted: a finite number (a float)", text.substr(0, 64));
      },
      "finite");
}

}  // namespace attnc
