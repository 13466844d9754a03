// The score step of the sm90a forward (fwd_sm90a.cuh) on one warpgroup's m64 x kBlockN
// accumulator of S = Q K^T: score modifiers, the mask of a partial key block, and the online
// softmax. Element (nt, e) of the fragment (wgmma.cuh) is row `row0 + 8 (e / 2)` of the
// thread and key `8 nt + 2 t + e % 2` of the block, t = lane % 4; the four lanes of a quad
// share the rows.
#pragma once

#include "attnjit/mask.cuh"
#include "attnjit/primitives.cuh"
#include "attnjit/score_mod.cuh"

namespace attnjit {

/// Applies the score modifiers (before the mask, which then sets -inf: a modifier would turn
/// -inf into a number). row0: the thread's first query row in the sequence.
template <class Score, bool kOrderedCtas, int kTiles, class Params>
__device__ __forceinline__ void modify_scores(const Params& p, float (&s)[kTiles][4], int row0,
                                              int key0, int diagonal, int t) {
  if constexpr (Score::kActive) {
    const Score score = Score::template make<kOrderedCtas>(p);
    const int distance0 = key0 + 2 * t - (row0 + diagonal);
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = score.apply(s[nt][e], distance0 + 8 * nt + e % 2 - 8 * (e / 2));
      }
    }
  }
}

/// Sets the masked elements of a partial key block to -inf by the mask's element rule on the
/// columns' FlashMask values in shared memory (`vectors`, kColumns ints per key). row0: the
/// thread's first query row in the sequence; key0: the block's first key. The rule is
/// evaluated into bits first, 32 elements per word, so that no more than a column's values
/// are live next to the accumulators.
template <class Mask, int kTiles, class Params>
__device__ __forceinline__ void mask_scores(const Params& p, const MaskState& ms,
                                            float (&s)[kTiles][4], u32 vectors, int row0, int key0,
                                            int t) {
  constexpr int kWords = (kTiles * 4 + 31) / 32;
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    // Bit 4 (nt % 8) + 2 r + c of word w: element (nt, 2 r + c), nt in [8 w, 8 w + 8).
    unsigned hidden = 0;
#pragma unroll
    for (int j = 0; j < 16 && 16 * w + j < kTiles * 2; ++j) {
      const int nt = (16 * w + j) / 2;
      const int c = j % 2;
      const int local_col = 8 * nt + 2 * t + c;
      const typename Mask::Column column =
          Mask::load_column(ms, vectors + local_col * Mask::kColumns * 4);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (Mask::masked(p, ms, row0 + 8 * r, key0 + local_col, column)) {
          hidden |= 1u << (4 * (nt % 8) + 2 * r + c);
        }
      }
    }
#pragma unroll
    for (int e = 0; e < 32 && 32 * w + e < kTiles * 4; ++e) {
      if ((hidden >> e) & 1) s[8 * w + e / 4][e % 4] = negative_infinity();
    }
  }
}

/// Sets the hidden elements (bit 4 nt + e of `hidden`) of the fragment to -inf.
template <int kTiles>
__device__ __forceinline__ void hide_scores(float (&s)[kTiles][4], unsigned long long hidden) {
#pragma unroll
  for (int i = 0; i < kTiles * 4; ++i) {
    if ((hidden >> i) & 1) s[i / 4][i % 4] = negative_infinity();
  }
}

/// The running max and sum of the thread's two rows. The max is kept in the units of the
/// scores (raw q.k, or log2 units after a modifier); `scale` (Score::exponent_scale) folds
/// softmax_scale * log2(e) into exp2.
struct OnlineSoftmax {
  float row_max[2];
  float row_sum[2];  ///< the thread's share; the quad's sum is taken at the end

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = negative_infinity();
      row_sum[r] = 0.f;
    }
  }

  /// Turns the scores into P = 2^(s scale - max scale) in place with the block's new running
  /// max, adds them to the sums, and returns in `correction` what the output accumulated so far
  /// must be multiplied by. A row with nothing visible yet keeps max = -inf and P = 0.
  template <int kTiles>
  __device__ __forceinline__ void step(float (&s)[kTiles][4], float scale, float (&correction)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float block_max = row_max[r];
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
        block_max = fmaxf(block_max, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      }
      block_max = quad_max(block_max);
      const float max_scaled = block_max == negative_infinity() ? 0.f : block_max * scale;
      correction[r] = exp2_approx(row_max[r] * scale - max_scaled);
      row_max[r] = block_max;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float value = exp2_approx(fmaf(s[nt][2 * r + c], scale, -max_scaled));
          s[nt][2 * r + c] = value;
          sum += value;
        }
      }
      row_sum[r] = fmaf(row_sum[r], correction[r], sum);
    }
  }
};

/// P (the scores after OnlineSoftmax::step) as the A operand of O += P V: for k16 step kk,
/// {P[2 kk][0, 1], P[2 kk][2, 3], P[2 kk + 1][0, 1], P[2 kk + 1][2, 3]} packed to 16 bits.
template <class Element, int kTiles>
__device__ __forceinline__ void pack_probabilities(const float (&s)[kTiles][4],
                                                   u32 (&a)[kTiles / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < kTiles / 2; ++kk) {
    a[kk][0] = pack2<Element>(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = pack2<Element>(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = pack2<Element>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = pack2<Element>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

/// Multiplies the thread's two rows of an accumulator by correction[0] and correction[1].
template <int kTiles>
__device__ __forceinline__ void scale_rows(float (&o)[kTiles][4], const float (&correction)[2]) {
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] *= correction[e / 2];
  }
}

}  // namespace attnjit
