// The runtime side of predicate masks: the host checks of PredicateArgs against the inputs
// the plan says the predicate reads, and the budget of its element bits.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "attnjit/common/params.cuh"
#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "compiler/ir/lowering.hpp"

namespace attnjit::jit::detail {

/// Checks `args` against the predicate's inputs `used` (the count of scalars, every named
/// tensor present once and no other, int32, rank 1 or 2, rows 1 or `batch`, contiguous, in
/// device memory) and gives the kernels' PredicateInputs; throws Error naming the field, the
/// value and what is accepted. For other masks, checks that `args` is empty. A packed batch
/// (`packed`) passes its sequence count as `batch`: a tensor's row b is sequence b's.
PredicateInputs predicate_inputs(const AttentionSpec& spec, const PredicateLaunch& used,
                                 const PredicateArgs& args, int batch, bool packed = false);

/// The device memory the element bits of partial predicate tiles may take per block table:
/// ATTNJIT_PREDICATE_BITS_MIB (MiB, an integer from 0 to 1048576; 0: every partial tile
/// evaluates the predicate in the attention kernels), else 256 MiB. Throws Error on a bad
/// value.
std::size_t predicate_bits_budget();

}  // namespace attnjit::jit::detail
