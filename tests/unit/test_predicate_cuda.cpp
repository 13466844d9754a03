// The CUDA side of predicates: the helpers of templates/attnjit/masks/predicate.cuh compiled by g++
// and checked against the host evaluator on edge values, the emitted expression's text (and
// that very text compiled here as C++), and NVRTC compiling generated expressions.
#include <catch2/catch.hpp>

#include <array>
#include <climits>
#include <random>
#include <string>
#include <vector>

#include "attnjit/masks/predicate.cuh"
#include "compiler/ir/predicate.hpp"
#include "embedded.hpp"
#include "runtime/jit/nvrtc.hpp"
#include "support/predicate_cases.hpp"

using namespace attnjit;

namespace {

constexpr std::array<int, 13> kEdges{INT_MIN, INT_MIN + 1, -65536, -7,    -2,          -1,     0,
                                     1,       2,           7,      65536, INT_MAX - 1, INT_MAX};

}  // namespace

TEST_CASE("predicate.cuh helpers agree with the evaluator on edge values", "[dsl]") {
  struct Helper {
    const char* expression;
    int (*function)(int, int);
  };
  const Helper helpers[] = {
      {"$0+$1", [](int x, int y) { return pred_add(x, y); }},
      {"$0-$1", [](int x, int y) { return pred_sub(x, y); }},
      {"$0*$1", [](int x, int y) { return pred_mul(x, y); }},
      {"$0/$1", [](int x, int y) { return pred_div(x, y); }},
      {"$0%$1", [](int x, int y) { return pred_mod(x, y); }},
      {"min($0,$1)", [](int x, int y) { return pred_min(x, y); }},
      {"max($0,$1)", [](int x, int y) { return pred_max(x, y); }},
      {"abs($0)+0*$1", [](int x, int) { return pred_abs(x); }},
      {"-$0+0*$1", [](int x, int) { return pred_sub(0, x); }},
  };
  for (const Helper& helper : helpers) {
    const Predicate predicate = parse_predicate(helper.expression);
    for (int x : kEdges) {
      for (int y : kEdges) {
        INFO(helper.expression << " with $0 = " << x << ", $1 = " << y);
        CHECK(helper.function(x, y) ==
              PredicateEvaluator(predicate, {{}, {x, y}}).value(0, 0, 0, 0));
      }
    }
  }
  // Powers of two take the shift path: every one of them against the evaluator, with
  // dividends around multiples of the divisor and the edges.
  const Predicate div = parse_predicate("$0/$1");
  const Predicate mod = parse_predicate("$0%$1");
  for (int shift = 0; shift < 31; ++shift) {
    const int y = 1 << shift;
    for (int x : kEdges) {
      for (int dx : {-y - 1, -y, -y + 1, -1, 0, 1, y - 1, y, y + 1}) {
        const int dividend = pred_add(x, dx);
        INFO(dividend << " / " << y);
        CHECK(pred_div(dividend, y) ==
              PredicateEvaluator(div, {{}, {dividend, y}}).value(0, 0, 0, 0));
        CHECK(pred_mod(dividend, y) ==
              PredicateEvaluator(mod, {{}, {dividend, y}}).value(0, 0, 0, 0));
      }
    }
  }
  const int row[3] = {4, 5, 6};
  CHECK(pred_tensor_read(row, 3, 0) == 4);
  CHECK(pred_tensor_read(row, 3, 2) == 6);
  CHECK(pred_tensor_read(row, 3, 3) == 0);
  CHECK(pred_tensor_read(row, 3, -1) == 0);
  CHECK(pred_tensor_read(nullptr, 0, 0) == 0);
}

