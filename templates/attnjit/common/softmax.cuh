// The online softmax of the forward kernels over the rows of an accumulator fragment
// (fragment.cuh): mma.sync slabs of a warp (sm80) or the m64 wgmma fragment of a warpgroup
// (sm90a), both m16n8 C tiles whose rows g and g + 8 are shared by the four lanes of a quad.
//
// Per key block, for each row: the new running max m' over the block's scores S, the
// correction 2^((m - m') c) of what was accumulated (output rows and the running sum), and
// P = 2^(S c - m' c) in place of S, summed into the running sum. c is the score modifiers'
// exponent scale (score_mod.cuh: scale * log2(e) for raw scores, 1 for modified ones), so the
// max is kept in the scores' units and scaled where it meets exp2. At the end the output rows
// are divided by the quad's total sum and LSE = (m c + log2 sum) ln 2.
//
// Rows with nothing visible: masked scores are -inf, so a row that has seen no visible key
// keeps m = -inf; its exponent offset is taken as 0 (not -inf * c, which would make
// -inf - -inf = NaN), so its P stays 0, its sum 0, its output 0 and its LSE -inf.
//
// Sinks (ScoreMod::kSinks): the head's sink logit t joins each row's sum at the end, with no
// value: the output rows are divided by sum 2^(m c - M) + 2^(t log2(e) - M) and scaled by
// 2^(m c - M), with M = max(m c, t log2(e)), so that a sink far above the scores (or a row with
// nothing visible, whose LSE is then t) overflows nothing.
#pragma once

#include "attnjit/common/fragment.cuh"
#include "attnjit/common/primitives.cuh"

namespace attnjit {

/// The running max and sum of the rows a thread holds in kSlabs m16 slabs (rows g and g + 8 of
/// each). row_sum is this thread's share (its columns) until finish() reduces the quad.
template <int kSlabs>
struct OnlineSoftmax {
  /// Lazy steps: how far (exponent units, log2) a row's max may rise before the row is
  /// rescaled; P stays below 2^8.
  static constexpr float kLazyThreshold = 8.f;
  float row_max[kSlabs][2];  ///< in the scores' units (before the exponent scale)
  float row_sum[kSlabs][2];

