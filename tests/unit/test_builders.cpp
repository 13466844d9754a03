// Unit tests of dsl/builders: the ten-token examples of docs/masks.md, every family against a
// brute-force evaluation of its own definition, parameter errors, the random generators, and
// every row of the family table (dsl/families.hpp): its language call, flashmask()'s keyword
// parameters and its device builder's definition build the same vectors.
#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "attnjit/error.hpp"
#include "dsl/builders.hpp"
#include "dsl/families.hpp"
#include "dsl/mask_lang.hpp"

namespace dsl = attnjit::dsl;
using attnjit::Error;
using Catch::Matchers::Contains;
using dsl::IntervalVectors;

namespace {

/// Vector `c` of the single sample, column by column.
std::vector<int> vector_of(const IntervalVectors& m, int c) {
  std::vector<int> values;
  for (int col = 0; col < m.seqlen_k; ++col) values.push_back(m.at(0, 0, col, c));
  return values;
}

/// Checks that `m` is a valid single sample of `n` tokens with the given layout whose dense mask
/// is exactly "not visible(i, j)" for every query row i and key column j.
void check_family(const IntervalVectors& m, int n, bool causal, int columns,
                  const std::function<bool(int, int)>& visible) {
  REQUIRE_NOTHROW(dsl::validate(m));
  REQUIRE(m.batch == 1);
  REQUIRE(m.heads == 1);
  REQUIRE(m.seqlen_q == n);
  REQUIRE(m.seqlen_k == n);
  CHECK(m.causal == causal);
  CHECK(m.columns == columns);
  const std::vector<std::uint8_t> dense = dsl::dense_mask(m, 0, 0);
  int mismatches = 0;
  std::string first;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const bool masked = dense[static_cast<std::size_t>(i) * n + j] != 0;
      if (masked == !visible(i, j)) continue;
      if (mismatches++ == 0) first = fmt::format("row {} column {}: masked={}", i, j, masked);
    }
  }
  INFO("first mismatch: " << first);
  CHECK(mismatches == 0);
}

/// Random segment lengths: `count` lengths in [0, max_length] (zero only when `allow_zero`).
std::vector<int> random_lengths(std::mt19937& rng, int count, int max_length, bool allow_zero) {
  std::uniform_int_distribution<int> length(allow_zero ? 0 : 1, max_length);
  std::vector<int> lengths(count);
  for (int& l : lengths) l = length(rng);
  return lengths;
}

int uniform(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

/// Segment index of every token for consecutive segments of `lengths`.
std::vector<int> owners(const std::vector<int>& lengths) {
  std::vector<int> owner;
  for (std::size_t s = 0; s < lengths.size(); ++s)
    owner.insert(owner.end(), lengths[s], static_cast<int>(s));
  return owner;
}

int sum(const std::vector<int>& values) {
  int total = 0;
  for (const int v : values) total += v;
  return total;
}

/// Random lengths summing to at least 1 (zero-length segments included when `allow_zero`).
std::vector<int> random_documents_lengths(std::mt19937& rng, bool allow_zero) {
  std::vector<int> lengths;
  do {
    lengths = random_lengths(rng, uniform(rng, 1, 6), uniform(rng, 1, 40), allow_zero);
  } while (sum(lengths) == 0);
  return lengths;
}

constexpr int kTrials = 150;

}  // namespace

TEST_CASE("the ten-token examples of docs/masks.md", "[dsl]") {
  SECTION("document") {
    const std::vector<int> docs = {4, 3, 3};
    const IntervalVectors m = dsl::document(docs);
    CHECK(vector_of(m, 0) == std::vector<int>{4, 4, 4, 4, 7, 7, 7, 10, 10, 10});
    CHECK(vector_of(m, 1) == std::vector<int>{0, 0, 0, 0, 4, 4, 4, 7, 7, 7});
  }
  SECTION("share question") {
    const std::vector<int> answers = {3, 3};
    const IntervalVectors m = dsl::share_question(4, answers);
    CHECK(m.columns == 1);
    CHECK(vector_of(m, 0) == std::vector<int>{10, 10, 10, 10, 7, 7, 7, 10, 10, 10});
  }
  SECTION("causal blockwise") {
    const std::vector<int> blocks = {4, 3};
    const IntervalVectors m = dsl::causal_blockwise(blocks, 3);
    CHECK(vector_of(m, 0) == std::vector<int>{4, 4, 4, 4, 7, 7, 7, 10, 10, 10});
    CHECK(vector_of(m, 1) == std::vector<int>{7, 7, 7, 7, 7, 7, 7, 10, 10, 10});
  }
}

