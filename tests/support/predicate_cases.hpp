// Test material for element predicates: random expression trees and bindings rich in int32
// edge values, an independent tree-walking evaluator (int64 arithmetic, then wrapped), and
// the source of a kernel that evaluates a predicate's CUDA expression over a whole grid.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "compiler/ir/predicate.hpp"

namespace attnjit::testing {

/// An int32 that is an edge value (INT_MIN, -1, 0, 1, INT_MAX, ...) half of the time.
std::int32_t random_edge_value(std::mt19937& rng);

/// A random tree of every operator, at most `max_depth` deep, over b, h, q, k, literals,
/// the scalar slots $0 .. $2 and the tensors `t` and `u`.
Predicate random_predicate(std::mt19937& rng, int max_depth);

/// Bindings for every tensor and slot `predicate` reads: rows 1 or `batch`, lengths 1 .. 8,
/// edge values.
PredicateBindings random_bindings(std::mt19937& rng, const Predicate& predicate, int batch);

/// The predicate's value computed from its definition, node by node, without the evaluator.
std::int32_t reference_value(const Predicate& predicate, const PredicateBindings& bindings, int b,
                             int h, int q, int k);

/// CUDA source of `extern "C" __global__ void predicate_visible(int* out, const int* data,
/// const int* offsets, const int* rows, const int* lengths, const int* scalars, int batch,
/// int heads, int seqlen_q, int seqlen_k)`: one thread per (b, h, q, k), row-major, writes 1
/// if visible else 0. Tensor `slot` (info().tensors order) starts at data + offsets[slot] and
/// has shape [rows[slot], lengths[slot]].
std::string predicate_kernel_source(const Predicate& predicate);

}  // namespace attnjit::testing
