// The dQ hand-over of the sm90a backward (sm90a/backward.cuh): each consumer warpgroup hands
// its dQ tile of each query block to a writer warp of its own (warps 1 and 2 of the producer
// warpgroup, named barriers), which walks the query blocks as the producer does and adds the
// tile to the fp32 dQ accumulator by TMA reductions; in the deterministic mode it takes its
// turns (backward_reductions.cuh). The tile goes through a dQ buffer of the consumer's, or, when
// the consumers split the head dim, through the consumer's Q and dO panels of the stage (and its
// part of the stage's extra dQ area where head_dim_qk exceeds head_dim_v), which the writer then
// releases.
#pragma once

#include "attnjit/sm90a/backward_reductions.cuh"
#include "attnjit/sm90a/backward_walk.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The writer warps and the consumers' side of the hand-over, of Kernel (its shared-memory
/// layout, barriers and split).
template <class Kernel>
struct BackwardDqWriter {
  /// dQ buffers: the consumer's part of the dQ buffer, once the writer's reductions of the
  /// last tile have read it, takes acc_dq; the tile goes to the writer (its reductions drop the
  /// rows past Sq).
  __device__ __forceinline__ static void hand(
      u32 base, const WarpgroupAccumulator<Kernel::kDqAccCols>& acc_dq) {
    const int consumer = Kernel::consumer_index();
    const u32 buffer =
        base + Kernel::kDqOffset + (Kernel::kDqByColumns ? 0 : consumer) * Kernel::kDqBufferBytes;
    named_barrier_sync(Kernel::kDqFreeBarrier + consumer, Kernel::kWriterThreads);
    store(buffer, Kernel::Products::dq_panel(consumer) * Kernel::KTile::kPanelCols, acc_dq.v[0]);
    fence_async_shared();
    named_barrier_arrive(Kernel::dq_barrier(consumer, 0), Kernel::kWriterThreads);
  }

  /// dQ buffers: adds `panel`'s boxes of the dQ tile in `buffer` to the dQ of query block
  /// `block` of query head `head` by TMA reductions (one thread).
  __device__ __forceinline__ static void add_tile(const BwdParams& p, const BwdTensorMaps& maps,
                                                  u32 buffer, int panel, int head, int block) {
    const int batch = Kernel::work_of(p).batch;
#pragma unroll
    for (int box = panel * 2; box < panel * 2 + Kernel::kDqCols / 32; ++box) {
      tma_reduce_add(maps.dq_accum, buffer + box * Kernel::kDqBoxBytes, box * 32,
                     block * Kernel::kBlockM, head, batch);
    }
    tma_store_commit();
  }

