// Pieces of the sm90a backward's dQ and gradient reductions (sm90a/backward.cuh): the fp32 boxes
// the TMA reductions read, and the deterministic mode's turns.
#pragma once

#include "attnjit/sm90a/vocabulary.cuh"

namespace attnjit {

/// The fp32 boxes of the TMA reductions (dQ, and under GQA dK and dV): 64 rows x 32 columns,
/// 128-byte rows in the 128-byte swizzle.
constexpr int kSumBoxBytes = 64 * 128;

/// Stores rows 16 w + g (+ 8) of a warpgroup's m64 x kCols fp32 accumulator times `scale`,
/// columns col0 + 8 dt + 2 t, as an fp32 TMA map's boxes of 64 rows x kBoxCols columns, box b at
/// box_address(b). kBoxCols = 32: 128-byte rows in the 128-byte swizzle, column c of row r
/// being float c % 4 of 16-byte chunk (c % 32 / 4) ^ (r % 8) of row r of box c / 32; 16:
/// 64-byte rows in the 64-byte swizzle, chunk (c % 16 / 4) ^ ((r / 2) % 4) of box c / 16.
/// A 64-bit store is served a half-warp (four rows) at a time: where the swizzle would put two
/// of those rows' 32 bytes of one n8 tile in the same banks (rows r and r + 1 in the 128-byte
/// swizzle, r and r + 2 in the 64-byte one), one of them stores a neighbouring tile of the same
/// box in that step instead (tile dt ^ kFlip), so that each step takes one pass of the banks.
template <int kCols, int kBoxCols = 32, class BoxAddress>
__device__ __forceinline__ void store_fp32_boxes(BoxAddress box_address, int col0,
                                                 const float (&acc)[kCols / 8][4], float scale) {
  static_assert(kBoxCols == 32 || kBoxCols == 16, "boxes of 128- or 64-byte rows");
  constexpr int kFlip = kBoxCols == 32 ? 2 : 1;
  static_assert(kCols / 8 % (2 * kFlip) == 0, "whole groups of tiles that trade places");
  const int lane = read_tid_x() % 32;
  const int t = lane % 4;
  // Rows g and g + 8 trade alike (their row's bits that choose the banks are g's).
  const bool flip = kBoxCols == 32 ? (lane / 4) % 2 == 1 : (lane / 8) % 2 == 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * ((read_tid_x() / 32) % 4) + lane / 4 + 8 * r;
    const u32 at = row * (kBoxCols * 4) + (t % 2) * 8;
#pragma unroll
    for (int dt = 0; dt < kCols / 8; ++dt) {
      // Selects between compile-time tiles: the accumulator stays in registers.
      const int tile = flip ? dt ^ kFlip : dt;
      const float v0 = flip ? acc[dt ^ kFlip][2 * r] : acc[dt][2 * r];
      const float v1 = flip ? acc[dt ^ kFlip][2 * r + 1] : acc[dt][2 * r + 1];
      const int chunk = kBoxCols == 32 ? (2 * (tile % 4) + t / 2) ^ (row % 8)
                                       : (2 * (tile % 2) + t / 2) ^ ((row / 2) % 4);
      // Tiles dt and dt ^ kFlip lie in the same box.
      store_shared_v2_f32(box_address((col0 + 8 * dt) / kBoxCols) + at + chunk * 16, v0 * scale,
                          v1 * scale);
    }
  }
}

/// store_fp32_boxes into consecutive boxes from `buffer`.
template <int kCols>
__device__ __forceinline__ void store_fp32_tile(u32 buffer, int col0,
                                                const float (&acc)[kCols / 8][4], float scale) {
  store_fp32_boxes<kCols>([buffer](int box) { return buffer + box * kSumBoxBytes; }, col0, acc,
                          scale);
}

/// Deterministic mode: how many key blocks after n_block walk query block m_block (whose rows
/// `s` holds), i.e. the turn of n_block's reductions into its dQ; each lane of the calling warp
/// tests one key block per step as the walk would (index range, then classification; the
/// deterministic walks do not narrow a packed batch's range, query_blocks_of).
template <class Mask, int kBlockM, int kBlockN>
__device__ __forceinline__ int later_key_visitors(const BwdParams& p, const MaskState& s,
                                                  int m_block, int n_block) {
  const int lane = threadIdx.x % 32;
  int count = 0;
  for (int base = n_block + 1; base < s.num_key_blocks; base += 32) {
    const int n = base + lane;
    bool visits = false;
    if (n < s.num_key_blocks) {
      int first, last;
      Mask::template query_block_range<kBlockM, kBlockN>(s, n, first, last);
      visits = m_block >= first && m_block < last &&
               tile_kind(Mask::template classify<kBlockN>(s, p.minmax, n)) != kTileSkip;
    }
    count += __popc(__ballot_sync(0xffffffffu, visits));
  }
  return count;
}

/// Deterministic mode: the turn counter (params.cuh's dq_turns, kLanes per query block of
/// kBlockM rows) of query block `block` of (batch, query head `head`), lane `lane`.
template <int kBlockM, int kLanes>
__device__ __forceinline__ int* dq_turn_counter(const BwdParams& p, int batch, int head, int block,
                                                int lane) {
  const long long blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  const long long row = (static_cast<long long>(batch) * p.heads + head) * blocks;
  return p.dq_turns + (row + block) * kLanes + lane;
}

}  // namespace attnjit
