// The CTA order of an attention kernel under a data-dependent mask (schedule.cuh): the CTAs
// sorted by the tiles they will compute, heaviest first, so that the hardware, which starts
// CTAs in launch order as slots free up, runs a longest-first schedule. The sort runs within
// groups of group_pairs head pairs of one batch (consecutive natural indices), the groups in
// natural order: the CTAs running at once then share the operands of a few heads in L2.
// Sorted over the whole grid, CTAs of equal cost from every head and batch ran together and
// each fetched its operands from DRAM, and the kernel became bound by DRAM bandwidth.
//
// Two launches of one kernel (CtaOrderParams::phase):
//   phase 0  one warp per CTA of the attention grid (natural index, schedule.cuh) walks the
//            blocks the CTA would visit, with the kernel's own Mask::classify on the same
//            tables, and writes cost = 4 * full + 5 * partial tiles + 2 (the CTA's loads and
//            stores), or -1 for the missing half of the last head pair;
//   phase 1  one CTA of kSortThreads per group (launched per head pair and batch; those
//            that do not start a group return) buckets the group's costs (kBuckets, scaled by
//            max_cost), counts them, and scatters the natural indices into the group's slice
//            of the order, heaviest bucket first and in natural order within a bucket (a
//            counting sort), so the order is the same on every run.
// Within a bucket the natural order keeps the CTAs of a pair of heads together, as before.
// kKeyBlocks: the CTAs own key blocks and walk query blocks (the backward main kernel);
// otherwise they own query blocks and walk key blocks (forward, deterministic dQ).
#pragma once

#include "attnjit/masks/mask.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/schedule.cuh"

namespace attnjit {

constexpr int kSortThreads = 1024;
constexpr int kBuckets = 1024;

/// The bucket of a cost: 0 for the empty CTAs, else 1 .. kBuckets - 1 growing with the cost;
/// `scale` is (kBuckets - 2) / max_cost in fp32 (bucket_scale).
__device__ __forceinline__ int cost_bucket(int cost, float scale) {
  if (cost < 0) return 0;
  return 1 + min(static_cast<int>(static_cast<float>(cost) * scale), kBuckets - 2);
}

__device__ __forceinline__ float bucket_scale(int max_cost) {
  return static_cast<float>(kBuckets - 2) / static_cast<float>(max(1, max_cost));
}

/// The first query head of a CTA whose grid head is `head`: the backward main kernel's grid
/// may count groups of BwdParams::head_group query heads (1 in every other launch), which
/// share their mask data, so the first head's walk costs what each head's does.
__device__ __forceinline__ int first_query_head(const BwdParams& a, int head) {
  return head * a.head_group;
}
__device__ __forceinline__ int first_query_head(const FwdParams&, int head) {
  return head;
}

/// Phase 0: the cost of CTA `natural` from all lanes of a warp, 32 blocks per step.
template <class Mask, int kBlockM, int kBlockN, bool kKeyBlocks, class Params>
__device__ __forceinline__ int cta_cost(const CtaOrderParams<Params>& p, unsigned natural) {
  const Params& a = p.attention;
  CtaWork work = natural_cta_work_at<kKeyBlocks>(natural, p.grid_x, p.grid_y);
  work.head = first_query_head(a, work.head);
  if (work.head >= a.heads) return -1;
  MaskState ms = make_mask_state<kBlockN, Mask>(a, work.head, work.batch);
  const int lane = threadIdx.x % 32;
  int begin, end;
  if (kKeyBlocks) {
    query_blocks_of<Mask, kBlockM, kBlockN>(a.varlen, ms, work.block, begin, end);
  } else {
    ms.row_begin = work.block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, ms.seqlen_q);
    Mask::template key_block_range<kBlockN>(ms, begin, end);
    narrow_to_sequences<kBlockN>(a.varlen, ms, begin, end);
  }
  int cost = 0;
#pragma unroll 4
  for (int i = begin + lane; i < end; i += 32) {
    int kind;
    if (kKeyBlocks) {
      ms.row_begin = i * kBlockM;
      ms.row_end = min(ms.row_begin + kBlockM, ms.seqlen_q);
      kind = tile_kind(Mask::template classify<kBlockN>(ms, p.table, work.block));
    } else {
      kind = tile_kind(Mask::template classify<kBlockN>(ms, p.table, i));
    }
    cost += kind == kTileFull ? 4 : kind == kTilePartial ? 5 : 0;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) cost += __shfl_xor_sync(0xffffffffu, cost, offset);
  return cost + 2;
}

