// Unit tests of the mask language (dsl/mask_lang): the ten-token examples through the text
// forms, every family against a brute-force evaluation of its definition written in the
// language, random predicates (derived intervals and the predicate form against the host
// evaluator), combinations, forced predicates, structure reuse and errors.
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "attnjit/error.hpp"
#include "dsl/builders.hpp"
#include "dsl/mask_families.hpp"
#include "dsl/mask_lang.hpp"

namespace dsl = attnjit::dsl;
using attnjit::Error;
using attnjit::MaskKind;
using attnjit::MaskSpec;
using attnjit::PredicateEvaluator;
using attnjit::PredicateParseError;
using attnjit::PredicateTensor;
using Catch::Matchers::Contains;

namespace {

int uniform(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

PredicateTensor tensor(std::string name, std::vector<std::int32_t> values) {
  PredicateTensor t;
  t.name = std::move(name);
  t.length = static_cast<int>(values.size());
  t.values = std::move(values);
  return t;
}

std::vector<int> vector_of(const dsl::MaskData& data, int c) {
  std::vector<int> values;
  for (int col = 0; col < data.seqlen_k; ++col) values.push_back(data.intervals->at(0, 0, col, c));
  return values;
}

// The brute-force visibility of `definition` (mask-language predicate text) on `tensors`.
std::vector<std::uint8_t> brute_force(const std::string& definition, int n,
                                      const std::vector<PredicateTensor>& tensors) {
  const PredicateEvaluator evaluator(attnjit::parse_predicate(definition), {tensors, {}});
  std::vector<std::uint8_t> visible(static_cast<std::size_t>(n) * n);
  for (int q = 0; q < n; ++q) {
    for (int k = 0; k < n; ++k)
      visible[static_cast<std::size_t>(q) * n + k] = evaluator.visible(0, 0, q, k);
  }
  return visible;
}

std::string list(const std::vector<int>& values) {
  return fmt::format("[{}]", fmt::join(values, ","));
}

std::vector<int> random_lengths(std::mt19937& rng, int total) {
  std::vector<int> lengths;
  while (total > 0) {
    const int length = std::min(total, uniform(rng, 0, 12));
    lengths.push_back(length);
    total -= length;
  }
  return lengths;
}

std::vector<std::int32_t> ids_of(const std::vector<int>& lengths, int first) {
  std::vector<std::int32_t> ids;
  for (std::size_t d = 0; d < lengths.size(); ++d) ids.insert(ids.end(), lengths[d], first + d);
  return ids;
}

}  // namespace

TEST_CASE("the ten-token examples through the text forms", "[dsl]") {
  const auto build = [](const char* text) {
    return dsl::build_mask(dsl::compile_mask(text), 1, 10, 10, {});
  };
  const dsl::MaskData doc = build("document([4,3,3])");
  CHECK(doc.spec == MaskSpec{MaskKind::flashmask, false, 2});
  CHECK(vector_of(doc, 0) == std::vector<int>{4, 4, 4, 4, 7, 7, 7, 10, 10, 10});
  CHECK(vector_of(doc, 1) == std::vector<int>{0, 0, 0, 0, 4, 4, 4, 7, 7, 7});
  const dsl::MaskData share = build("share_question(4,[3,3])");
  CHECK(share.spec == MaskSpec{MaskKind::flashmask, true, 1});
  CHECK(vector_of(share, 0) == std::vector<int>{10, 10, 10, 10, 7, 7, 7, 10, 10, 10});
  const dsl::MaskData blocks = build("causal_blockwise([4,3],3)");
  CHECK(blocks.spec == MaskSpec{MaskKind::flashmask, true, 2});
  CHECK(vector_of(blocks, 0) == std::vector<int>{4, 4, 4, 4, 7, 7, 7, 10, 10, 10});
  CHECK(vector_of(blocks, 1) == std::vector<int>{7, 7, 7, 7, 7, 7, 7, 10, 10, 10});

  const dsl::MaskData derived =
      dsl::build_mask(dsl::compile_mask("q >= k && doc[q] == doc[k]"), 1, 10, 10,
                      std::vector{tensor("doc", {0, 0, 0, 0, 1, 1, 1, 2, 2, 2})});
  CHECK(derived.spec == MaskSpec{MaskKind::flashmask, true, 1});
  CHECK(vector_of(derived, 0) == std::vector<int>{4, 4, 4, 4, 7, 7, 7, 10, 10, 10});
}

TEST_CASE("every family equals its definition as a predicate, alone and combined", "[dsl]") {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = uniform(rng, 1, 40);
    const std::vector<int> lengths = random_lengths(rng, n);
    std::vector<PredicateTensor> tensors{tensor("doc", ids_of(lengths, 0))};
    std::vector<std::pair<std::string, std::string>> cases;  // family text, definition
    const int w = uniform(rng, 1, n + 2);
    cases.emplace_back(fmt::format("sliding_window({})", w), fmt::format("q>=k&&q-k<{}", w));
    cases.emplace_back(fmt::format("causal_document({})", list(lengths)), "q>=k&&doc[q]==doc[k]");
    cases.emplace_back(fmt::format("document({})", list(lengths)), "doc[q]==doc[k]");
    const int question = uniform(rng, 0, n);
    const std::vector<int> answers = random_lengths(rng, n - question);
    std::vector<std::int32_t> qa(question, 0);
    const std::vector<std::int32_t> answer_ids = ids_of(answers, 1);
    qa.insert(qa.end(), answer_ids.begin(), answer_ids.end());
    tensors.push_back(tensor("qa", qa));
    cases.emplace_back(fmt::format("share_question({},{})", question, list(answers)),
                       fmt::format("q>=k&&(k<{}||qa[q]==qa[k])", question));
    const int g = uniform(rng, 0, n), left = uniform(rng, 0, 6), right = uniform(rng, 0, 6);
    cases.emplace_back(fmt::format("global_sliding_window({},{},{})", g, left, right),
                       fmt::format("k<{0}||q<{0}||(k>=q-{1}&&k<=q+{2})", g, left, right));
    const int test = uniform(rng, 0, n);
    const std::vector<int> blocks = random_lengths(rng, n - test);
    std::vector<std::int32_t> block_ids = ids_of(blocks, 0);
    block_ids.insert(block_ids.end(), test, -1);
    tensors.push_back(tensor("blk", block_ids));
    cases.emplace_back(fmt::format("causal_blockwise({},{})", list(blocks), test),
                       fmt::format("q>=k&&(q>={}||blk[q]==blk[k]&&blk[q]>=0)", n - test));
    const int prefix = uniform(rng, 0, n);
    cases.emplace_back(fmt::format("prefix_lm_causal({})", prefix),
                       fmt::format("k<{}||k<=q", prefix));
    std::vector<int> prefixes;
    std::vector<std::int32_t> starts;
    for (std::size_t d = 0, start = 0; d < lengths.size(); start += lengths[d], ++d) {
      prefixes.push_back(uniform(rng, 0, lengths[d]));
      starts.insert(starts.end(), lengths[d], static_cast<std::int32_t>(start));
    }
    std::vector<std::int32_t> prefix_of_doc;
    for (std::size_t d = 0; d < lengths.size(); ++d)
      prefix_of_doc.insert(prefix_of_doc.end(), lengths[d], prefixes[d]);
    tensors.push_back(tensor("start", starts));
    tensors.push_back(tensor("pl", prefix_of_doc));
    cases.emplace_back(fmt::format("prefix_lm_document({},{})", list(lengths), list(prefixes)),
                       "doc[q]==doc[k]&&(k-start[k]<pl[k]||k<=q)");
    const int offset = uniform(rng, 0, n), length = uniform(rng, 0, n - offset);
    cases.emplace_back(fmt::format("qk_sparse({},{})", offset, length),
                       fmt::format("q>=k&&!(k>={0}&&k<{1}&&q<{1})", offset, offset + length));
    std::vector<int> evicted;
    for (int j = 0; j < n; ++j) evicted.push_back(uniform(rng, 0, n));
    tensors.push_back(tensor("ev", std::vector<std::int32_t>(evicted.begin(), evicted.end())));
    cases.emplace_back(fmt::format("random_eviction({})", list(evicted)), "q>=k&&q<ev[k]");

    for (const auto& [text, definition] : cases) {
      INFO(text << " vs " << definition);
      const std::vector<std::uint8_t> expected = brute_force(definition, n, tensors);
      const dsl::MaskProgram alone = dsl::compile_mask(text);
      CHECK(dsl::dense_visible(dsl::build_mask(alone, 1, n, n, {}), 0) == expected);
      // Combined, the family is lowered to a predicate and derived again: same layout.
      const dsl::MaskProgram combined = dsl::compile_mask(text + " & k >= 0");
      CHECK(combined.spec == alone.spec);
      CHECK(dsl::dense_visible(dsl::build_mask(combined, 1, n, n, {}), 0) == expected);
      const dsl::MaskProgram forced = dsl::compile_mask("predicate(" + text + ")");
      CHECK(forced.spec.kind == MaskKind::predicate);
      CHECK(dsl::dense_visible(dsl::build_mask(forced, 1, n, n, {}), 0) == expected);
    }
  }
}

