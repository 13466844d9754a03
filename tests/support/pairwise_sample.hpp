// A sample of a test sweep that keeps what the sweep covers, pair by pair: every two feature
// values (a mask kind and a head dim, a dtype and a mask kind, ...) that some case of the sweep
// holds together are held together by a case of the sample. The seed picks among the samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnjit::testing {

/// The features of one case of a sweep, each a value of one axis, e.g. "mask=causal",
/// "head_dim=128", "dtype=bf16".
using Features = std::vector<std::string>;

/// The indices, ascending, of a sample of `cases`: every pair of values that appear together
/// in some case appear together in a chosen case (so every single value appears too). Greedy:
/// each step takes the case that covers the most pairs not yet covered, ties broken in an
/// order drawn from `seed`; the same cases and seed give the same sample.
std::vector<std::size_t> pairwise_sample(const std::vector<Features>& cases, std::uint64_t seed);

}  // namespace attnjit::testing
