// Deriving FlashMask intervals from an element predicate. The structure alone decides whether
// the visible rows of every key column provably have the FlashMask shape, and which layout
// (causal flag, columns) holds them; the data then gives the bounds of every column exactly.
//
// Atoms the derivation understands (anything else leaves the predicate form):
//   - conditions that do not read q (column-constant: the whole column or none of it);
//   - comparisons of two sides affine in q with coefficient 1, -1 or 0 (`q-k<256`, `q>=k`,
//     `k-q<=r`), built from + and - over column-constant terms;
//   - comparisons of `T[q]` with a column-constant value (`doc[q]==doc[k]`, `T[q]<=v`), which
//     select a run of T when T is nondecreasing over [0, seqlen_q) (checked on the data);
// combined by &&, || and !; h must not appear.
//
// The causal part is the top-level conjunct `q>=k` (or `k<=q`); the kernels apply it bottom-
// right aligned (key k is visible to rows q >= k + seqlen_q - seqlen_k), which is the
// predicate's top-left `q>=k` exactly when seqlen_q == seqlen_k. Bounds are computed from the
// predicate's own semantics and each column is checked to fit the layout, so the vectors
// always equal the predicate; data that does not fit (seqlen_q != seqlen_k under a causal
// layout, int32 overflow of q + c) is an Error that suggests predicate(...).
#pragma once

#include <optional>

#include "compiler/ir/predicate.hpp"
#include "dsl/intervals.hpp"

namespace attnjit::dsl {

/// A layout for a predicate: `causal` and `columns` as in IntervalVectors; columns 0 with
/// causal means the predicate is exactly `q>=k` (MaskKind::causal, no vectors).
struct DerivedLayout {
  bool causal = false;
  int columns = 0;

  bool operator==(const DerivedLayout&) const = default;
};

/// The tightest layout the predicate's structure guarantees, or nullopt when it does not
/// provably fit one (the predicate form is needed). Depends on the structure only.
std::optional<DerivedLayout> derive_layout(const Predicate& predicate);

/// The interval vectors of `predicate` under `layout` (from derive_layout; columns > 0), one
/// mask head, for every batch row: visible iff the predicate is true. Throws Error for a
/// tensor compared by runs that is not nondecreasing (naming it and the first offending index),
/// a missing tensor, a tensor whose rows are neither 1 nor `batch`, or data that does not fit
/// the layout (naming the batch row and key column). O(batch * seqlen_k * nodes).
IntervalVectors derive_intervals(const Predicate& predicate, const DerivedLayout& layout,
                                 const PredicateBindings& bindings, int batch, int seqlen_q,
                                 int seqlen_k);

}  // namespace attnjit::dsl
