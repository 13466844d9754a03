// The C ABI (include/attnjit/attnjit.h) over jit::compile, Kernel::forward and
// Kernel::backward. Every entry point catches every exception, maps it to a return code and
// keeps its message for attnjit_last_error() on the calling thread.
#include "attnjit/attnjit.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/ir/predicate.hpp"

struct attnjit_kernel {
  attnjit::jit::Kernel kernel;
};

namespace {

thread_local std::string t_last_error;
thread_local const char* t_last_error_text = "";

// Stores the message of a failure; never throws (an allocation failure keeps a fixed text).
void remember(std::string_view prefix, std::string_view what) noexcept {
  try {
    t_last_error.assign(prefix);
    t_last_error.append(what);
    t_last_error_text = t_last_error.c_str();
  } catch (...) {
    t_last_error_text = "out of host memory while recording an error";
  }
}

// Runs `body`, turning any exception into a return code and a stored message.
template <typename Body>
int guarded(Body&& body) noexcept {
  try {
    body();
    return ATTNJIT_OK;
  } catch (const attnjit::Error& error) {
    remember("", error.what());
    return ATTNJIT_USER_ERROR;
  } catch (const attnjit::DeviceError& error) {
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

void require(bool condition, std::string_view field, std::string_view accepted) {
  if (!condition) attnjit::throw_field_error(field, "NULL", accepted);
}

// The size protocol of attnjit_kernel_info and attnjit_cache_dir: 0 when `text` fit,
// otherwise the bytes to allocate (at least 4, above every error code).
int copy_out(const std::string& text, char* buffer, std::size_t size) {
  const std::size_t needed = text.size() + 1;
  if (buffer == nullptr || size < needed) {
    if (needed > static_cast<std::size_t>(INT32_MAX)) {
      throw attnjit::InternalError("text larger than 2 GiB");
    }
    return std::max(static_cast<int>(needed), 4);
  }
  std::memcpy(buffer, text.c_str(), needed);
  return ATTNJIT_OK;
}

attnjit::TensorView to_view(std::string_view name, const attnjit_tensor& tensor) {
  if (tensor.dtype < ATTNJIT_FP16 || tensor.dtype > ATTNJIT_INT32) {
    attnjit::throw_field_error(fmt::format("{}.dtype", name), std::to_string(tensor.dtype),
                               "0 (fp16), 1 (bf16), 2 (fp32), 3 (int32)");
  }
  if (tensor.rank < 0 || tensor.rank > 4) {
    attnjit::throw_field_error(fmt::format("{}.rank", name), std::to_string(tensor.rank), "0 to 4");
  }
  attnjit::TensorView view;
  view.data = tensor.data;
  view.dtype = static_cast<attnjit::ScalarType>(tensor.dtype);
  view.rank = tensor.rank;
  for (int d = 0; d < 4; ++d) {
    view.shape[d] = d < tensor.rank ? tensor.shape[d] : 0;
    view.stride[d] = d < tensor.rank ? tensor.stride[d] : 0;
  }
  return view;
}

attnjit::TensorView optional_view(std::string_view name, const attnjit_tensor* tensor) {
  return tensor == nullptr ? attnjit::TensorView{} : to_view(name, *tensor);
}

attnjit::TensorView required_view(std::string_view name, const attnjit_tensor* tensor) {
  require(tensor != nullptr, name, "a tensor descriptor");
  return to_view(name, *tensor);
}

std::string info_json(const attnjit::jit::CompileInfo& info) {
  nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
  for (const attnjit::jit::KernelReport& report : info.kernels) {
    kernels.push_back({{"name", report.name},
                       {"role", report.role},
                       {"registers", report.registers},
                       {"spill_bytes", report.spill_bytes},
                       {"stack_bytes", report.stack_bytes},
                       {"static_smem_bytes", report.static_smem_bytes},
                       {"dynamic_smem_bytes", report.dynamic_smem_bytes},
                       {"threads", report.threads}});
  }
  const nlohmann::ordered_json object = {{"key", info.key},
                                         {"spec", info.spec_text},
                                         {"cache", std::string(attnjit::jit::name_of(info.cache))},
                                         {"compile_ms", info.compile_ms},
                                         {"kernels", std::move(kernels)}};
  return object.dump();
}

template <typename Compile>
int compile_into(const char* spec_text, attnjit_kernel** out, Compile&& compile) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    require(out != nullptr, "out", "a pointer to an attnjit_kernel* to fill");
    require(spec_text != nullptr, "spec_text", "a spec such as 'dtype=bf16 head_dim=128'");
    const attnjit::AttentionSpec spec = attnjit::parse_spec(spec_text);
    *out = new attnjit_kernel{compile(spec)};
  });
}