TEST_CASE("random predicates: derived intervals and the predicate form equal the evaluator",
          "[dsl]") {
  std::mt19937 rng(5);
  const std::vector<std::string> atoms{"q-k<{}",  "k-q<={}",        "q>=k",    "doc[q]==doc[k]",
                                       "k<{}",    "q<{}",           "q>={}",   "doc[q]<=doc[k]",
                                       "q+{}>=k", "doc[q]!=doc[k]", "k%3=={}", "q%4<{}"};
  int interval_forms = 0, predicate_forms = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::function<std::string(int)> expr = [&](int depth) -> std::string {
      const int pick = depth > 2 ? 0 : uniform(rng, 0, 4);
      if (pick == 0 || pick == 1) {
        return fmt::format(fmt::runtime(atoms[uniform(rng, 0, atoms.size() - 1)]),
                           uniform(rng, -3, 12));
      }
      if (pick == 2) return fmt::format("!({})", expr(depth + 1));
      const std::string lhs = expr(depth + 1);
      const std::string rhs = expr(depth + 1);
      return fmt::format("({}{}{})", lhs, pick == 3 ? "&&" : "||", rhs);
    };
    std::string text = expr(0);
    if (trial % 2 == 0) text = "q>=k&&" + text;
    const int n = uniform(rng, 1, 24);
    const std::vector<PredicateTensor> tensors{tensor("doc", ids_of(random_lengths(rng, n), 0))};
    INFO(text << " n=" << n);
    const dsl::MaskProgram program = dsl::compile_mask(text);
    (program.spec.kind == MaskKind::predicate ? predicate_forms : interval_forms)++;
    const dsl::MaskData data = dsl::build_mask(program, 1, n, n, tensors);
    CHECK(dsl::dense_visible(data, 0) == brute_force(text, n, tensors));
  }
  CHECK(interval_forms > 100);
  CHECK(predicate_forms > 20);
}

