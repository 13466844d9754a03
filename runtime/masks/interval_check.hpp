// The device check of user-supplied FlashMask vectors: attnjit::validate_intervals (declared in
// include/attnjit/mask_builder.hpp) and the hook through which Kernel::forward and
// Kernel::backward run it on request or in debug mode.
#pragma once

#include <cuda.h>

#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"

namespace attnjit::jit::detail {

/// Runs validate_intervals(intervals, mask, seqlen_q, stream) when `requested` or
/// ATTNJIT_DEBUG=1; nothing for masks without vectors. Waits for `stream` when it runs.
/// `positions`: the rows are positions in a KV cache's sequences, seqlen_q its capacity.
void validate_intervals_on_request(bool requested, const MaskSpec& mask,
                                   const TensorView& intervals, int seqlen_q, CUstream stream,
                                   bool positions = false);

}  // namespace attnjit::jit::detail
