// FlashMask interval vectors: the element rule, validation, stacking, head broadcast, packing
// and the dense rendering.
#include "dsl/intervals.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <string_view>

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit::dsl {
std::string_view vector_name(bool causal, int columns, int c) {
  static constexpr std::array<std::string_view, 4> kFour = {"LTS", "LTE", "UTS", "UTE"};
  if (columns == 4) return kFour[c];
  if (columns == 2) return c == 0 ? "LTS" : (causal ? "LTE" : "UTE");
  return "LTS";
}

namespace {

/// The two intervals of one key column with the defaults of omitted vectors filled in.
struct ColumnIntervals {
  std::int32_t lts, lte, uts, ute;
};

ColumnIntervals column_intervals(const IntervalVectors& m, int b, int h, int col) {
  ColumnIntervals iv{m.at(b, h, col, 0), m.seqlen_q, 0, 0};
  if (m.columns == 4) {
    iv.lte = m.at(b, h, col, 1);
    iv.uts = m.at(b, h, col, 2);
    iv.ute = m.at(b, h, col, 3);
  } else if (m.columns == 2) {
    if (m.causal) {
      iv.lte = m.at(b, h, col, 1);
    } else {
      iv.ute = m.at(b, h, col, 1);
    }
  }
  return iv;
}

void check_positive(std::string_view field, int value) {
  if (value < 1) throw_field_error(field, fmt::to_string(value), ">= 1");
}

std::string element_name(int b, int h, int col) {
  return fmt::format("startend_row_indices[batch={}, head={}, column={}]", b, h, col);
}

/// Checks the column's vectors in order: vector c is bad when outside [0, seqlen_q], or when it
/// is an end (LTE, UTE) below its start; the first bad one is reported.
void validate_column(const IntervalVectors& m, int b, int h, int col) {
  const bool has_lte = m.columns == 4 || (m.causal && m.columns == 2);
  for (int c = 0; c < m.columns; ++c) {
    const std::int32_t value = m.at(b, h, col, c);
    if (value < 0 || value > m.seqlen_q) {
      const std::string_view role = vector_name(m.causal, m.columns, c);
      throw Error(fmt::format("{} {}={} is outside [0, {}]; accepted: 0 <= {} <= {} (seqlen_q)",
                              element_name(b, h, col), role, value, m.seqlen_q, role, m.seqlen_q));
    }
    if (c == 1 && has_lte && value < m.at(b, h, col, 0)) {
      throw Error(fmt::format("{} LTE={} is below LTS={}; accepted: LTS <= LTE <= {} (seqlen_q)",
                              element_name(b, h, col), value, m.at(b, h, col, 0), m.seqlen_q));
    }
    if (c == 3 && value < m.at(b, h, col, 2)) {
      throw Error(fmt::format("{} UTE={} is below UTS={}; accepted: UTS <= UTE <= {} (seqlen_q)",
                              element_name(b, h, col), value, m.at(b, h, col, 2), m.seqlen_q));
    }
  }
}

/// Throws unless `sample` agrees with `first` on everything but its data.
// Sample `index` of `operation`'s list (stack: "samples", concat_keys: "pieces") against the
// first: one sample, the same layout and heads, and the lengths too when `same_lengths`.
void check_stackable(const IntervalVectors& first, const IntervalVectors& sample, int index,
                     std::string_view operation, std::string_view list, bool same_lengths) {
  const auto mismatch = [&](std::string_view field, auto got, auto expected) {
    if (got != expected) {
      throw Error(fmt::format("{}: {}[{}].{}: got {}; accepted: {} (the value of {}[0])", operation,
                              list, index, field, got, expected, list));
    }
  };
  if (sample.batch != 1) {
    throw Error(fmt::format("{}: {}[{}].batch: got {}; accepted: 1 (single-sample vectors)",
                            operation, list, index, sample.batch));
  }
  mismatch("causal", sample.causal, first.causal);
  mismatch("columns", sample.columns, first.columns);
  mismatch("heads", sample.heads, first.heads);
  if (same_lengths) {
    mismatch("seqlen_q", sample.seqlen_q, first.seqlen_q);
    mismatch("seqlen_k", sample.seqlen_k, first.seqlen_k);
  }
  const std::size_t expected_size =
      static_cast<std::size_t>(sample.heads) * sample.seqlen_k * sample.columns;
  if (sample.data.size() != expected_size) {
    throw Error(
        fmt::format("{}: {}[{}].data: got {} values; accepted: heads*seqlen_k*"
                    "columns = {}",
                    operation, list, index, sample.data.size(), expected_size));
  }
}

}  // namespace

bool is_masked(const IntervalVectors& m, int b, int h, int row, int col) {
  if (m.causal && col > row + (m.seqlen_k - m.seqlen_q)) return true;
  const ColumnIntervals iv = column_intervals(m, b, h, col);
  if (row >= iv.lts && row < iv.lte) return true;
  return !m.causal && row >= iv.uts && row < iv.ute;
}

void validate_shape(const IntervalVectors& m) {
  if (m.columns != 1 && m.columns != 2 && m.columns != 4) {
    throw_field_error("columns", fmt::to_string(m.columns), "1, 2 or 4");
  }
  if (m.causal && m.columns == 4) {
    throw Error(
        "columns: got '4' with causal=true; accepted: 1 (LTS) or 2 (LTS, LTE) when causal, "
        "since causal mode never reads UTS/UTE");
  }
  if (!m.causal && m.columns == 1) {
    throw Error(
        "columns: got '1' with causal=false; accepted: 2 (LTS, UTE) or 4 (LTS, LTE, UTS, UTE) "
        "when not causal");
  }
  check_positive("batch", m.batch);
  check_positive("heads", m.heads);
  check_positive("seqlen_q", m.seqlen_q);
  check_positive("seqlen_k", m.seqlen_k);
}

void validate(const IntervalVectors& m) {
  validate_shape(m);
  const std::size_t expected = static_cast<std::size_t>(m.batch) * m.heads * m.seqlen_k *
                               static_cast<std::size_t>(m.columns);
  if (m.data.size() != expected) {
    throw Error(
        fmt::format("startend_row_indices: got {} values; accepted: batch*heads*seqlen_k*columns = "
                    "{}*{}*{}*{} = {}",
                    m.data.size(), m.batch, m.heads, m.seqlen_k, m.columns, expected));
  }
  for (int b = 0; b < m.batch; ++b) {
    for (int h = 0; h < m.heads; ++h) {
      for (int col = 0; col < m.seqlen_k; ++col) validate_column(m, b, h, col);
    }
  }
}

IntervalVectors stack(std::span<const IntervalVectors> samples) {
  if (samples.empty()) throw_field_error("stack: samples", "an empty list", "one or more samples");
  IntervalVectors result = samples.front();
  result.data.clear();
  result.batch = static_cast<int>(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    check_stackable(samples.front(), samples[i], static_cast<int>(i), "stack", "samples", true);
    result.data.insert(result.data.end(), samples[i].data.begin(), samples[i].data.end());
  }
  return result;
}

IntervalVectors concat_keys(std::span<const IntervalVectors> pieces) {
  if (pieces.empty()) {
    throw_field_error("concat_keys: pieces", "an empty list", "one or more pieces");
  }
  IntervalVectors result = pieces.front();
  result.seqlen_q = 0;
  result.seqlen_k = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    check_stackable(pieces.front(), pieces[i], static_cast<int>(i), "concat_keys", "pieces", false);
    result.seqlen_q = std::max(result.seqlen_q, pieces[i].seqlen_q);
    result.seqlen_k += pieces[i].seqlen_k;
  }
  const std::size_t row = static_cast<std::size_t>(result.seqlen_k) * result.columns;
  result.data.assign(row * result.heads, 0);
  std::size_t first = 0;
  for (const IntervalVectors& piece : pieces) {
    const std::size_t width = static_cast<std::size_t>(piece.seqlen_k) * piece.columns;
    for (int h = 0; h < result.heads; ++h) {
      std::copy_n(piece.data.begin() + static_cast<std::ptrdiff_t>(h * width), width,
                  result.data.begin() + static_cast<std::ptrdiff_t>(h * row + first));
    }
    first += width;
  }
  return result;
}