  /// The writer warp of `consumer`. It walks the query blocks the producer streams (the same
  /// walk, backward_walk.cuh); per block,
  /// once the consumer has written the dQ tile, its first lane issues the reductions (in the
  /// deterministic mode once the block's turn has come). dQ buffers: the buffer goes back once
  /// they have read it (but after the last block). dQ in the stage: the stage goes back to the
  /// producer once they have read it. In the deterministic mode the turn passes on once they are
  /// complete; in the atomic mode nothing waits for them but the writer's exit.
  __device__ static void run(const BwdParams& p, const BwdTensorMaps& maps, u32 base,
                             int consumer) {
    const u32 buffer =
        base + Kernel::kDqOffset + (Kernel::kDqByColumns ? 0 : consumer) * Kernel::kDqBufferBytes;
    const bool leader = threadIdx.x % 32 == 0;
    const typename Kernel::Ring ring{base + Kernel::kRingOffset};
    typename Kernel::RingState state;
    const int n_block = Kernel::work_of(p).block;
    BackwardWalk<Kernel> walk;
    walk.begin(p, n_block);
    // dQ buffers: the buffer starts free.
    if constexpr (!Kernel::kDqInStage) {
      if (!walk.done())
        named_barrier_arrive(Kernel::kDqFreeBarrier + consumer, Kernel::kWriterThreads);
    }
    while (!walk.done()) {
      walk.set_rows(p);
      const int block = walk.block;
      const int head = walk.head();
      const int turn =
          Kernel::kOrderedDq
              ? later_key_visitors<typename Kernel::MaskType, Kernel::kBlockM, Kernel::kBlockN>(
                    p, walk.ms, block, n_block)
              : 0;
      walk.advance(p, n_block);
      // dQ buffers: the turn counter is formed by every lane before the barrier; dQ in the
      // stage: by the leader after it, with the work its reductions address (each keeps its
      // layout's machine code).
      int* counter =
          Kernel::kOrderedDq && !Kernel::kDqInStage
              ? dq_turn_counter<Kernel::kBlockM, Kernel::kDqLanes>(
                    p, Kernel::work_of(p).batch, head, block, Kernel::kDqByColumns ? consumer : 0)
              : nullptr;
      named_barrier_sync(Kernel::dq_barrier(consumer, state.index), Kernel::kWriterThreads);
      if (leader) {
        if constexpr (Kernel::kDqInStage) {
          const int batch = Kernel::work_of(p).batch;
          int* turns = Kernel::kOrderedDq ? dq_turn_counter<Kernel::kBlockM, Kernel::kDqLanes>(
                                                p, batch, head, block, consumer)
                                          : nullptr;
          if constexpr (Kernel::kOrderedDq) wait_turn(turns, turn);
          const u32 stage = Kernel::stage_address(base, state.index);
#pragma unroll
          for (int box = 0; box < Kernel::kDqBoxes; ++box) {
            tma_reduce_add(maps.dq_accum, Kernel::dq_box(stage, consumer, box),
                           Kernel::consumer_col0_qk(consumer) + Kernel::kDqBoxCols * box,
                           block * Kernel::kBlockM, head, batch);
          }
          tma_store_commit();
          tma_store_wait_read<0>();
          ring.consumer_release(state);
          if constexpr (Kernel::kOrderedDq) {
            tma_store_wait<0>();
            pass_turn(turns);
          }
        } else {
          if constexpr (Kernel::kOrderedDq) {
            wait_turn(counter, turn * Kernel::kDqTurns + (Kernel::kDqByColumns ? 0 : consumer));
          }
          add_tile(p, maps, buffer, Kernel::Products::dq_panel(consumer), head, block);
          tma_store_wait_read<0>();
        }
      }
      __syncwarp();
      if constexpr (!Kernel::kDqInStage) {
        if (!walk.done())
          named_barrier_arrive(Kernel::kDqFreeBarrier + consumer, Kernel::kWriterThreads);
        if (Kernel::kOrderedDq && leader) {
          tma_store_wait<0>();
          pass_turn(counter);
        }
        __syncwarp();
      } else {
        state.advance();
      }
    }
    // The reductions are complete before the kernel ends (backward_convert_dq reads them).
    if (leader) tma_store_wait<0>();
  }

  /// dQ buffers: stores the warp's dQ rows 16 w + g (+ 8) of the accumulator, columns
  /// col0 + 8 dt + 2 t, into the dQ buffer at `buffer` (store_fp32_tile's layout).
  /// Kernel::kDqTransposed: the accumulator is dQ^T, its rows columns col0 + 16 w + g (+ 8) of dQ,
  /// its columns queries 8 nt + 2 t (+ 1), stored one float at a time into the same layout (boxes
  /// of Kernel::kBlockM rows of 32 columns, 128-byte rows, 16-byte chunk (c % 32 / 4) ^ (row % 8)):
  /// for each element the warp's 32 stores cover 8 chunks of 4 rows, one per bank. Row 8 nt + 2 t +
  /// c has the swizzle of row 2 t + c: four addresses, the tiles 1 KB apart.
  __device__ __forceinline__ static void store(u32 buffer, int col0,
                                               const float (&acc)[Kernel::kDqAccCols / 8][4]) {
    if constexpr (Kernel::kDqTransposed) {
      const u32 lane = static_cast<u32>(read_tid_x()) % 32;
      const u32 t = lane % 4;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const u32 warp = (static_cast<u32>(read_tid_x()) / 32) % 4;
        const u32 col = col0 + 16 * warp + lane / 4 + 8 * r;
        const u32 box = buffer + (col / 32) * Kernel::kDqBoxBytes + (col % 4) * 4;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const u32 row = 2 * t + c;
          const u32 at = box + row * 128 + (((col % 32) / 4) ^ row) * 16;
#pragma unroll
          for (int nt = 0; nt < Kernel::kDqAccCols / 8; ++nt) {
            store_shared_f32(at + nt * 1024, acc[nt][2 * r + c]);
          }
        }
      }
    } else {
      store_fp32_tile<Kernel::kDqCols>(buffer, col0, acc, 1.f);
    }
  }
};

}  // namespace attnjit
