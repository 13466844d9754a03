// The text of what a call throws, for the tests that check error messages word by word.
#pragma once

#include <string>
#include <string_view>

#include "attnjit/error.hpp"

namespace attnjit::testing {

/// The message of the attnjit::Error that `call()` throws, or `none` when it returns. A
/// DeviceError (the host checks passed and the call reached the device) gives `device_prefix`
/// followed by its message.
template <class Call>
std::string error_text(Call&& call, std::string_view none = "no error",
                       std::string_view device_prefix = "device: ") {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  } catch (const DeviceError& error) {
    return std::string(device_prefix) + error.what();
  }
  return std::string(none);
}

}  // namespace attnjit::testing
