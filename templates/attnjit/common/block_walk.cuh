// The walks of the attention kernels over the blocks their CTA visits, with the copies of the
// next blocks in flight while the current one is computed:
//   KeyBlockWalk    a query block visits its key blocks, last to first (the forward kernels,
//                   the deterministic dQ kernel): K, V and FlashMask values through kStages
//                   cp.async stages
//   QueryBlockWalk  a key block visits its query blocks, first to last (the backward main
//                   kernels): Q, dO, LSE2 and D through two cp.async stages
// Both skip the blocks the mask skips (mask.cuh: index ranges, FlashMask min/max tables,
// predicate block tables). A kernel starts the walk (KeyBlockWalk: find_range() and prefetch();
// QueryBlockWalk: begin()), then per iteration `it` calls stage() at its top, computes `block`
// from the stage it returns, and calls advance().
#pragma once

#include "attnjit/common/kv_block.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/masks/mask.cuh"

namespace attnjit {

/// The walk of a CTA that owns a query block (MaskState rows set) over the key blocks its rows
/// can see, from the last to the first. Shared memory: kStages stages of K (kHeadDimQK columns)
/// then V (kHeadDimV columns), kStageBytes each, from smem_kv on, kStages stages of the blocks'
/// FlashMask values (kVectorBytes each) from smem_vectors on. `table` names the kernel parameter
/// that holds the mask's tables for key blocks of kBlockN as a member pointer (&FwdParams::minmax,
/// &BwdParams::minmax_dq): it is read where a block is classified, so that no register holds it
/// across the loop.
template <class Mask, int kBlockN, int kHeadDimQK, int kHeadDimV, int kThreads, int kStages>
struct KeyBlockWalk {
  typedef SmemTile<kBlockN, kHeadDimQK> KTile;
  typedef SmemTile<kBlockN, kHeadDimV> VTile;
  static constexpr int kStageBytes = KTile::kBytes + VTile::kBytes;  // K then V
  static constexpr int kVectorBytes = kBlockN * Mask::kColumns * 4;
  /// The K/V stages and the FlashMask value stages.
  static constexpr int kSmemBytes = kStages * (kStageBytes + kVectorBytes);
  static_assert(kStages >= 2, "the K/V pipeline needs at least two stages");

  int block;  ///< this iteration's key block; the walk is over when it drops below `begin`
  int begin;
  int end;
  int load;  ///< the next block to copy

  /// The key blocks [begin, end) that can hold a visible key for the CTA's rows (index
  /// ranges only: prefetch() skips what the tables skip).
  __device__ __forceinline__ void find_range(const MaskState& ms) {
    Mask::template key_block_range<kBlockN>(ms, begin, end);
  }

  /// After find_range(): the first active block, and the copies of the first kStages - 1
  /// active ones (one commit group per stage, empty ones included).
  template <class Params, class Table>
  __device__ __forceinline__ void prefetch(const Params& p, const MaskState& ms, Table table,
                                           u32 smem_kv, u32 smem_vectors, int thread) {
    load = next_active(p, ms, table, end - 1);
    block = load;
#pragma unroll
    for (int stage = 0; stage < kStages - 1; ++stage) {
      if (load >= begin) {
        copy(p, ms, load, smem_kv, smem_vectors, stage, thread);
        load = next_active(p, ms, table, load - 1);
      }
      cp_async_commit();
    }
  }

  __device__ __forceinline__ bool more() const {
    return block >= begin;
  }

  /// Waits for the copies of stage `it` and makes them visible to all warps, which also frees
  /// the stage computed in the previous iteration; issues the next active block's copies into
  /// that one. Returns the stage index of `block`.
  template <class Params, class Table>
  __device__ __forceinline__ int stage(const Params& p, const MaskState& ms, Table table,
                                       u32 smem_kv, u32 smem_vectors, int it, int thread) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (load >= begin) {
      copy(p, ms, load, smem_kv, smem_vectors, (it + kStages - 1) % kStages, thread);
      load = next_active(p, ms, table, load - 1);
    }
    cp_async_commit();
    return it % kStages;
  }

  template <class Params, class Table>
  __device__ __forceinline__ void advance(const Params& p, const MaskState& ms, Table table) {
    block = next_active(p, ms, table, block - 1);
  }

  /// The highest key block <= from that the mask does not skip, or begin - 1.
  template <class Params, class Table>
  __device__ __forceinline__ int next_active(const Params& p, const MaskState& ms, Table table,
                                             int from) const {
    return Mask::template last_active_key_block<kBlockN>(ms, p.*table, from, begin);
  }

  /// K (then V) and the FlashMask values of stage `stage`.
  __device__ __forceinline__ static u32 kv_stage(u32 smem_kv, int stage) {
    return smem_kv + stage * kStageBytes;
  }
  __device__ __forceinline__ static u32 vector_stage(u32 smem_vectors, int stage) {
    return smem_vectors + stage * kVectorBytes;
  }

