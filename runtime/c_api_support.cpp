// The per-thread last error of the C ABI and its pointer checks.
#include "runtime/c_api_support.hpp"

#include <string>

namespace attnjit::c_api {
namespace {

thread_local std::string t_last_error;
thread_local const char* t_last_error_text = "";

}  // namespace

void remember(std::string_view prefix, std::string_view what) noexcept {
  try {
    t_last_error.assign(prefix);
    t_last_error.append(what);
    t_last_error_text = t_last_error.c_str();
  } catch (...) {
    t_last_error_text = "out of host memory while recording an error";
  }
}

const char* last_error() noexcept {
  return t_last_error_text;
}

void require(bool condition, std::string_view field, std::string_view accepted) {
  if (!condition) throw_field_error(field, "NULL", accepted);
}

}  // namespace attnjit::c_api