TEST_CASE("forms of predicates and combinations", "[dsl]") {
  const auto spec = [](const char* text) { return dsl::compile_mask(text).spec; };
  CHECK(spec("full") == MaskSpec{MaskKind::none});
  CHECK(spec("causal") == MaskSpec{MaskKind::causal});
  CHECK(spec("q >= k") == MaskSpec{MaskKind::causal});
  CHECK(spec("q - k < 256 && q >= k") == MaskSpec{MaskKind::flashmask, true, 1});
  CHECK(spec("(q - k < 256 && q >= k) || k < 4") == MaskSpec{MaskKind::flashmask, false, 2});
  CHECK(spec("document([2,2]) | k < 1") == MaskSpec{MaskKind::flashmask, false, 2});
  CHECK(spec("q < 3 | q >= 7") == MaskSpec{MaskKind::flashmask, false, 4});
  CHECK(spec("causal & (q < 3 | q >= 7)") == MaskSpec{MaskKind::flashmask, true, 2});
  CHECK(spec("q % 2 == k % 2") == MaskSpec{MaskKind::predicate, false, 0, "q%$0==k%$1"});
  CHECK(spec("h == 0 || q >= k").kind == MaskKind::predicate);
  CHECK(spec("q == 1 | q == 3 | q == 5").kind == MaskKind::predicate);
  CHECK(spec("document([4,3,3]) | sliding_window(2)") ==
        MaskSpec{MaskKind::predicate, false, 0, "_doc0[q]==_doc0[k]||q>=k&&q-k<$0"});
  CHECK(spec("predicate(q >= k)") == MaskSpec{MaskKind::predicate, false, 0, "q>=k"});

  // The predicate form's data: the lifted scalars and the tensors it reads, generated ones too.
  const dsl::MaskData data =
      dsl::build_mask(dsl::compile_mask("causal_document([3,1]) | q % 3 == 0"), 2, 4, 4, {});
  REQUIRE(data.spec.kind == MaskKind::predicate);
  CHECK(data.spec.predicate == "q>=k&&_doc0[q]==_doc0[k]||q%$0==$1");
  CHECK(data.bindings.scalars == std::vector<std::int32_t>{3, 0});
  REQUIRE(data.bindings.tensors.size() == 1);
  CHECK(data.bindings.tensors[0].values == std::vector<std::int32_t>{0, 0, 0, 1});
  CHECK(dsl::dense_visible(data, 1) == std::vector<std::uint8_t>{1, 1, 1, 1,  //
                                                                 1, 1, 0, 0,  //
                                                                 1, 1, 1, 0,  //
                                                                 1, 1, 1, 1});
}

