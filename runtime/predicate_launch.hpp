// The runtime side of predicate masks: the host checks of PredicateArgs against the spec's
// predicate, and the block classification launches that build the tables the attention
// kernels read.
#pragma once

#include <cuda.h>

#include <memory>
#include <vector>

#include "attnjit/params.cuh"
#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "compiler/ir/lowering.hpp"
#include "runtime/kernel_set.hpp"
#include "runtime/launch_support.hpp"

namespace attnjit::jit::detail {

/// Checks `args` against the spec's predicate (the count of scalars, every named tensor
/// present once and no other, int32, rank 1 or 2, rows 1 or `batch`, contiguous, in device
/// memory) and gives the kernels' PredicateInputs; throws Error naming the field, the value and
/// what is accepted. For other masks, checks that `args` is empty.
PredicateInputs predicate_inputs(const AttentionSpec& spec, const PredicateArgs& args, int batch);

/// The device memory the element bits of partial predicate tiles may take per block table:
/// ATTNJIT_PREDICATE_BITS_MIB (MiB, an integer from 0 to 1048576; 0: every partial tile
/// evaluates the predicate in the attention kernels), else 256 MiB. Throws Error on a bad
/// value.
std::size_t predicate_bits_budget();

/// A block table and the element bits of its partial tiles (null when no slot was given).
struct BlockTable {
  const int* table = nullptr;
  const unsigned* bits = nullptr;
};

/// Launches the predicate_blocks kernel `desc` on `stream` to classify the tiles of
/// desc.block_m x desc.block_n and store the bits of partial tiles while slots last
/// (predicate_bits_budget()); the buffers are new scratch appended to `scratch`. Returns
/// the table (as the kernels' `minmax` pointer) and the bits, or nulls when the problem is
/// empty.
BlockTable build_block_table(const LoadedKernel& kernel, const KernelDesc& desc,
                             const MaskLowering& mask, const PredicateInputs& inputs,
                             const Shapes& shapes, CUstream stream,
                             std::vector<std::unique_ptr<StreamScratch>>& scratch);

}  // namespace attnjit::jit::detail
