// The per-row kernels around the backward main kernel (backward_preprocess.cuh,
// backward_convert_dq.cuh, backward_reduce_dkdv.cuh): one warp per row, kRowsPerBlock rows per
// block, grids (ceil(rows / kRowsPerBlock), heads, batch).
#pragma once

#include "attnjit/common/primitives.cuh"

namespace attnjit {

constexpr int kRowsPerBlock = 4;

/// The row of the calling warp (kRowsPerBlock rows per block along x), its lane, and the head
/// and batch of the grid's y and z.
struct WarpRow {
  int row;
  int lane;
  int head;
  int batch;
};

__device__ __forceinline__ WarpRow warp_row() {
  WarpRow w;
  w.row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  w.lane = threadIdx.x % 32;
  w.head = blockIdx.y;
  w.batch = blockIdx.z;
  return w;
}

/// The sum of x over the warp's lanes, in every lane.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace attnjit