attnjit::PredicateArgs predicate_args(const attnjit_predicate_inputs* inputs) {
  require(inputs != nullptr, "predicate", "the predicate's inputs (attnjit_predicate_inputs)");
  attnjit::PredicateArgs args;
  if (inputs->scalar_count < 0 || inputs->tensor_count < 0) {
    attnjit::throw_field_error("predicate counts",
                               fmt::format("{}/{}", inputs->scalar_count, inputs->tensor_count),
                               "scalar_count and tensor_count >= 0");
  }
  if (inputs->scalar_count > 0) {
    require(inputs->scalars != nullptr, "predicate.scalars", "scalar_count values");
    args.scalars.assign(inputs->scalars, inputs->scalars + inputs->scalar_count);
  }
  if (inputs->tensor_count > 0) {
    require(inputs->tensor_names != nullptr && inputs->tensors != nullptr,
            "predicate.tensor_names/tensors", "tensor_count names and tensors");
  }
  for (int i = 0; i < inputs->tensor_count; ++i) {
    require(inputs->tensor_names[i] != nullptr, fmt::format("predicate.tensor_names[{}]", i),
            "a tensor name");
    const std::string name = inputs->tensor_names[i];
    args.tensors.push_back(
        {name, to_view(fmt::format("predicate tensor '{}'", name), inputs->tensors[i])});
  }
  return args;
}

}  // namespace

extern "C" {

int attnjit_compile(const char* spec_text, attnjit_kernel** out) {
  return compile_into(spec_text, out, [](const attnjit::AttentionSpec& spec) {
    return attnjit::jit::compile(spec);
  });
}

int attnjit_compile_reference(const char* spec_text, attnjit_kernel** out) {
  return compile_into(spec_text, out, [](const attnjit::AttentionSpec& spec) {
    return attnjit::jit::compile_reference(spec);
  });
}

void attnjit_release(attnjit_kernel* kernel) {
  delete kernel;
}

int attnjit_forward(const attnjit_kernel* kernel, const attnjit_tensor* q, const attnjit_tensor* k,
                    const attnjit_tensor* v, const attnjit_tensor* o, const attnjit_tensor* lse,
                    const attnjit_tensor* startend_row_indices, float softmax_scale,
                    int window_left, int window_right, void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    attnjit::ForwardArgs args;
    args.q = required_view("q", q);
    args.k = required_view("k", k);
    args.v = required_view("v", v);
    args.o = required_view("o", o);
    args.lse = optional_view("lse", lse);
    args.startend_row_indices = optional_view("startend_row_indices", startend_row_indices);
    args.softmax_scale = softmax_scale;
    args.window_left = window_left;
    args.window_right = window_right;
    kernel->kernel.forward(args, stream);
  });
}

