// The standard FlashMask families and the random generators used to fuzz kernels.
#include "dsl/builders.hpp"

#include <algorithm>
#include <climits>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "attnjit/error.hpp"

namespace attnjit::dsl {
namespace {

/// A single sample of `n` tokens with every value set to `fill`.
IntervalVectors single_sample(bool causal, int columns, int n, std::int32_t fill) {
  IntervalVectors m;
  m.causal = causal;
  m.columns = columns;
  m.batch = 1;
  m.heads = 1;
  m.seqlen_q = n;
  m.seqlen_k = n;
  m.data.assign(static_cast<std::size_t>(n) * columns, fill);
  return m;
}

void set(IntervalVectors& m, int col, int c, std::int64_t value) {
  m.data[static_cast<std::size_t>(col) * m.columns + c] = static_cast<std::int32_t>(value);
}

void check_at_least(std::string_view field, std::int64_t value, std::int64_t minimum) {
  if (value < minimum) {
    throw_field_error(field, fmt::to_string(value), fmt::format(">= {}", minimum));
  }
}

void check_range(std::string_view field, std::int64_t value, std::int64_t lo, std::int64_t hi,
                 std::string_view hi_name) {
  if (value < lo || value > hi) {
    throw_field_error(field, fmt::to_string(value),
                      fmt::format("{} <= {} <= {} ({})", lo, field, hi, hi_name));
  }
}

/// Checks each length >= 0 and returns their sum.
std::int64_t checked_sum(std::string_view name, std::span<const int> lengths) {
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    check_at_least(fmt::format("{}[{}]", name, i), lengths[i], 0);
    sum += lengths[i];
  }
  return sum;
}

/// Checks the total token count of a sample: >= 1 and representable as int32.
int checked_total(std::string_view what, std::int64_t total) {
  if (total < 1 || total > INT_MAX) {
    throw_field_error(what, fmt::to_string(total), fmt::format("1 to {} tokens", INT_MAX));
  }
  return static_cast<int>(total);
}

/// [start, end) of each document, in order.
std::vector<std::pair<int, int>> segments(std::span<const int> lengths) {
  std::vector<std::pair<int, int>> result;
  result.reserve(lengths.size());
  int start = 0;
  for (const int length : lengths) {
    result.emplace_back(start, start + length);
    start += length;
  }
  return result;
}

/// SplitMix64: tiny, seedable and identical on every platform (unlike std distributions).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  /// Uniform in [lo, hi] (inclusive; the modulo bias is irrelevant for test data).
  int uniform(int lo, int hi) {
    const auto span = static_cast<std::uint64_t>(static_cast<std::int64_t>(hi) - lo + 1);
    return static_cast<int>(lo + static_cast<std::int64_t>(next() % span));
  }

  bool chance(int percent) { return uniform(0, 99) < percent; }

 private:
  std::uint64_t state_;
};

/// The two intervals of one column before projection onto the stored vectors.
struct Intervals {
  int lts, lte, uts, ute;
};

/// A row bound that is often 0, seqlen_q, or on or next to a multiple of 16, 64 or 128.
int random_row(Rng& rng, int seqlen_q) {
  int row = 0;
  switch (rng.uniform(0, 4)) {
    case 0:
      row = rng.chance(50) ? 0 : seqlen_q;
      break;
    case 1:
    case 2: {
      const int tile = rng.chance(50) ? 64 : (rng.chance(50) ? 128 : 16);
      row = tile * rng.uniform(0, seqlen_q / tile + 1) + rng.uniform(-1, 1);
      break;
    }
    default:
      row = rng.uniform(0, seqlen_q);
  }
  return std::clamp(row, 0, seqlen_q);
}

std::pair<int, int> random_interval(Rng& rng, int seqlen_q) {
  const int a = random_row(rng, seqlen_q);
  const int b = random_row(rng, seqlen_q);
  return {std::min(a, b), std::max(a, b)};
}

/// Stores `iv` into column `col` of (b, h), keeping only the vectors the layout has.
void store(IntervalVectors& m, int b, int h, int col, const Intervals& iv) {
  const std::size_t base =
      ((static_cast<std::size_t>(b) * m.heads + h) * m.seqlen_k + col) * m.columns;
  m.data[base] = iv.lts;
  if (m.columns == 4) {
    m.data[base + 1] = iv.lte;
    m.data[base + 2] = iv.uts;
    m.data[base + 3] = iv.ute;
  } else if (m.columns == 2) {
    m.data[base + 1] = m.causal ? iv.lte : iv.ute;
  }
}

