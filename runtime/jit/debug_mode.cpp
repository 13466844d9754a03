// Reading ATTNJIT_DEBUG.
#include "runtime/jit/debug_mode.hpp"

#include <cstdlib>
#include <string_view>

#include "attnjit/error.hpp"

namespace attnjit::runtime {

bool debug_mode() {
  const char* text = std::getenv("ATTNJIT_DEBUG");
  if (text == nullptr) return false;
  const std::string_view value(text);
  if (value.empty() || value == "0") return false;
  if (value == "1") return true;
  throw_field_error("ATTNJIT_DEBUG", value, "1 (device checks on), 0, empty or unset (off)");
}

}  // namespace attnjit::runtime