 private:
  template <class Params>
  __device__ __forceinline__ static void copy(const Params& p, const MaskState& ms, int n,
                                              u32 smem_kv, u32 smem_vectors, int stage,
                                              int thread) {
    load_key_value_block<kBlockN, kHeadDimQK, kHeadDimV, kThreads, Mask::kColumns,
                         Mask::kOrderedCtas>(p, ms, n, kv_stage(smem_kv, stage),
                                             vector_stage(smem_vectors, stage), thread);
  }
};

/// cp.async of query block m into one stage: Q (kHeadDimQK columns), dO (kHeadDimV columns;
/// both zero-filled past Sq), then LSE2 and D (kBlockM floats each, zero past Sq).
template <int kBlockM, int kHeadDimQK, int kHeadDimV, int kThreads>
__device__ __forceinline__ void load_backward_query_block(const BwdParams& p, int m, u32 smem_stage,
                                                          int head, int batch, int thread) {
  typedef SmemTile<kBlockM, kHeadDimQK> QTile;
  typedef SmemTile<kBlockM, kHeadDimV> DoTile;
  const int row0 = m * kBlockM;
  const int valid = min(kBlockM, p.seqlen_q - row0);
  load_tile_async<kBlockM, kHeadDimQK, kThreads>(smem_stage,
                                                 static_cast<const u16*>(p.q) +
                                                     batch * p.q_batch_stride +
                                                     head * p.q_head_stride + row0 * p.q_row_stride,
                                                 p.q_row_stride, valid, thread);
  load_tile_async<kBlockM, kHeadDimV, kThreads>(
      smem_stage + QTile::kBytes,
      static_cast<const u16*>(p.d_o) + batch * p.do_batch_stride + head * p.do_head_stride +
          row0 * p.do_row_stride,
      p.do_row_stride, valid, thread);
  const long long bh_row = (static_cast<long long>(batch) * p.heads + head) * p.seqlen_q + row0;
  for (int i = thread; i < 2 * kBlockM; i += kThreads) {
    const int r = i % kBlockM;
    const float* src = (i < kBlockM ? p.lse_log2 : p.row_dot) + bh_row + r;
    cp_async_4(smem_stage + QTile::kBytes + DoTile::kBytes + i * 4, r < valid ? src : p.row_dot,
               r < valid ? 4 : 0);
  }
}

/// The walk of a backward main kernel's CTA (one key block) over the query blocks that can see
/// its keys, with Q_i, dO_i, LSE_i and D_i streamed through two cp.async stages of
/// kStageBytes (load_backward_query_block).
template <class Mask, int kBlockM, int kBlockN, int kHeadDimQK, int kHeadDimV, int kThreads,
          int kStageBytes>
struct QueryBlockWalk {
  int block;  ///< this iteration's query block; the walk is over when it reaches `end`
  int end;
  int load;  ///< the next block to copy

  __device__ __forceinline__ void begin(const BwdParams& p, const MaskState& ms, int n_block,
                                        u32 smem_stages, const CtaWork& work) {
    int first;
    query_blocks_of<Mask, kBlockM, kBlockN>(p.varlen, ms, n_block, first, end);
    load = next_active(p, ms, n_block, first);
    block = load;
    if (load < end) {
      load_backward_query_block<kBlockM, kHeadDimQK, kHeadDimV, kThreads>(
          p, load, smem_stages, work.head, work.batch, threadIdx.x);
      load = next_active(p, ms, n_block, load + 1);
    }
    cp_async_commit();
  }

  __device__ __forceinline__ bool more() const { return block < end; }

  /// Waits for stage `it` and makes it visible to all warps, which also frees the other stage
  /// (and whatever else the previous iteration read); issues the next active block's copies
  /// into that other stage. Returns stage `it`.
  __device__ __forceinline__ u32 stage(const BwdParams& p, const MaskState& ms, int n_block,
                                       u32 smem_stages, int it) {
    cp_async_wait<0>();
    __syncthreads();
    if (load < end) {
      const CtaWork now = cta_work<true>(cta_order_of<Mask::kOrderedCtas>(p));
      load_backward_query_block<kBlockM, kHeadDimQK, kHeadDimV, kThreads>(
          p, load, smem_stages + ((it + 1) % 2) * kStageBytes, now.head, now.batch, read_tid_x());
      load = next_active(p, ms, n_block, load + 1);
    }
    cp_async_commit();
    return smem_stages + (it % 2) * kStageBytes;
  }

  __device__ __forceinline__ void advance(const BwdParams& p, const MaskState& ms, int n_block) {
    block = next_active(p, ms, n_block, block + 1);
  }

  /// The first query block >= from (and < end) with a visible element in this key block.
  __device__ __forceinline__ int next_active(const BwdParams& p, const MaskState& ms, int n_block,
                                             int from) const {
    return Mask::template first_active_query_block<kBlockM, kBlockN>(ms, p.minmax, n_block, from,
                                                                     end);
  }
};

}  // namespace attnjit
