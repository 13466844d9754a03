// The C ABI (include/attnjit/attnjit.h) over jit::compile, Kernel::forward and
// Kernel::backward. Every entry point catches every exception, maps it to a return code and
// keeps its message for attnjit_last_error() on the calling thread (c_api_support.hpp).
#include "attnjit/attnjit.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/ir/predicate.hpp"
#include "jit/c_api/c_api_kernel.hpp"
#include "jit/c_api/c_api_support.hpp"
#include "runtime/jit/driver.hpp"

namespace {

using attnjit::c_api::copy_out;
using attnjit::c_api::guarded;
using attnjit::c_api::optional_view;
using attnjit::c_api::require;
using attnjit::c_api::required_view;
using attnjit::c_api::to_view;

// The entry points below run on the device holding q's memory (making that device's primary
// context current for the call when the current context belongs to another device); a pointer
// the driver does not know leaves the current context in place.
int device_of(const attnjit_tensor* q) {
  return attnjit::runtime::device_of_pointer(q != nullptr ? q->data : nullptr);
}

std::string info_json(const attnjit::jit::Kernel& kernel) {
  const attnjit::jit::CompileInfo& info = kernel.info();
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
                                         {"kernels", std::move(kernels)},
                                         {"predicate_scalars", kernel.predicate_scalars()}};
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

}  // namespace

// Shared with the prepared launches (c_api_launch.cpp).
namespace attnjit::c_api {
namespace {

constexpr std::size_t kMaxTensorNameBytes = 256;

}  // namespace

attnjit::PredicateArgs predicate_args(const attnjit_predicate_inputs* inputs) {
  require(inputs != nullptr, "predicate", "the predicate's inputs (attnjit_predicate_inputs)");
  // Every count is checked against its limit before an array is read: a count beyond the
  // caller's array would read past it.
  if (inputs->scalar_count < 0 || inputs->scalar_count > attnjit::kPredicateScalarLimit) {
    attnjit::throw_field_error("predicate.scalar_count", std::to_string(inputs->scalar_count),
                               fmt::format("0 to {} (the scalar slots a predicate may have)",
                                           attnjit::kPredicateScalarLimit));
  }
  if (inputs->tensor_count < 0 || inputs->tensor_count > attnjit::kPredicateTensorLimit) {
    attnjit::throw_field_error(
        "predicate.tensor_count", std::to_string(inputs->tensor_count),
        fmt::format("0 to {} (the tensors a predicate may read)", attnjit::kPredicateTensorLimit));
  }
  attnjit::PredicateArgs args;
  if (inputs->scalar_count > 0) {
    require(inputs->scalars != nullptr, "predicate.scalars",
            fmt::format("an array of scalar_count ({}) values", inputs->scalar_count));
    args.scalars.assign(inputs->scalars, inputs->scalars + inputs->scalar_count);
  }
  if (inputs->tensor_count > 0) {
    require(inputs->tensor_names != nullptr, "predicate.tensor_names",
            fmt::format("an array of tensor_count ({}) names", inputs->tensor_count));
    require(inputs->tensors != nullptr, "predicate.tensors",
            fmt::format("an array of tensor_count ({}) tensors", inputs->tensor_count));
  }
  for (int i = 0; i < inputs->tensor_count; ++i) {
    const std::string field = fmt::format("predicate.tensor_names[{}]", i);
    const char* name = inputs->tensor_names[i];
    require(name != nullptr, field, "a tensor name");
    // A name is an identifier: reading stops after the longest one accepted.
    const std::size_t length = strnlen(name, kMaxTensorNameBytes + 1);
    if (length > kMaxTensorNameBytes) {
      attnjit::throw_field_error(field, std::string_view(name, 32),
                                 fmt::format("a name of at most {} bytes", kMaxTensorNameBytes));
    }
    args.tensors.push_back(
        {std::string(name, length),
         to_view(fmt::format("predicate tensor '{}'", std::string_view(name, length)),
                 inputs->tensors[i])});
  }
  return args;
}

}  // namespace attnjit::c_api

