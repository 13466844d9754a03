// The checks every GPU test applies to a case: fresh inputs, the kernels on the GPU, the CPU
// float64 reference, FlashAttention's criterion, and untouched padding.
#pragma once

#include "gpu/gpu_case.hpp"

namespace attnjit::gpu_test {

/// O and LSE of the case's forward kernel (or attnjit's fp32 reference kernel) against the
/// CPU reference; o's padding stays untouched.
void check_forward(const Case& c, bool reference_kernel = false);

/// dQ, dK and dV of the case's backward (atomic or deterministic) against the CPU reference
/// gradients; the padding stays untouched.
void check_backward(const Case& c, bool deterministic);

/// Whether two gradients hold the same bits.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

/// `repeats` more deterministic backward runs of the case on the same inputs give dQ, dK and
/// dV bitwise identical to the first run's.
void check_deterministic_repeatable(const Case& c, int repeats = 1);

/// For the log: in how many of `repeats` more atomic-mode runs of the case on the same inputs
/// dQ differs from the first run's (the order the additions land in varies).
int atomic_dq_variations(const Case& c, int repeats);

}  // namespace attnjit::gpu_test
