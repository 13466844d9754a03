// The FlashMask vectors of a packed batch (varlen=true). q holds the sequences' queries one
// after the other, k and v their keys: sequence s has queries [cu_q[s], cu_q[s + 1]) and keys
// [cu_k[s], cu_k[s + 1]), of which the first seqused_k[s] (all without seqused_k) are used.
// Key j of sequence s, at local position jl = j - cu_k[s], is visible to the rows [UTE, LTS)
// of the packed queries: the rows of its own sequence that the mask lets see it, in local
// positions with the bottom-right alignment off = Sk - Sq of that sequence:
//   none            all Sq rows of s
//   causal          local rows i >= jl - off
//   sliding window  jl - off - window_right <= i <= jl - off + window_left (-1: unbounded)
// Everything else, and keys past seqused_k or past the last sequence, is hidden (LTS = UTE).
// The attention kernels take these (LTS, UTE) as a non-causal two-column FlashMask over one
// batch row, so every kernel family, the min/max tables and the CTA orders serve packed
// batches as they are. Under shared boundaries (cu_k is cu_q) a causal mask is the packed
// row's own causal diagonal, which the kernels apply by index: LTS alone (kColumns = 1) then
// hides the later sequences, as causal-document vectors do. One thread per packed key:
// O(total_k log B).
//
// With p.varlen.first_error set the launch also checks the boundaries and keeps the first
// violation by atomicMin on (entry << 4) | code, code one of VarlenError.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/masks/mask_builders.cuh"

namespace attnjit {

enum VarlenMask { kVarlenNone = 0, kVarlenCausal = 1, kVarlenWindow = 2 };

enum VarlenError {
  kCuQStart = 1,        ///< cu_seqlens_q[0] != 0
  kCuQDecrease = 2,     ///< cu_seqlens_q[entry] < cu_seqlens_q[entry - 1]
  kCuQEnd = 3,          ///< cu_seqlens_q[B] != total_q
  kCuKStart = 4,        ///< cu_seqlens_k[0] != 0
  kCuKDecrease = 5,     ///< cu_seqlens_k[entry] < cu_seqlens_k[entry - 1]
  kCuKEnd = 6,          ///< cu_seqlens_k[B] != total_k
  kMaxSeqlenQ = 7,      ///< sequence entry - 1 has more queries than max_seqlen_q
  kMaxSeqlenK = 8,      ///< sequence entry - 1 has more keys than max_seqlen_k
  kSequsedK = 9,        ///< seqused_k[entry] outside [0, keys of sequence entry]
};

namespace varlen {

__device__ __forceinline__ void report(const VarlenInputs& v, long long entry, int code) {
  atomicMin(v.first_error,
            (static_cast<unsigned long long>(entry) << 4) | static_cast<unsigned long long>(code));
}

/// One boundary array: starts at 0, never decreases, ends at `total`; lengths <= max_length.
__device__ __forceinline__ void check_boundaries(const VarlenInputs& v, const int* cu, int total,
                                                 int max_length, int code) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long e = blockIdx.x * blockDim.x + threadIdx.x; e <= v.sequences; e += stride) {
    const int value = cu[e];
    if (e == 0 && value != 0) report(v, e, code);
    if (e > 0 && value < cu[e - 1]) report(v, e, code + 1);
    if (e > 0 && static_cast<long long>(value) - cu[e - 1] > max_length) {
      report(v, e, code == kCuQStart ? kMaxSeqlenQ : kMaxSeqlenK);
    }
    if (e == v.sequences && value != total) report(v, e, code + 2);
  }
}

__device__ __forceinline__ void check(const VarlenInputs& v, int total_q, int total_k) {
  check_boundaries(v, v.cu_seqlens_q, total_q, v.max_seqlen_q, kCuQStart);
  check_boundaries(v, v.cu_seqlens_k, total_k, v.max_seqlen_k, kCuKStart);
  if (v.seqused_k == nullptr) return;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long e = blockIdx.x * blockDim.x + threadIdx.x; e < v.sequences; e += stride) {
    const long long keys = static_cast<long long>(v.cu_seqlens_k[e + 1]) - v.cu_seqlens_k[e];
    if (v.seqused_k[e] < 0 || v.seqused_k[e] > keys) report(v, e, kSequsedK);
  }
}

/// The sequence of packed key j (a segment of the boundaries, mask_builders.cuh); -1 when j
/// lies past cu_k[B].
__device__ __forceinline__ int sequence_of(const int* cu, int sequences, int j) {
  return cu[sequences] <= j ? -1 : mask_build::segment_of(cu, sequences, j).index;
}

__device__ __forceinline__ long long clamp(long long x, long long lo, long long hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

}  // namespace varlen

/// Writes (LTS, UTE) of every packed key into p.varlen.intervals. Whatever the boundaries hold,
/// every value stays in [0, total_q], so bad data gives a meaningless mask, never a bad access.
template <int kMask, int kColumns, class Params>
__device__ __forceinline__ void varlen_intervals(const Params& p) {
  static_assert(kColumns == 2 || (kColumns == 1 && kMask == kVarlenCausal),
                "LTS alone serves causal masks by index");
  const VarlenInputs& v = p.varlen;
  const int total_q = p.seqlen_q;
  if (v.first_error != nullptr) varlen::check(v, total_q, p.seqlen_k);
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.seqlen_k) return;
  int* out = v.intervals + kColumns * static_cast<long long>(j);
  const int s = varlen::sequence_of(v.cu_seqlens_k, v.sequences, j);
  if (s < 0) {
    out[0] = 0;
    if (kColumns == 2) out[1] = 0;
    return;
  }
  const long long q_begin = varlen::clamp(v.cu_seqlens_q[s], 0, total_q);
  const long long q_end = varlen::clamp(v.cu_seqlens_q[s + 1], q_begin, total_q);
  const long long k_begin = v.cu_seqlens_k[s];
  long long keys = static_cast<long long>(v.cu_seqlens_k[s + 1]) - k_begin;
  if (v.seqused_k != nullptr) keys = varlen::clamp(v.seqused_k[s], 0, keys);
  const long long queries = q_end - q_begin;
  const long long local = j - k_begin;
  const long long diagonal = local - (keys - queries);  // the local row whose diagonal is j
  long long first = 0;                                  // visible local rows [first, last)
  long long last = local < keys ? queries : 0;
  if (kMask == kVarlenCausal) first = diagonal;
  if (kMask == kVarlenWindow) {
    if (p.window_right >= 0) first = diagonal - p.window_right;
    if (p.window_left >= 0) last = min(last, diagonal + p.window_left + 1);
  }
  first = varlen::clamp(first, 0, queries);
  last = varlen::clamp(last, 0, queries);
  if (first >= last) first = last = 0;
  out[0] = static_cast<int>(q_begin + last);                   // LTS: rows from here on are hidden
  if (kColumns == 2) out[1] = static_cast<int>(q_begin + first);  // UTE: rows before are hidden
}

}  // namespace attnjit