namespace {

using attnjit::c_api::predicate_args;

// The tensors that forward and backward entry points share; absent startend_row_indices (NULL)
// is empty.
template <class Args>
Args attention_tensors(const attnjit_tensor* q, const attnjit_tensor* k, const attnjit_tensor* v,
                       const attnjit_tensor* o, const attnjit_tensor* startend_row_indices) {
  Args args;
  args.q = required_view("q", q);
  args.k = required_view("k", k);
  args.v = required_view("v", v);
  args.o = required_view("o", o);
  args.startend_row_indices = optional_view("startend_row_indices", startend_row_indices);
  return args;
}

// The tensors every forward entry point takes (the LSE is an optional output).
attnjit::ForwardArgs forward_tensors(const attnjit_tensor* q, const attnjit_tensor* k,
                                     const attnjit_tensor* v, const attnjit_tensor* o,
                                     const attnjit_tensor* lse,
                                     const attnjit_tensor* startend_row_indices) {
  auto args = attention_tensors<attnjit::ForwardArgs>(q, k, v, o, startend_row_indices);
  args.lse = optional_view("lse", lse);
  return args;
}

// The tensors every backward entry point takes (the LSE is an input).
attnjit::BackwardArgs backward_tensors(const attnjit_tensor* q, const attnjit_tensor* k,
                                       const attnjit_tensor* v, const attnjit_tensor* o,
                                       const attnjit_tensor* d_o, const attnjit_tensor* lse,
                                       const attnjit_tensor* startend_row_indices,
                                       const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                                       const attnjit_tensor* d_v) {
  auto args = attention_tensors<attnjit::BackwardArgs>(q, k, v, o, startend_row_indices);
  args.d_o = required_view("d_o", d_o);
  args.lse = required_view("lse", lse);
  args.d_q = required_view("d_q", d_q);
  args.d_k = required_view("d_k", d_k);
  args.d_v = required_view("d_v", d_v);
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
  return attnjit_forward_score_mod(kernel, q, k, v, o, lse, startend_row_indices, softmax_scale,
                                   window_left, window_right, 0.0f, nullptr, stream);
}

int attnjit_forward_score_mod(const attnjit_kernel* kernel, const attnjit_tensor* q,
                              const attnjit_tensor* k, const attnjit_tensor* v,
                              const attnjit_tensor* o, const attnjit_tensor* lse,
                              const attnjit_tensor* startend_row_indices, float softmax_scale,
                              int window_left, int window_right, float softcap,
                              const attnjit_tensor* alibi_slopes, void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    const attnjit::runtime::DeviceScope scope(device_of(q));
    attnjit::ForwardArgs args = forward_tensors(q, k, v, o, lse, startend_row_indices);
    args.softmax_scale = softmax_scale;
    args.window_left = window_left;
    args.window_right = window_right;
    args.softcap = softcap;
    args.alibi_slopes = optional_view("alibi_slopes", alibi_slopes);
    kernel->kernel.forward(args, stream);
  });
}

