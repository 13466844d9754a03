// The host evaluator of predicates: int32 semantics (division by zero, wrap-around), tensor
// reads out of range and per batch row, bindings, and a brute-force mask.
#include <catch2/catch.hpp>

#include <chrono>
#include <climits>
#include <string>

#include "compiler/ir/predicate.hpp"

using namespace attnjit;

namespace {

std::int32_t value_of(const std::string& text, PredicateBindings bindings = {}) {
  return PredicateEvaluator(parse_predicate(text), std::move(bindings)).value(0, 0, 0, 0);
}

}  // namespace

TEST_CASE("evaluation follows int32 semantics", "[dsl]") {
  const std::pair<const char*, std::int32_t> cases[] = {
      {"7 / 2", 3},
      {"-7 / 2", -3},
      {"7 / -2", -3},
      {"7 % -2", 1},
      {"-7 % 2", -1},
      {"7 / 0", 0},
      {"-7 % 0", 0},
      {"0 / 0", 0},
      {"-2147483648 / -1", INT_MIN},
      {"-2147483648 % -1", 0},
      {"2147483647 + 1", INT_MIN},
      {"-2147483648 - 1", INT_MAX},
      {"65536 * 65536", 0},
      {"65537 * 65537", 131073},
      {"-(-2147483648)", INT_MIN},
      {"abs(-2147483648)", INT_MIN},
      {"abs(-5)", 5},
      {"min(3, -4)", -4},
      {"max(3, -4)", 3},
      {"3 < 4", 1},
      {"4 <= 3", 0},
      {"!5", 0},
      {"!0", 1},
      {"2 && 3", 1},
      {"0 && 3", 0},
      {"0 || -1", 1},
      {"0 || 0", 0},
      {"1 + 2 * 3 - 4 / 2", 5},
      {"(1 < 2) + (2 < 1) * 5 + !0", 2},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    CHECK(value_of(text) == expected);
    CHECK(PredicateEvaluator(parse_predicate(text), {}).visible(0, 0, 0, 0) == (expected != 0));
  }
}

TEST_CASE("variables, scalars and visibility", "[dsl]") {
  const PredicateEvaluator causal(parse_predicate("q >= k"), {});
  CHECK(causal.visible(0, 0, 5, 5));
  CHECK(causal.visible(0, 0, 5, 4));
  CHECK(!causal.visible(0, 0, 4, 5));
  const PredicateEvaluator all(parse_predicate("b * 1000 + h * 100 + q * 10 + k"), {});
  CHECK(all.value(1, 2, 3, 4) == 1234);
  const PredicateEvaluator window(parse_predicate("q - k < $0 && q >= k"), {{}, {2}});
  CHECK(window.visible(0, 0, 5, 4));
  CHECK(!window.visible(0, 0, 5, 3));
}

TEST_CASE("tensor reads outside the row read 0, rows are shared or per batch", "[dsl]") {
  PredicateBindings bindings{{{"doc", 1, 4, {5, 6, 7, 8}}}, {}};
  const PredicateEvaluator read(parse_predicate("doc[q]"), bindings);
  CHECK(read.value(0, 0, 0, 0) == 5);
  CHECK(read.value(0, 0, 3, 0) == 8);
  CHECK(read.value(0, 0, 4, 0) == 0);
  CHECK(read.value(0, 0, -1, 0) == 0);
  CHECK(read.value(0, 0, INT_MIN, 0) == 0);
  CHECK(read.value(0, 0, INT_MAX, 0) == 0);
  CHECK(read.value(7, 0, 1, 0) == 6);  // one row: every batch reads it

  const PredicateEvaluator per_batch(parse_predicate("t[k]"), {{{"t", 2, 2, {1, 2, 3, 4}}}, {}});
  CHECK(per_batch.value(0, 0, 0, 1) == 2);
  CHECK(per_batch.value(1, 0, 0, 0) == 3);
  CHECK(per_batch.value(1, 0, 0, 2) == 0);
  CHECK_THROWS_WITH(per_batch.value(2, 0, 0, 0),
                    "predicate tensor 't': read for batch 2; accepted: a batch in [0, 2) (its "
                    "rows)");
  const PredicateEvaluator empty(parse_predicate("e[0] == 0"), {{{"e", 1, 0, {}}}, {}});
  CHECK(empty.visible(0, 0, 0, 0));
}

