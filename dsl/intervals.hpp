// FlashMask interval vectors on the host: the int32 tensor `startend_row_indices`
// [batch, heads, seqlen_k, columns], its element rule, validation, batching, packing and a dense
// rendering for tests and the CLI. The column roles follow docs/masks.md:
//
//   causal  C=1: LTS            masked rows of column j: causal ∪ [LTS, Sq)
//   causal  C=2: LTS, LTE       masked rows of column j: causal ∪ [LTS, LTE)
//   !causal C=2: LTS, UTE       masked rows of column j: [LTS, Sq) ∪ [0, UTE)
//   !causal C=4: LTS, LTE, UTS, UTE   masked rows:      [LTS, LTE) ∪ [UTS, UTE)
//
// The causal part is bottom-right aligned: query i sees key j only if j <= i + (Sk - Sq).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attnjit/spec.hpp"

namespace attnjit::dsl {

/// The interval vectors of a FlashMask mask and the shape they apply to.
struct IntervalVectors {
  bool causal = false;  ///< the causal part is applied by index arithmetic; UTS/UTE unused
  int columns = 0;      ///< interval vectors per key column: 1, 2 or 4 (table above)
  int batch = 0;
  int heads = 0;  ///< mask heads: 1 or the number of KV heads
  int seqlen_q = 0;
  int seqlen_k = 0;
  /// int32 [batch, heads, seqlen_k, columns], columns fastest.
  std::vector<std::int32_t> data;

  /// Value of vector `c` for key column `col` of (batch `b`, mask head `h`). No bounds check.
  std::int32_t at(int b, int h, int col, int c) const {
    const auto index = ((static_cast<std::size_t>(b) * heads + h) * seqlen_k + col) * columns + c;
    return data[index];
  }

  /// The mask's structure for an AttentionSpec: kind flashmask, `causal`, `columns`.
  MaskSpec mask_spec() const { return MaskSpec{MaskKind::flashmask, causal, columns}; }
};

/// The name of vector `c` of each key column under the column table of docs/masks.md: LTS for
/// one column; LTS, LTE (causal) or LTS, UTE (non-causal) for two; LTS, LTE, UTS, UTE for four.
std::string_view vector_name(bool causal, int columns, int c);

/// True iff query `row` must not see key `col` in (batch `b`, mask head `h`): the row lies in
/// one of the column's intervals, or (when m.causal) col > row + (seqlen_k - seqlen_q).
/// Expects valid vectors and in-range indices.
bool is_masked(const IntervalVectors& m, int b, int h, int row, int col);

/// Throws attnjit::Error unless the layout and shape of `m` are well formed (its data is not
/// read): columns in {1, 2, 4} and allowed with m.causal (causal: 1 or 2; non-causal: 2 or 4),
/// batch, heads, seqlen_q and seqlen_k >= 1.
void validate_shape(const IntervalVectors& m);

/// Throws attnjit::Error unless `m` is well formed: validate_shape(), data size equal to
/// batch*heads*seqlen_k*columns, every value in [0, seqlen_q], LTS <= LTE and UTS <= UTE.
/// The message names the first bad element in (batch, head, column, vector) order (a vector is
/// bad outside [0, seqlen_q], and an end LTE/UTE also below its start), its value and what is
/// accepted; attnjit::validate_intervals reports the same element on the device.
void validate(const IntervalVectors& m);

/// Concatenates single-sample vectors (batch = 1 each, equal causal flag, columns, heads and
/// sequence lengths) into one batch, in order. Throws Error naming the first mismatch.
IntervalVectors stack(std::span<const IntervalVectors> samples);

/// A packed batch's vectors: single-sample pieces (equal causal flag, columns and heads; any
/// lengths) one after another along the keys, their values kept (rows local to each piece's
/// sequence). seqlen_q is the largest piece's. Throws Error naming the first mismatch.
IntervalVectors concat_keys(std::span<const IntervalVectors> pieces);

/// Keys [first_key, first_key + keys) of a single-sample mask, as a mask of `seqlen_q` rows: a
/// packed batch's sequence. Throws Error for several samples or a range outside the keys.
IntervalVectors key_range(const IntervalVectors& m, int first_key, int keys, int seqlen_q);

/// Repeats the single head of `m` (m.heads must be 1) `heads` times.
IntervalVectors broadcast_heads(const IntervalVectors& m, int heads);

/// Places single-sample, single-head masks (seqlen_q == seqlen_k each) one after another along
/// the sequence, each seeing only itself, as in packed training batches: piece p of n_p tokens
/// takes rows and columns [s_p, s_p + n_p), its values shifted by s_p. Accepted layouts, equal
/// for every piece: causal with 1 column (LTS) and non-causal with 2 columns (LTS, UTE), whose
/// masked intervals reach the ends of the sequence and so hide every other piece. Throws Error
/// naming the first bad piece.
IntervalVectors pack(std::span<const IntervalVectors> pieces);

/// Row-major [seqlen_q][seqlen_k] rendering of (batch `b`, mask head `h`): 1 = masked,
/// causal part included. Throws Error for `b` or `h` out of range.
std::vector<std::uint8_t> dense_mask(const IntervalVectors& m, int b, int h);

}  // namespace attnjit::dsl