TEST_CASE("sliding window matches its definition", "[dsl]") {
  std::mt19937 rng(1);
  for (int trial = 0; trial < kTrials; ++trial) {
    const int n = trial < 3 ? trial + 1 : uniform(rng, 1, 150);
    const int window = uniform(rng, 1, n + 3);
    INFO("n=" << n << " window=" << window);
    // Causal, and key j is one of the `window` most recent keys of row i (itself included).
    check_family(dsl::sliding_window(n, window), n, true, 1,
                 [&](int i, int j) { return j <= i && i - j < window; });
  }
}

TEST_CASE("causal document and document match their definitions", "[dsl]") {
  std::mt19937 rng(2);
  for (int trial = 0; trial < kTrials; ++trial) {
    const std::vector<int> lengths =
        trial == 0 ? std::vector<int>{1} : random_documents_lengths(rng, trial % 3 == 0);
    const int n = sum(lengths);
    const std::vector<int> doc = owners(lengths);
    INFO("doc_lengths=" << fmt::format("{}", fmt::join(lengths, ",")));
    // Causal document: causal, and query and key in the same document.
    check_family(dsl::causal_document(lengths), n, true, 1,
                 [&](int i, int j) { return j <= i && doc[i] == doc[j]; });
    // Document: query and key in the same document, in both directions.
    check_family(dsl::document(lengths), n, false, 2,
                 [&](int i, int j) { return doc[i] == doc[j]; });
  }
}

TEST_CASE("share question matches its definition", "[dsl]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < kTrials; ++trial) {
    const int question = uniform(rng, trial % 5 == 0 ? 0 : 1, 30);
    std::vector<int> answers = random_lengths(rng, uniform(rng, 0, 5), 25, trial % 4 == 0);
    if (question + sum(answers) == 0) answers.push_back(1);
    const int n = question + sum(answers);
    // Segment of each token: -1 for the question, otherwise the answer's index.
    std::vector<int> segment(question, -1);
    const std::vector<int> answer_of = owners(answers);
    segment.insert(segment.end(), answer_of.begin(), answer_of.end());
    INFO("question=" << question << " answers=" << fmt::format("{}", fmt::join(answers, ",")));
    // Causal; question keys are visible to every later row, an answer's keys only to rows of
    // the same answer.
    check_family(dsl::share_question(question, answers), n, true, 1, [&](int i, int j) {
      return j <= i && (segment[j] == -1 || segment[j] == segment[i]);
    });
  }
}