/// Intervals of a run of columns [first, last) following one randomly chosen pattern.
void fill_run(IntervalVectors& m, int b, int h, int first, int last, Rng& rng) {
  const int sq = m.seqlen_q;
  const Intervals never{sq, sq, 0, 0};
  const int pattern = rng.uniform(0, 6);
  const auto [a, e] = random_interval(rng, sq);
  const auto [ua, ue] = random_interval(rng, sq);
  const int lower_width = rng.uniform(0, std::max(1, sq / 2));
  const int upper_width = rng.uniform(0, std::max(1, sq / 2));
  for (int col = first; col < last; ++col) {
    Intervals iv = never;
    switch (pattern) {
      case 0:  // never masked
        break;
      case 1:  // fully masked by the lower interval
        iv = {0, sq, 0, 0};
        break;
      case 2:  // fully masked by the upper interval where the layout has one
        iv = m.causal ? Intervals{0, sq, 0, 0} : Intervals{sq, sq, 0, sq};
        break;
      case 3:  // one interval pair shared by the whole run
        iv = {a, e, ua, ue};
        break;
      case 4: {  // a band around the diagonal, as in sliding-window masks
        const int lts = std::clamp(col + lower_width, 0, sq);
        const int ute = std::clamp(col - upper_width, 0, sq);
        iv = {lts, std::max(lts, e), std::min(ua, ute), ute};
        break;
      }
      case 5: {  // lower and upper intervals that together cover every row
        const int split = random_row(rng, sq);
        iv = {split, sq, 0, split};
        break;
      }
      default: {  // independent random intervals per column
        const auto [l0, l1] = random_interval(rng, sq);
        const auto [u0, u1] = random_interval(rng, sq);
        iv = {l0, l1, u0, u1};
      }
    }
    store(m, b, h, col, iv);
  }
}

/// Length of the next run starting at `col`: often up to a 64 or 128 boundary (plus whole
/// tiles) so that entire key blocks share one pattern, otherwise short or long random runs.
int run_length(Rng& rng, int col, int seqlen_k) {
  int length = 1;
  switch (rng.uniform(0, 4)) {
    case 0:
    case 1: {
      const int tile = rng.chance(50) ? 64 : 128;
      length = tile - col % tile + tile * rng.uniform(0, 1);
      break;
    }
    case 2:
      length = rng.uniform(1, 16);
      break;
    case 3:
      length = rng.uniform(1, 64);
      break;
    default:
      length = rng.uniform(1, seqlen_k);
  }
  return std::min(length, seqlen_k - col);
}

}  // namespace

IntervalVectors sliding_window(int n, int window) {
  check_at_least("n", n, 1);
  check_at_least("window", window, 1);
  IntervalVectors m = single_sample(true, 1, n, n);
  for (int j = 0; j < n; ++j) set(m, j, 0, std::min<std::int64_t>(std::int64_t{j} + window, n));
  return m;
}

IntervalVectors causal_document(std::span<const int> doc_lengths) {
  const int n = checked_total("doc_lengths: sum", checked_sum("doc_lengths", doc_lengths));
  IntervalVectors m = single_sample(true, 1, n, n);
  for (const auto& [start, end] : segments(doc_lengths)) {
    for (int j = start; j < end; ++j) set(m, j, 0, end);
  }
  return m;
}

IntervalVectors document(std::span<const int> doc_lengths) {
  const int n = checked_total("doc_lengths: sum", checked_sum("doc_lengths", doc_lengths));
  IntervalVectors m = single_sample(false, 2, n, n);
  for (const auto& [start, end] : segments(doc_lengths)) {
    for (int j = start; j < end; ++j) {
      set(m, j, 0, end);
      set(m, j, 1, start);
    }
  }
  return m;
}

IntervalVectors share_question(int question, std::span<const int> answers) {
  check_at_least("question", question, 0);
  const int n = checked_total("question + sum(answers)",
                              std::int64_t{question} + checked_sum("answers", answers));
  IntervalVectors m = single_sample(true, 1, n, n);
  for (const auto& [start, end] : segments(answers)) {
    for (int j = question + start; j < question + end; ++j) set(m, j, 0, question + end);
  }
  return m;
}

IntervalVectors global_sliding_window(int n, int global, int left, int right) {
  check_at_least("n", n, 1);
  check_range("global", global, 0, n, "n");
  check_at_least("left", left, 0);
  check_at_least("right", right, 0);
  IntervalVectors m = single_sample(false, 4, n, n);
  for (int j = 0; j < n; ++j) {
    if (j < global) {
      set(m, j, 2, 0);
      set(m, j, 3, 0);
      continue;
    }
    set(m, j, 0, std::min<std::int64_t>(std::int64_t{j} + left + 1, n));
    set(m, j, 2, global);
    set(m, j, 3, std::max<std::int64_t>(std::int64_t{j} - right, global));
  }
  return m;
}

