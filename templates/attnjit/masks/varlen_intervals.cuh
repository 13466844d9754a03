// The vectors of a packed batch (varlen). q holds the sequences' queries one after the other,
// k and v their keys: sequence s has queries [cu_q[s], cu_q[s + 1]) and keys
// [cu_k[s], cu_k[s + 1]), of which the first seqused_k[s] (all without seqused_k) are used.
// Key j of sequence s, at local position jl = j - cu_k[s], is visible to a range of rows of
// its own sequence, in local positions with the bottom-right alignment off = Sk - Sq of that
// sequence:
//   none, flashmask(causal=false)  all Sq rows of s
//   causal, flashmask(causal=true) local rows i >= jl - off
//   sliding window                 jl - off - window_right <= i <= jl - off + window_left
// Everything else, and keys past seqused_k or past the last sequence, is hidden. A FlashMask's
// own vectors (startend_row_indices [1, Hm, total_k, C], rows local to each sequence) then
// hide more of those rows: they are shifted to packed rows and clamped to the sequence.
// The attention kernels take the result as a non-causal FlashMask over one batch row (with
// VISIBLE_BEGIN / VISIBLE_END vectors where the range does not fold into the user's), so every
// kernel family, the min/max tables and the CTA orders serve packed batches as they are. Under
// shared boundaries (cu_k is cu_q) a causal mask is the packed row's own causal diagonal,
// which the kernels apply by index: the rows before the sequence need no vector then, as for
// causal documents. One thread per packed key and mask head: O(Hm total_k log B).
//
// With p.varlen.first_error set the launch also checks the boundaries and keeps the first
// violation by atomicMin on (entry << 4) | code, code one of VarlenError.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/masks/mask.cuh"
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

/// The user's FlashMask values of one packed key, local to its sequence (an absent LTE reads
/// as the sequence's query count, an absent UTS as 0), from startend_row_indices
/// [1, Hm, total_k, kUserColumns] with the roles of docs/masks.md.
struct LocalIntervals {
  long long lts, lte, uts, ute;
  bool has_lts, has_ute;
};

template <int kUserColumns, bool kUserCausal>
__device__ __forceinline__ LocalIntervals local_intervals(const int* values, long long queries) {
  LocalIntervals v{queries, queries, 0, 0, kUserColumns > 0, false};
  if (kUserColumns == 0) return v;
  v.lts = values[0];
  if (kUserColumns == 2 && kUserCausal) v.lte = values[1];
  if (kUserColumns == 2 && !kUserCausal) {
    v.ute = values[1];
    v.has_ute = true;
  }
  if (kUserColumns == 4) {
    v.lte = values[1];
    v.uts = values[2];
    v.ute = values[3];
    v.has_ute = true;
  }
  return v;
}

/// Writes the packed vectors of every packed key and mask head into p.varlen.intervals
/// ([Hm, total_k, Mask::kColumns], the columns of Mask): its visible rows [begin, end) of its
/// own sequence (cut by kMask), and the user's FlashMask vectors (kUserColumns, causal with
/// kMask == kVarlenCausal) shifted to packed rows, each clamped to the sequence. A visible
/// bound folds into a one-sided vector (LTS without LTE: min(LTS, end); UTE without UTS:
/// max(UTE, begin)), else Mask has a VISIBLE_BEGIN / VISIBLE_END vector for it. Whatever the
/// boundaries and values hold, every value stays in [0, total_q], so bad data gives a
/// meaningless mask, never a bad access. One thread per key, blockIdx.y the mask head.
template <int kMask, int kUserColumns, class Mask, class Params>
__device__ __forceinline__ void varlen_intervals(const Params& p) {
  static_assert(Mask::kHasLower, "every packed key has a last visible row");
  static_assert(Mask::kHasUpper || Mask::kCausalByIndex, "rows before the sequence are hidden");
  static_assert(kMask != kVarlenWindow || kUserColumns == 0, "a window is a mask of its own");
  static_assert(Mask::kLteColumn < 0 || Mask::kVisibleEndColumn >= 0, "LTE: VISIBLE_END");
  static_assert(Mask::kUtsColumn < 0 || Mask::kVisibleBeginColumn >= 0, "UTS: VISIBLE_BEGIN");
  constexpr bool kUserCausal = kMask == kVarlenCausal;
  const VarlenInputs& v = p.varlen;
  const int total_q = p.seqlen_q;
  if (v.first_error != nullptr && blockIdx.y == 0) varlen::check(v, total_q, p.seqlen_k);
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.seqlen_k) return;
  const long long key = static_cast<long long>(blockIdx.y) * p.seqlen_k + j;
  int* out = v.intervals + Mask::kColumns * key;
  const int s = varlen::sequence_of(v.cu_seqlens_k, v.sequences, j);
  long long q_begin = 0, queries = 0, first = 0, last = 0;  // visible local rows [first, last)
  if (s >= 0) {
    q_begin = varlen::clamp(v.cu_seqlens_q[s], 0, total_q);
    queries = varlen::clamp(v.cu_seqlens_q[s + 1], q_begin, total_q) - q_begin;
    const long long k_begin = v.cu_seqlens_k[s];
    long long keys = static_cast<long long>(v.cu_seqlens_k[s + 1]) - k_begin;
    if (v.seqused_k != nullptr) keys = varlen::clamp(v.seqused_k[s], 0, keys);
    const long long local = j - k_begin;
    const long long diagonal = local - (keys - queries);  // the local row whose diagonal is j
    last = local < keys ? queries : 0;
    if (kMask == kVarlenCausal) first = diagonal;
    if (kMask == kVarlenWindow) {
      if (p.window_right >= 0) first = diagonal - p.window_right;
      if (p.window_left >= 0) last = min(last, diagonal + p.window_left + 1);
    }
    first = varlen::clamp(first, 0, queries);
    last = varlen::clamp(last, 0, queries);
    if (first >= last) first = last = 0;
  }
  const LocalIntervals u = local_intervals<kUserColumns, kUserCausal>(
      v.mask_vectors + kUserColumns * key, queries);
  const auto row = [&](long long local) {
    return static_cast<int>(q_begin + varlen::clamp(local, 0, queries));
  };
  const int begin = row(first), end = first < last ? row(last) : 0;
  if (Mask::kLteColumn >= 0) {
    out[Mask::kLtsColumn] = row(u.lts);
    out[Mask::kLteColumn] = row(u.lte);
  } else {
    out[Mask::kLtsColumn] = min(end, u.has_lts ? row(u.lts) : end);
  }
  if (Mask::kUtsColumn >= 0) {
    out[Mask::kUtsColumn] = row(u.uts);
    out[Mask::kUteColumn] = row(u.ute);
  } else if (Mask::kHasUpper) {
    out[Mask::kUteColumn] = max(begin, u.has_ute ? row(u.ute) : begin);
  }
  if (Mask::kVisibleBeginColumn >= 0) out[Mask::kVisibleBeginColumn] = begin;
  if (Mask::kVisibleEndColumn >= 0) out[Mask::kVisibleEndColumn] = end;
}

}  // namespace attnjit
