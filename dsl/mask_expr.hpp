// The syntax tree of the mask language and its parser: family calls (`document([4,3,3])`),
// element predicates (compiler/ir/predicate.hpp), their combinations with `&` (intersection of
// the visible sets) and `|` (union), parentheses, and `predicate(EXPR)` that forces the
// predicate form. `&` binds tighter than `|`; `&&` and `||` belong to predicates.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/predicate.hpp"

namespace attnjit::dsl {

/// One parameter of a family call: an integer, a list `[a,b,...]` or the name of a runtime
/// int32 tensor standing for a list (one row per sample).
struct FamilyArg {
  enum class Kind { integer, list, tensor };
  Kind kind = Kind::integer;
  std::int32_t value = 0;            ///< integer
  std::vector<std::int32_t> values;  ///< list
  std::string tensor;                ///< tensor
  int line = 1;
  int column = 1;
};

/// A node of a mask expression.
struct MaskExpr {
  enum class Kind { family, predicate, intersect, unite, force };
  Kind kind = Kind::predicate;
  std::string family;              ///< family: its name (`causal`, `document`, ...)
  std::vector<FamilyArg> args;     ///< family: its parameters
  Predicate predicate;             ///< predicate: the element predicate
  std::vector<MaskExpr> operands;  ///< intersect, unite: two; force: one
  int line = 1;
  int column = 1;
};

/// Parses mask text. Throws PredicateParseError (line, column, what was expected) for any
/// malformed input, and nothing but attnjit::Error subclasses whatever the bytes. Family
/// parameters are checked later (compile_mask), apart from the syntax of integers and lists.
MaskExpr parse_mask_expr(std::string_view text);

}  // namespace attnjit::dsl
