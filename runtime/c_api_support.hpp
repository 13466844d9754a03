// What the files of the C ABI (include/attnjit/attnjit.h) share: every entry point runs its
// body through guarded(), which turns any exception into a return code and keeps the message
// for attnjit_last_error() on the calling thread.
#pragma once

#include <exception>
#include <new>
#include <string_view>

#include "attnjit/attnjit.h"
#include "attnjit/error.hpp"

namespace attnjit::c_api {

/// Stores `prefix` + `what` as the calling thread's last error; never throws (an allocation
/// failure keeps a fixed text).
void remember(std::string_view prefix, std::string_view what) noexcept;

/// The calling thread's last error message ("" if none).
const char* last_error() noexcept;

/// Runs `body`, turning any exception into a return code (ATTNJIT_USER_ERROR for Error,
/// ATTNJIT_DEVICE_ERROR for DeviceError, ATTNJIT_INTERNAL_ERROR otherwise) and a stored message.
template <typename Body>
int guarded(Body&& body) noexcept {
  try {
    body();
    return ATTNJIT_OK;
  } catch (const Error& error) {
    remember("", error.what());
    return ATTNJIT_USER_ERROR;
  } catch (const DeviceError& error) {
    remember("", error.what());
    return ATTNJIT_DEVICE_ERROR;
  } catch (const std::bad_alloc&) {
    remember("", "out of host memory");
    return ATTNJIT_INTERNAL_ERROR;
  } catch (const std::exception& error) {
    remember("internal error: ", error.what());
    return ATTNJIT_INTERNAL_ERROR;
  } catch (...) {
    remember("internal error: ", "an unknown exception");
    return ATTNJIT_INTERNAL_ERROR;
  }
}

/// Throws Error("<field>: got 'NULL'; accepted: <accepted>") unless `condition` holds.
void require(bool condition, std::string_view field, std::string_view accepted);

}  // namespace attnjit::c_api
