// The per-thread error message and the tensor descriptor conversion of the C ABI.
#include "jit/c_api/c_api_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
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

int copy_out(const std::string& text, char* buffer, std::size_t size) {
  const std::size_t needed = text.size() + 1;
  if (buffer == nullptr || size < needed) {
    if (needed > static_cast<std::size_t>(INT32_MAX)) {
      throw InternalError("text larger than 2 GiB");
    }
    return std::max(static_cast<int>(needed), 4);
  }
  std::memcpy(buffer, text.c_str(), needed);
  return ATTNJIT_OK;
}

void require(bool condition, std::string_view field, std::string_view accepted) {
  if (!condition) throw_field_error(field, "NULL", accepted);
}

TensorView to_view(std::string_view name, const attnjit_tensor& tensor) {
  if (tensor.dtype < ATTNJIT_FP16 || tensor.dtype > ATTNJIT_E4M3) {
    throw_field_error(fmt::format("{}.dtype", name), std::to_string(tensor.dtype),
                      "0 (fp16), 1 (bf16), 2 (fp32), 3 (int32), 4 (e4m3)");
  }
  if (tensor.rank < 0 || tensor.rank > 4) {
    throw_field_error(fmt::format("{}.rank", name), std::to_string(tensor.rank), "0 to 4");
  }
  TensorView view;
  view.data = tensor.data;
  view.dtype = static_cast<ScalarType>(tensor.dtype);
  view.rank = tensor.rank;
  for (int d = 0; d < 4; ++d) {
    view.shape[d] = d < tensor.rank ? tensor.shape[d] : 0;
    view.stride[d] = d < tensor.rank ? tensor.stride[d] : 0;
  }
  return view;
}

TensorView optional_view(std::string_view name, const attnjit_tensor* tensor) {
  return tensor == nullptr ? TensorView{} : to_view(name, *tensor);
}

TensorView required_view(std::string_view name, const attnjit_tensor* tensor) {
  require(tensor != nullptr, name, "a tensor descriptor");
  return to_view(name, *tensor);
}

}  // namespace attnjit::c_api
