// A ring of kStages shared-memory buffers passed between a producer (one thread issuing TMA
// copies, optionally helped by cp.async copies of its warp) and consumer warps, on two
// mbarriers per stage (mbarrier.cuh):
//   full[s]   completes when the producer's copies into stage s have landed: its arrivals are
//             the producer's arrive_expect_tx (plus one per helping thread's cp.async arrival);
//   empty[s]  completes when every consumer has released stage s: one arrival per consumer.
// Producer: acquire(state) waits until the stage is empty, commit(...) arrives on full with
// the transaction bytes of the copies it then issues. Consumer: wait(state) until full,
// release(state) when done reading. Both walk the ring with a PipelineState, whose phase bit
// flips at each wrap: the consumer waits full[s] with parity `phase`, the producer waits
// empty[s] with parity `phase ^ 1`, so its first pass over fresh barriers does not block.
#pragma once

#include "attnjit/sm90a/mbarrier.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// Position in a ring of kStages: the stage index and the parity of the pass over the ring.
template <int kStages>
struct PipelineState {
  int index = 0;
  u32 phase = 0;

  __device__ __forceinline__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1;
    }
  }
};

/// The barriers of a ring of kStages, 2 * kStages * 8 bytes of shared memory at `barriers`
/// (8-byte aligned): full[0 .. kStages), then empty[0 .. kStages).
template <int kStages>
struct Pipeline {
  static constexpr int kBytes = 2 * kStages * 8;
  u32 barriers;

  __device__ __forceinline__ u32 full(int stage) const { return barriers + stage * 8; }
  __device__ __forceinline__ u32 empty(int stage) const { return barriers + (kStages + stage) * 8; }

  /// Initialises the barriers: full expects `producer_arrivals` arrivals per phase, empty
  /// `consumer_arrivals`. One thread calls it, then mbarrier_init_fence() and a CTA barrier.
  __device__ __forceinline__ void init(int producer_arrivals, int consumer_arrivals) const {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), producer_arrivals);
      mbarrier_init(empty(s), consumer_arrivals);
    }
  }

  /// Producer: waits until the consumers have released the stage.
  __device__ __forceinline__ void producer_acquire(const PipelineState<kStages>& state) const {
    mbarrier_wait(empty(state.index), state.phase ^ 1);
  }

  /// Producer (the thread that issues the stage's TMA copies): arrives on full expecting
  /// `bytes` transaction bytes. Issue the copies after it, onto full(state.index).
  __device__ __forceinline__ void producer_commit(const PipelineState<kStages>& state,
                                                  u32 bytes) const {
    mbarrier_arrive_expect_tx(full(state.index), bytes);
  }

  /// A helping producer thread: its arrival on full once its cp.async copies have landed.
  __device__ __forceinline__ void producer_commit_cp_async(
      const PipelineState<kStages>& state) const {
    mbarrier_arrive_after_cp_async(full(state.index));
  }

  /// Consumer: waits until the stage's copies have landed.
  __device__ __forceinline__ void consumer_wait(const PipelineState<kStages>& state) const {
    mbarrier_wait(full(state.index), state.phase);
  }

  /// Consumer: one arrival on empty (each of the consumer_arrivals arrivals of a phase).
  __device__ __forceinline__ void consumer_release(const PipelineState<kStages>& state) const {
    mbarrier_arrive(empty(state.index));
  }
};

}  // namespace attnjit
