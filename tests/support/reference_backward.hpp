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
};

/// Gradients of O = softmax(m(scale * Q K^T), masked as in reference_forward) V, m the score
/// modifiers of p.score_mod (modified_score), for the upstream
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
/// (bf16) or 1e-2 (fp16). When ref is all zeros, got must be exactly all zeros. Throws Error
/// when the sizes differ.
Comparison compare_gradient(std::string_view name, std::span<const float> got,
                            std::span<const double> ref, std::span<const float> ref_lowp,
                            DType dtype);

}  // namespace attnjit::testing
