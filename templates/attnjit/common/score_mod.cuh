// Score modifiers of the attention kernels: logit soft-capping and ALiBi, applied to each
// score between S = Q K^T and the mask. The generated code binds the flags (like MaskPolicy)
// and passes the hook as the kernels' third template argument; without modifiers the
// kernels take ScoreMod<false, false>, whose hooks the compiler removes entirely.
//
// With s = softmax_scale * (q_i . k_j) for query row i of query head h and key j:
//   kSoftcap  s <- cap * tanh(s / cap)                    (cap: FwdParams/BwdParams::softcap)
//   kAlibi    s <- s + slope[h] * (j - (i + Sk - Sq))     (slope: params.alibi_slopes[h])
// soft-capping first. Plain kernels keep raw q . k in their accumulators and fold
// softmax_scale * log2(e) into exp2; with a modifier the hook returns the modified score
// already in log2 units, and exponent_scale() turns that folding into a unit factor.
// kSinks (the forward only) changes no score: a sink logit per query head (params.sinks[h])
// joins each row's softmax denominator where the forward finishes its rows (softmax.cuh).
#pragma once

#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"

namespace attnjit {

/// 1 / x (approximate, flushes denormals; 1 / inf = 0).
__device__ __forceinline__ float rcp_approx(float x) {
  float out;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(out) : "f"(x));
  return out;
}

template <bool kSoftcapFlag, bool kAlibiFlag, bool kSinksFlag = false>
struct ScoreMod {
  static constexpr bool kSoftcap = kSoftcapFlag;
  static constexpr bool kAlibi = kAlibiFlag;
  static constexpr bool kActive = kSoftcap || kAlibi;  ///< the scores are modified
  static constexpr bool kSinks = kSinksFlag;           ///< a sink logit joins each softmax row

  // Copies of kernel parameters (which the compiler reads from the constant bank, holding no
  // register for them) and the head's slope. The kernels make one per key block, so that
  // nothing stays in a register across their key loops.
  float scale_log2;    ///< softmax_scale * log2(e)
  float softcap_exp2;  ///< kSoftcap: 2 * scale_log2 / cap, so e^(2 s / cap) = 2^(q.k * this)
  float softcap_log2;  ///< kSoftcap: cap * log2(e)
  float slope_log2;    ///< kAlibi: slope[h] * log2(e)

  /// The hook's constants (FwdParams or BwdParams) for the CTA's query head, decoded from the
  /// paired-head grid of every kernel that takes the hook (schedule.cuh); with ALiBi a load of
  /// the head's slope (cached after the first key block). Without modifiers it emits no code.
  template <bool kOrderedCtas, class Params>
  __device__ __forceinline__ static ScoreMod make(const Params& p) {
    return make_for_head(p, kAlibi ? cta_work<true>(cta_order_of<kOrderedCtas>(p)).head : 0);
  }

  /// make() for query head `head` (persistent kernels, whose CTAs take several works).
  template <class Params>
  __device__ __forceinline__ static ScoreMod make_for_head(const Params& p, int head) {
    ScoreMod m;
    m.scale_log2 = p.scale_log2;
    m.softcap_exp2 = p.softcap_exp2;
    m.softcap_log2 = p.softcap_log2;
    m.slope_log2 = kAlibi ? p.alibi_slopes[head] * 1.4426950408889634f : 0.f;
    return m;
  }

  /// What multiplies an accumulator value inside exp2: scale * log2(e) for raw scores, 1 for
  /// scores the hook already modified. Read where used, like the parameter it replaces.
  template <class Params>
  __device__ __forceinline__ static float exponent_scale(const Params& p) {
    return kActive ? 1.f : p.scale_log2;
  }

  /// The modified score of raw `qk` = q_i . k_j, in log2 units; `distance` = j - (i + Sk - Sq)
  /// (the kernels' MaskState::diagonal is Sk - Sq), read by ALiBi only. `grad` receives
  /// d(modified) / d(s): 1 - tanh^2(s / cap) with soft-capping, else 1.
  __device__ __forceinline__ float apply(float qk, int distance, float& grad) const {
    float score;
    if (kSoftcap) {
      // tanh(x) = 1 - 2 r with r = 1 / (1 + e^(2x)): accurate near 0 in absolute terms and
      // saturating to +-1 (e^(2x) = inf gives r = 0); 1 - tanh^2 = 4 r (1 - r), without the
      // cancellation of 1 - tanh^2 where tanh saturates.
      const float r = rcp_approx(1.f + exp2_approx(qk * softcap_exp2));
      score = fmaf(-2.f, r, 1.f) * softcap_log2;
      const float r4 = 4.f * r;
      grad = fmaf(-r4, r, r4);
    } else {
      score = qk * scale_log2;
      grad = 1.f;
    }
    if (kAlibi) score = fmaf(slope_log2, static_cast<float>(distance), score);
    return score;
  }

  /// apply() without the derivative (the forward pass).
  __device__ __forceinline__ float apply(float qk, int distance) const {
    float unused;
    return apply(qk, distance, unused);
  }

  /// apply() to a score the mask may have set to -inf, which stays -inf (with grad 0 under
  /// soft-capping: its P is 0 anyway).
  __device__ __forceinline__ float apply_after_mask(float qk, int distance, float& grad) const {
    const float score = apply(qk, distance, grad);
    return qk == negative_infinity() ? qk : score;
  }
};

}  // namespace attnjit
