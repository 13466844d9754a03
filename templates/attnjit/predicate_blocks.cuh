// Block classification of a predicate mask: one CTA per tile of the consuming attention
// kernel's shape (kBlockM queries x kBlockN keys) of one (batch row, head row) of the table.
// Every thread evaluates the predicate on a share of the tile's elements, stopping once it has
// seen both a visible and a hidden element; two barrier votes then give skip (nothing
// visible), full (everything visible) or partial. Keys past Sk count as hidden (the kernels
// must mask them), queries past Sq are ignored (the kernels never store them).
#pragma once

#include "attnjit/mask.cuh"
#include "attnjit/params.cuh"

namespace attnjit {

template <class Visible, int kBlockM, int kBlockN, bool kPerBatch, bool kPerHead>
__device__ __forceinline__ void predicate_blocks(const PredicateBlocksParams& p) {
  const long long tile = blockIdx.x;
  const int n_block = static_cast<int>(tile % p.blocks_n);
  const int m_block = static_cast<int>((tile / p.blocks_n) % p.blocks_m);
  const int table_row = static_cast<int>(tile / (static_cast<long long>(p.blocks_n) * p.blocks_m));
  const int head = kPerHead ? table_row % p.table_heads : 0;
  const int batch = kPerBatch ? table_row / p.table_heads : 0;
  const int row0 = m_block * kBlockM;
  const int col0 = n_block * kBlockN;
  const int rows = min(kBlockM, p.seqlen_q - row0);

  bool any_visible = false;
  bool any_hidden = false;
  for (int e = threadIdx.x; e < rows * kBlockN; e += blockDim.x) {
    const int col = col0 + e % kBlockN;
    const bool visible =
        col < p.seqlen_k && Visible::visible(p.predicate, batch, head, row0 + e / kBlockN, col);
    any_visible |= visible;
    any_hidden |= !visible;
    if (any_visible && any_hidden) break;
  }
  const bool tile_visible = __syncthreads_or(any_visible);
  const bool tile_hidden = __syncthreads_or(any_hidden);
  if (threadIdx.x == 0) {
    p.table[tile] = !tile_visible ? kTileSkip : tile_hidden ? kTilePartial : kTileFull;
  }
}

}  // namespace attnjit
