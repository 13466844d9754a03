// The epilogue of a consumer warpgroup of the sm90a forward (sm90a/forward.cuh): O divided by the
// row sums (0 for rows with nothing visible; the sink joins them under Score::kSinks), the LSE
// (-inf there, or the sink's logit), and O written through
// shared memory: the warpgroup's 64 rows of the Q tile (its own rows: no other warpgroup reads
// them), or of an O tile of the kernel's own (a persistent kernel, whose next work's Q may land
// meanwhile, or O wider than Q), take O in the swizzled panel layout, and one thread stores them
// with TMA, which drops the rows past Sq. Rows packed by cu_seqlens_q (the prefill kernel with
// ragged new tokens) are stored by the warpgroup's threads instead, the sequence's rows only.
#pragma once

#include "attnjit/common/kv_cache.cuh"
#include "attnjit/common/softmax.cuh"
#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// Writes the warpgroup's O rows [row0, row0 + 64) of the CTA's (head, batch) and their LSE.
/// consumer: 0, 1 (or 2), the warpgroup's share of the query block (and its named barrier
/// kBarrier + consumer); o_tile: a tile of OTile's layout whose rows [64 consumer, + 64) this
/// warpgroup alone uses: the Q tile, whose rows it reads no longer (its Q K^T products have
/// completed), or the kernel's O tile. kPersistent: the warpgroup's store of the work before
/// may still be reading the O tile, and this one's runs on under the next work (the kernel
/// waits for the last store before it exits). `rows`: the query rows of the (head, batch), Sq
/// but over a KV cache, and `packed`: they are rows rows.first .. of o and of the LSE's columns
/// (ragged new tokens; o and lse have batch stride 0).
template <class Element, class OTile, bool kReturnLse, int kBarrier, class Score, bool kPersistent,
          int kHeadDim>
__device__ __forceinline__ void forward_epilogue(const FwdParams& p, const TensorMap& o_map,
                                                 WarpgroupAccumulator<kHeadDim>& o,
                                                 OnlineSoftmax<1>& softmax, u32 o_tile,
                                                 int consumer, int row0, int head, int batch,
                                                 NewTokens rows, bool packed) {
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int warp_row = 64 * consumer + 16 * ((threadIdx.x / 32) % 4);  // in the query block
  softmax.template finish<Score>(p, head, o, [&](int, int r) {
    const int row = row0 - 64 * consumer + warp_row + 8 * r + g;
    if (kReturnLse && t == 0 && row < rows.count) {
      p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + rows.first + row] =
          softmax.template lse<Score>(p, 0, r);
    }
  });
  if constexpr (kPersistent) {
    // The store of the work before must have read the rows.
    if (threadIdx.x % 128 == 0) tma_store_wait_read<0>();
    named_barrier_sync(kBarrier + consumer, 128);
  }
#pragma unroll
  for (int dt = 0; dt < kHeadDim / 8; ++dt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      store_shared_u32(o_tile + OTile::element_offset(warp_row + 8 * r + g, 8 * dt + 2 * t),
                       pack2<Element>(o.v[0][dt][2 * r], o.v[0][dt][2 * r + 1]));
    }
  }
  // The stores reach the TMA unit's reads only through the async-proxy fence, and all 128
  // threads' stores must be in before the one thread issues the copy.
  fence_async_shared();
  named_barrier_sync(kBarrier + consumer, 128);
  if (packed) {
    // Each thread a 16-byte chunk of a row at a time, the sequence's rows only.
    for (int i = threadIdx.x % 128; i < 64 * OTile::kChunks; i += 128) {
      const int r = i / OTile::kChunks;
      const int chunk = i % OTile::kChunks;
      if (row0 + r >= rows.count) break;
      u16* out = static_cast<u16*>(p.o) + batch * p.o_batch_stride +
                 (rows.first + row0 + r) * p.o_row_stride + head * p.o_head_stride + 8 * chunk;
      *reinterpret_cast<uint4*>(out) =
          load_shared_v4(o_tile + OTile::offset(64 * consumer + r, chunk));
    }
    return;
  }
  if (threadIdx.x % 128 == 0) {
#pragma unroll
    for (int panel = 0; panel < OTile::kChunks / OTile::kChunksPerPanel; ++panel) {
      tma_store(o_map, o_tile + panel * OTile::kPanelBytes + 64 * consumer * OTile::kPanelCols * 2,
                panel * OTile::kPanelCols, row0, head, batch);
    }
    tma_store_commit();
    // Shared memory must stay until the copies have read it: the CTA may exit next (with
    // kPersistent the next work or the kernel's exit waits).
    if constexpr (!kPersistent) tma_store_wait_read<0>();
  }
}

}  // namespace attnjit