TEST_CASE("pack places pieces along the sequence, each seeing only itself", "[dsl]") {
  SECTION("packed share-question samples") {
    const std::vector<int> answers = {2, 1};
    const std::vector<IntervalVectors> pieces = {dsl::share_question(2, answers),
                                                 dsl::sliding_window(3, 2)};
    const IntervalVectors m = dsl::pack(pieces);
    CHECK(vector_of(m, 0) == std::vector<int>{5, 5, 4, 4, 5, 7, 8, 8});
    // Piece of each token and the piece-local rule: causal inside both pieces; the first
    // piece's answer keys only for their own answer, the second piece's keys for 2 rows.
    const std::vector<int> piece = {0, 0, 0, 0, 0, 1, 1, 1};
    const std::vector<int> segment = {-1, -1, 0, 0, 1, 2, 2, 2};
    check_family(m, 8, true, 1, [&](int i, int j) {
      if (piece[i] != piece[j] || j > i) return false;
      if (piece[j] == 1) return i - j < 2;
      return segment[j] == -1 || segment[j] == segment[i];
    });
  }
  SECTION("packing single documents gives the document families") {
    std::mt19937 rng(9);
    for (int trial = 0; trial < kTrials; ++trial) {
      const std::vector<int> lengths = random_documents_lengths(rng, false);
      std::vector<int> prefixes;
      std::vector<IntervalVectors> causal, bidirectional, prefix_lm;
      for (const int n : lengths) {
        const std::vector<int> one = {n};
        prefixes.push_back(uniform(rng, 0, n));
        causal.push_back(dsl::causal_document(one));
        bidirectional.push_back(dsl::document(one));
        prefix_lm.push_back(dsl::prefix_lm_causal(n, prefixes.back()));
      }
      INFO("doc_lengths=" << fmt::format("{}", fmt::join(lengths, ",")));
      CHECK(dsl::pack(causal).data == dsl::causal_document(lengths).data);
      CHECK(dsl::pack(bidirectional).data == dsl::document(lengths).data);
      CHECK(dsl::pack(prefix_lm).data == dsl::prefix_lm_document(lengths, prefixes).data);
      const IntervalVectors packed = dsl::pack(prefix_lm);
      CHECK(packed.seqlen_q == sum(lengths));
      CHECK(packed.seqlen_k == sum(lengths));
      CHECK_FALSE(packed.causal);
      CHECK(packed.columns == 2);
    }
  }
  SECTION("errors name the piece") {
    const std::vector<int> docs = {2, 2};
    const std::vector<IntervalVectors> four = {dsl::global_sliding_window(4, 1, 1, 1)};
    CHECK_THROWS_WITH(dsl::pack(four), Contains("pack: pieces[0] layout: got causal=false with 4"));
    const std::vector<IntervalVectors> blockwise = {dsl::causal_blockwise(docs, 1)};
    CHECK_THROWS_WITH(dsl::pack(blockwise), Contains("causal=true with 2 columns"));
    const std::vector<IntervalVectors> mixed = {dsl::causal_document(docs), dsl::document(docs)};
    CHECK_THROWS_WITH(dsl::pack(mixed), Contains("pack: pieces[1].causal: got false"));
    IntervalVectors two_heads = dsl::broadcast_heads(dsl::causal_document(docs), 2);
    const std::vector<IntervalVectors> heads = {dsl::causal_document(docs), two_heads};
    CHECK_THROWS_WITH(dsl::pack(heads), Contains("pack: pieces[1].heads: got 2; accepted: 1"));
    IntervalVectors bad = dsl::causal_document(docs);
    bad.data[1] = 9;
    const std::vector<IntervalVectors> invalid = {bad};
    CHECK_THROWS_WITH(dsl::pack(invalid), Contains("LTS=9 is outside [0, 4]"));
    CHECK_THROWS_WITH(dsl::pack({}), Contains("pack: pieces: got 'an empty list'"));
  }
}

TEST_CASE("global + sliding window matches its definition", "[dsl]") {
  std::mt19937 rng(4);
  for (int trial = 0; trial < kTrials; ++trial) {
    const int n = trial < 3 ? trial + 1 : uniform(rng, 1, 130);
    const int global = uniform(rng, 0, std::min(n, 12));
    const int left = uniform(rng, 0, 20);
    const int right = uniform(rng, 0, 20);
    INFO("n=" << n << " global=" << global << " left=" << left << " right=" << right);
    // Global keys are visible to every row and global rows see every key; other keys are
    // visible to rows that have them within `left` keys before or `right` keys after the row.
    check_family(dsl::global_sliding_window(n, global, left, right), n, false, 4,
                 [&](int i, int j) {
                   return j < global || i < global || (j >= i - left && j <= i + right);
                 });
  }
}

