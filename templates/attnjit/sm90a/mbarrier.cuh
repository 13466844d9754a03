// Shared-memory transaction barriers (mbarrier, sm_90): 8-byte objects in shared memory that
// complete a phase when their expected arrivals have come and their expected transaction bytes
// (written by TMA copies, tma.cuh) have landed; waiters spin on the parity of the phase.
//
// A fresh barrier is in phase 0 with its whole arrival count pending. mbarrier_wait(bar, p)
// returns once phase p (0 or 1) has completed, i.e. the barrier moved on to phase p ^ 1, so a
// ring of barriers is waited on with parity (iteration / stages) & 1 (pipeline.cuh). Arrivals
// release and waits acquire at CTA scope: shared-memory stores made before an arrive are
// visible after the wait that sees its phase complete.
//
// ATTNJIT_MBARRIER_SPIN_LIMIT (a compile-time define, 0 = off) bounds every wait (and the dQ
// turns of tma.cuh): after that many failed polls the thread traps, so that a wrong
// transaction count (which never completes) ends the kernel with an error instead of hanging
// the device.
#pragma once

#include "attnjit/common/primitives.cuh"

#ifndef ATTNJIT_MBARRIER_SPIN_LIMIT
#define ATTNJIT_MBARRIER_SPIN_LIMIT 0
#endif

namespace attnjit {

/// Initialises the barrier at shared address `bar` to expect `arrivals` arrivals per phase.
/// Call from one thread, then mbarrier_init_fence() and a barrier of the threads that use it.
__device__ __forceinline__ void mbarrier_init(u32 bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

/// Makes the initialisations visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// One arrival.
__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/// One arrival that also expects `bytes` more transaction bytes in the current phase (the
/// exact byte count of the TMA copies that signal this barrier: a mismatch never completes).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

/// An arrival triggered when all of this thread's earlier cp.async copies have completed; it
/// counts as one of the barrier's expected arrivals (.noinc).
__device__ __forceinline__ void mbarrier_arrive_after_cp_async(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

/// Waits until phase `parity` of the barrier has completed. The loop is one asm block (as
/// the PTX labels are local to it), so it holds no register beyond its operands; the poll
/// (try_wait) may suspend the thread for a while before answering no. With a spin limit the
/// polls do not suspend (test_wait), so the limit is reached in about a second.
__device__ __forceinline__ void mbarrier_wait(u32 bar, u32 parity) {
#if ATTNJIT_MBARRIER_SPIN_LIMIT > 0
  asm volatile(
      "{\n.reg .pred done;\n.reg .u32 polls;\nmov.u32 polls, 0;\n"
      "WAIT:\nmbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n@done bra DONE;\n"
      "add.u32 polls, polls, 1;\nsetp.lt.u32 done, polls, %2;\n@done bra WAIT;\ntrap;\n"
      "DONE:\n}\n" ::"r"(bar),
      "r"(parity), "n"(ATTNJIT_MBARRIER_SPIN_LIMIT)
      : "memory");
#else
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

}  // namespace attnjit
