// Tensor memory accelerator (TMA, sm_90) copies between global memory and shared memory,
// described by a tensor map (params.cuh's TensorMap, encoded on the host by
// runtime/launch/tma.cpp).
//
// A load moves one box of the map's tensor, at the given element coordinates (innermost
// first), into shared memory and completes its bytes on an mbarrier (mbarrier.cuh); parts of
// the box outside the tensor are filled with zeros and still count as transaction bytes. A
// store moves a box from shared memory to the tensor, dropping the parts outside it; stores
// are tracked per thread in bulk groups (commit, then wait until their shared-memory reads
// are done). With the map's 128-byte swizzle, a box of 64 16-bit columns lands as the
// SmemTile panel layout (smem_tile.cuh), which wgmma reads directly (wgmma.cuh). One thread
// issues each copy.
#pragma once

#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/sm90a/mbarrier.cuh"

namespace attnjit {

/// The box one copy of a tensor map moves: rows x columns of one (head, batch), in a
/// shared-memory swizzle of swizzle_bytes. A kernel names the box of each map it copies
/// through; the generated source asserts that they are its plan's (KernelDesc::tensor_maps),
/// which the host encodes.
struct TmaBox {
  int rows;
  int cols;
  int swizzle_bytes;
};

__host__ __device__ constexpr bool operator==(const TmaBox& a, const TmaBox& b) {
  return a.rows == b.rows && a.cols == b.cols && a.swizzle_bytes == b.swizzle_bytes;
}

/// A box of one panel of 16-bit elements (SmemTile's), swizzled by its row bytes.
__host__ __device__ constexpr TmaBox panel_box(int rows, int panel_cols) {
  return TmaBox{rows, panel_cols, panel_cols * 2};
}

/// A box of fp32 columns, swizzled by its row bytes.
__host__ __device__ constexpr TmaBox fp32_box(int rows, int cols) {
  return TmaBox{rows, cols, cols * 4};
}

/// The generic address of a tensor map (a __grid_constant__ kernel parameter).
__device__ __forceinline__ unsigned long long tensor_map_address(const TensorMap& map) {
  return reinterpret_cast<unsigned long long>(&map);
}

/// Fetches the tensor map into the TMA unit's cache ahead of its first copy.
__device__ __forceinline__ void tma_prefetch_map(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tensor_map_address(map)) : "memory");
}

/// Loads the box of a 4-D map at (c0, c1, c2, c3) into shared memory `dst`, completing on
/// `bar` (an activation [B, S, H, D] is the map (D, S, H, B): runtime/launch/tma.hpp).
__device__ __forceinline__ void tma_load(u32 dst, const TensorMap& map, u32 bar, int c0, int c1,
                                         int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(tensor_map_address(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/// Loads every panel of a Tile (smem_tile.cuh) at `dst`: rows [row0, row0 + Tile's rows) of
/// one (head, batch) of `map`, completing on `bar`; rows past the tensor read as zeros.
template <class Tile>
__device__ __forceinline__ void tma_load_tile(u32 dst, const TensorMap& map, u32 bar, int row0,
                                              int head, int batch) {
#pragma unroll
  for (int panel = 0; panel < Tile::kBytes / Tile::kPanelBytes; ++panel) {
    tma_load(dst + panel * Tile::kPanelBytes, map, bar, panel * Tile::kPanelCols, row0, head,
             batch);
  }
}

/// Stores shared memory `src` as the box of a 4-D map at (c0, c1, c2, c3).
__device__ __forceinline__ void tma_store(const TensorMap& map, u32 src, int c0, int c1, int c2,
                                          int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
          tensor_map_address(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/// Adds the box of shared memory `src` to the box of a 4-D map at (c0, c1, c2, c3), element
/// by element in L2 (.add of the map's type; parts outside the tensor dropped), atomic with
/// respect to other reductions. Tracked like a store: commit, then wait before reusing `src`.
__device__ __forceinline__ void tma_reduce_add(const TensorMap& map, u32 src, int c0, int c1,
                                               int c2, int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, "
      "%5}], [%1];" ::"l"(tensor_map_address(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/// Closes the group of this thread's stores issued since the last commit.
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/// Waits until at most kPending of this thread's store groups still read shared memory (the
/// source may be reused, or the CTA may exit, once they have read it).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

/// Waits until at most kPending of this thread's store groups are incomplete (their writes
/// visible in global memory).
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

/// Turns between threads of different CTAs on a global counter, which orders their bulk
/// reductions into one tensor (the deterministic backward's dQ): a thread waits until the
/// counter holds `turn`, issues its reductions, waits until they are complete
/// (tma_store_wait<0>) and passes the turn on. The proxy fences order the reductions (async
/// proxy) after the acquiring load and before the releasing add. ATTNJIT_MBARRIER_SPIN_LIMIT
/// (mbarrier.cuh) bounds the polls here too: a turn that never comes traps.
__device__ __forceinline__ void wait_turn(const int* counter, int turn) {
  int seen;
#if ATTNJIT_MBARRIER_SPIN_LIMIT > 0
  unsigned polls = 0;
#endif
  do {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
#if ATTNJIT_MBARRIER_SPIN_LIMIT > 0
    if (seen != turn && ++polls >= ATTNJIT_MBARRIER_SPIN_LIMIT) __trap();
#endif
  } while (seen != turn);
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

/// Passes the turn on: the counter's next value.
__device__ __forceinline__ void pass_turn(int* counter) {
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(counter) : "memory");
}

}  // namespace attnjit