TEST_CASE("causal blockwise matches its definition", "[dsl]") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<int> blocks = random_lengths(rng, uniform(rng, 0, 5), 25, trial % 4 == 0);
    const int test = uniform(rng, trial % 3 == 0 ? 0 : 1, 20);
    if (sum(blocks) + test == 0) blocks.push_back(2);
    const int n = sum(blocks) + test;
    const int test_start = sum(blocks);
    const std::vector<int> block = owners(blocks);
    INFO("blocks=" << fmt::format("{}", fmt::join(blocks, ",")) << " test=" << test);
    // Causal; a demonstration row sees its own block only, a test row sees every earlier key.
    check_family(dsl::causal_blockwise(blocks, test), n, true, 2,
                 [&](int i, int j) { return j <= i && (i >= test_start || block[i] == block[j]); });
  }
}

TEST_CASE("prefix-LM causal and prefix-LM document match their definitions", "[dsl]") {
  std::mt19937 rng(6);
  for (int trial = 0; trial < kTrials; ++trial) {
    const int n = trial < 3 ? trial + 1 : uniform(rng, 1, 120);
    const int prefix = trial % 7 == 0 ? n : uniform(rng, 0, n);
    INFO("n=" << n << " prefix=" << prefix);
    // Prefix keys are visible to every row, the others causally.
    check_family(dsl::prefix_lm_causal(n, prefix), n, false, 2,
                 [&](int i, int j) { return j < prefix || j <= i; });
  }
  for (int trial = 0; trial < kTrials; ++trial) {
    const std::vector<int> lengths = random_documents_lengths(rng, trial % 3 == 0);
    std::vector<int> prefixes;
    for (const int length : lengths) prefixes.push_back(uniform(rng, 0, length));
    const int n = sum(lengths);
    const std::vector<int> doc = owners(lengths);
    std::vector<int> start(lengths.size(), 0);
    for (std::size_t d = 1; d < lengths.size(); ++d) start[d] = start[d - 1] + lengths[d - 1];
    INFO("doc_lengths=" << fmt::format("{}", fmt::join(lengths, ","))
                        << " prefixes=" << fmt::format("{}", fmt::join(prefixes, ",")));
    // Same document, and the key lies in its document's prefix or is causally visible.
    check_family(dsl::prefix_lm_document(lengths, prefixes), n, false, 2, [&](int i, int j) {
      return doc[i] == doc[j] && (j - start[doc[j]] < prefixes[doc[j]] || j <= i);
    });
  }
}

TEST_CASE("QK-sparse matches its definition", "[dsl]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < kTrials; ++trial) {
    const int n = trial < 3 ? trial + 1 : uniform(rng, 1, 120);
    const int offset = uniform(rng, 0, n);
    const int length = uniform(rng, 0, n - offset);
    INFO("n=" << n << " offset=" << offset << " length=" << length);
    // Causal; keys of the dropped segment are hidden from every row before its end.
    const int end = offset + length;
    check_family(dsl::qk_sparse(n, offset, length), n, true, 2,
                 [&](int i, int j) { return j <= i && !(j >= offset && j < end && i < end); });
  }
}

TEST_CASE("random eviction matches its definition", "[dsl]") {
  std::mt19937 rng(8);
  for (int trial = 0; trial < kTrials; ++trial) {
    const int n = trial < 3 ? trial + 1 : uniform(rng, 1, 120);
    std::vector<int> evicted(n);
    for (int j = 0; j < n; ++j) evicted[j] = uniform(rng, 0, 2) == 0 ? n : uniform(rng, 0, n);
    INFO("evicted_at_row=" << fmt::format("{}", fmt::join(evicted, ",")));
    // Causal; key j is visible from its own row until the row where it is evicted.
    check_family(dsl::random_eviction(evicted), n, true, 1,
                 [&](int i, int j) { return j <= i && i < evicted[j]; });
  }
}