int attnjit_backward(const attnjit_kernel* kernel, const attnjit_tensor* q, const attnjit_tensor* k,
                     const attnjit_tensor* v, const attnjit_tensor* o, const attnjit_tensor* d_o,
                     const attnjit_tensor* lse, const attnjit_tensor* startend_row_indices,
                     const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                     const attnjit_tensor* d_v, float softmax_scale, int window_left,
                     int window_right, void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    attnjit::BackwardArgs args;
    args.q = required_view("q", q);
    args.k = required_view("k", k);
    args.v = required_view("v", v);
    args.o = required_view("o", o);
    args.d_o = required_view("d_o", d_o);
    args.lse = required_view("lse", lse);
    args.startend_row_indices = optional_view("startend_row_indices", startend_row_indices);
    args.d_q = required_view("d_q", d_q);
    args.d_k = required_view("d_k", d_k);
    args.d_v = required_view("d_v", d_v);
    args.softmax_scale = softmax_scale;
    args.window_left = window_left;
    args.window_right = window_right;
    kernel->kernel.backward(args, stream);
  });
}

int attnjit_forward_predicate(const attnjit_kernel* kernel, const attnjit_tensor* q,
                              const attnjit_tensor* k, const attnjit_tensor* v,
                              const attnjit_tensor* o, const attnjit_tensor* lse,
                              const attnjit_predicate_inputs* predicate, float softmax_scale,
                              void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    attnjit::ForwardArgs args;
    args.q = required_view("q", q);
    args.k = required_view("k", k);
    args.v = required_view("v", v);
    args.o = required_view("o", o);
    args.lse = optional_view("lse", lse);
    args.softmax_scale = softmax_scale;
    args.predicate = predicate_args(predicate);
    kernel->kernel.forward(args, stream);
  });
}

int attnjit_backward_predicate(const attnjit_kernel* kernel, const attnjit_tensor* q,
                               const attnjit_tensor* k, const attnjit_tensor* v,
                               const attnjit_tensor* o, const attnjit_tensor* d_o,
                               const attnjit_tensor* lse, const attnjit_predicate_inputs* predicate,
                               const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                               const attnjit_tensor* d_v, float softmax_scale, void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    attnjit::BackwardArgs args;
    args.q = required_view("q", q);
    args.k = required_view("k", k);
    args.v = required_view("v", v);
    args.o = required_view("o", o);
    args.d_o = required_view("d_o", d_o);
    args.lse = required_view("lse", lse);
    args.d_q = required_view("d_q", d_q);
    args.d_k = required_view("d_k", d_k);
    args.d_v = required_view("d_v", d_v);
    args.softmax_scale = softmax_scale;
    args.predicate = predicate_args(predicate);
    kernel->kernel.backward(args, stream);
  });
}

int attnjit_predicate_lift(const char* expression, char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] {
    require(expression != nullptr, "expression", "a predicate such as 'q >= k'");
    std::vector<std::int32_t> scalars;
    const attnjit::Predicate lifted =
        attnjit::lift_literals(attnjit::parse_predicate(expression), scalars);
    const nlohmann::ordered_json object = {{"structure", attnjit::to_string(lifted)},
                                           {"scalars", scalars},
                                           {"tensors", attnjit::info(lifted).tensors}};
    result = copy_out(object.dump(), buffer, size);
  });
  return status != ATTNJIT_OK ? status : result;
}

int attnjit_kernel_info(const attnjit_kernel* kernel, char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    result = copy_out(info_json(kernel->kernel.info()), buffer, size);
  });
  return status != ATTNJIT_OK ? status : result;
}

int attnjit_cache_clear(int memory, int disk) {
  return guarded([&] {
    if (memory != 0) attnjit::jit::clear_memory_cache();
    if (disk != 0) attnjit::jit::clear_disk_cache();
  });
}

int attnjit_cache_dir(char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] { result = copy_out(attnjit::jit::cache_dir(), buffer, size); });
  return status != ATTNJIT_OK ? status : result;
}

const char* attnjit_last_error(void) {
  return t_last_error_text;
}

const char* attnjit_version(void) {
  return ATTNJIT_VERSION;
}

}  // extern "C"
