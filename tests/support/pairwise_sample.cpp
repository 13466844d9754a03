// The greedy pairwise cover of a sweep's cases.
#include "support/pairwise_sample.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <utility>

namespace attnjit::testing {
namespace {

using Pair = std::pair<std::string, std::string>;

// The pairs of a case's features (each value also paired with itself, so that a case with a
// single feature is covered too), in one order.
std::vector<Pair> pairs_of(const Features& features) {
  std::vector<Pair> pairs;
  for (std::size_t i = 0; i < features.size(); ++i) {
    for (std::size_t j = i; j < features.size(); ++j) {
      pairs.push_back(std::minmax(features[i], features[j]));
    }
  }
  return pairs;
}

}  // namespace

std::vector<std::size_t> pairwise_sample(const std::vector<Features>& cases, std::uint64_t seed) {
  std::vector<std::vector<Pair>> pairs;
  std::set<Pair> uncovered;
  for (const Features& features : cases) {
    pairs.push_back(pairs_of(features));
    uncovered.insert(pairs.back().begin(), pairs.back().end());
  }
  std::vector<std::size_t> order(cases.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);

  std::vector<std::size_t> chosen;
  while (!uncovered.empty()) {
    std::size_t best = order.front(), best_gain = 0;
    for (std::size_t i : order) {
      const std::size_t gain = std::count_if(pairs[i].begin(), pairs[i].end(),
                                             [&](const Pair& p) { return uncovered.count(p) > 0; });
      if (gain > best_gain) {
        best = i;
        best_gain = gain;
      }
    }
    for (const Pair& p : pairs[best]) uncovered.erase(p);
    chosen.push_back(best);
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

}  // namespace attnjit::testing
