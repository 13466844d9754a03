// Error types shared by every attnjit library. User errors name the field, the value
// and what is accepted; device and compile failures say what failed and where to look.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace attnjit {

/// A user error: a bad spec, mask, tensor or option. The message names the field, the
/// value that was given and what is accepted. The CLI exits 2 with this message.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The environment failed: no CUDA driver, no device, a Driver API call failed, NVRTC
/// rejected generated code, or files (the disk cache's) cannot be used. Not the user's input;
/// the CLI exits 4 with this message.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A broken internal invariant (a bug in attnjit, never the user's fault).
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// `text` as quoted in messages: itself up to 200 bytes, else its start, "...", and its size.
std::string quoted_input(std::string_view text);

/// Throws Error("<field>: got '<value>'; accepted: <accepted>"), the value quoted by
/// quoted_input().
[[noreturn]] void throw_field_error(std::string_view field, std::string_view value,
                                    std::string_view accepted);

/// Throws InternalError naming the failed condition when `condition` is false.
void internal_check(bool condition, std::string_view what);

}  // namespace attnjit
