// The random generators of dsl/builders.hpp that fuzz the kernels: arbitrary valid interval
// vectors and random document splits, deterministic for a seed on every platform.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "dsl/builders.hpp"
#include "dsl/param_checks.hpp"

namespace attnjit::dsl {
namespace {

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
