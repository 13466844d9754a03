// The mask families in the language: their parameters, their FlashMask layout, their interval
// vectors (through their builders) and their definitions as element predicates over generated
// tensors, used when a family is combined with other masks; all read from the family table
// (dsl/families.hpp). A family is defined for
// seqlen_q == seqlen_k == N; list parameters are literal lists (one sample broadcast over the
// batch) or runtime int32 tensors [B, n] or [1, n] (one sample per row, zero-padded).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/predicate.hpp"
#include "dsl/families.hpp"
#include "dsl/intervals.hpp"
#include "dsl/mask_expr.hpp"

namespace attnjit::dsl {

/// True iff `name` is a family of the table (`full`, `causal`, `sliding_window`, ...).
bool is_family_name(std::string_view name);

/// The FlashMask layout of a family (its row's); `full` and `causal` have no vectors
/// (columns 0).
struct FamilyLayout {
  bool causal = false;
  int columns = 0;
};
FamilyLayout family_layout(std::string_view name);

/// Throws Error unless the call has the family's parameters, by count and kind (an integer,
/// or a list or tensor name); the message names the family and the parameter.
void check_family_call(const MaskExpr& call);

/// The family's definition as a predicate (literals for integer parameters, generated tensors
/// `_doc<instance>`, `_blk<instance>`, ... for list parameters; `_lts<instance>`, ... holding
/// its vectors for a row without a definition of its own). Visible iff the family's builder
/// leaves the element visible, for seqlen_q == seqlen_k.
Predicate family_predicate(const MaskExpr& call, int instance);

/// The definition of a family over its own vectors, for a row without a predicate of its own:
/// FlashMask's rule (docs/masks.md) for the layout, over `_lts<instance>`, `_lte<instance>`, ...
/// (the tensors of vector_tensors()). Visible iff not masked, for seqlen_q == seqlen_k.
std::string vector_definition(bool causal, int columns, int instance);

/// The rows of those tensors for one single-head sample `m`: its vectors, one stem each.
std::vector<SampleTensor> vector_tensors(const IntervalVectors& m);

/// The data of the generated tensors of family_predicate(call, instance): one row, or one per
/// batch row when a parameter names a tensor. Throws Error for bad parameters (naming them),
/// a tensor that is missing or of the wrong shape, or seqlen_q != seqlen_k.
std::vector<PredicateTensor> family_tensors(const MaskExpr& call, int instance, int batch,
                                            int seqlen_q, int seqlen_k,
                                            std::span<const PredicateTensor> tensors);

/// The interval vectors of a family with vectors, one sample per batch row. Throws as
/// family_tensors.
IntervalVectors family_intervals(const MaskExpr& call, int batch, int seqlen_q, int seqlen_k,
                                 std::span<const PredicateTensor> tensors);

}  // namespace attnjit::dsl
