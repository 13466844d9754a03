// Launch expressions: folding, printing and evaluation, and the overflow error.
#include <catch2/catch.hpp>

#include "attnjit/error.hpp"
#include "compiler/ir/launch_expr.hpp"

using namespace attnjit;

namespace {

LaunchExtents extents(std::int64_t batch, std::int64_t sq, std::int64_t sk, std::int64_t heads) {
  LaunchExtents e;
  e[Extent::batch] = batch;
  e[Extent::seqlen_q] = sq;
  e[Extent::seqlen_k] = sk;
  e[Extent::heads] = heads;
  e[Extent::kv_heads] = heads;
  e[Extent::mask_heads] = 1;
  return e;
}

}  // namespace

TEST_CASE("launch expressions fold constants and print readably", "[ir]") {
  CHECK(LaunchExpr(3) * 4 == LaunchExpr(12));
  CHECK(ceil_div(LaunchExpr(129), 64) == LaunchExpr(3));
  CHECK(floor_div(LaunchExpr(129), 64) == LaunchExpr(2));
  CHECK(min(LaunchExpr(5), 7) == LaunchExpr(5));
  CHECK((LaunchExpr(Extent::batch) * 1).to_string() == "B");
  CHECK((LaunchExpr(Extent::heads) + 0).to_string() == "H");
  CHECK((2 * ceil_div(Extent::seqlen_q, 128)).to_string() == "2*ceil(Sq/128)");
  const LaunchExpr warps =
      LaunchExpr(Extent::batch) * Extent::mask_heads * ceil_div(Extent::seqlen_k, 64);
  CHECK(ceil_div(warps, 4).to_string() == "ceil(B*Hm*ceil(Sk/64)/4)");
  CHECK(((LaunchExpr(Extent::batch) + 1) * 3).to_string() == "(B+1)*3");
  CHECK(min(floor_div(Extent::bits_budget, 1024), 7).to_string() == "min(floor(bits/1024), 7)");
  CHECK((LaunchExpr(Extent::kv_heads) * Extent::gqa).to_string() == "Hkv*gqa");
  CHECK(LaunchGrid{2 * ceil_div(Extent::seqlen_k, 128), ceil_div(Extent::heads, 2), Extent::batch}
            .to_string() == "(2*ceil(Sk/128), ceil(H/2), B)");
}

TEST_CASE("launch expressions evaluate for a call's extents", "[ir]") {
  const LaunchExpr grid_x = 2 * ceil_div(Extent::seqlen_q, 128);
  CHECK(grid_x.evaluate(extents(1, 1, 1, 1)) == 2);
  CHECK(grid_x.evaluate(extents(1, 128, 1, 1)) == 2);
  CHECK(grid_x.evaluate(extents(1, 129, 1, 1)) == 4);
  CHECK(grid_x.evaluate(extents(1, 0, 1, 1)) == 0);
  CHECK(ceil_div(Extent::heads, 2).evaluate(extents(1, 1, 1, 5)) == 3);
  CHECK(floor_div(Extent::seqlen_k, 3).evaluate(extents(1, 1, 8, 1)) == 2);
  CHECK(min(LaunchExpr(Extent::seqlen_q), Extent::seqlen_k).evaluate(extents(1, 9, 4, 1)) == 4);
  CHECK((LaunchExpr(Extent::batch) * Extent::heads + 1).evaluate(extents(3, 1, 1, 5)) == 16);
  CHECK(!grid_x.is_constant());
  CHECK(LaunchExpr(7).is_constant());
}

TEST_CASE("a launch expression that leaves int64 is an error naming it", "[ir]") {
  const LaunchExpr bytes = LaunchExpr(Extent::batch) * Extent::heads * Extent::seqlen_q * 4;
  const std::int64_t big = std::int64_t{1} << 31;
  CHECK_THROWS_WITH(bytes.evaluate(extents(big, big, big, big)),
                    Catch::Contains("launch size B*H*Sq*4: does not fit in 64 bits"));
}
