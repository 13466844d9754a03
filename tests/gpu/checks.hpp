// The checks every GPU test applies to a case: fresh inputs, the kernels on the GPU, the CPU
// float64 reference, FlashAttention's criterion, and untouched padding.
#pragma once

#include <utility>
#include <vector>

#include "gpu/gpu_case.hpp"

namespace attnjit::gpu_test {

/// O and LSE of the case's forward kernel (or attnjit's fp32 reference kernel) against the
/// CPU reference; o's padding stays untouched.
void check_forward(const Case& c, bool reference_kernel = false);

/// O and LSE of the case's forward kernel against attnjit's fp32 reference kernel on the same
/// inputs, for problems too large for the CPU reference: relative L2 error of O below 1e-2, its
/// largest error below 2e-2 max(1, max |O|), LSE within 1e-3 (log Sk + 1).
void check_against_reference_kernel(const Case& c);

/// dQ, dK and dV of the case's backward (atomic or deterministic) against the CPU reference
/// gradients; the padding stays untouched.
void check_backward(const Case& c, bool deterministic);

/// check_forward of every case, their kernels compiled ahead on every core (CompileAhead),
/// their inputs and references made ahead on other threads.
void check_forwards(const std::vector<Case>& cases);

/// A case and the backward modes it is checked in, on the same inputs and reference gradients.
struct BackwardRun {
  Case c;
  bool atomic = true;
  bool deterministic = true;

  /// The case in one mode.
  static BackwardRun in_mode(Case c, bool deterministic) {
    return {std::move(c), !deterministic, deterministic};
  }
};

/// check_backward of every run in its modes (atomic first; one reference per run), their
/// kernels compiled ahead on every core (CompileAhead), their inputs and references made ahead
/// on other threads.
void check_backwards(const std::vector<BackwardRun>& runs);

/// Whether two gradients hold the same bits.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

/// `repeats` more deterministic backward runs of the case on the same inputs give dQ, dK and
/// dV bitwise identical to the first run's.
void check_deterministic_repeatable(const Case& c, int repeats = 1);

/// check_deterministic_repeatable of every case, their kernels compiled and their inputs made
/// ahead; with `atomic_repeats` > 0 also warns, for the log, in how many of that many more
/// atomic-mode runs dQ differed from the first one's (atomic_dq_variations).
void check_deterministic_repeatable(const std::vector<Case>& cases, int repeats,
                                    int atomic_repeats = 0);

/// For the log: in how many of `repeats` more atomic-mode runs of the case on the same inputs
/// dQ differs from the first run's (the order the additions land in varies).
int atomic_dq_variations(const Case& c, int repeats);

}  // namespace attnjit::gpu_test
