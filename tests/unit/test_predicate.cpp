// Element predicates: canonical text and round trips, parse errors with their positions,
// literal lifting, info, and the parser on arbitrary bytes.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <climits>
#include <random>
#include <string>

#include "compiler/ir/predicate.hpp"
#include "support/predicate_cases.hpp"

using namespace attnjit;

namespace {

Predicate var(PredicateOp op) {
  return make_variable(op);
}
const Predicate kQ = var(PredicateOp::query);
const Predicate kK = var(PredicateOp::key);

PredicateParseOptions reserved_allowed() {
  return PredicateParseOptions{.allow_reserved_tensor_names = true};
}

}  // namespace

TEST_CASE("predicates print canonically with minimal parentheses and parse back", "[dsl]") {
  const std::pair<const char*, const char*> cases[] = {
      {"q >= k", "q>=k"},
      {"q >= k && doc[q] == doc[k]", "q>=k&&doc[q]==doc[k]"},
      {"(q - k < 256 && q >= k) || k < 4", "q-k<256&&q>=k||k<4"},
      {"q || (k && h)", "q||k&&h"},
      {"(q || k) && h", "(q||k)&&h"},
      {"q - (k - h)", "q-(k-h)"},
      {"(q - k) - h", "q-k-h"},
      {"q * (k + 1)", "q*(k+1)"},
      {"(q * k) + 1", "q*k+1"},
      {"q / 2 % 3", "q/2%3"},
      {"q / (2 % 3)", "q/(2%3)"},
      {"(q < k) == (k < q)", "q<k==k<q"},
      {"q < (k == h)", "q<(k==h)"},
      {"(q < k) < h", "q<k<h"},
      {"q < (k < h)", "q<(k<h)"},
      {"-(q)", "-q"},
      {"-(q * k)", "-(q*k)"},
      {"(-q) * k", "-q*k"},
      {"!(q < k)", "!(q<k)"},
      {"(!q) < k", "!q<k"},
      {"- - q", "--q"},
      {"-5", "-5"},
      {"-(5)", "-(5)"},
      {"-(-5)", "--5"},
      {"q - -5", "q--5"},
      {"q-(-5)", "q--5"},
      {"!-5", "!-5"},
      {"-2147483648 < 2147483647", "-2147483648<2147483647"},
      {"min(q, k) + max(abs(q - k), 3)", "min(q,k)+max(abs(q-k),3)"},
      {"abs(-q)", "abs(-q)"},
      {"doc[doc[q] + 1] != doc[k]", "doc[doc[q]+1]!=doc[k]"},
      {"$0 + $12 * b", "$0+$12*b"},
      {"q\n>=\tk\r\n", "q>=k"},
      {"((((q))))", "q"},
      {"Doc_2[q]", "Doc_2[q]"},
  };
  for (const auto& [text, canonical] : cases) {
    INFO(text);
    const Predicate parsed = parse_predicate(text);
    CHECK(to_string(parsed) == canonical);
    CHECK(parse_predicate(canonical) == parsed);
    CHECK(to_string(parse_predicate(canonical)) == canonical);
  }
}

TEST_CASE("the parser builds the tree of C precedence and associativity", "[dsl]") {
  using Op = PredicateOp;
  CHECK(parse_predicate("q-k-1") ==
        make_binary(Op::sub, make_binary(Op::sub, kQ, kK), make_literal(1)));
  CHECK(parse_predicate("q-(k-1)") ==
        make_binary(Op::sub, kQ, make_binary(Op::sub, kK, make_literal(1))));
  CHECK(parse_predicate("q+k*2") ==
        make_binary(Op::add, kQ, make_binary(Op::mul, kK, make_literal(2))));
  CHECK(parse_predicate("q<k||q>k&&k==1") ==
        make_binary(Op::logical_or, make_binary(Op::less, kQ, kK),
                    make_binary(Op::logical_and, make_binary(Op::greater, kQ, kK),
                                make_binary(Op::equal, kK, make_literal(1)))));
  // A '-' before a literal is the literal's sign; before anything else it negates.
  CHECK(parse_predicate("-5") == make_literal(-5));
  CHECK(parse_predicate("-2147483648") == make_literal(INT_MIN));
  CHECK(parse_predicate("-(5)") == make_unary(Op::negate, make_literal(5)));
  CHECK(parse_predicate("-5*q") == make_binary(Op::mul, make_literal(-5), kQ));
  CHECK(parse_predicate("-q*5") ==
        make_binary(Op::mul, make_unary(Op::negate, kQ), make_literal(5)));
  CHECK(parse_predicate("doc[q]") == make_tensor_read("doc", kQ));
  CHECK(parse_predicate("$3") == make_scalar(3));
  CHECK(parse_predicate("abs(q)") == make_unary(Op::abs, kQ));
  CHECK(parse_predicate("max(q,k)") == make_binary(Op::max, kQ, kK));
}

