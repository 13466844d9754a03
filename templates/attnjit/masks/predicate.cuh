// Helpers of the element-predicate expressions that emit_cuda_expression generates
// (compiler/ir/predicate.hpp): int32 arithmetic with the mask language's semantics, identical
// to the host PredicateEvaluator. Two's-complement wrap-around (through unsigned arithmetic, so
// never signed-overflow UB); `/` truncates toward zero; x / 0 == 0, x % 0 == 0,
// INT_MIN / -1 == INT_MIN, INT_MIN % -1 == 0, pred_abs(INT_MIN) == INT_MIN.
//
// Also compiles as plain C++ (g++, no CUDA): the host tests check these helpers against the
// evaluator. The generated expression additionally needs `b, h, q, k`, `tensor_at(slot, index)`
// and `scalar_at(slot)` from the kernel; pred_tensor_read gives tensor_at its semantics.
#pragma once

#include "attnjit/common/params.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNJIT_PREDICATE_FN __device__ __forceinline__
#else
#define ATTNJIT_PREDICATE_FN inline
#endif

namespace attnjit {

/// x + y with wrap-around.
ATTNJIT_PREDICATE_FN int pred_add(int x, int y) {
  return static_cast<int>(static_cast<unsigned>(x) + static_cast<unsigned>(y));
}

/// x - y with wrap-around (unary minus is pred_sub(0, x)).
ATTNJIT_PREDICATE_FN int pred_sub(int x, int y) {
  return static_cast<int>(static_cast<unsigned>(x) - static_cast<unsigned>(y));
}

/// x * y with wrap-around.
ATTNJIT_PREDICATE_FN int pred_mul(int x, int y) {
  return static_cast<int>(static_cast<unsigned>(x) * static_cast<unsigned>(y));
}

/// log2(y) when y is a positive power of two, else -1. Division by such a y (block sizes,
/// parities) is a shift: a hardware integer division costs tens of instructions per element.
ATTNJIT_PREDICATE_FN int pred_power_of_two_shift(int y) {
  if (y <= 0 || (y & (y - 1)) != 0) return -1;
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return __ffs(y) - 1;
#else
  return __builtin_ctz(static_cast<unsigned>(y));
#endif
}

/// x / y truncated toward zero; 0 when y == 0; INT_MIN / -1 wraps to INT_MIN.
ATTNJIT_PREDICATE_FN int pred_div(int x, int y) {
  const int shift = pred_power_of_two_shift(y);
  // Truncation toward zero: a negative x is biased by y - 1 (never overflows) before the
  // arithmetic shift.
  if (shift >= 0) return (x < 0 ? x + (y - 1) : x) >> shift;
  if (y == 0) return 0;
  if (y == -1) return pred_sub(0, x);
  return x / y;
}

/// x % y with the sign of x; 0 when y == 0 or y == -1.
ATTNJIT_PREDICATE_FN int pred_mod(int x, int y) {
  const int shift = pred_power_of_two_shift(y);
  if (shift >= 0) {
    return pred_sub(x, static_cast<int>(static_cast<unsigned>(pred_div(x, y)) << shift));
  }
  if (y == 0 || y == -1) return 0;
  return x % y;
}

ATTNJIT_PREDICATE_FN int pred_min(int x, int y) {
  return x < y ? x : y;
}

ATTNJIT_PREDICATE_FN int pred_max(int x, int y) {
  return x < y ? y : x;
}

/// |x|; INT_MIN stays INT_MIN.
ATTNJIT_PREDICATE_FN int pred_abs(int x) {
  return x < 0 ? pred_sub(0, x) : x;
}

/// Element `index` of one tensor row of `length` values; 0 outside [0, length), without
/// touching memory there. The kernel's tensor_at(slot, index) reads its (slot, batch) row so.
ATTNJIT_PREDICATE_FN int pred_tensor_read(const int* row, int length, int index) {
  return index >= 0 && index < length ? row[index] : 0;
}

/// Element `index` of the predicate tensor in `slot`, row `batch` (row 0 when the tensor has
/// one row); 0 outside [0, length). The generated expression's tensor_at in the kernels.
ATTNJIT_PREDICATE_FN int predicate_tensor_at(const PredicateInputs& in, int slot, int batch,
                                             int index) {
  return pred_tensor_read(in.tensors[slot] + batch * in.tensor_row_stride[slot],
                          in.tensor_length[slot], index);
}

}  // namespace attnjit

#undef ATTNJIT_PREDICATE_FN