int attnjit_forward_kvcache(const attnjit_kernel* kernel, const attnjit_tensor* q,
                            const attnjit_tensor* k, const attnjit_tensor* v,
                            const attnjit_tensor* o, const attnjit_tensor* lse,
                            const attnjit_tensor* cache_seqlens, const attnjit_tensor* block_table,
                            const attnjit_tensor* startend_row_indices,
                            const attnjit_predicate_inputs* predicate, const attnjit_tensor* k_new,
                            const attnjit_tensor* v_new, const attnjit_tensor* cu_seqlens_q,
                            int max_seqlen_q, int num_splits, float softmax_scale, int window_left,
                            int window_right, float softcap, const attnjit_tensor* alibi_slopes,
                            const attnjit_tensor* sinks, void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    const attnjit::runtime::DeviceScope scope(device_of(q));
    attnjit::ForwardArgs args = forward_tensors(q, k, v, o, lse, startend_row_indices);
    args.softmax_scale = softmax_scale;
    args.window_left = window_left;
    args.window_right = window_right;
    args.softcap = softcap;
    args.alibi_slopes = optional_view("alibi_slopes", alibi_slopes);
    args.sinks = optional_view("sinks", sinks);
    if (predicate != nullptr) args.predicate = predicate_args(predicate);
    args.kv_cache.cache_seqlens = optional_view("cache_seqlens", cache_seqlens);
    args.kv_cache.block_table = optional_view("block_table", block_table);
    args.kv_cache.k_new = optional_view("k_new", k_new);
    args.kv_cache.v_new = optional_view("v_new", v_new);
    args.kv_cache.cu_seqlens_q = optional_view("cu_seqlens_q", cu_seqlens_q);
    args.kv_cache.max_seqlen_q = max_seqlen_q;
    args.kv_cache.num_splits = num_splits;
    kernel->kernel.forward(args, stream);
  });
}

int attnjit_backward(const attnjit_kernel* kernel, const attnjit_tensor* q, const attnjit_tensor* k,
                     const attnjit_tensor* v, const attnjit_tensor* o, const attnjit_tensor* d_o,
                     const attnjit_tensor* lse, const attnjit_tensor* startend_row_indices,
                     const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                     const attnjit_tensor* d_v, float softmax_scale, int window_left,
                     int window_right, void* stream) {
  return attnjit_backward_score_mod(kernel, q, k, v, o, d_o, lse, startend_row_indices, d_q, d_k,
                                    d_v, softmax_scale, window_left, window_right, 0.0f, nullptr,
                                    stream);
}

int attnjit_backward_score_mod(const attnjit_kernel* kernel, const attnjit_tensor* q,
                               const attnjit_tensor* k, const attnjit_tensor* v,
                               const attnjit_tensor* o, const attnjit_tensor* d_o,
                               const attnjit_tensor* lse,
                               const attnjit_tensor* startend_row_indices,
                               const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                               const attnjit_tensor* d_v, float softmax_scale, int window_left,
                               int window_right, float softcap, const attnjit_tensor* alibi_slopes,
                               void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    const attnjit::runtime::DeviceScope scope(device_of(q));
    attnjit::BackwardArgs args =
        backward_tensors(q, k, v, o, d_o, lse, startend_row_indices, d_q, d_k, d_v);
    args.softmax_scale = softmax_scale;
    args.window_left = window_left;
    args.window_right = window_right;
    args.softcap = softcap;
    args.alibi_slopes = optional_view("alibi_slopes", alibi_slopes);
    kernel->kernel.backward(args, stream);
  });
}

int attnjit_forward_predicate(const attnjit_kernel* kernel, const attnjit_tensor* q,
                              const attnjit_tensor* k, const attnjit_tensor* v,
                              const attnjit_tensor* o, const attnjit_tensor* lse,
                              const attnjit_predicate_inputs* predicate, float softmax_scale,
                              float softcap, const attnjit_tensor* alibi_slopes, void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    const attnjit::runtime::DeviceScope scope(device_of(q));
    attnjit::ForwardArgs args = forward_tensors(q, k, v, o, lse, nullptr);
    args.softmax_scale = softmax_scale;
    args.softcap = softcap;
    args.alibi_slopes = optional_view("alibi_slopes", alibi_slopes);
    args.predicate = predicate_args(predicate);
    kernel->kernel.forward(args, stream);
  });
}

int attnjit_backward_predicate(const attnjit_kernel* kernel, const attnjit_tensor* q,
                               const attnjit_tensor* k, const attnjit_tensor* v,
                               const attnjit_tensor* o, const attnjit_tensor* d_o,
                               const attnjit_tensor* lse, const attnjit_predicate_inputs* predicate,
                               const attnjit_tensor* d_q, const attnjit_tensor* d_k,
                               const attnjit_tensor* d_v, float softmax_scale, float softcap,
                               const attnjit_tensor* alibi_slopes, void* stream) {
  return guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    const attnjit::runtime::DeviceScope scope(device_of(q));
    attnjit::BackwardArgs args = backward_tensors(q, k, v, o, d_o, lse, nullptr, d_q, d_k, d_v);
    args.softmax_scale = softmax_scale;
    args.softcap = softcap;
    args.alibi_slopes = optional_view("alibi_slopes", alibi_slopes);
    args.predicate = predicate_args(predicate);
    kernel->kernel.backward(args, stream);
  });
}