TEST_CASE("parse errors give the line, the column and what was expected", "[dsl]") {
  struct Bad {
    std::string text;
    int line, column;
    std::string message;
  };
  const std::string operand =
      "expected an operand (a number, b, h, q, k, $N, name[index], min, max, abs or '('), got ";
  const std::string operator_or_end = "expected an operator or end of input, got ";
  const std::string close = "expected ')' to close ";
  const Bad cases[] = {
      {"", 1, 1, operand + "end of input"},
      {"   ", 1, 4, operand + "end of input"},
      {"q >=", 1, 5, operand + "end of input"},
      {"q >= * k", 1, 6, operand + "'*'"},
      {"(q >= k", 1, 8, close + "'(' at column 1, got end of input"},
      {"(q\n>= k", 2, 5, close + "'(' at line 1 column 1, got end of input"},
      {"q >=\n  (k +", 2, 7, operand + "end of input"},
      {"q >= k)", 1, 7, operator_or_end + "')'"},
      {"b h", 1, 3, operator_or_end + "'h'"},
      {"q = k", 1, 3, operator_or_end + "'=' (did you mean '=='?)"},
      {"q & k", 1, 3, "got '&' (did you mean '&&'?)"},
      {"q | k", 1, 3, "got '|' (did you mean '||'?)"},
      {"q >= k @", 1, 8, operator_or_end + "'@'"},
      {"q\x01", 1, 2, "got '\\x01'"},
      {"min(q k)", 1, 7, "expected ',' between the two arguments of 'min', got 'k'"},
      {"max(q, k", 1, 9, close + "'max(' at column 1, got end of input"},
      {"abs(q, k)", 1, 6, close + "'abs(' at column 1, got ','"},
      {"min", 1, 4, "expected '(' after 'min', got end of input"},
      {"foo(q)", 1, 1, "expected a function min, max or abs, got 'foo'"},
      {"doc", 1, 4,
       "expected '[' after tensor 'doc' (a tensor is read as doc[index]), got end of input"},
      {"doc + 1", 1, 5, "expected '[' after tensor 'doc'"},
      {"doc[q][k]", 1, 7,
       operator_or_end + "'[' (a tensor is indexed once, and only a tensor is indexed)"},
      {"q[0]", 1, 2, "got '['"},
      {"doc[q", 1, 6, "expected ']' to close '[' at column 4, got end of input"},
      {"_doc[q]", 1, 1,
       "expected a tensor name not starting with '_' (reserved for generated tensors), got "
       "'_doc'"},
      {"2147483648", 1, 1,
       "expected an integer literal in int32 range [-2147483648, 2147483647], got '2147483648'"},
      {"-2147483649", 1, 2, "in int32 range [-2147483648, 2147483647], got '-2147483649'"},
      {"99999999999999999999999", 1, 1, "got '99999999999999999999999'"},
      {"$", 1, 1, operand + "'$' (a slot is $ and a number)"},
      {"$x", 1, 1, "got '$' (a slot is $ and a number)"},
      {"$65536", 1, 1, "expected a scalar slot $0 .. $65535, got '$65536'"},
      {std::string(300, '(') + "q" + std::string(300, ')'), 1, 257,
       "expected an expression at most 256 levels deep (every parenthesis, index, call and "
       "operator adds one"},
      {std::string(300, '(') + "q" + std::string(300, ')'), 1, 257, "got a deeper one at '('"},
      {std::string(300, '-') + "q", 1, 257, "at most 256 levels deep"},
      {std::string(300, '!') + "q", 1, 257, "at most 256 levels deep"},
      {"q" + std::string(256, '+') + "q", 1, 3, operand + "'+'"},
  };
  for (const Bad& bad : cases) {
    INFO(bad.text);
    try {
      parse_predicate(bad.text);
      FAIL("no error");
    } catch (const PredicateParseError& error) {
      CHECK(error.line() == bad.line);
      CHECK(error.column() == bad.column);
      CHECK_THAT(error.what(), Catch::StartsWith(fmt::format(
                                   "mask expression, line {} column {}: ", bad.line, bad.column)) &&
                                   Catch::Contains(bad.message));
    }
  }
}

