// The CPU reference attention backward (exact float64 gradients and an emulation of PyTorch's
// math attention in bf16/fp16 under autograd) and the gradient comparison that decides pass or
// fail. Same problems and mask semantics as reference_forward (support/reference.hpp).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "attnjit/spec.hpp"
#include "support/reference.hpp"

namespace attnjit::testing {

/// Gradients of sum(O * dO) with respect to q, k and v.
struct Gradients {
  std::vector<double> dq;  ///< [B, Sq, H, D], exact float64
  std::vector<double> dk;  ///< [B, Sk, Hkv, D], exact float64
  std::vector<double> dv;  ///< [B, Sk, Hkv, Dv], exact float64
  /// Same shapes: PyTorch's math attention in p.dtype under autograd. S = Q K^T accumulated in
  /// fp32, scaled, rounded, then the score modifiers in fp32; softmax in fp32, P rounded;
  /// dV = P^T dO and dP = dO V^T (fp32 accumulation, rounded); dS = P * (dP - rowsum(dP * P))
  /// * m' in fp32 (m' the modifiers' derivative), rounded; dQ = scale * dS K and
  /// dK = scale * dS^T Q (fp32 accumulation, rounded). With GQA each query head's rounded dK,
  /// dV are summed over the group in fp32 and rounded again. Its error sets the tolerance of
  /// compare_gradient.
  std::vector<float> dq_lowp, dk_lowp, dv_lowp;
  /// What a correct kernel's dQ and dK may carry where dS = P (dP - D) cancels: a kernel forms
  /// dP and D by fp32 sums over Dv, whose rounding (modelled as 4 sqrt(Dv) 2^-24 of the
  /// magnitudes summed, sum_d |dO_d v_d| and sum_j P_j sum_d |dO_d v_jd|) survives where the two
  /// nearly cancel, while the float64 reference and the low-precision baseline (which forms D
  /// from the same rounded dP) cancel exactly: a row that sees one key has dS = 0 exactly. The
  /// bounds take these dS errors through dQ = scale dS K and dK = scale dS^T Q (a GQA group's
  /// heads added); compare_gradient adds them to its limit. Zero where no row sees a key.
  double dq_cancellation = 0, dk_cancellation = 0;
  /// Sinks (Problem::sinks): d t[h] = -sum_i P_sink,i D_i over the rows of head h in every
  /// batch, [H] in float64 (empty without sinks); the baseline sums each row's term, P_sink
  /// rounded to the dtype times its D, in fp32.
  std::vector<double> d_sinks;
  std::vector<float> d_sinks_lowp;
  /// What a correct kernel's d_sinks may carry: its D = rowsum(dO * O) reads O rounded to the
  /// dtype and sums in fp32, off by up to (u + 4 sqrt(Dv) 2^-24) sum_d |dO_d O_d| per row (u the
  /// dtype's unit roundoff), weighted by the row's P_sink and summed over the head's rows: the
  /// largest over the heads.
  double d_sinks_cancellation = 0;
};

/// Gradients of O = softmax(m(scale * Q K^T), masked as in reference_forward) V, m the score
/// modifiers of p.score_mod (modified_score), with p.sinks in the denominators (and their
/// gradient), for the upstream
/// gradient d_o [B, Sq, H, Dv], with q, k, v laid out as for reference_forward (values
/// representable in p.dtype). dK and dV of a KV head sum over its query heads. A row with no
/// visible key contributes nothing: its dq is exactly 0. Runs (batch, head) pairs on all
/// hardware threads and keeps one dK and dV buffer per query head, B*H*Sk*(D+Dv)*12 bytes.
/// Throws attnjit::Error for inconsistent shapes, sizes or mask.
Gradients reference_backward(const Problem& p, std::span<const float> q, std::span<const float> k,
                             std::span<const float> v, std::span<const float> d_o);

/// FlashAttention's criterion for one gradient (`name`: "dq", "dk" or "dv"): passes iff every
/// value of `got` is finite, max|got - ref| <= 2 * max|ref_lowp - ref| + atol with
/// atol = u * max|ref| (u = 2^-8 for bf16, 2^-11 for fp16), and ||got - ref|| / ||ref|| <= 5e-2
/// (bf16) or 1e-2 (fp16); `cancellation` (Gradients::dq_cancellation, dk_cancellation) is
/// added to the max-error limit. When ref is all zeros, every |got| must be within
/// `cancellation` (exactly zero when it is 0: every row masked). Throws Error when the sizes
/// differ or `cancellation` is negative or not finite.
Comparison compare_gradient(std::string_view name, std::span<const float> got,
                            std::span<const double> ref, std::span<const float> ref_lowp,
                            DType dtype, double cancellation = 0);

}  // namespace attnjit::testing
