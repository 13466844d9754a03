// Shared by Kernel::forward and Kernel::backward: the checks of the attention tensors against
// the spec, stream-ordered scratch memory, and grid arithmetic.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string_view>

#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"

namespace attnjit::jit::detail {

/// The problem sizes the tensors agree on.
struct Shapes {
  int batch = 0, seqlen_q = 0, seqlen_k = 0, heads = 0, kv_heads = 0, mask_heads = 1;
};

/// Checks q, k, v, o, lse, startend_row_indices, the window sizes and the scale of `args`
/// (ForwardArgs or BackwardArgs) against `spec`; throws Error naming the first bad field.
template <class Args>
Shapes check_args(const AttentionSpec& spec, const Args& args, bool lse_required);

/// Checks that `t` has the dtype and shape of `like` and a valid layout (contiguous last
/// dim, 16-byte rows, 16-byte aligned data); the message names `name` and `like_name`.
void check_same_layout(std::string_view name, const TensorView& t, std::string_view like_name,
                       const TensorView& like);

/// Device memory from the stream-ordered pool, returned to it after the work queued on the
/// stream (cuMemAllocAsync / cuMemFreeAsync).
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, CUstream stream);
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  ~StreamScratch();
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(ptr_));
  }

 private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
};

inline unsigned ceil_div(std::int64_t a, std::int64_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

}  // namespace attnjit::jit::detail