TEST_CASE("new data reuses the structure", "[dsl]") {
  const auto spec = [](const std::string& text) { return dsl::compile_mask(text).spec; };
  CHECK(spec("sliding_window(3)") == spec("sliding_window(300)"));
  CHECK(spec("causal_document([4,3,3])") == spec("causal_document(lengths)"));
  CHECK(spec("q - k < 5 || k < 2") == spec("q - k < 70 || k < 9"));
  CHECK(spec("predicate(sliding_window(3) | k < 2)") ==
        spec("predicate(sliding_window(9) | k < 5)"));
  CHECK(spec("q % 2 == k % 2") == spec("q % 64 == k % 128"));
  CHECK(spec("q % 2 == k % 2") != spec("q % 2 == k / 2"));
  // Per-row tensors: one sample per batch row.
  const dsl::MaskProgram program = dsl::compile_mask("q >= k && doc[q] == doc[k]");
  PredicateTensor doc = tensor("doc", {0, 0, 1, 1, 0, 1, 1, 1});
  doc.rows = 2;
  doc.length = 4;
  const dsl::MaskData data = dsl::build_mask(program, 2, 4, 4, std::vector{doc});
  CHECK(data.intervals->at(0, 0, 0, 0) == 2);
  CHECK(data.intervals->at(1, 0, 0, 0) == 1);
  CHECK(data.intervals->at(1, 0, 1, 0) == 4);
}

