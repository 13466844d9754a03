// Warpgroup-level synchronisation and register reallocation (sm_90a): named barriers that a
// subset of the CTA's warps meets at, setmaxnreg, and the warpgroup indices of a thread.
//
// Named barriers 1 .. 15 (0 is __syncthreads) take a thread count, a multiple of 32: a
// barrier completes when that many threads have arrived, each by bar.sync (arrive and wait)
// or bar.arrive (arrive only). Two warpgroups can so hand a turn to each other: one waits on
// barrier A with 256 threads while the other arrives on A with its 128 (sm90a/forward.cuh).
#pragma once

#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// The warpgroup (4 consecutive warps, 128 threads) of this thread.
__device__ __forceinline__ int warpgroup_index() {
  return read_tid_x() / 128;
}

/// This thread's index inside its warpgroup.
__device__ __forceinline__ int warpgroup_thread() {
  return read_tid_x() % 128;
}

/// Waits at named barrier `id` until `threads` threads (this one included) have arrived.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/// Arrives at named barrier `id` (of `threads` threads) without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/// Raises this warpgroup's register budget to kRegisters per thread (a multiple of 8 in
/// [24, 256]); every thread of the warpgroup executes it. ptxas honours it only in kernels
/// with a register cap at entry (__launch_bounds__(threads, 1)), else it reports C7508.
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_increase() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

/// Lowers this warpgroup's register budget to kRegisters per thread, returning the rest to
/// the SM's pool for the warpgroups that increase theirs.
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_decrease() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

}  // namespace attnjit