TEST_CASE("builders reject bad parameters by name and value", "[dsl]") {
  const std::vector<int> negative = {3, -1, 2};
  const std::vector<int> empty;
  const std::vector<int> zeros = {0, 0};
  CHECK_THROWS_WITH(dsl::sliding_window(0, 2), Contains("n: got '0'"));
  CHECK_THROWS_WITH(dsl::sliding_window(8, 0), Contains("window: got '0'; accepted: >= 1"));
  CHECK_THROWS_WITH(dsl::causal_document(negative), Contains("doc_lengths[1]: got '-1'"));
  CHECK_THROWS_WITH(dsl::document(empty), Contains("doc_lengths: sum: got '0'"));
  CHECK_THROWS_WITH(dsl::document(zeros), Contains("doc_lengths: sum: got '0'"));
  CHECK_THROWS_WITH(dsl::share_question(-2, zeros), Contains("question: got '-2'"));
  CHECK_THROWS_WITH(dsl::share_question(3, negative), Contains("answers[1]: got '-1'"));
  CHECK_THROWS_WITH(dsl::share_question(0, zeros), Contains("question + sum(answers): got '0'"));
  CHECK_THROWS_WITH(dsl::global_sliding_window(10, 11, 1, 1),
                    Contains("global: got '11'; accepted: 0 <= global <= 10 (n)"));
  CHECK_THROWS_WITH(dsl::global_sliding_window(10, 2, -1, 1), Contains("left: got '-1'"));
  CHECK_THROWS_WITH(dsl::global_sliding_window(10, 2, 1, -3), Contains("right: got '-3'"));
  CHECK_THROWS_WITH(dsl::causal_blockwise(negative, 2), Contains("blocks[1]: got '-1'"));
  CHECK_THROWS_WITH(dsl::causal_blockwise(zeros, -1), Contains("test: got '-1'"));
  CHECK_THROWS_WITH(dsl::prefix_lm_causal(10, 11), Contains("prefix: got '11'"));
  const std::vector<int> docs = {4, 6};
  const std::vector<int> one_prefix = {2};
  const std::vector<int> long_prefix = {2, 7};
  CHECK_THROWS_WITH(dsl::prefix_lm_document(docs, one_prefix),
                    Contains("prefixes: count: got '1'; accepted: one prefix per document (2)"));
  CHECK_THROWS_WITH(dsl::prefix_lm_document(docs, long_prefix),
                    Contains("prefixes[1]: got '7'; accepted: 0 <= prefixes[1] <= 6"));
  CHECK_THROWS_WITH(dsl::qk_sparse(10, 11, 0), Contains("offset: got '11'"));
  CHECK_THROWS_WITH(dsl::qk_sparse(10, 4, 7),
                    Contains("length: got '7'; accepted: 0 <= length <= 6 (n - offset)"));
  CHECK_THROWS_WITH(dsl::qk_sparse(10, 4, -1), Contains("length: got '-1'"));
  const std::vector<int> evicted = {3, 2, 5};
  CHECK_THROWS_WITH(dsl::random_eviction(evicted), Contains("evicted_at_row[2]: got '5'"));
  CHECK_THROWS_WITH(dsl::random_eviction(empty), Contains("evicted_at_row: size: got '0'"));
}