TEST_CASE("mask language errors", "[dsl]") {
  const auto fails = [](const std::string& text, const std::string& what) {
    INFO(text);
    CHECK_THROWS_WITH(dsl::compile_mask(text), Contains(what));
  };
  fails("", "line 1 column 1: expected a mask operand");
  fails("causal &", "line 1 column 9: expected a mask operand");
  fails("causal\n  & (q >=", "line 2 column 10: expected an operand");
  fails("causal && k < 4", "expected '&', '|', ')' or end of input after causal");
  fails("document(4)", "expected a list [a,b,...] or a tensor name for parameter lengths");
  fails("sliding_window()", "expected 1 parameter for sliding_window(window), got 0");
  fails("document([1,x])", "expected a parameter");
  fails("document(_doc)", "not starting with '_'");
  fails("predicate", "expected '(' after predicate");
  fails("q - k < $0", "numbers instead of $N slots");
  fails("sliding_window(99999999999)", "expected an integer in");
  CHECK_THROWS_AS(dsl::compile_mask("(((q"), PredicateParseError);

  const auto build_fails = [](const std::string& text, int n, std::vector<PredicateTensor> t,
                              const std::string& what) {
    INFO(text);
    CHECK_THROWS_WITH(dsl::build_mask(dsl::compile_mask(text), 1, n, n, t), Contains(what));
  };
  build_fails("doc[q] == doc[k]", 3, {tensor("doc", {0, 2, 1})},
              "tensor doc: row 0 decreases at index 2");
  build_fails("doc[q] == doc[k]", 3, {}, "tensor doc: not given");
  build_fails("doc[q] == doc[k]", 4, {tensor("doc", {0, 1, 1})}, "at least seqlen_q = 4");
  build_fails("causal_document([2,2])", 5, {}, "causal_document: sum(lengths): got 4 tokens");
  build_fails("qk_sparse(3,4)", 5, {}, "qk_sparse:");
  build_fails("causal_document(lens)", 4, {}, "causal_document: lengths: got tensor 'lens'");
  CHECK_THROWS_WITH(dsl::build_mask(dsl::compile_mask("q >= k"), 1, 4, 6, {}),
                    Contains("seqlen_k: got 6 with seqlen_q 4"));
  CHECK_THROWS_WITH(dsl::build_mask(dsl::compile_mask("q >= k && k < 2"), 1, 4, 6, {}),
                    Contains("bottom-right"));
  CHECK_THROWS_WITH(dsl::build_mask(dsl::compile_mask("q + 2147483647 > k"), 1, 4, 4, {}),
                    Contains("wraps around int32"));
  // The predicate form accepts what the interval form refuses.
  CHECK_NOTHROW(dsl::build_mask(dsl::compile_mask("predicate(doc[q] == doc[k])"), 1, 3, 3,
                                std::vector{tensor("doc", {0, 2, 1})}));
}

TEST_CASE("a family without a definition of its own is defined over its vectors", "[dsl]") {
  std::mt19937 rng(29);
  const std::pair<bool, int> layouts[] = {{true, 1}, {true, 2}, {false, 2}, {false, 4}};
  for (const auto& [causal, columns] : layouts) {
    for (int trial = 0; trial < 20; ++trial) {
      const int n = uniform(rng, 1, 70);
      const dsl::IntervalVectors m =
          dsl::random_intervals(causal, columns, 1, 1, n, n, static_cast<std::uint64_t>(rng()));
      std::vector<PredicateTensor> tensors;
      for (const dsl::SampleTensor& row : dsl::vector_tensors(m)) {
        tensors.push_back(tensor(fmt::format("_{}3", row.stem), row.values));
      }
      const std::string definition = dsl::vector_definition(causal, columns, 3);
      INFO(definition << " n=" << n);
      attnjit::PredicateParseOptions options;
      options.allow_reserved_tensor_names = true;
      const PredicateEvaluator evaluator(attnjit::parse_predicate(definition, options),
                                         {tensors, {}});
      int mismatches = 0;
      for (int q = 0; q < n; ++q) {
        for (int k = 0; k < n; ++k)
          mismatches += evaluator.visible(0, 0, q, k) == dsl::is_masked(m, 0, 0, q, k);
      }
      CHECK(mismatches == 0);
      // The interval form derives it back: its layout is the family's.
      const std::optional<dsl::DerivedLayout> derived =
          dsl::derive_layout(attnjit::parse_predicate(definition, options));
      REQUIRE(derived.has_value());
      CHECK(derived->causal == causal);
      CHECK(derived->columns == columns);
    }
  }
}