IntervalVectors key_range(const IntervalVectors& m, int first_key, int keys, int seqlen_q) {
  if (m.batch != 1) {
    throw_field_error("key_range: batch", fmt::to_string(m.batch), "1 (single-sample vectors)");
  }
  if (first_key < 0 || keys < 0 || first_key > m.seqlen_k - keys) {
    throw_field_error("key_range: keys", fmt::format("[{}, {})", first_key, first_key + keys),
                      fmt::format("a range within the {} keys", m.seqlen_k));
  }
  IntervalVectors result = m;
  result.seqlen_q = seqlen_q;
  result.seqlen_k = keys;
  result.data.clear();
  for (int h = 0; h < m.heads; ++h) {
    const auto begin =
        m.data.begin() + (static_cast<std::ptrdiff_t>(h) * m.seqlen_k + first_key) * m.columns;
    result.data.insert(result.data.end(), begin,
                       begin + static_cast<std::ptrdiff_t>(keys) * m.columns);
  }
  return result;
}

IntervalVectors broadcast_heads(const IntervalVectors& m, int heads) {
  if (m.heads != 1) {
    throw_field_error("broadcast_heads: mask heads", fmt::to_string(m.heads),
                      "1 (a single-head mask to repeat)");
  }
  check_positive("broadcast_heads: heads", heads);
  const std::size_t per_head = static_cast<std::size_t>(m.seqlen_k) * m.columns;
  if (m.data.size() != per_head * m.batch) {
    throw Error(fmt::format(
        "broadcast_heads: startend_row_indices: got {} values; accepted: batch*seqlen_k*columns "
        "= {}",
        m.data.size(), per_head * m.batch));
  }
  IntervalVectors result = m;
  result.heads = heads;
  result.data.clear();
  result.data.reserve(per_head * m.batch * heads);
  for (int b = 0; b < m.batch; ++b) {
    const auto first = m.data.begin() + static_cast<std::ptrdiff_t>(per_head * b);
    for (int h = 0; h < heads; ++h) {
      result.data.insert(result.data.end(), first, first + static_cast<std::ptrdiff_t>(per_head));
    }
  }
  return result;
}