TEST_CASE("bindings are checked against what the predicate reads", "[dsl]") {
  const Predicate doc = parse_predicate("doc[q] == doc[k] && q - k < $0 && other[k] > 0");
  const PredicateTensor one{"doc", 1, 2, {0, 1}};
  const PredicateTensor other{"other", 1, 1, {1}};
  CHECK_NOTHROW(PredicateEvaluator(doc, {{one, other, {"unused", 1, 0, {}}}, {4}}));
  CHECK_THROWS_WITH(PredicateEvaluator(doc, {{one}, {4}}),
                    "predicate tensor 'other': missing; accepted: a binding for every tensor the "
                    "predicate reads (doc, other)");
  CHECK_THROWS_WITH(PredicateEvaluator(doc, {{one, other}, {}}),
                    Catch::StartsWith("predicate scalars: got 0 values; accepted: 1"));
  CHECK_THROWS_WITH(PredicateEvaluator(doc, {{one, other}, {1, 2}}),
                    Catch::StartsWith("predicate scalars: got 2 values; accepted: 1"));
  CHECK_THROWS_WITH(PredicateEvaluator(doc, {{one, other, one}, {4}}),
                    "predicate tensor 'doc': bound twice; accepted: one binding per tensor");
  CHECK_THROWS_WITH(PredicateEvaluator(doc, {{{"doc", 1, 3, {0, 1}}, other}, {4}}),
                    Catch::StartsWith("predicate tensor 'doc': got rows 1, length 3 and 2 values"));
  CHECK_THROWS_AS(PredicateEvaluator(doc, {{{"doc", 0, 0, {}}, other}, {4}}), Error);
  CHECK_THROWS_AS(PredicateEvaluator(doc, {{{"doc", 1, -1, {}}, other}, {4}}), Error);
}

TEST_CASE("a causal document mask evaluated by brute force", "[dsl]") {
  // docs/masks.md's ten-token example: documents of 4, 3 and 3 tokens.
  const std::vector<std::int32_t> doc{0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
  const PredicateEvaluator ten(parse_predicate("q >= k && doc[q] == doc[k]"),
                               {{{"doc", 1, 10, doc}}, {}});
  std::string drawn;
  for (int q = 0; q < 10; ++q) {
    for (int k = 0; k < 10; ++k) drawn += ten.visible(0, 0, q, k) ? '#' : '.';
    drawn += '\n';
  }
  CHECK(drawn ==
        "#.........\n"
        "##........\n"
        "###.......\n"
        "####......\n"
        "....#.....\n"
        "....##....\n"
        "....###...\n"
        ".......#..\n"
        ".......##.\n"
        ".......###\n");

  // 4K x 4K against the direct rule, documents of 1000 tokens.
  constexpr int kSeq = 4096;
  std::vector<std::int32_t> docs(kSeq);
  for (int i = 0; i < kSeq; ++i) docs[i] = i / 1000;
  const PredicateEvaluator large(parse_predicate("q >= k && doc[q] == doc[k]"),
                                 {{{"doc", 1, kSeq, docs}}, {}});
  const auto start = std::chrono::steady_clock::now();
  std::int64_t mismatches = 0, visible = 0;
  for (int q = 0; q < kSeq; ++q) {
    for (int k = 0; k < kSeq; ++k) {
      const bool got = large.visible(0, 0, q, k);
      visible += got;
      mismatches += got != (q >= k && q / 1000 == k / 1000);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(mismatches == 0);
  CHECK(visible == 4 * 1000 * 1001 / 2 + 96 * 97 / 2);
  INFO("16.8M evaluations in " << seconds << " s");
  CHECK(seconds < 20.0);
}
