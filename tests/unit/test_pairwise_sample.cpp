// The pairwise sample of a sweep (support/pairwise_sample.hpp): every pair of feature values
// the sweep holds is held by a chosen case, the sample is much smaller than the sweep, and the
// seed picks it reproducibly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "support/pairwise_sample.hpp"

using attnjit::testing::Features;
using attnjit::testing::pairwise_sample;

namespace {

// The GPU forward sweep's axes: 2 dtypes x 6 head dims x 8 masks, each point twice with
// shapes rotating through 6.
std::vector<Features> sweep() {
  std::vector<Features> cases;
  int rotation = 0;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      for (int mask = 0; mask < 8; ++mask) {
        for (int repeat = 0; repeat < 2; ++repeat) {
          cases.push_back({std::string("dtype=") + dtype, "head_dim=" + std::to_string(d),
                           "mask=" + std::to_string(mask),
                           "shape=" + std::to_string(rotation++ % 6)});
        }
      }
    }
  }
  return cases;
}

std::set<std::pair<std::string, std::string>> pairs_of(const std::vector<Features>& cases,
                                                       const std::vector<std::size_t>& chosen) {
  std::set<std::pair<std::string, std::string>> pairs;
  for (std::size_t i : chosen) {
    for (const std::string& a : cases[i]) {
      for (const std::string& b : cases[i]) pairs.insert({a, b});
    }
  }
  return pairs;
}

std::vector<std::size_t> all(std::size_t n) {
  std::vector<std::size_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = i;
  return out;
}

}  // namespace

TEST_CASE("a pairwise sample holds every pair of values the sweep holds", "[sample]") {
  const std::vector<Features> cases = sweep();
  for (std::uint64_t seed : {0u, 1u, 12345u}) {
    INFO("seed " << seed);
    const std::vector<std::size_t> chosen = pairwise_sample(cases, seed);
    CHECK(pairs_of(cases, chosen) == pairs_of(cases, all(cases.size())));
    CHECK(std::is_sorted(chosen.begin(), chosen.end()));
    CHECK(std::adjacent_find(chosen.begin(), chosen.end()) == chosen.end());
    // 48 (head dim, mask) pairs need 48 cases at least; the sweep has 192.
    CHECK(chosen.size() >= 48);
    CHECK(chosen.size() <= 64);
  }
}

TEST_CASE("the seed picks the pairwise sample reproducibly", "[sample]") {
  const std::vector<Features> cases = sweep();
  CHECK(pairwise_sample(cases, 7) == pairwise_sample(cases, 7));
  std::set<std::vector<std::size_t>> samples;
  for (std::uint64_t seed = 0; seed < 8; ++seed) samples.insert(pairwise_sample(cases, seed));
  CHECK(samples.size() > 1);
}

TEST_CASE("a pairwise sample keeps a case whose values no other case has", "[sample]") {
  const std::vector<Features> cases{{"a=1", "b=1"}, {"a=1", "b=1"}, {"a=2"}, {}};
  const std::vector<std::size_t> chosen = pairwise_sample(cases, 3);
  REQUIRE(chosen.size() == 2);
  CHECK(chosen[1] == 2);
  CHECK(pairwise_sample({}, 3).empty());
}
