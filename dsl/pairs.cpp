// visible_pairs: per row for index masks, per column (union of intervals) for FlashMask.
#include "dsl/pairs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "attnjit/error.hpp"

namespace attnjit::dsl {
namespace {

struct Rows {
  std::int64_t begin, end;  // [begin, end)
};

// Length of the union of up to three row intervals clipped to [0, seqlen_q).
std::int64_t union_length(std::array<Rows, 3> rows, int count, int seqlen_q) {
  for (int i = 0; i < count; ++i) {
    rows[i].begin = std::clamp<std::int64_t>(rows[i].begin, 0, seqlen_q);
    rows[i].end = std::clamp<std::int64_t>(rows[i].end, 0, seqlen_q);
  }
  std::sort(rows.begin(), rows.begin() + count,
            [](const Rows& a, const Rows& b) { return a.begin < b.begin; });
  std::int64_t total = 0, covered_to = 0;
  for (int i = 0; i < count; ++i) {
    const std::int64_t begin = std::max(rows[i].begin, covered_to);
    if (rows[i].end > begin) total += rows[i].end - begin;
    covered_to = std::max(covered_to, rows[i].end);
  }
  return total;
}

std::int64_t flashmask_pairs(const IntervalVectors& m, int heads) {
  const std::int64_t diagonal = static_cast<std::int64_t>(m.seqlen_k) - m.seqlen_q;
  std::int64_t total = 0;
  for (int b = 0; b < m.batch; ++b) {
    for (int h = 0; h < m.heads; ++h) {
      std::int64_t visible = 0;
      for (int col = 0; col < m.seqlen_k; ++col) {
        std::array<Rows, 3> rows{};
        int count = 0;
        if (m.causal) {
          // Key col is hidden from rows i with col > i + diagonal, i.e. i < col - diagonal.
          rows[count++] = {0, col - diagonal};
          const std::int64_t lte = m.columns == 2 ? m.at(b, h, col, 1) : m.seqlen_q;
          rows[count++] = {m.at(b, h, col, 0), lte};
        } else if (m.columns == 2) {
          rows[count++] = {m.at(b, h, col, 0), m.seqlen_q};
          rows[count++] = {0, m.at(b, h, col, 1)};
        } else {
          rows[count++] = {m.at(b, h, col, 0), m.at(b, h, col, 1)};
          rows[count++] = {m.at(b, h, col, 2), m.at(b, h, col, 3)};
        }
        visible += m.seqlen_q - union_length(rows, count, m.seqlen_q);
      }
      total += visible * (heads / m.heads);
    }
  }
  return total;
}

}  // namespace

std::int64_t visible_pairs(const MaskSpec& mask, int batch, int heads, int seqlen_q, int seqlen_k,
                           int window_left, int window_right, const IntervalVectors* intervals) {
  if (mask.kind == MaskKind::flashmask) {
    if (intervals == nullptr)
      throw Error(
          "visible_pairs intervals: got none; accepted: the interval vectors of the flashmask "
          "mask");
    if (intervals->heads < 1 || heads % intervals->heads != 0) {
      throw Error(fmt::format(
          "visible_pairs heads: got {} query heads for {} mask heads; accepted: a multiple of "
          "the mask heads",
          heads, intervals->heads));
    }
    return flashmask_pairs(*intervals, heads);
  }
  if (mask.kind == MaskKind::predicate) {
    throw_field_error("visible_pairs mask", to_string(mask),
                      "none, causal, sliding_window, flashmask (count a predicate's pairs with "
                      "PredicateEvaluator)");
  }
  const std::int64_t diagonal = static_cast<std::int64_t>(seqlen_k) - seqlen_q;
  std::int64_t per_head = 0;
  for (std::int64_t row = 0; row < seqlen_q; ++row) {
    std::int64_t first = 0, last = static_cast<std::int64_t>(seqlen_k) - 1;
    if (mask.kind == MaskKind::causal) last = std::min(last, row + diagonal);
    if (mask.kind == MaskKind::sliding_window) {
      if (window_left >= 0) first = std::max(first, row + diagonal - window_left);
      if (window_right >= 0) last = std::min(last, row + diagonal + window_right);
    }
    per_head += std::max<std::int64_t>(0, last - first + 1);
  }
  return per_head * batch * heads;
}

}  // namespace attnjit::dsl
