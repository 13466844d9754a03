// Element predicates of the mask language: the AST of an integer expression over
// (b, h, q, k), its parser and canonical text, literal lifting, a host evaluator and the CUDA
// expression the kernels evaluate per element.
//
// Value semantics (host and device identical): every value is an int32 with two's-complement
// wrap-around; `/` truncates toward zero; x / 0 == 0 and x % 0 == 0; INT_MIN / -1 == INT_MIN
// and INT_MIN % -1 == 0; abs(INT_MIN) == INT_MIN; comparisons, `!`, `&&` and `||` give 0 or 1;
// any nonzero value is true. The predicate's value is nonzero iff key k is VISIBLE to query q
// of head h in batch b (`q>=k` is causal, as FlexAttention's mask_mod).
//
// Tensors: `name[i]` reads the int32 tensor `name` of shape [rows, length], rows 1 (one row for
// every batch) or B (row b). An index outside [0, length) reads 0: never a memory fault.
//
// Text (C precedence, loosest first): `||`, `&&`, `== !=`, `< <= > >=`, `+ -`, `* / %`, unary
// `- !`, then primaries: a decimal literal, `b h q k`, a runtime scalar slot `$N`, `name[expr]`,
// `min(x,y)`, `max(x,y)`, `abs(x)`, `(expr)`. A `-` directly before a literal is part of the
// literal (`-5` is the literal -5, so `-2147483648` is INT_MIN), `-(5)` negates the literal 5.
// Spaces, tabs and newlines separate tokens anywhere.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/error.hpp"

namespace attnjit {

/// The deepest expression tree accepted (the parser, the builders and NVRTC's nesting).
inline constexpr int kMaxPredicateDepth = 256;
/// Scalar slots are `$0` .. `$65535`.
inline constexpr int kMaxPredicateSlots = 65536;

/// The runtime inputs one mask=predicate kernel can take (validate checks them; the kernels'
/// parameter block, PredicateInputs in templates/attnjit/common/params.cuh, holds this many).
inline constexpr int kPredicateTensorLimit = 8;
inline constexpr int kPredicateScalarLimit = 16;

/// What one node of a predicate computes.
enum class PredicateOp : std::uint8_t {
  literal,      ///< `value`
  scalar,       ///< runtime scalar slot `$value`
  batch,        ///< b
  head,         ///< h (the query head)
  query,        ///< q (the query row)
  key,          ///< k (the key column)
  tensor_read,  ///< `name[lhs]`
  negate,       ///< -lhs
  logical_not,  ///< !lhs
  mul,
  div,
  mod,
  add,
  sub,
  less,
  less_equal,
  greater,
  greater_equal,
  equal,
  not_equal,
  logical_and,
  logical_or,
  min,  ///< min(lhs, rhs)
  max,  ///< max(lhs, rhs)
  abs,  ///< abs(lhs)
};

/// Number of operands of `op`: 0, 1 or 2.
int arity(PredicateOp op);

/// One node. Operands are indices of earlier nodes of the same Predicate.
struct PredicateNode {
  PredicateOp op = PredicateOp::literal;
  std::int32_t value = 0;  ///< literal: the value; scalar: the slot
  std::string tensor;      ///< tensor_read: the tensor's name
  int lhs = -1;            ///< first operand, -1 if none
  int rhs = -1;            ///< second operand, -1 if none

  bool operator==(const PredicateNode&) const = default;
};

/// An expression tree stored in post-order: each node's operands come before it (the whole
/// left operand, then the whole right operand), the root is last. The builders below and the
/// parser keep that order, so == is structural equality.
struct Predicate {
  std::vector<PredicateNode> nodes;