TEST_CASE("the emitted expression, compiled as C++, agrees with the evaluator", "[dsl][emit]") {
  const Predicate predicate = parse_predicate(
      "(q - k < $0 && q >= k || k < $1) && doc[q] == doc[k] && -h / 2 % 3 != 1 "
      "&& !(abs(min(q, k) - max(b, -2147483648)) * 3 > 2147483647)");
  // The text is pinned, and this test compiles that same text: a change to the emitter
  // updates both.
  CHECK(emit_cuda_expression(predicate) ==
        "((((((pred_sub(q,k)<scalar_at(0))&&(q>=k))||(k<scalar_at(1)))&&(tensor_at(0,q)==tensor_"
        "at(0,k)))&&(pred_mod(pred_div(pred_sub(0,h),2),3)!=1))&&(!(pred_mul(pred_abs(pred_sub("
        "pred_min(q,k),pred_max(b,(-2147483647-1)))),3)>2147483647)))");
  const std::vector<std::int32_t> doc{0, 0, 0, 1, 1, 2, 2, 2};
  const std::array<int, 2> scalars{3, 1};
  const PredicateEvaluator evaluator(
      predicate, {{{"doc", 1, static_cast<int>(doc.size()), doc}}, {scalars[0], scalars[1]}});
  auto tensor_at = [&](int slot, int index) {
    REQUIRE(slot == 0);
    return pred_tensor_read(doc.data(), static_cast<int>(doc.size()), index);
  };
  auto scalar_at = [&](int slot) { return scalars.at(slot); };
  int visible = 0;
  for (int b = 0; b < 2; ++b) {
    for (int h = -3; h < 4; ++h) {
      for (int q = -1; q < 10; ++q) {
        for (int k = -1; k < 10; ++k) {
          const bool emitted =
              ((((((pred_sub(q, k) < scalar_at(0)) && (q >= k)) || (k < scalar_at(1))) &&
                 (tensor_at(0, q) == tensor_at(0, k))) &&
                (pred_mod(pred_div(pred_sub(0, h), 2), 3) != 1)) &&
               (!(pred_mul(pred_abs(pred_sub(pred_min(q, k), pred_max(b, (-2147483647 - 1)))), 3) >
                  2147483647)));
          INFO(b << " " << h << " " << q << " " << k);
          REQUIRE(emitted == evaluator.visible(b, h, q, k));
          visible += emitted;
        }
      }
    }
  }
  CHECK(visible > 0);
}

TEST_CASE("emitted expressions are bool and use only the documented names", "[dsl][emit]") {
  CHECK(emit_cuda_expression(parse_predicate("q>=k")) == "(q>=k)");
  CHECK(emit_cuda_expression(parse_predicate("q-k")) == "(pred_sub(q,k)!=0)");
  CHECK(emit_cuda_expression(parse_predicate("doc[q]")) == "(tensor_at(0,q)!=0)");
  CHECK(emit_cuda_expression(parse_predicate("!b")) == "(!b)");
  CHECK(emit_cuda_expression(parse_predicate("a[q]+b_[k]+a[h]")) ==
        "(pred_add(pred_add(tensor_at(0,q),tensor_at(1,k)),tensor_at(0,h))!=0)");
  CHECK(emit_cuda_expression(parse_predicate("-5 < -(5)")) == "((-5)<pred_sub(0,5))");
}

TEST_CASE("NVRTC compiles generated predicates with predicate.cuh", "[dsl][nvrtc]") {
  std::vector<runtime::NvrtcHeader> headers;
  for (const auto& file : templates::all()) headers.push_back({file.name, file.source});
  std::vector<Predicate> predicates{
      parse_predicate("q >= k && doc[q] == doc[k]"),
      parse_predicate("(q - k < $0 && q >= k) || k < $1"),
      parse_predicate("-2147483648 / -1 == min(abs(b - h), max(q % 0, k / 0))"),
  };
  // The deepest tree accepted: 255 nested additions inside one comparison.
  std::string deepest = "q";
  for (int i = 2; i < kMaxPredicateDepth; ++i) deepest += "+k";
  predicates.push_back(parse_predicate(deepest + "<$0"));
  std::string nested = "q";
  for (int i = 3; i < kMaxPredicateDepth; ++i) nested = "-" + nested;
  predicates.push_back(parse_predicate("t[" + nested + "]>0"));
  std::mt19937 rng(5);
  for (int i = 0; i < 3; ++i) predicates.push_back(testing::random_predicate(rng, 8));
  for (const Predicate& predicate : predicates) {
    INFO(to_string(predicate));
    const runtime::NvrtcOutput out =
        runtime::nvrtc_compile(testing::predicate_kernel_source(predicate), "predicate.cu", headers,
                               "sm_90", {}, "predicate_visible");
    CHECK(out.report.registers > 0);
    CHECK(out.report.spill_bytes() == 0);
  }
}
