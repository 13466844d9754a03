// validate_intervals: host checks of the layout, then the interval_check kernel, then the
// message naming the first bad element (the element and the words of dsl::validate).
#include "runtime/masks/interval_check.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string_view>

#include "attnjit/error.hpp"
#include "attnjit/mask_builder.hpp"
#include "attnjit/masks/mask_params.cuh"
#include "dsl/intervals.hpp"
#include "runtime/jit/debug_mode.hpp"
#include "runtime/masks/mask_kernels.hpp"

namespace attnjit {
namespace {

void check_mask(const MaskSpec& mask) {
  if (mask.kind != MaskKind::flashmask) {
    throw_field_error("mask", to_string(mask),
                      "flashmask(causal=true|false,columns=1|2|4) (only FlashMask masks have "
                      "interval vectors)");
  }
  const bool allowed = mask.causal ? (mask.columns == 1 || mask.columns == 2)
                                   : (mask.columns == 2 || mask.columns == 4);
  if (!allowed) {
    throw_field_error("mask", to_string(mask),
                      "causal=true with columns 1 or 2, or causal=false with columns 2 or 4");
  }
}

/// The message of the first bad element, `element` its linear index in the tensor (as
/// dsl::validate words it).
[[noreturn]] void throw_bad_element(const TensorView& t, const MaskSpec& mask, int seqlen_q,
                                    std::string_view rows, unsigned long long element) {
  const long long column = static_cast<long long>(element / mask.columns);
  const int c = static_cast<int>(element % mask.columns);
  const long long seqlen_k = t.shape[2];
  const long long heads = t.shape[1];
  std::array<int, 4> v{};
  for (int i = 0; i < mask.columns; ++i) {
    v[i] = runtime::read_device_int(t.data, column * mask.columns + i);
  }
  const std::string name =
      fmt::format("startend_row_indices[batch={}, head={}, column={}]", column / seqlen_k / heads,
                  column / seqlen_k % heads, column % seqlen_k);
  if (v[c] < 0 || v[c] > seqlen_q) {
    const std::string_view role = dsl::vector_name(mask.causal, mask.columns, c);
    throw Error(fmt::format("{} {}={} is outside [0, {}]; accepted: 0 <= {} <= {} ({})", name, role,
                            v[c], seqlen_q, role, seqlen_q, rows));
  }
  if (c == 1) {
    throw Error(fmt::format("{} LTE={} is below LTS={}; accepted: LTS <= LTE <= {} ({})", name,
                            v[1], v[0], seqlen_q, rows));
  }
  if (c == 3) {
    throw Error(fmt::format("{} UTE={} is below UTS={}; accepted: UTS <= UTE <= {} ({})", name,
                            v[3], v[2], seqlen_q, rows));
  }
  throw InternalError(fmt::format("interval check: element {} (vector {}) is not bad", element, c));
}

/// validate_intervals, its messages naming the bound of the rows `rows`.
void validate_intervals_of(const TensorView& startend_row_indices, const MaskSpec& mask,
                           int seqlen_q, std::string_view rows, jit::Stream stream_handle) {
  const TensorView& t = startend_row_indices;
  check_mask(mask);
  if (seqlen_q < 0) throw_field_error("seqlen_q", std::to_string(seqlen_q), ">= 0");
  runtime::check_int32_tensor("startend_row_indices", t, 4);
  if (t.shape[3] != mask.columns) {
    throw_field_error("startend_row_indices.shape[3]", std::to_string(t.shape[3]),
                      fmt::format("{} (the columns of {})", mask.columns, to_string(mask)));
  }
  const long long limits[3] = {65535, 65535, INT32_MAX / 2};
  const char* const dims[3] = {"batch", "mask heads", "seqlen_k"};
  for (int d = 0; d < 3; ++d) {
    if (t.shape[d] > limits[d]) {
      throw_field_error(fmt::format("startend_row_indices.shape[{}] ({})", d, dims[d]),
                        std::to_string(t.shape[d]), fmt::format("0 to {}", limits[d]));
    }
  }
  const long long key_columns = t.shape[0] * t.shape[1] * t.shape[2];
  const long long blocks =
      (key_columns + runtime::kMaskKernelThreads - 1) / runtime::kMaskKernelThreads;
  if (blocks > INT32_MAX) {
    throw_field_error(
        "startend_row_indices: batch*heads*seqlen_k", std::to_string(key_columns),
        fmt::format("at most {}", INT32_MAX * static_cast<long long>(runtime::kMaskKernelThreads)));
  }
  if (key_columns == 0) return;

  const CUstream stream = static_cast<CUstream>(stream_handle);
  const runtime::MaskKernel kernel = runtime::compile_mask_kernel({"", Arch::auto_detect});
  const runtime::FirstErrorSlot first_bad(stream);
  IntervalCheckParams params{};
  params.intervals = static_cast<const int*>(t.data);
  params.first_bad = first_bad.device();
  params.key_columns = key_columns;
  params.columns = mask.columns;
  params.causal = mask.causal ? 1 : 0;
  params.seqlen_q = seqlen_q;
  const unsigned grid[3] = {static_cast<unsigned>(blocks), 1, 1};
  runtime::launch_mask_kernel(kernel, grid, &params, stream);
  if (const auto found = first_bad.wait_and_read()) {
    throw_bad_element(t, mask, seqlen_q, rows, *found);
  }
}

}  // namespace

void validate_intervals(const TensorView& startend_row_indices, const MaskSpec& mask, int seqlen_q,
                        jit::Stream stream) {
  validate_intervals_of(startend_row_indices, mask, seqlen_q, "seqlen_q", stream);
}

namespace jit::detail {

void validate_intervals_on_request(bool requested, const MaskSpec& mask,
                                   const TensorView& intervals, int seqlen_q, CUstream stream,
                                   bool positions) {
  if (mask.kind != MaskKind::flashmask || !(requested || runtime::debug_mode())) return;
  validate_intervals_of(intervals, mask, seqlen_q,
                        positions ? "the cache's capacity: over a KV cache the rows are positions"
                                  : "seqlen_q",
                        stream);
}

}  // namespace jit::detail
}  // namespace attnjit
