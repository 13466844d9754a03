// Device builders of the FlashMask families, build_<family> each (the family table,
// dsl/families.hpp, names the MaskBuildArgs fields each reads; include/attnjit/mask_builder.hpp
// describes them; dsl/builders.hpp has the host builders they equal). One thread per key column
// j of one batch row b (and mask head h): grid (ceil(N / blockDim.x), B, Hm). Columns find
// their segment by a binary search over the row's offsets, O(N log S) per row. N is the sample
// length, "segment d" of a row is [o_d, o_{d+1}) of its offsets row.
//
// With p.first_error set, the same launch also checks the device parameters and keeps the
// first violation by atomicMin on (b << 36) | (index << 4) | code, code one of MaskParamError
// (index: the offsets entry or segment; 0 for one-per-sample values).
#pragma once

#include "attnjit/masks/mask_params.cuh"

namespace attnjit {

enum MaskParamError {
  kOffsetsStart = 1,     ///< offsets[b][0] != 0
  kOffsetsDecrease = 2,  ///< offsets[b][index] < offsets[b][index - 1]
  kOffsetsEnd = 3,       ///< offsets[b][S] != N
  kSampleValue = 4,      ///< prefix, test or dropped_start [b] outside [0, N]
  kDroppedLength = 5,    ///< dropped_length[b] outside [0, N - dropped_start[b]]
  kSegmentPrefix = 6,    ///< prefixes[b][index] outside [0, length of segment index]
};

namespace mask_build {

/// A key column's segment: its index d and [start, end) = [o_d, o_{d+1}).
struct Segment {
  int index, start, end;
};

__device__ __forceinline__ int key_column() {
  return blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ void report(const MaskBuildParams& p, int b, long long index, int code) {
  atomicMin(p.first_error, (static_cast<unsigned long long>(b) << 36) |
                               (static_cast<unsigned long long>(index) << 4) |
                               static_cast<unsigned long long>(code));
}

/// The first of the C values of column j in (b, h).
template <int kColumns>
__device__ __forceinline__ int* column_out(const MaskBuildParams& p, int b, int h, int j) {
  const long long row = static_cast<long long>(b) * p.mask_heads + h;
  return p.intervals + (row * p.seqlen + j) * kColumns;
}

__device__ __forceinline__ const int* offsets_row(const MaskBuildParams& p, int b) {
  return p.offsets + static_cast<long long>(b) * (p.segments + 1);
}

/// Checks a row of offsets: starts at 0, never decreases, ends at N. The threads of the row
/// share the entries (a row may hold more entries than columns).
__device__ __forceinline__ void check_offsets(const MaskBuildParams& p, int b, const int* o) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = key_column(); i <= p.segments; i += stride) {
    const int value = o[i];
    if (i == 0 && value != 0) report(p, b, i, kOffsetsStart);
    if (i > 0 && value < o[i - 1]) report(p, b, i, kOffsetsDecrease);
    if (i == p.segments && value != p.seqlen) report(p, b, i, kOffsetsEnd);
  }
}

/// The segment holding column j: the first u in [1, S] with o_u > j gives d = u - 1. Stays
/// inside the row whatever the data.
__device__ __forceinline__ Segment segment_of(const int* o, int segments, int j) {
  int lo = 1;
  int hi = segments;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (o[mid] > j) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return {lo - 1, o[lo - 1], o[lo]};
}

/// values[b], checked against [lo, hi] by the row's first thread when checking.
__device__ __forceinline__ int sample_value(const MaskBuildParams& p, const int* values, int b,
                                            long long lo, long long hi, int code) {
  const int value = values[b];
  if (p.first_error != nullptr && key_column() == 0 && (value < lo || value > hi)) {
    report(p, b, 0, code);
  }
  return value;
}

/// The offsets row of b, checked when checking.
__device__ __forceinline__ const int* checked_offsets(const MaskBuildParams& p, int b) {
  const int* o = offsets_row(p, b);
  if (p.first_error != nullptr) check_offsets(p, b, o);
  return o;
}

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace mask_build

/// Causal, 1 column, reads window >= 1: LTS = min(j + window, N).
__device__ __forceinline__ void build_sliding_window(const MaskBuildParams& p) {
  using namespace mask_build;
  const int j = key_column();
  if (j >= p.seqlen) return;
  const long long lts = static_cast<long long>(j) + p.window;
  column_out<1>(p, blockIdx.y, 0, j)[0] = static_cast<int>(lts < p.seqlen ? lts : p.seqlen);
}

/// Causal, 1 column, reads offsets: LTS = end of j's segment.
__device__ __forceinline__ void build_causal_document(const MaskBuildParams& p) {
  using namespace mask_build;
  const int b = blockIdx.y;
  const int* o = checked_offsets(p, b);
  const int j = key_column();
  if (j >= p.seqlen) return;
  column_out<1>(p, b, 0, j)[0] = segment_of(o, p.segments, j).end;
}

/// Non-causal, 2 columns, reads offsets: LTS = end, UTE = start of j's segment.
__device__ __forceinline__ void build_document(const MaskBuildParams& p) {
  using namespace mask_build;
  const int b = blockIdx.y;
  const int* o = checked_offsets(p, b);
  const int j = key_column();
  if (j >= p.seqlen) return;
  const Segment s = segment_of(o, p.segments, j);
  int* out = column_out<2>(p, b, 0, j);
  out[0] = s.end;
  out[1] = s.start;
}

/// Causal, 1 column, reads offsets (segment 0 is the question, the others are the answers):
/// question columns LTS = N, answer columns LTS = the end of their answer.
__device__ __forceinline__ void build_share_question(const MaskBuildParams& p) {
  using namespace mask_build;
  const int b = blockIdx.y;
  const int* o = checked_offsets(p, b);
  const int j = key_column();
  if (j >= p.seqlen) return;
  const Segment s = segment_of(o, p.segments, j);
  column_out<1>(p, b, 0, j)[0] = s.index == 0 ? p.seqlen : s.end;
}

/// Non-causal, 4 columns, reads global_tokens, window_left, window_right (each >= 0):
/// j < global_tokens: N, N, 0, 0; else min(j + left + 1, N), N, global_tokens,
/// max(j - right, global_tokens).
__device__ __forceinline__ void build_global_sliding_window(const MaskBuildParams& p) {
  using namespace mask_build;
  const int j = key_column();
  if (j >= p.seqlen) return;
  int* out = column_out<4>(p, blockIdx.y, 0, j);
  const int n = p.seqlen;
  if (j < p.global_tokens) {
    out[0] = n;
    out[1] = n;
    out[2] = 0;
    out[3] = 0;
    return;
  }
  const long long lts = static_cast<long long>(j) + p.window_left + 1;
  const long long ute = static_cast<long long>(j) - p.window_right;
  out[0] = static_cast<int>(lts < n ? lts : n);
  out[1] = n;
  out[2] = p.global_tokens;
  out[3] = static_cast<int>(ute > p.global_tokens ? ute : p.global_tokens);
}

/// Causal, 2 columns, reads offsets and test [B]: the last test[b] tokens form the test block,
/// the demonstration blocks are the segments cut at N - test. j < N - test: LTS = min(end,
/// N - test), LTE = N - test; else LTS = LTE = N.
__device__ __forceinline__ void build_causal_blockwise(const MaskBuildParams& p) {
  using namespace mask_build;
  const int b = blockIdx.y;
  const int* o = checked_offsets(p, b);
  const int demo = p.seqlen - sample_value(p, p.test, b, 0, p.seqlen, kSampleValue);
  const int j = key_column();
  if (j >= p.seqlen) return;
  int* out = column_out<2>(p, b, 0, j);
  if (j >= demo) {
    out[0] = p.seqlen;
    out[1] = p.seqlen;
    return;
  }
  const int end = segment_of(o, p.segments, j).end;
  out[0] = end < demo ? end : demo;
  out[1] = demo;
}

/// Non-causal, 2 columns, reads prefix [B]: LTS = N; UTE = j < prefix ? 0 : j.
__device__ __forceinline__ void build_prefix_lm_causal(const MaskBuildParams& p) {
  using namespace mask_build;
  const int b = blockIdx.y;
  const int prefix = sample_value(p, p.prefix, b, 0, p.seqlen, kSampleValue);
  const int j = key_column();
  if (j >= p.seqlen) return;
  int* out = column_out<2>(p, b, 0, j);
  out[0] = p.seqlen;
  out[1] = j < prefix ? 0 : j;
}

/// Non-causal, 2 columns, reads offsets and prefixes [B, S] (one per segment): LTS = end;
/// UTE = j < start + prefixes[d] ? start : j.
__device__ __forceinline__ void build_prefix_lm_document(const MaskBuildParams& p) {
  using namespace mask_build;
  const int b = blockIdx.y;
  const int* o = checked_offsets(p, b);
  const int* prefixes = p.prefixes + static_cast<long long>(b) * p.segments;
  if (p.first_error != nullptr) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long d = key_column(); d < p.segments; d += stride) {
      const long long length = static_cast<long long>(o[d + 1]) - o[d];
      if (prefixes[d] < 0 || prefixes[d] > length) report(p, b, d, kSegmentPrefix);
    }
  }
  const int j = key_column();
  if (j >= p.seqlen) return;
  const Segment s = segment_of(o, p.segments, j);
  int* out = column_out<2>(p, b, 0, j);
  out[0] = s.end;
  out[1] =
      static_cast<long long>(j) < static_cast<long long>(s.start) + prefixes[s.index] ? s.start : j;
}

