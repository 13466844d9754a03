// Shared by the translation units of the C ABI (include/attnjit/attnjit.h): the guard that
// turns every exception into a return code and a per-thread message for
// attnjit_last_error(), and the conversion of attnjit_tensor descriptors.
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "attnjit/attnjit.h"
#include "attnjit/error.hpp"
#include "attnjit/tensor.hpp"

namespace attnjit::c_api {

/// Stores the message of a failure for attnjit_last_error() on this thread; never throws (an
/// allocation failure keeps a fixed text).
void remember(std::string_view prefix, std::string_view what) noexcept;

/// The message of the last failure on this thread ("" if none).
const char* last_error() noexcept;

/// Runs `body`, turning any exception into a return code and a stored message.
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

/// The size protocol of attnjit_kernel_info and the other text outputs: copies `text` and its NUL
/// into `buffer` and returns 0 when they fit into `size` bytes, otherwise writes nothing and
/// returns the bytes to allocate (at least 4, above every error code).
int copy_out(const std::string& text, char* buffer, std::size_t size);

/// Throws Error("<field>: got 'NULL'; accepted: <accepted>") unless `condition`.
void require(bool condition, std::string_view field, std::string_view accepted);

/// The TensorView of a descriptor; Error naming `name` for a bad dtype or rank.
TensorView to_view(std::string_view name, const attnjit_tensor& tensor);

/// As to_view; a NULL descriptor is an absent (empty) tensor.
TensorView optional_view(std::string_view name, const attnjit_tensor* tensor);

/// As to_view; a NULL descriptor is an Error.
TensorView required_view(std::string_view name, const attnjit_tensor* tensor);

/// The PredicateArgs of a predicate mask's inputs; Error naming the field for a NULL or a bad
/// count (defined in c_api.cpp).
PredicateArgs predicate_args(const attnjit_predicate_inputs* inputs);

}  // namespace attnjit::c_api