/// Phase 1 on entries [first, first + count) of cost[] and order[]: order[first + i] for
/// i < count from cost[first .. first + count), in one CTA of kSortThreads threads.
template <class Params>
__device__ __forceinline__ void sort_ctas(const CtaOrderParams<Params>& p, int first, int count) {
  constexpr int kWarps = kSortThreads / 32;
  static_assert(kBuckets == kSortThreads, "one bucket per thread");
  __shared__ int offsets[kBuckets];
  __shared__ int warp_totals[kWarps];
  // The CTAs of each bucket in each warp's 32 CTAs of the current chunk (at most 32).
  __shared__ unsigned char warp_counts[kWarps][kBuckets];
  const int thread = threadIdx.x;
  const int lane = thread % 32;
  const int warp = thread / 32;
  offsets[thread] = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) warp_counts[w][thread] = 0;
  __syncthreads();
  const float scale = bucket_scale(p.max_cost);
  // CTAs of equal cost are common (heads sharing a mask row): one atomic per bucket per warp.
  for (int base = 0; base < count; base += kSortThreads) {
    const int i = base + thread;
    const int b = i < count ? cost_bucket(p.cost[first + i], scale) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    if (b >= 0 && (peers & ((1u << lane) - 1u)) == 0) atomicAdd(&offsets[b], __popc(peers));
  }
  __syncthreads();

  // Exclusive scan from the heaviest bucket down: thread t holds bucket kBuckets - 1 - t.
  const int bucket = kBuckets - 1 - thread;
  const int size = offsets[bucket];
  int inclusive = size;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int from = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += from;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += warp_totals[w];
  offsets[bucket] = before + inclusive - size;
  __syncthreads();

  // Stable scatter, kSortThreads CTAs at a time: a CTA's place is its bucket's offset, plus
  // the CTAs of its bucket in the warps before its own, plus those before it in its warp.
  const unsigned lanes_before = (1u << lane) - 1u;
  for (int base = 0; base < count; base += kSortThreads) {
    const int i = base + thread;
    const int b = i < count ? cost_bucket(p.cost[first + i], scale) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    const int rank = __popc(peers & lanes_before);
    if (b >= 0 && rank == 0) warp_counts[warp][b] = static_cast<unsigned char>(__popc(peers));
    __syncthreads();
    if (b >= 0) {
      int at = offsets[b] + rank;
      for (int w = 0; w < warp; ++w) at += warp_counts[w][b];
      p.order[first + at] = first + i;
    }
    __syncthreads();
    int taken = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      taken += warp_counts[w][thread];
      warp_counts[w][thread] = 0;
    }
    offsets[thread] += taken;
    __syncthreads();
  }
}

/// Phase 1 for the CTA (head pair blockIdx.x, batch blockIdx.y): sorts the group of
/// group_pairs head pairs it starts, if it starts one.
template <class Params>
__device__ __forceinline__ void sort_group(const CtaOrderParams<Params>& p) {
  const int pair = static_cast<int>(blockIdx.x);
  if (pair % p.group_pairs != 0) return;
  const int pairs = min(p.group_pairs, p.grid_y - pair);
  sort_ctas(p, p.grid_x * (pair + p.grid_y * static_cast<int>(blockIdx.y)), p.grid_x * pairs);
}

/// The body of a generated CTA-order kernel: phase 0 on any number of warps per CTA, phase 1
/// on one CTA of kSortThreads threads per head pair and batch.
template <class Mask, int kBlockM, int kBlockN, bool kKeyBlocks, class Params>
__device__ __forceinline__ void cta_order(const CtaOrderParams<Params>& p) {
  const int count = p.grid_x * p.grid_y * p.grid_z;
  if (p.phase == 0) {
    const unsigned natural = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (natural >= static_cast<unsigned>(count)) return;
    const int cost = cta_cost<Mask, kBlockM, kBlockN, kKeyBlocks>(p, natural);
    if (threadIdx.x % 32 == 0) p.cost[natural] = cost;
    return;
  }
  sort_group(p);
}

}  // namespace attnjit