TEST_CASE("random_intervals gives valid, varied vectors", "[dsl]") {
  struct Layout {
    bool causal;
    int columns;
  };
  const Layout layouts[] = {{true, 1}, {true, 2}, {false, 2}, {false, 4}};
  std::mt19937 rng(9);
  int fully_masked_blocks = 0, unmasked_blocks = 0, partial_blocks = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const Layout layout = layouts[seed % 4];
    const int seqlen_q = uniform(rng, 1, 300);
    const int seqlen_k = uniform(rng, 1, 300);
    const int heads = uniform(rng, 1, 2);
    INFO("seed=" << seed << " seqlen_q=" << seqlen_q << " seqlen_k=" << seqlen_k);
    const IntervalVectors m =
        dsl::random_intervals(layout.causal, layout.columns, 1, heads, seqlen_q, seqlen_k, seed);
    REQUIRE_NOTHROW(dsl::validate(m));
    CHECK(m.mask_spec() ==
          attnjit::MaskSpec{attnjit::MaskKind::flashmask, layout.causal, layout.columns});
    const std::vector<std::uint8_t> dense = dsl::dense_mask(m, 0, heads - 1);
    const int off = seqlen_k - seqlen_q;
    // Classify whole 64-key blocks by their interval masking (the causal part aside).
    for (int first = 0; first + 64 <= seqlen_k; first += 64) {
      int masked = 0, interval_masked = 0;
      for (int i = 0; i < seqlen_q; ++i) {
        for (int j = first; j < first + 64; ++j) {
          const bool m_ij = dense[static_cast<std::size_t>(i) * seqlen_k + j] != 0;
          masked += m_ij;
          interval_masked += m_ij && !(layout.causal && j > i + off);
        }
      }
      if (masked == seqlen_q * 64) {
        ++fully_masked_blocks;
      } else if (interval_masked == 0) {
        ++unmasked_blocks;
      } else {
        ++partial_blocks;
      }
    }
  }
  CHECK(fully_masked_blocks >= 20);
  CHECK(unmasked_blocks >= 20);
  CHECK(partial_blocks >= 20);
}

TEST_CASE("random_intervals is deterministic and checks its layout", "[dsl]") {
  const IntervalVectors a = dsl::random_intervals(false, 4, 2, 3, 100, 90, 42);
  const IntervalVectors b = dsl::random_intervals(false, 4, 2, 3, 100, 90, 42);
  const IntervalVectors c = dsl::random_intervals(false, 4, 2, 3, 100, 90, 43);
  CHECK(a.data == b.data);
  CHECK(a.data != c.data);
  CHECK(a.data.size() == 2u * 3 * 90 * 4);
  // Different (batch, head) slices differ too.
  CHECK_FALSE(std::equal(a.data.begin(), a.data.begin() + 360, a.data.begin() + 360));
  CHECK_THROWS_WITH(dsl::random_intervals(true, 4, 1, 1, 8, 8, 0),
                    Contains("columns: got '4' with causal=true"));
  CHECK_THROWS_WITH(dsl::random_intervals(false, 2, 1, 1, 0, 8, 0), Contains("seqlen_q: got '0'"));
}

TEST_CASE("random_documents splits a sample into documents", "[dsl]") {
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    const bool causal = seed % 2 == 0;
    const int seqlen = 1 + static_cast<int>(seed * 37 % 500);
    const int min_docs = std::min(seqlen, 1 + static_cast<int>(seed % 4));
    const int max_docs = min_docs + static_cast<int>(seed % 5);
    INFO("seed=" << seed << " seqlen=" << seqlen);
    const IntervalVectors m = dsl::random_documents(causal, seqlen, min_docs, max_docs, seed);
    REQUIRE_NOTHROW(dsl::validate(m));
    CHECK(m.causal == causal);
    CHECK(m.columns == (causal ? 1 : 2));
    CHECK(m.seqlen_q == seqlen);
    // Every LTS is the end of its column's document, so the distinct values count documents.
    const std::vector<int> ends = vector_of(m, 0);
    const std::set<int> distinct(ends.begin(), ends.end());
    CHECK(static_cast<int>(distinct.size()) >= min_docs);
    CHECK(static_cast<int>(distinct.size()) <= std::min(max_docs, seqlen));
    CHECK(ends.back() == seqlen);
    CHECK(std::is_sorted(ends.begin(), ends.end()));
  }
  CHECK_THROWS_WITH(dsl::random_documents(false, 4, 5, 6, 0), Contains("min_docs: got '5'"));
  CHECK_THROWS_WITH(dsl::random_documents(false, 4, 2, 1, 0), Contains("max_docs: got '1'"));
  CHECK_THROWS_WITH(dsl::random_documents(true, 0, 1, 1, 0), Contains("seqlen: got '0'"));
}