/// Causal, 2 columns, reads dropped_start [B] and dropped_length [B]: j in [start, start +
/// length): LTS = j, LTE = start + length; else LTS = LTE = N.
__device__ __forceinline__ void build_qk_sparse(const MaskBuildParams& p) {
  using namespace mask_build;
  const int b = blockIdx.y;
  const int start = sample_value(p, p.dropped_start, b, 0, p.seqlen, kSampleValue);
  const int length = sample_value(p, p.dropped_length, b, 0,
                                  static_cast<long long>(p.seqlen) - start, kDroppedLength);
  const int j = key_column();
  if (j >= p.seqlen) return;
  int* out = column_out<2>(p, b, 0, j);
  const long long end = static_cast<long long>(start) + length;
  const bool dropped = j >= start && j < end;
  out[0] = dropped ? j : p.seqlen;
  out[1] = dropped ? static_cast<int>(end) : p.seqlen;
}

/// Causal, 1 column, reads seed; Hm mask heads from the output's shape. Key j of (batch row b,
/// mask head h) stays visible to rows j <= i < r with r = j + 1 + splitmix64(seed +
/// 0x9E3779B97F4A7C15 * (1 + (b * Hm + h) * N + j)) % (N - j) (unsigned 64-bit arithmetic;
/// r = N: never evicted), i.e. dsl::random_eviction of those rows.
__device__ __forceinline__ void build_random_eviction(const MaskBuildParams& p) {
  using namespace mask_build;
  const int j = key_column();
  if (j >= p.seqlen) return;
  const unsigned long long n = static_cast<unsigned long long>(p.seqlen);
  const unsigned long long row =
      static_cast<unsigned long long>(blockIdx.y) * p.mask_heads + blockIdx.z;
  const unsigned long long hash = splitmix64(p.seed + 0x9E3779B97F4A7C15ull * (1 + row * n + j));
  column_out<1>(p, blockIdx.y, blockIdx.z, j)[0] = static_cast<int>(j + 1 + hash % (n - j));
}

}  // namespace attnjit