TEST_CASE("trees deeper than 256 levels are refused, by the parser and the builders", "[dsl]") {
  std::string chain = "q";
  for (int i = 1; i < kMaxPredicateDepth; ++i) chain += "+q";
  const Predicate deepest = parse_predicate(chain);  // 255 additions: 256 levels
  CHECK(to_string(deepest) == chain);
  CHECK_THROWS_WITH(parse_predicate(chain + "+q"),
                    Catch::Contains("line 1 column 512: expected an expression at most 256 "
                                    "levels deep") &&
                        Catch::Contains("a chain like a + b + c ... adds one per operator") &&
                        Catch::EndsWith("got a deeper one at '+'"));
  CHECK_THROWS_AS(make_binary(PredicateOp::add, deepest, kQ), Error);
  CHECK_THROWS_WITH(make_unary(PredicateOp::negate, deepest),
                    "mask expression: got a tree 257 levels deep; accepted: at most 256");
  const std::string nested = std::string(256, '(') + "q" + std::string(256, ')');
  CHECK(to_string(parse_predicate(nested)) == "q");
  // Hostile sizes end in an error, never in a stack overflow.
  CHECK_THROWS_AS(parse_predicate(std::string(1'000'000, '(')), PredicateParseError);
  CHECK_THROWS_AS(parse_predicate(std::string(1'000'000, '-') + "q"), PredicateParseError);
  std::string wide = "q";
  for (int i = 0; i < 100'000; ++i) wide += "*q";
  CHECK_THROWS_AS(parse_predicate(wide), PredicateParseError);
}

TEST_CASE("reserved tensor names are accepted on request", "[dsl]") {
  CHECK(to_string(parse_predicate("_gen0[q]==_gen0[k]", reserved_allowed())) ==
        "_gen0[q]==_gen0[k]");
  CHECK_THROWS_AS(parse_predicate("_gen0[q]"), PredicateParseError);
  for (const char* name : {"b", "h", "q", "k", "min", "max", "abs", "", "1x", "a-b"}) {
    INFO(name);
    CHECK_THROWS_AS(make_tensor_read(name, kQ), Error);
  }
  CHECK(to_string(make_tensor_read("_gen", kQ)) == "_gen[q]");
  CHECK_THROWS_AS(make_scalar(-1), Error);
  CHECK_THROWS_AS(make_scalar(kMaxPredicateSlots), Error);
}

TEST_CASE("lifting replaces every literal by a scalar slot in order of appearance", "[dsl]") {
  std::vector<std::int32_t> values;
  const Predicate lifted = lift_literals(parse_predicate("q - k < 256"), values);
  CHECK(to_string(lifted) == "q-k<$0");
  CHECK(values == std::vector<std::int32_t>{256});
  std::vector<std::int32_t> other;
  CHECK(lift_literals(parse_predicate("q-k<512"), other) == lifted);
  CHECK(other == std::vector<std::int32_t>{512});

  values.clear();
  CHECK(to_string(lift_literals(parse_predicate("(q - k < 256 && q >= k) || k < 4"), values)) ==
        "q-k<$0&&q>=k||k<$1");
  CHECK(values == std::vector<std::int32_t>{256, 4});

  values.clear();
  CHECK(to_string(lift_literals(parse_predicate("-5 < q && doc[q + 0] == 1"), values)) ==
        "$0<q&&doc[q+$1]==$2");
  CHECK(values == std::vector<std::int32_t>{-5, 0, 1});

  // Slots already present keep their values; new ones come after them.
  values = {3};
  CHECK(to_string(lift_literals(parse_predicate("q < $0 + 7"), values)) == "q<$0+$1");
  CHECK(values == std::vector<std::int32_t>{3, 7});
  values.clear();
  CHECK_THROWS_WITH(lift_literals(parse_predicate("q < $0 + 7"), values),
                    Catch::Contains("got slot $0 with 0 scalar values"));

  values.clear();
  const Predicate none = parse_predicate("q>=k");
  CHECK(lift_literals(none, values) == none);

  // No more slots than a spec takes (validate's limit), counting the slots already there.
  std::string sixteen = "q < 1";
  for (int i = 2; i <= 16; ++i) sixteen += " || q < " + std::to_string(i);
  values.clear();
  CHECK(info(lift_literals(parse_predicate(sixteen), values)).scalar_count == 16);
  values.clear();
  CHECK_THROWS_WITH(lift_literals(parse_predicate(sixteen + " || q < 17"), values),
                    "mask predicate: got '17 scalar slots'; accepted: at most 16 scalars ($0 .. "
                    "$15); each number in the expression takes one");
  CHECK(values.empty());
  values = {5};
  CHECK_THROWS_WITH(lift_literals(parse_predicate(sixteen + " || q < $0"), values),
                    Catch::StartsWith("mask predicate: got '17 scalar slots'"));
  CHECK(values == std::vector<std::int32_t>{5});
}

TEST_CASE("info lists tensors in order of first appearance and what is read", "[dsl]") {
  const PredicateInfo doc = info(parse_predicate("q >= k && doc[q] == doc[k]"));
  CHECK(doc.tensors == std::vector<std::string>{"doc"});
  CHECK(doc.scalar_count == 0);
  CHECK(doc.literal_count == 0);
  CHECK(!doc.uses_batch);
  CHECK(!doc.uses_head);
  CHECK(doc.uses_q);
  CHECK(doc.uses_k);

  CHECK(info(parse_predicate("outer[inner[q]] + x[k] + inner[h] + x[b]")).tensors ==
        std::vector<std::string>{"outer", "inner", "x"});
  const PredicateInfo scalars = info(parse_predicate("b == $2 || h < 3 || h > 4"));
  CHECK(scalars.scalar_count == 3);
  CHECK(scalars.literal_count == 2);
  CHECK(scalars.uses_batch);
  CHECK(scalars.uses_head);
  CHECK(!scalars.uses_q);
  CHECK(!scalars.uses_k);
}

TEST_CASE("the parser only ever throws attnjit errors, and what it accepts round-trips", "[dsl]") {
  const std::string pieces[] = {
      "q",   "k",   "b",  "h",  "doc", "_t", "[",  "]",  "(",          ")",
      ",",   "+",   "-",  "*",  "/",   "%",  "<",  "<=", ">",          ">=",
      "==",  "!=",  "&&", "||", "!",   "$",  "$1", "7",  "2147483648", "min",
      "max", "abs", " ",  "\n", "=",   "&",  "|",  "@",  "\xff",       std::string(1, '\0')};
  std::mt19937 rng(7);
  int parsed = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < length; ++i) {
      text += pieces[std::uniform_int_distribution<std::size_t>(0, std::size(pieces) - 1)(rng)];
    }
    try {
      const Predicate predicate = parse_predicate(text, reserved_allowed());
      ++parsed;
      INFO(text);
      REQUIRE(parse_predicate(to_string(predicate), reserved_allowed()) == predicate);
    } catch (const PredicateParseError&) {
    }
  }
  CHECK(parsed > 100);
}