namespace {

/// One family's sample of N = 10 tokens, given three ways.
struct FamilyExample {
  std::string_view family;
  std::string call;           ///< in the mask language
  dsl::KeywordArgs keywords;  ///< flashmask()'s parameters
  dsl::DeviceSample device;   ///< the device builder's parameters
};

dsl::KeywordValue integer(int v) {
  return {0, {{v}}};
}
dsl::KeywordValue list(std::vector<int> values) {
  return {1, {std::move(values)}};
}

dsl::DeviceSample device(std::vector<int> offsets = {}) {
  dsl::DeviceSample s;
  s.n = 10;
  s.offsets = std::move(offsets);
  return s;
}

/// An example of every family with vectors (a new family adds its own).
std::vector<FamilyExample> family_examples() {
  std::vector<FamilyExample> examples;
  const std::vector<int> offsets{0, 4, 7, 10};
  dsl::DeviceSample s = device();
  s.window = 3;
  examples.push_back({"sliding_window", "sliding_window(3)", {{"window", integer(3)}}, s});
  examples.push_back({"causal_document",
                      "causal_document([4,3,3])",
                      {{"doc_lengths", list({4, 3, 3})}},
                      device(offsets)});
  examples.push_back(
      {"document", "document([4,3,3])", {{"doc_lengths", list({4, 3, 3})}}, device(offsets)});
  examples.push_back({"share_question",
                      "share_question(4,[3,3])",
                      {{"documents", {2, {{4, 3, 3}}}}},
                      device(offsets)});
  s = device();
  s.global_tokens = 2;
  s.window_left = 3;
  s.window_right = 1;
  examples.push_back({"global_sliding_window",
                      "global_sliding_window(2,3,1)",
                      {{"global_tokens", integer(2)}, {"left", integer(3)}, {"right", integer(1)}},
                      s});
  s = device(offsets);
  s.test = 3;
  examples.push_back({"causal_blockwise",
                      "causal_blockwise([4,3],3)",
                      {{"blocks", list({4, 3})}, {"test", integer(3)}},
                      s});
  s = device();
  s.prefix = 4;
  examples.push_back({"prefix_lm_causal", "prefix_lm_causal(4)", {{"prefix", integer(4)}}, s});
  s = device(offsets);
  s.prefixes = {2, 0, 3};
  examples.push_back({"prefix_lm_document",
                      "prefix_lm_document([4,3,3],[2,0,3])",
                      {{"doc_lengths", list({4, 3, 3})}, {"prefixes", list({2, 0, 3})}},
                      s});
  s = device();
  s.dropped_start = 3;
  s.dropped_length = 4;
  examples.push_back(
      {"qk_sparse", "qk_sparse(3,4)", {{"offset", integer(3)}, {"length", integer(4)}}, s});
  // Key j of batch row 1, mask head 2 of 3 with seed 7 (the device builder's hash).
  s = device();
  s.seed = 7;
  s.batch_row = 1;
  s.mask_head = 2;
  s.mask_heads = 3;
  examples.push_back({"random_eviction",
                      "random_eviction([7,4,5,5,6,9,9,9,9,10])",
                      {{"evicted_at_row", list({7, 4, 5, 5, 6, 9, 9, 9, 9, 10})}},
                      s});
  return examples;
}

std::string keyword_error(std::string_view family, int n, const dsl::KeywordArgs& args,
                          std::string_view where = {}) {
  try {
    dsl::build_from_keywords(*dsl::find_family(family), n, args, where);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("the family table: full and causal first, every family with vectors complete", "[dsl]") {
  const auto table = dsl::family_table();
  REQUIRE(table.size() >= 12);
  CHECK(table[0].name == "full");
  CHECK(table[1].name == "causal");
  std::set<std::string_view> names;
  for (const dsl::FamilyRow& row : table) {
    INFO(row.name);
    CHECK(names.insert(row.name).second);
    CHECK(dsl::find_family(row.name) == &row);
    CHECK((row.keywords.empty() == (row.build_keywords == nullptr)));
    CHECK((row.tensors == nullptr || row.predicate != nullptr));
    if (!row.has_vectors()) {
      CHECK(row.params.empty());
      CHECK(row.build == nullptr);
      CHECK(row.device_params == 0);
      CHECK(row.predicate != nullptr);
      continue;
    }
    CHECK((row.columns == 1 || row.columns == 2 || (row.columns == 4 && !row.causal)));
    CHECK((!row.causal || row.columns != 4));
    CHECK(row.build != nullptr);
    CHECK(row.device_reference != nullptr);
    CHECK(row.device_params != 0);
    CHECK(&dsl::vector_family(row.name) == &row);
  }
  CHECK_THROWS_WITH(dsl::vector_family("causal"),
                    Catch::StartsWith("family: got 'causal'; accepted: sliding_window, "));
  CHECK(dsl::device_param_names(dsl::kOffsets | dsl::kSeed | dsl::kTest) == "offsets, test, seed");
}

TEST_CASE("every family's language call, keyword parameters and device definition agree", "[dsl]") {
  const std::vector<FamilyExample> examples = family_examples();
  for (const dsl::FamilyRow& row : dsl::family_table()) {
    if (!row.has_vectors()) continue;
    INFO(row.name);
    const auto example = std::find_if(examples.begin(), examples.end(),
                                      [&](const FamilyExample& e) { return e.family == row.name; });
    REQUIRE(example != examples.end());
    const dsl::MaskData data = dsl::build_mask(dsl::compile_mask(example->call), 1, 10, 10, {});
    REQUIRE(data.intervals.has_value());
    const IntervalVectors& language = *data.intervals;
    CHECK(language.mask_spec() == IntervalVectors{row.causal, row.columns}.mask_spec());
    CHECK(dsl::build_from_keywords(row, 10, example->keywords).data == language.data);
    const IntervalVectors on_device = row.device_reference(example->device);
    CHECK(on_device.mask_spec() == language.mask_spec());
    CHECK(on_device.data == language.data);
  }
}

TEST_CASE("flashmask()'s keyword parameters are checked in its words", "[dsl]") {
  CHECK(keyword_error("document", 6, {{"doc_lengths", list({2, 3})}}) ==
        "doc_lengths: sum 5; accepted: seqlen (6)");
  CHECK(keyword_error("causal_document", 6, {{"doc_lengths", list({5})}}, " (sample 1)") ==
        "doc_lengths: sum 5 (sample 1); accepted: seqlen (6)");
  CHECK(keyword_error("causal_blockwise", 10, {{"blocks", list({4, 3})}, {"test", integer(2)}}) ==
        "blocks + test: sum 9; accepted: seqlen (10)");
  CHECK(keyword_error("random_eviction", 2, {{"evicted_at_row", list({2, 2, 2})}}) ==
        "evicted_at_row: got 3 values; accepted: seqlen (2)");
  CHECK(keyword_error("prefix_lm_document", 4,
                      {{"doc_lengths", list({2, 2})}, {"prefixes", list({1})}}) ==
        "prefixes: got 1; accepted: one per document (2)");
  CHECK(keyword_error("share_question", 4, {{"documents", {2, {{}}}}}) ==
        "documents[0]: got an empty list; accepted: [question, answer, ...] lengths");
  CHECK(keyword_error("share_question", 5, {{"documents", {2, {{2, 2}}}}}) ==
        "documents: sum 4; accepted: seqlen (5)");
  CHECK(keyword_error("sliding_window", 4, {}) ==
        "sliding_window parameters: missing window; accepted: window");
  CHECK(keyword_error("document", 4, {{"doc_lengths", list({4})}, {"window", integer(2)}}) ==
        "document parameters: unknown window; accepted: doc_lengths");
  CHECK(keyword_error("sliding_window", 4, {{"window", list({1})}}) ==
        "window: got 'a list of ints'; accepted: an int");
  // The builders' own checks, in their words.
  CHECK(
      keyword_error("global_sliding_window", 4,
                    {{"global_tokens", integer(9)}, {"left", integer(1)}, {"right", integer(1)}}) ==
      "global: got '9'; accepted: 0 <= global <= 4 (n)");
}