int attnjit_predicate_lift(const char* expression, char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] {
    require(expression != nullptr, "expression", "a predicate such as 'q >= k'");
    std::vector<std::int32_t> scalars;
    const attnjit::Predicate parsed = attnjit::parse_predicate(expression);
    if (attnjit::info(parsed).scalar_count > 0) {
      attnjit::throw_field_error("expression", expression,
                                 "numbers instead of $N slots (numbers become runtime scalars)");
    }
    const attnjit::Predicate lifted = attnjit::lift_literals(parsed, scalars);
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
    result = copy_out(info_json(kernel->kernel), buffer, size);
  });
  return status != ATTNJIT_OK ? status : result;
}

int attnjit_kernel_ptx(const attnjit_kernel* kernel, int index, char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] {
    require(kernel != nullptr, "kernel", "a handle from attnjit_compile");
    const std::vector<std::string> ptx = kernel->kernel.ptx();
    if (index < 0 || static_cast<std::size_t>(index) >= ptx.size()) {
      attnjit::throw_field_error("index", std::to_string(index),
                                 fmt::format("0 to {} (the kernel set has {} kernels)",
                                             static_cast<int>(ptx.size()) - 1, ptx.size()));
    }
    result = copy_out(ptx[static_cast<std::size_t>(index)], buffer, size);
  });
  return status != ATTNJIT_OK ? status : result;
}

int attnjit_cache_clear(int memory, int disk) {
  return guarded([&] {
    if (memory != 0) attnjit::jit::clear_memory_cache();
    if (disk == 0) return;
    const attnjit::jit::CacheClearReport report = attnjit::jit::clear_disk_cache();
    if (!report.problems.empty()) {
      throw attnjit::DeviceError(
          fmt::format("disk cache: could not remove {} files ({} entries removed): {}",
                      report.problems.size(), report.removed, fmt::join(report.problems, "; ")));
    }
  });
}

int attnjit_set_disk_cache_mode(int mode) {
  return guarded([&] {
    using attnjit::jit::DiskCacheMode;
    static_assert(ATTNJIT_DISK_CACHE_ON == static_cast<int>(DiskCacheMode::on) &&
                  ATTNJIT_DISK_CACHE_READONLY == static_cast<int>(DiskCacheMode::readonly) &&
                  ATTNJIT_DISK_CACHE_OFF == static_cast<int>(DiskCacheMode::off));
    if (mode < ATTNJIT_DISK_CACHE_ON || mode > ATTNJIT_DISK_CACHE_OFF) {
      attnjit::throw_field_error(
          "mode", std::to_string(mode),
          "ATTNJIT_DISK_CACHE_ON (0), ATTNJIT_DISK_CACHE_READONLY (1), ATTNJIT_DISK_CACHE_OFF (2)");
    }
    attnjit::jit::set_disk_cache_mode(static_cast<DiskCacheMode>(mode));
  });
}

int attnjit_disk_cache_mode(int* mode) {
  return guarded([&] {
    require(mode != nullptr, "mode", "a pointer to an int to fill");
    *mode = static_cast<int>(attnjit::jit::disk_cache_mode());
  });
}

int attnjit_cache_dir(char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] { result = copy_out(attnjit::jit::cache_dir(), buffer, size); });
  return status != ATTNJIT_OK ? status : result;
}

const char* attnjit_last_error(void) {
  return attnjit::c_api::last_error();
}

const char* attnjit_version(void) {
  return ATTNJIT_VERSION;
}

}  // extern "C"
