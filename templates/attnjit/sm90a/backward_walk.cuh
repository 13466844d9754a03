// The walk of a CTA of the sm90a backward (sm90a/backward.cuh) over the query blocks that can
// see its key block, as its producer streams them, its statistics warp loads their rows and its
// writer warps reduce their dQ: those of the CTA's first query head, then the same blocks of
// each next head of its group (BwdParams::head_group; the launch groups the query heads of a
// KV head only where they share the mask's data, so every head visits the same blocks).
#pragma once

#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// Kernel's walk (its mask policy, tiles and mode).
template <class Kernel>
struct BackwardWalk {
  typedef typename Kernel::MaskType Mask;
  static constexpr int kBlockM = Kernel::kBlockM;
  static constexpr int kBlockN = Kernel::kBlockN;

  MaskState ms;    ///< of the current head; rows of the current block after set_rows
  int block;       ///< the current query block; done() once it reaches `end`
  int end;         ///< past the last query block that can see the key block
  int first;       ///< the first block each head visits
  int heads_left;  ///< the group's heads after the current one

  /// The walk of key block `n_block` from the CTA's first query head.
  __device__ __forceinline__ void begin(const BwdParams& p, int n_block) {
    ms = Kernel::key_mask_state(p);
    heads_left = p.head_group - 1;
    query_blocks_of<Mask, kBlockM, kBlockN, !Kernel::kOrderedDq>(p.varlen, ms, n_block, first,
                                                                 end);
    first = Mask::template first_active_query_block<kBlockM, kBlockN>(ms, p.minmax, n_block,
                                                                      first, end);
    block = first;
  }

  __device__ __forceinline__ bool done() const { return block >= end; }

  /// The query head of the current block.
  __device__ __forceinline__ int head() const { return ms.head; }

  /// ms takes the rows of the current block.
  __device__ __forceinline__ void set_rows(const BwdParams& p) {
    ms.row_begin = block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);
  }

  /// To the next active block of the head, else the first of the next head, else done.
  __device__ __forceinline__ void advance(const BwdParams& p, int n_block) {
    block = Mask::template first_active_query_block<kBlockM, kBlockN>(ms, p.minmax, n_block,
                                                                      block + 1, end);
    if (block >= end && heads_left > 0) {
      --heads_left;
      ++ms.head;
      block = first;
    }
  }
};

}  // namespace attnjit
