// Parameter blocks of the mask utility kernels (device builders and the interval check),
// shared verbatim by the host (which fills them) and the kernels (which take them by value).
// Plain C++: no CUDA keywords, fixed-size types only, so the layout is identical under g++ and
// NVRTC (LP64).
#pragma once

namespace attnjit {

/// Arguments of a device mask builder (mask_builders.cuh). Tensors are contiguous int32.
struct MaskBuildParams {
  int* intervals;             ///< out: startend_row_indices [B, Hm, N, C]
  const int* offsets;         ///< [B, segments + 1], or null
  const int* prefix;          ///< [B], or null
  const int* prefixes;        ///< [B, segments], or null
  const int* test;            ///< [B], or null
  const int* dropped_start;   ///< [B], or null
  const int* dropped_length;  ///< [B], or null
  /// The first bad device parameter as (b << 36) | (index << 4) | code (see
  /// mask_builders.cuh), reduced by atomicMin; null: the parameters are not checked.
  unsigned long long* first_error;
  unsigned long long seed;
  int batch, mask_heads, seqlen, segments;
  int window, global_tokens, window_left, window_right;
};

/// Arguments of the interval check (interval_check.cuh).
struct IntervalCheckParams {
  const int* intervals;  ///< startend_row_indices [B, Hm, Sk, C]
  /// The linear index of the first bad element (see interval_check.cuh), reduced by
  /// atomicMin; all ones when there is none.
  unsigned long long* first_bad;
  long long key_columns;  ///< B * Hm * Sk
  int columns;            ///< C: 1, 2 or 4
  int causal;             ///< 1: the columns are LTS[, LTE]; 0: LTS, UTE or LTS, LTE, UTS, UTE
  int seqlen_q;
};

}  // namespace attnjit