IntervalVectors causal_blockwise(std::span<const int> blocks, int test) {
  check_at_least("test", test, 0);
  const std::int64_t demo = checked_sum("blocks", blocks);
  const int n = checked_total("sum(blocks) + test", demo + test);
  IntervalVectors m = single_sample(true, 2, n, n);
  for (const auto& [start, end] : segments(blocks)) {
    for (int j = start; j < end; ++j) {
      set(m, j, 0, end);
      set(m, j, 1, demo);
    }
  }
  return m;
}

IntervalVectors prefix_lm_causal(int n, int prefix) {
  check_at_least("n", n, 1);
  check_range("prefix", prefix, 0, n, "n");
  IntervalVectors m = single_sample(false, 2, n, n);
  for (int j = 0; j < n; ++j) set(m, j, 1, j < prefix ? 0 : j);
  return m;
}

IntervalVectors prefix_lm_document(std::span<const int> doc_lengths,
                                   std::span<const int> prefixes) {
  const int n = checked_total("doc_lengths: sum", checked_sum("doc_lengths", doc_lengths));
  if (prefixes.size() != doc_lengths.size()) {
    throw_field_error("prefixes: count", fmt::to_string(prefixes.size()),
                      fmt::format("one prefix per document ({})", doc_lengths.size()));
  }
  const auto docs = segments(doc_lengths);
  for (std::size_t d = 0; d < docs.size(); ++d) {
    check_range(fmt::format("prefixes[{}]", d), prefixes[d], 0, doc_lengths[d],
                fmt::format("doc_lengths[{}]", d));
  }
  IntervalVectors m = single_sample(false, 2, n, n);
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const auto [start, end] = docs[d];
    for (int j = start; j < end; ++j) {
      set(m, j, 0, end);
      set(m, j, 1, j < start + prefixes[d] ? start : j);
    }
  }
  return m;
}

IntervalVectors qk_sparse(int n, int offset, int length) {
  check_at_least("n", n, 1);
  check_range("offset", offset, 0, n, "n");
  check_range("length", length, 0, n - offset, "n - offset");
  IntervalVectors m = single_sample(true, 2, n, n);
  for (int j = offset; j < offset + length; ++j) {
    set(m, j, 0, j);
    set(m, j, 1, offset + length);
  }
  return m;
}

IntervalVectors random_eviction(std::span<const int> evicted_at_row) {
  const int n =
      checked_total("evicted_at_row: size", static_cast<std::int64_t>(evicted_at_row.size()));
  IntervalVectors m = single_sample(true, 1, n, n);
  for (int j = 0; j < n; ++j) {
    if (evicted_at_row[j] < 0 || evicted_at_row[j] > n) {
      check_range(fmt::format("evicted_at_row[{}]", j), evicted_at_row[j], 0, n,
                  "the number of keys");
    }
    set(m, j, 0, evicted_at_row[j]);
  }
  return m;
}

IntervalVectors random_intervals(bool causal, int columns, int batch, int heads, int seqlen_q,
                                 int seqlen_k, std::uint64_t seed) {
  IntervalVectors m;
  m.causal = causal;
  m.columns = columns;
  m.batch = batch;
  m.heads = heads;
  m.seqlen_q = seqlen_q;
  m.seqlen_k = seqlen_k;
  validate_shape(m);
  m.data.resize(static_cast<std::size_t>(batch) * heads * seqlen_k * columns);
  Rng rng(seed);
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      for (int col = 0; col < seqlen_k;) {
        const int length = run_length(rng, col, seqlen_k);
        fill_run(m, b, h, col, col + length, rng);
        col += length;
      }
    }
  }
  return m;
}

IntervalVectors random_documents(bool causal, int seqlen, int min_docs, int max_docs,
                                 std::uint64_t seed) {
  check_at_least("seqlen", seqlen, 1);
  check_range("min_docs", min_docs, 1, seqlen, "seqlen");
  check_at_least("max_docs", max_docs, min_docs);
  Rng rng(seed);
  const int docs = rng.uniform(min_docs, std::min(max_docs, seqlen));
  // docs - 1 distinct cut points in [1, seqlen - 1] by a partial Fisher-Yates shuffle.
  std::vector<int> cuts(static_cast<std::size_t>(seqlen - 1));
  for (int i = 0; i < seqlen - 1; ++i) cuts[i] = i + 1;
  for (int i = 0; i < docs - 1; ++i) std::swap(cuts[i], cuts[rng.uniform(i, seqlen - 2)]);
  cuts.resize(static_cast<std::size_t>(docs - 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> lengths;
  int start = 0;
  for (const int cut : cuts) {
    lengths.push_back(cut - start);
    start = cut;
  }
  lengths.push_back(seqlen - start);
  return causal ? causal_document(lengths) : document(lengths);
}

}  // namespace attnjit::dsl