  const PredicateNode& root() const { return nodes.back(); }
  bool operator==(const Predicate&) const = default;
};

/// A parse error: the message reads
/// "mask expression, line L column C: expected X, got 'Y'" (1-based line and column).
class PredicateParseError : public Error {
 public:
  PredicateParseError(int line, int column, const std::string& message);
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_;
  int column_;
};

/// Options of the parser.
struct PredicateParseOptions {
  /// Accept tensor names that start with `_` (the front end's generated tensors, found in
  /// canonical text from a spec). Off for user text.
  bool allow_reserved_tensor_names = false;
};

/// Parses predicate text. Throws PredicateParseError (and nothing but attnjit::Error
/// subclasses, whatever the bytes) for: an empty input, an unexpected or trailing token,
/// an unknown character or function, a tensor name without `[index]` or indexed twice, a
/// reserved name (`b h q k min max abs`, `_...` unless allowed), a literal outside int32, a
/// slot outside [0, kMaxPredicateSlots), and nesting deeper than kMaxPredicateDepth (the tree's
/// depth, and parentheses, indices, calls and unary operators counted together).
/// Lines and columns count bytes from 1.
Predicate parse_predicate(std::string_view text, const PredicateParseOptions& options = {});

/// Canonical text: no spaces, minimal parentheses, e.g. `q>=k&&doc[q]==doc[k]`.
/// parse_predicate(to_string(p)) == p.
std::string to_string(const Predicate& predicate);

/// Builders (for the front end and tests); each keeps the post-order and throws Error when the
/// result would be deeper than kMaxPredicateDepth.
Predicate make_literal(std::int32_t value);
Predicate make_scalar(int slot);
/// One of batch, head, query, key.
Predicate make_variable(PredicateOp op);
Predicate make_tensor_read(std::string name, const Predicate& index);
/// negate, logical_not or abs.
Predicate make_unary(PredicateOp op, const Predicate& operand);
/// A binary operator or min / max.
Predicate make_binary(PredicateOp op, const Predicate& lhs, const Predicate& rhs);

/// Replaces every literal by a new scalar slot, in order of appearance, and appends each
/// literal's value to `values`; the first new slot is values.size() on entry, so `values`
/// holds the values of the slots the predicate already has (throws Error if a slot of
/// `predicate` has no value there, or if the slots would be more than kPredicateScalarLimit).
/// `q-k<256` and `q-k<512` both lift to `q-k<$0`.
Predicate lift_literals(const Predicate& predicate, std::vector<std::int32_t>& values);

/// What a predicate reads.
struct PredicateInfo {
  /// Tensor names in order of first appearance in the text: a tensor's index here is its slot
  /// in the generated code (`tensor_at(slot, index)`).
  std::vector<std::string> tensors;
  int scalar_count = 0;  ///< 1 + the largest scalar slot, 0 if none
  int literal_count = 0;
  bool uses_batch = false;
  bool uses_head = false;
  bool uses_q = false;
  bool uses_k = false;
};
PredicateInfo info(const Predicate& predicate);

/// The runtime value of one tensor: int32 [rows, length], row-major.
struct PredicateTensor {
  std::string name;
  int rows = 1;  ///< 1 (shared by every batch) or the batch size (row b)
  int length = 0;
  std::vector<std::int32_t> values;  ///< rows * length
};

/// Runtime values for a predicate's tensors (by name) and scalar slots (by index).
struct PredicateBindings {
  std::vector<PredicateTensor> tensors;
  std::vector<std::int32_t> scalars;
};

/// Evaluates a predicate on the host: the reference for tests and the front end's tool. The
/// tree is compiled once to a flat postfix program; visible() allocates nothing.
class PredicateEvaluator {
 public:
  /// Throws Error naming a tensor without a binding, a tensor of bad shape, or a scalar count
  /// different from info(predicate).scalar_count. Extra tensors are ignored.
  PredicateEvaluator(const Predicate& predicate, PredicateBindings bindings);

  /// True iff key k is visible to query q of head h in batch b. Throws Error if a tensor with
  /// rows > 1 is read with b outside [0, rows).
  bool visible(int b, int h, int q, int k) const;

  /// The predicate's int32 value (visible() is value != 0).
  std::int32_t value(int b, int h, int q, int k) const;

 private:
  struct Instruction {
    PredicateOp op;
    std::int32_t operand;  ///< literal value, or tensor index into tensors_
  };
  std::vector<Instruction> program_;
  std::vector<PredicateTensor> tensors_;
  int stack_size_ = 0;
};

/// One C++ expression of type bool computing the predicate in device code, from exactly these
/// names: `b`, `h`, `q`, `k` (int); `tensor_at(slot, index)` (int, slot an integer literal: the
/// tensor's index in info().tensors; reads 0 outside [0, length), see pred_tensor_read);
/// `scalar_at(slot)` (int); and the helpers of templates/attnjit/masks/predicate.cuh, in namespace
/// attnjit: `pred_add`, `pred_sub`, `pred_mul` (wrap-around, also used for unary minus as
/// pred_sub(0, x)), `pred_div`, `pred_mod`, `pred_min`, `pred_max`, `pred_abs`. Comparisons
/// and logic use the C++ operators. Literals are written in place (a lifted predicate has
/// none).
std::string emit_cuda_expression(const Predicate& predicate);

}  // namespace attnjit
