// The order in which the CTAs of an attention kernel take their work.
//
// The hardware starts CTAs in linear order, x fastest. With a grid (blocks, heads, batch)
// all blocks of one (batch, head) would run back to back, and under causal masks the
// heaviest blocks of the last heads would start last and set the kernel's tail (about 10%
// of a causal 8K pass on 132 SMs). So the attention kernels are launched on
// (2 * blocks, ceil(heads / 2), batch): x = 2 * step + member walks the blocks of a pair of
// heads heaviest first, alternating between the two heads. The last CTAs to start are then
// light ones, and the CTAs running at once still share the operands of about two heads in
// L2, as in the literal order. Decoding takes a few integer operations on the block indices,
// which the compiler may redo at each use rather than hold in registers across a loop.
#pragma once

#include "attnjit/primitives.cuh"

namespace attnjit {

/// One CTA's share of the grid: a block of rows (forward, dQ) or keys (backward) of one
/// (batch, head). With an odd head count the last pair's second member is `heads`, which
/// does not exist: such a CTA returns at once.
struct CtaWork {
  int block;
  int head;
  int batch;
};

/// The CTA's work. kLowBlocksHeavy: block 0 carries the most work under causal masks (the
/// backward's key blocks); otherwise the last block does (query blocks).
template <bool kLowBlocksHeavy>
__device__ __forceinline__ CtaWork cta_work() {
  const int x = blockIdx.x;
  const int step = x >> 1;
  CtaWork work;
  work.block = kLowBlocksHeavy ? step : static_cast<int>(gridDim.x >> 1) - 1 - step;
  work.head = 2 * blockIdx.y + (x & 1);
  work.batch = blockIdx.z;
  return work;
}

}  // namespace attnjit