  /// No block seen: max -inf, sum 0.
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_max[s][r] = negative_infinity();
        row_sum[s][r] = 0.f;
      }
    }
  }

  /// One key block: S (the block's scores, -inf where masked) becomes P, the running max and
  /// sum advance, and the output rows `o` are rescaled by the correction. Score::exponent_scale
  /// is read from the kernel parameters `p` where it is used.
  template <class Score, class Params, int kTiles, int kOutTiles>
  __device__ __forceinline__ void step(const Params& p, WarpAccumulator<kSlabs, kTiles>& scores,
                                       WarpAccumulator<kSlabs, kOutTiles>& o) {
    float block_max[kSlabs][2];
    block_maxima(scores, block_max);
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float max_scaled;
        const float correction = advance<Score, false>(p, s, r, block_max[s][r], max_scaled);
        scale_row(o, s, r, correction);
        row_sum[s][r] +=
            exponentiate_row(s, r, scores, scores, Score::exponent_scale(p), max_scaled);
      }
    }
  }

  /// step() without the output: the corrections go to `correction`, for kernels that rescale
  /// their output later (rescale() or rescale_if_any()), e.g. after issuing the product that
  /// reads P. kLazy: a row keeps its max until a block's exceeds it by more than
  /// kLazyThreshold in exponent units (P stays below 2^kLazyThreshold; the sum, the output
  /// and the LSE are exact for any max they share), so that most blocks need no rescaling.
  /// P goes to `probs`, which may be `scores` (in place).
  template <class Score, bool kLazy = false, class Params, int kTiles>
  __device__ __forceinline__ void step(const Params& p,
                                       const WarpAccumulator<kSlabs, kTiles>& scores,
                                       WarpAccumulator<kSlabs, kTiles>& probs,
                                       float (&correction)[kSlabs][2]) {
    float block_max[kSlabs][2];
    block_maxima(scores, block_max);
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float max_scaled;
        correction[s][r] = advance<Score, kLazy>(p, s, r, block_max[s][r], max_scaled);
        row_sum[s][r] +=
            exponentiate_row(s, r, scores, probs, Score::exponent_scale(p), max_scaled);
      }
    }
  }

  /// A lazy step that skips the block's max: P = 2^(S c - m c) into `probs` with the rows'
  /// running maxima m, kept where every thread's share of each of the warp's rows sums to at
  /// most 2^kLazyThreshold (then no P exceeds it, as a lazy step() guarantees, and the
  /// corrections are 1); otherwise, and where a row has no max yet (its sum is not finite),
  /// it returns false and changes nothing but `probs`. The block's max, its tree of maxima
  /// and the quads' shuffles, is then needed only where scores rise well above the running
  /// max, mostly in a row's first blocks: a warp vote instead.
  template <class Score, class Params, int kTiles>
  __device__ __forceinline__ bool step_keeping_max(const Params& p,
                                                   const WarpAccumulator<kSlabs, kTiles>& scores,
                                                   WarpAccumulator<kSlabs, kTiles>& probs) {
    constexpr float kLimit = static_cast<float>(1 << static_cast<int>(kLazyThreshold));
    float sums[kSlabs][2];
    bool kept = true;
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float scale = Score::exponent_scale(p);
        sums[s][r] = exponentiate_row(s, r, scores, probs, scale, row_max[s][r] * scale);
        // False for a sum of inf or NaN (a row without a max: -inf offsets).
        kept = kept && sums[s][r] <= kLimit;
      }
    }
    if (!__all_sync(0xffffffffu, kept)) return false;
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) row_sum[s][r] += sums[s][r];
    }
    return true;
  }

  /// Multiplies the output rows by the corrections of a step.
  template <int kOutTiles>
  __device__ __forceinline__ static void rescale(WarpAccumulator<kSlabs, kOutTiles>& o,
                                                 const float (&correction)[kSlabs][2]) {
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) scale_row(o, s, r, correction[s][r]);
    }
  }

  /// rescale(), skipped where every row of the warp has the correction 1 (no max moved, or
  /// lazy steps kept them): a warp vote instead of the output's multiplies.
  template <int kOutTiles>
  __device__ __forceinline__ static void rescale_if_any(WarpAccumulator<kSlabs, kOutTiles>& o,
                                                        const float (&correction)[kSlabs][2]) {
    bool any = false;
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
      any = any || correction[s][0] != 1.f || correction[s][1] != 1.f;
    }
    if (__any_sync(0xffffffffu, any)) rescale(o, correction);
  }

  /// After the last block: row_sum becomes the quad's total and the output rows are divided by
  /// it (0 for rows with nothing visible); then visit(s, r) runs for each row, which may read
  /// lse(). Rows with nothing visible keep max -inf and sum 0.
  template <int kOutTiles, class Visit>
  __device__ __forceinline__ void finish(WarpAccumulator<kSlabs, kOutTiles>& o, Visit visit) {
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(row_sum[s][r]);
        row_sum[s][r] = sum;
        const float inverse = sum > 0.f ? 1.f / sum : 0.f;
        scale_row(o, s, r, inverse);
        visit(s, r);
      }
    }
  }

  template <int kOutTiles>
  __device__ __forceinline__ void finish(WarpAccumulator<kSlabs, kOutTiles>& o) {
    finish(o, [](int, int) {});
  }

  /// finish() for the rows of query head `head` under the score modifiers Score: with
  /// Score::kSinks the head's sink logit (p.sinks[head]) joins each row's sum; then row_max
  /// holds the rows' offsets M in log2 units and row_sum their totals relative to M, which
  /// lse<Score>() reads. Without sinks it is finish(o, visit).
  template <class Score, class Params, int kOutTiles, class Visit>
  __device__ __forceinline__ void finish(const Params& p, int head,
                                         WarpAccumulator<kSlabs, kOutTiles>& o, Visit visit) {
    if constexpr (Score::kSinks) {
      const float sink_log2 = p.sinks[head] * 1.4426950408889634f;
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float sum = quad_sum(row_sum[s][r]);
          const float scores_log2 =
              sum > 0.f ? row_max[s][r] * Score::exponent_scale(p) : negative_infinity();
          const float top = fmaxf(scores_log2, sink_log2);
          // top is -inf only for a row with nothing visible and a sink of -inf: its total is 0.
          const float offset = top == negative_infinity() ? 0.f : top;
          const float kept = exp2_approx(scores_log2 - offset);
          const float total = fmaf(sum, kept, exp2_approx(sink_log2 - offset));
          row_max[s][r] = top;
          row_sum[s][r] = total;
          scale_row(o, s, r, total > 0.f ? kept / total : 0.f);
          visit(s, r);
        }
      }
    } else {
      finish(o, visit);
    }
  }

  /// The natural-log LSE of row (s, r) after finish(): -inf for a row with nothing visible
  /// (with sinks: after finish<Score>(), the sink's logit there, -inf only for a sink of -inf).
  template <class Score, class Params>
  __device__ __forceinline__ float lse(const Params& p, int s, int r) const {
    if constexpr (Score::kSinks) {
      return row_sum[s][r] > 0.f ? (row_max[s][r] + log2_approx(row_sum[s][r])) * 0.69314718056f
                                 : negative_infinity();
    }
    return row_sum[s][r] > 0.f
               ? (row_max[s][r] * Score::exponent_scale(p) + log2_approx(row_sum[s][r])) *
                     0.69314718056f
               : negative_infinity();
  }

 private:
  /// Every row's new max over the block's scores (the quad's) and its running max: each
  /// thread's by a tree of pairwise maxima (depth log2(2 kTiles), not a chain of 2 kTiles; the
  /// exponentials wait for it), all rows before the quads' shuffles so that those overlap.
  /// Exact in any order.
  template <int kTiles>
  __device__ __forceinline__ void block_maxima(const WarpAccumulator<kSlabs, kTiles>& scores,
                                               float (&block_max)[kSlabs][2]) const {
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m[kTiles];
#pragma unroll
        for (int nt = 0; nt < kTiles; ++nt) {
          m[nt] = fmaxf(scores.v[s][nt][2 * r], scores.v[s][nt][2 * r + 1]);
        }
#pragma unroll
        for (int width = 1; width < kTiles; width *= 2) {
#pragma unroll
          for (int nt = 0; nt + width < kTiles; nt += 2 * width) {
            m[nt] = fmaxf(m[nt], m[nt + width]);
          }
        }
        block_max[s][r] = fmaxf(row_max[s][r], m[0]);
      }
    }
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) block_max[s][r] = quad_max(block_max[s][r]);
    }
  }

  /// Row (s, r) of a new block whose max (with the running one) is `block_max`: its exponent
  /// offset m' c to `max_scaled` (0 while the row has seen nothing visible), the sum scaled by
  /// the correction 2^(m c - m' c), which is returned for the output row. Lazy: the old max
  /// stays while the new one is within the threshold (correction 1, which rescale_if_any
  /// skips); a row's first visible block takes its max with correction 1 too (its output and
  /// sum are still 0). Without branches, so that the rows' steps interleave.
  template <class Score, bool kLazy, class Params>
  __device__ __forceinline__ float advance(const Params& p, int s, int r, float block_max,
                                           float& max_scaled) {
    const float old_max = row_max[s][r];
    const float scale = Score::exponent_scale(p);
    if constexpr (kLazy) {
      const bool first = old_max == negative_infinity();
      const bool moved = first || (block_max - old_max) * scale > kLazyThreshold;
      const float new_max = moved ? block_max : old_max;
      max_scaled = new_max == negative_infinity() ? 0.f : new_max * scale;
      const float shift = exp2_approx(old_max * scale - max_scaled);
      const float correction = moved && !first ? shift : 1.f;
      row_max[s][r] = new_max;
      row_sum[s][r] *= correction;
      return correction;
    }
    max_scaled = block_max == negative_infinity() ? 0.f : block_max * scale;
    const float correction = exp2_approx(old_max * scale - max_scaled);
    row_max[s][r] = block_max;
    row_sum[s][r] *= correction;
    return correction;
  }

  /// Row (s, r) of P = 2^(S scale - max_scaled) into `probs` (which may be `scores`); returns
  /// this thread's sum of it.
  template <int kTiles>
  __device__ __forceinline__ static float exponentiate_row(
      int s, int r, const WarpAccumulator<kSlabs, kTiles>& scores,
      WarpAccumulator<kSlabs, kTiles>& probs, float scale, float max_scaled) {
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float x = fmaf(scores.v[s][nt][2 * r + c], scale, -max_scaled);
        const float value = exp2_approx(x);
        probs.v[s][nt][2 * r + c] = value;
        sum += value;
      }
    }
    return sum;
  }

  template <int kOutTiles>
  __device__ __forceinline__ static void scale_row(WarpAccumulator<kSlabs, kOutTiles>& o, int s,
                                                   int r, float factor) {
#pragma unroll
    for (int nt = 0; nt < kOutTiles; ++nt) {
      o.v[s][nt][2 * r] *= factor;
      o.v[s][nt][2 * r + 1] *= factor;
    }
  }
};

}  // namespace attnjit