IntervalVectors pack(std::span<const IntervalVectors> pieces) {
  if (pieces.empty()) throw_field_error("pack: pieces", "an empty list", "one or more pieces");
  const IntervalVectors& first = pieces.front();
  if (!(first.causal && first.columns == 1) && !(!first.causal && first.columns == 2)) {
    throw Error(fmt::format(
        "pack: pieces[0] layout: got causal={} with {} columns; accepted: causal with 1 column "
        "(LTS) or non-causal with 2 columns (LTS, UTE)",
        first.causal, first.columns));
  }
  IntervalVectors result;
  result.causal = first.causal;
  result.columns = first.columns;
  result.batch = 1;
  result.heads = 1;
  std::int64_t start = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const IntervalVectors& piece = pieces[i];
    validate(piece);
    const auto mismatch = [&](std::string_view field, auto got, auto accepted) {
      throw Error(
          fmt::format("pack: pieces[{}].{}: got {}; accepted: {}", i, field, got, accepted));
    };
    if (piece.causal != first.causal) mismatch("causal", piece.causal, first.causal);
    if (piece.columns != first.columns) mismatch("columns", piece.columns, first.columns);
    if (piece.batch != 1) mismatch("batch", piece.batch, 1);
    if (piece.heads != 1) mismatch("heads", piece.heads, 1);
    if (piece.seqlen_k != piece.seqlen_q) {
      mismatch("seqlen_k", piece.seqlen_k, fmt::format("its seqlen_q ({})", piece.seqlen_q));
    }
    if (start + piece.seqlen_q > INT_MAX) {
      throw Error(
          fmt::format("pack: total length: got more than {} tokens at pieces[{}]; "
                      "accepted: at most {}",
                      INT_MAX, i, INT_MAX));
    }
    for (const std::int32_t value : piece.data) {
      result.data.push_back(static_cast<std::int32_t>(start + value));
    }
    start += piece.seqlen_q;
  }
  result.seqlen_q = static_cast<int>(start);
  result.seqlen_k = result.seqlen_q;
  return result;
}

std::vector<std::uint8_t> dense_mask(const IntervalVectors& m, int b, int h) {
  validate(m);
  if (b < 0 || b >= m.batch) {
    throw_field_error("dense_mask: batch index", fmt::to_string(b),
                      fmt::format("0 <= batch index < {}", m.batch));
  }
  if (h < 0 || h >= m.heads) {
    throw_field_error("dense_mask: head index", fmt::to_string(h),
                      fmt::format("0 <= head index < {}", m.heads));
  }
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(m.seqlen_q) * m.seqlen_k);
  for (int row = 0; row < m.seqlen_q; ++row) {
    for (int col = 0; col < m.seqlen_k; ++col) {
      dense[static_cast<std::size_t>(row) * m.seqlen_k + col] = is_masked(m, b, h, row, col);
    }
  }
  return dense;
}

}  // namespace attnjit::dsl