TEST_CASE("random trees print, parse back equal and keep their value", "[dsl]") {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 2000; ++trial) {
    const Predicate predicate = testing::random_predicate(rng, 7);
    const std::string text = to_string(predicate);
    INFO(text);
    const Predicate parsed = parse_predicate(text);
    REQUIRE(parsed == predicate);
    const PredicateBindings bindings = testing::random_bindings(rng, predicate, 3);
    const PredicateEvaluator evaluator(parsed, bindings);
    std::vector<std::int32_t> values = bindings.scalars;
    // Beyond the spec's scalar slots the lifter refuses; the tree is then checked unlifted.
    const bool liftable = bindings.scalars.size() + info(parsed).literal_count <=
                          static_cast<std::size_t>(kPredicateScalarLimit);
    if (!liftable)
      CHECK_THROWS_WITH(lift_literals(parsed, values), Catch::Contains("scalar slots"));
    const Predicate lifted = liftable ? lift_literals(parsed, values) : parsed;
    REQUIRE((!liftable || info(lifted).literal_count == 0));
    const PredicateEvaluator lifted_evaluator(lifted, PredicateBindings{bindings.tensors, values});
    for (int point = 0; point < 20; ++point) {
      const int b = std::uniform_int_distribution<int>(0, 2)(rng);
      const int h = std::uniform_int_distribution<int>(0, 3)(rng);
      const int q = std::uniform_int_distribution<int>(-2, 9)(rng);
      const int k = std::uniform_int_distribution<int>(-2, 9)(rng);
      const std::int32_t expected = testing::reference_value(predicate, bindings, b, h, q, k);
      REQUIRE(evaluator.value(b, h, q, k) == expected);
      REQUIRE(evaluator.visible(b, h, q, k) == (expected != 0));
      REQUIRE(lifted_evaluator.value(b, h, q, k) == expected);
    }
  }
}
