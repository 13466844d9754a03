// Host checks of a predicate's runtime inputs and the budget of its element bits.
#include "runtime/launch/predicate_launch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"

namespace attnjit::jit::detail {
namespace {

// One tensor: int32, [length] or [rows, length] with rows 1 or B, contiguous, not null.
void check_tensor(const PredicateTensorArg& arg, int batch, bool packed, PredicateInputs& in,
                  int slot) {
  const std::string field = fmt::format("predicate tensor '{}'", arg.name);
  const TensorView& t = arg.tensor;
  if (t.data == nullptr) throw Error(field + ": data is null; accepted: a device pointer");
  if (t.dtype != ScalarType::int32) throw_field_error(field + " dtype", name_of(t.dtype), "int32");
  if (t.rank != 1 && t.rank != 2) {
    throw_field_error(field + " rank", std::to_string(t.rank),
                      "1 ([length]) or 2 ([rows, length])");
  }
  const std::int64_t rows = t.rank == 2 ? t.shape[0] : 1;
  const std::int64_t length = t.shape[t.rank - 1];
  if (rows != 1 && rows != batch) {
    throw_field_error(field + " shape[0] (rows)", std::to_string(rows),
                      packed ? fmt::format("1 (shared by every sequence) or {} (one per sequence "
                                           "of the packed batch)",
                                           batch)
                             : fmt::format("1 (shared by every batch) or {} (the batch)", batch));
  }
  if (length < 0 || length > INT32_MAX) {
    throw_field_error(field + " length", std::to_string(length), "0 to 2147483647");
  }
  if (length > 1 && t.stride[t.rank - 1] != 1) {
    throw_field_error(fmt::format("{} stride[{}]", field, t.rank - 1),
                      std::to_string(t.stride[t.rank - 1]), "1 (the tensor must be contiguous)");
  }
  if (rows > 1 && t.stride[0] != length) {
    throw_field_error(field + " stride[0]", std::to_string(t.stride[0]),
                      fmt::format("{} (the tensor must be contiguous)", length));
  }
  in.tensors[slot] = static_cast<const int*>(t.data);
  in.tensor_row_stride[slot] = rows > 1 ? length : 0;
  in.tensor_length[slot] = static_cast<int>(length);
}

// The pointer is device (or managed) memory of the current context's device.
void check_on_device(const PredicateTensorArg& arg) {
  unsigned int type = 0;
  const CUresult result = runtime::driver().cuPointerGetAttribute(
      &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
      static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(arg.tensor.data)));
  if (result != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE) {
    throw_field_error(fmt::format("predicate tensor '{}' data", arg.name),
                      fmt::format("{}", arg.tensor.data), "a pointer to device memory");
  }
}

}  // namespace

PredicateInputs predicate_inputs(const AttentionSpec& spec, const PredicateLaunch& used,
                                 const PredicateArgs& args, int batch, bool packed) {
  PredicateInputs in{};
  if (spec.mask.kind != MaskKind::predicate) {
    if (!args.scalars.empty() || !args.tensors.empty()) {
      throw Error(fmt::format(
          "predicate: {} scalars and {} tensors given, but mask={} reads none; accepted: no "
          "predicate inputs",
          args.scalars.size(), args.tensors.size(), to_string(spec.mask)));
    }
    return in;
  }
  if (args.scalars.size() != static_cast<std::size_t>(used.scalar_count)) {
    throw_field_error("predicate.scalars", fmt::format("{} values", args.scalars.size()),
                      fmt::format("{} values, one per slot $0 .. ${} of mask={}", used.scalar_count,
                                  used.scalar_count - 1, to_string(spec.mask)));
  }
  std::copy(args.scalars.begin(), args.scalars.end(), in.scalars);
  std::string expected;
  for (const std::string& name : used.tensors) expected += (expected.empty() ? "" : ", ") + name;
  if (expected.empty()) expected = "none";
  for (const PredicateTensorArg& arg : args.tensors) {
    const auto slot = std::find(used.tensors.begin(), used.tensors.end(), arg.name);
    if (slot == used.tensors.end()) {
      throw_field_error("predicate.tensors name", arg.name,
                        fmt::format("the tensors the predicate reads: {}", expected));
    }
    const auto count =
        std::count_if(args.tensors.begin(), args.tensors.end(),
                      [&](const PredicateTensorArg& a) { return a.name == arg.name; });
    if (count > 1) {
      throw_field_error("predicate.tensors name", arg.name, "each tensor given once");
    }
    check_tensor(arg, batch, packed, in, static_cast<int>(slot - used.tensors.begin()));
  }
  for (const std::string& name : used.tensors) {
    const bool given = std::any_of(args.tensors.begin(), args.tensors.end(),
                                   [&](const PredicateTensorArg& a) { return a.name == name; });
    if (!given) {
      throw Error(fmt::format(
          "predicate tensor '{}': missing; accepted: an int32 device tensor [length] or "
          "[rows, length] for each of: {}",
          name, expected));
    }
  }
  for (const PredicateTensorArg& arg : args.tensors) check_on_device(arg);
  return in;
}

std::size_t predicate_bits_budget() {
  constexpr std::size_t kDefaultMib = 256;
  constexpr long long kMaxMib = 1 << 20;
  const char* text = std::getenv("ATTNJIT_PREDICATE_BITS_MIB");
  if (text == nullptr || *text == '\0') return kDefaultMib << 20;
  const std::string value(text);
  long long mib = -1;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), mib);
  if (error != std::errc() || end != value.data() + value.size() || mib < 0 || mib > kMaxMib) {
    throw_field_error("ATTNJIT_PREDICATE_BITS_MIB", value,
                      "an integer number of MiB from 0 to 1048576 (default 256)");
  }
  return static_cast<std::size_t>(mib) << 20;
}

}  // namespace attnjit::jit::detail
