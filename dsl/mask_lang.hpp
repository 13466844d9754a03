// The mask language's entry points: compile_mask decides the form of a mask expression from
// its text alone (its MaskSpec), build_mask produces its runtime data for one problem size.
//
//   form        MaskSpec                      data
//   none        kind none (`full`)            -
//   causal      kind causal (`causal`, `q>=k`) -
//   intervals   flashmask(causal, columns)    IntervalVectors, one mask head, per batch row
//   predicate   predicate(<lifted text>)      scalars ($0, $1, ...) and int32 tensors
//
// A family alone takes its builder's vectors (docs/masks.md's layout); a predicate or a
// combination takes the interval form when dsl/interval_derivation.hpp proves it fits, else
// the predicate form; `predicate(EXPR)` forces the predicate form. Families inside a
// combination are lowered to their predicate definitions over generated tensors (`_doc0`, ...).
// Data (lengths, windows, tensor values) never changes the MaskSpec.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/spec.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/interval_derivation.hpp"
#include "dsl/intervals.hpp"
#include "dsl/mask_expr.hpp"

namespace attnjit::dsl {

/// A compiled mask expression: its structure and what build_mask needs.
struct MaskProgram {
  MaskSpec spec;  ///< the structure for the AttentionSpec
  /// The whole expression as one element predicate (families lowered over generated tensors,
  /// literals in place): the definition the data is checked against.
  Predicate predicate;
  /// The family calls lowered into `predicate`, instance i generating the tensors `_...i`.
  std::vector<MaskExpr> families;
  /// A family alone: the call whose builder gives the vectors.
  std::optional<MaskExpr> family;
  /// The interval form derived from a predicate (not a family alone).
  std::optional<DerivedLayout> derived;
  /// The predicate form: the values of the lifted predicate's scalar slots.
  std::vector<std::int32_t> scalars;
};

/// Parses and compiles mask text. Throws PredicateParseError for syntax (line, column, what
/// was expected), Error for a family call with bad parameters (naming them) or `$N` slots in
/// the text (write the numbers; they become runtime scalars).
MaskProgram compile_mask(std::string_view text);

/// The runtime data of a mask for one problem.
struct MaskData {
  MaskSpec spec;
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  std::optional<IntervalVectors> intervals;  ///< flashmask: the vectors
  PredicateBindings bindings;  ///< predicate: the tensors it reads (generated ones too), scalars
};

/// Builds the data of `program` for `batch` samples of seqlen_q queries and seqlen_k keys from
/// the named int32 tensors (rows 1 or batch). O(batch * seqlen) on the host. Throws Error for a
/// non-positive size, a missing tensor, a tensor of bad shape or too short for its reads (at q:
/// seqlen_q, at k: seqlen_k), family parameters that do not match the sizes, data that does not
/// fit the derived interval form (a non-monotone tensor compared by runs names the tensor and
/// its first offending index), or `q>=k` alone with seqlen_q != seqlen_k.
MaskData build_mask(const MaskProgram& program, int batch, int seqlen_q, int seqlen_k,
                    std::span<const PredicateTensor> tensors);

/// Row-major [seqlen_q][seqlen_k] visibility of batch row `b` (1 = visible), from the data as
/// the kernels read it: the vectors, the causal rule, or the lifted predicate and its bindings.
std::vector<std::uint8_t> dense_visible(const MaskData& data, int b);

/// How one tile of block_m queries by block_n keys is treated: no visible element (skip), some
/// (partial, masked per element) or all (full).
enum class TileClass : std::uint8_t { skip, partial, full };

/// The tiles of a dense visibility, row-major [ceil(Sq / block_m)][ceil(Sk / block_n)].
std::vector<TileClass> classify_tiles(std::span<const std::uint8_t> visible, int seqlen_q,
                                      int seqlen_k, int block_m, int block_n);

}  // namespace attnjit::dsl
