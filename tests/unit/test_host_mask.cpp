// The public mask language of include/attnjit/masks.hpp: parse_mask's structure and
// build_host_mask's data for each form, and its errors.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/masks.hpp"

using namespace attnjit;

TEST_CASE("a family alone takes its builder's form and vectors", "[dsl]") {
  CHECK(parse_mask("document([4,3,3])") == MaskSpec{MaskKind::flashmask, false, 2});
  const HostMask mask = build_host_mask("document([4,3,3])", 1, 10, 10);
  CHECK(mask.spec == MaskSpec{MaskKind::flashmask, false, 2});
  REQUIRE(mask.intervals);
  CHECK(mask.intervals->batch == 1);
  CHECK(mask.intervals->heads == 1);
  CHECK(mask.intervals->seqlen_k == 10);
  // LTS, UTE per key column.
  CHECK(mask.intervals->data ==
        std::vector<std::int32_t>{4, 0, 4, 0, 4, 0, 4, 0, 7, 4, 7, 4, 7, 4, 10, 7, 10, 7, 10, 7});
  CHECK(mask.tensors.empty());
  CHECK(build_host_mask("causal", 2, 5, 7).spec.kind == MaskKind::causal);
  CHECK_FALSE(build_host_mask("full", 1, 5, 5).intervals);
}

TEST_CASE("a predicate that fits FlashMask is built from its tensors as intervals", "[dsl]") {
  const HostTensor doc{"doc", 1, 10, {0, 0, 0, 0, 1, 1, 1, 2, 2, 2}};
  const HostMask mask = build_host_mask("q >= k && doc[q] == doc[k]", 1, 10, 10, {&doc, 1});
  CHECK(mask.spec == MaskSpec{MaskKind::flashmask, true, 1});
  REQUIRE(mask.intervals);
  CHECK(mask.intervals->data == std::vector<std::int32_t>{4, 4, 4, 4, 7, 7, 7, 10, 10, 10});
}

TEST_CASE("a union intervals cannot hold is the predicate form with its literals and tensors",
          "[dsl]") {
  const MaskSpec structure = parse_mask("document([4,3,3]) | sliding_window(2)");
  CHECK(structure.kind == MaskKind::predicate);
  CHECK(structure.predicate == "_doc0[q]==_doc0[k]||q>=k&&q-k<$0");
  CHECK(structure.scalars == std::vector<std::int32_t>{2});
  const HostMask mask = build_host_mask("document([4,3,3]) | sliding_window(2)", 1, 10, 10);
  CHECK(mask.spec == structure);
  CHECK_FALSE(mask.intervals);
  REQUIRE(mask.tensors.size() == 1);
  CHECK(mask.tensors[0].name == "_doc0");
  CHECK(mask.tensors[0].rows == 1);
  CHECK(mask.tensors[0].values.size() == static_cast<std::size_t>(mask.tensors[0].length));
  // Other numbers, the same structure: one kernel for both.
  CHECK(parse_mask("document([4,3,3]) | sliding_window(5)").predicate == structure.predicate);
}

TEST_CASE("the mask language's errors name the line, the column or the tensor", "[dsl]") {
  CHECK_THROWS_WITH(parse_mask("document([4,3,3]) |"), Catch::Contains("line 1 column 20"));
  CHECK_THROWS_AS(build_host_mask("document([4,3,3])", 1, 12, 12), Error);
  CHECK_THROWS_WITH(build_host_mask("q >= k && doc[q] == doc[k]", 1, 10, 10),
                    Catch::Contains("tensor doc: not given"));
  CHECK_THROWS_AS(build_host_mask("causal", 0, 10, 10), Error);
}
