// The order in which the CTAs of an attention kernel take their work.
//
// The hardware starts CTAs in linear order, x fastest. With a grid (blocks, heads, batch)
// all blocks of one (batch, head) would run back to back, and under causal masks the
// heaviest blocks of the last heads would start last and set the kernel's tail. So the
// attention kernels are launched on (2 * blocks, ceil(heads / 2), batch): x = 2 * step +
// member walks the blocks of a pair of heads heaviest first, alternating between the two
// heads. The last CTAs to start are then light ones, and the CTAs running at once still share
// the operands of about two heads in L2, as in the literal order. Decoding takes a few integer operations on the block indices,
// which the compiler may redo at each use rather than hold in registers across a loop.
//
// Under FlashMask and predicate masks the work of a block depends on the mask data, not on
// its index (a long document late in the sequence, a question seen by every answer), and
// the index order would leave heavy CTAs for the tail. There a CTA-order kernel
// (cta_order.cuh) sorts the CTAs by their counted tiles before the launch and the kernel
// reads its work through that order (cta_work's `order`).
#pragma once

#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// One CTA's share of the grid: a block of rows (forward, dQ) or keys (backward) of one
/// (batch, head). With an odd head count the last pair's second member is `heads`, which
/// does not exist: such a CTA returns at once.
struct CtaWork {
  int block;
  int head;
  int batch;
};

/// The work of the CTA with natural index `natural` (x + gx * (y + gy * z) in a grid of
/// gx x gy x gz, the order above). kLowBlocksHeavy: block 0 carries the most work under causal
/// masks (the backward's key blocks); otherwise the last block does (query blocks).
template <bool kLowBlocksHeavy>
__device__ __forceinline__ CtaWork natural_cta_work(unsigned x, unsigned y, unsigned z,
                                                    unsigned grid_x) {
  const int step = static_cast<int>(x >> 1);
  CtaWork work;
  work.block = kLowBlocksHeavy ? step : static_cast<int>(grid_x >> 1) - 1 - step;
  work.head = 2 * static_cast<int>(y) + static_cast<int>(x & 1);
  work.batch = static_cast<int>(z);
  return work;
}

/// natural_cta_work of the CTA with natural (linear) index `natural` in a grid of grid_x x
/// grid_y x any.
template <bool kLowBlocksHeavy>
__device__ __forceinline__ CtaWork natural_cta_work_at(unsigned natural, unsigned grid_x,
                                                       unsigned grid_y) {
  const unsigned rest = natural / grid_x;
  return natural_cta_work<kLowBlocksHeavy>(natural - rest * grid_x, rest % grid_y, rest / grid_y,
                                           grid_x);
}

/// The `order` argument of cta_work in a kernel whose mask policy has kOrderedCtas (data-
/// dependent skipping, where the host launches a CTA-order kernel first): the kernel
/// parameter cta_order, else null at compile time, so index-ordered kernels carry no lookup.
template <bool kOrderedCtas, class Params>
__device__ __forceinline__ const int* cta_order_of(const Params& p) {
  return kOrderedCtas ? p.cta_order : nullptr;
}

/// The work of a CTA that runs in a CTA order, decoded once by start_cta: later cta_work
/// calls read it from shared memory instead of reloading the order and dividing.
__shared__ CtaWork ordered_cta_work;

/// Called by every thread of an attention kernel before its first cta_work. `order` (the
/// kernel parameter cta_order) is null for the index order above, else the order a CTA-order
/// kernel (cta_order.cuh) computed from the mask: entry i is the natural index of the CTA
/// launched i-th, so the heaviest CTAs start first whatever the mask.
template <bool kLowBlocksHeavy>
__device__ __forceinline__ void start_cta(const int* order) {
  if (order == nullptr) return;
  if (threadIdx.x == 0) {
    const unsigned launched = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    ordered_cta_work = natural_cta_work_at<kLowBlocksHeavy>(static_cast<unsigned>(order[launched]),
                                                            gridDim.x, gridDim.y);
  }
  __syncthreads();
}

/// The heads a CTA derives from its work by divisions: the K/V head of its query head (GQA)
/// and the row of its mask data (Mask::mask_row, MaskState::vector_row). A division is a few
/// dozen dependent instructions; warps that need these at every block (the sm90a forward's
/// producer for each K and V copy, its consumers for each block's mask state) read them from
/// shared memory instead, written once by store_cta_heads.
struct CtaHeads {
  int kv_head;
  int mask_row;
};

__shared__ CtaHeads cta_heads_slot;

/// The heads of `work` (its divisions).
template <class Mask, class Params>
__device__ __forceinline__ CtaHeads cta_heads_of(const Params& p, const CtaWork& work) {
  return {work.head / (p.heads / p.kv_heads), Mask::mask_row(p, work.head, work.batch)};
}

/// Thread 0 of the CTA, before a __syncthreads that precedes the first cta_kv_head() or
/// cta_mask_row<Mask>().
template <class Mask, class Params>
__device__ __forceinline__ void store_cta_heads(const Params& p, const CtaWork& work) {
  cta_heads_slot = cta_heads_of<Mask>(p, work);
}

/// The stored heads, read at each call (volatile loads: never hoisted into registers held
/// across a loop).
__device__ __forceinline__ int cta_kv_head() {
  return load_shared_s32(smem_address(&cta_heads_slot.kv_head));
}

/// The mask row of Mask's data; masks whose policy takes no CTA order have no data: row 0,
/// without a load.
template <class Mask>
__device__ __forceinline__ int cta_mask_row() {
  return Mask::kOrderedCtas ? load_shared_s32(smem_address(&cta_heads_slot.mask_row)) : 0;
}

/// The CTA's work (start_cta has run with the same `order`).
template <bool kLowBlocksHeavy>
__device__ __forceinline__ CtaWork cta_work(const int* order) {
  if (order == nullptr) {
    return natural_cta_work<kLowBlocksHeavy>(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x);
  }
  return ordered_cta_work;
}

/// The start of an attention kernel's CTA under mask policy Mask: start_cta in the mask's CTA
/// order (or the index order), then the CTA's work. A work whose head is `heads` is the missing
/// half of the last head pair: its CTA returns at once.
template <bool kLowBlocksHeavy, class Mask, class Params>
__device__ __forceinline__ CtaWork begin_cta(const Params& p) {
  start_cta<kLowBlocksHeavy>(cta_order_of<Mask::kOrderedCtas>(p));
  return cta_work<kLowBlocksHeavy>(cta_order_of<Mask::kOrderedCtas>(p));
}

/// The body of a generated attention kernel: Kernel's mainloop run(args..., smem) on the
/// dynamic shared memory, whose base is kAlign-byte aligned.
template <class Kernel, int kAlign, class... Args>
__device__ __forceinline__ void run_kernel(const Args&... args) {
  extern __shared__ __align__(kAlign) unsigned char smem[];
  Kernel kernel;
  kernel.run(args..., smem);
}

}  // namespace attnjit
