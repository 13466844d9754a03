// The host evaluator of predicates: the post-order nodes become a flat stack program with
// scalars and tensor slots resolved once, run without allocation per element.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>

#include "compiler/ir/predicate.hpp"

namespace attnjit {
namespace {

std::int32_t wrap(std::uint32_t value) {
  return static_cast<std::int32_t>(value);
}

std::int32_t apply(PredicateOp op, std::int32_t x, std::int32_t y) {
  const auto ux = static_cast<std::uint32_t>(x);
  const auto uy = static_cast<std::uint32_t>(y);
  switch (op) {
    case PredicateOp::mul:
      return wrap(ux * uy);
    case PredicateOp::div:
      if (y == 0) return 0;
      return y == -1 ? wrap(0u - ux) : x / y;
    case PredicateOp::mod:
      if (y == 0 || y == -1) return 0;
      return x % y;
    case PredicateOp::add:
      return wrap(ux + uy);
    case PredicateOp::sub:
      return wrap(ux - uy);
    case PredicateOp::less:
      return x < y;
    case PredicateOp::less_equal:
      return x <= y;
    case PredicateOp::greater:
      return x > y;
    case PredicateOp::greater_equal:
      return x >= y;
    case PredicateOp::equal:
      return x == y;
    case PredicateOp::not_equal:
      return x != y;
    case PredicateOp::logical_and:
      return x != 0 && y != 0;
    case PredicateOp::logical_or:
      return x != 0 || y != 0;
    case PredicateOp::min:
      return x < y ? x : y;
    case PredicateOp::max:
      return x < y ? y : x;
    default:
      throw InternalError("PredicateEvaluator: not a binary operator");
  }
}

using Stack = std::array<std::int32_t, kMaxPredicateDepth + 1>;

}  // namespace

PredicateEvaluator::PredicateEvaluator(const Predicate& predicate, PredicateBindings bindings) {
  const PredicateInfo used = info(predicate);
  if (static_cast<int>(bindings.scalars.size()) != used.scalar_count) {
    throw Error(fmt::format(
        "predicate scalars: got {} values; accepted: {} (one for each slot $0 .. $N the "
        "predicate reads)",
        bindings.scalars.size(), used.scalar_count));
  }
  for (const std::string& name : used.tensors) {
    PredicateTensor* found = nullptr;
    for (PredicateTensor& tensor : bindings.tensors) {
      if (tensor.name != name) continue;
      if (found != nullptr) {
        throw Error(fmt::format(
            "predicate tensor '{}': bound twice; accepted: one binding per tensor", name));
      }
      found = &tensor;
    }
    if (found == nullptr) {
      throw Error(fmt::format(
          "predicate tensor '{}': missing; accepted: a binding for every tensor the predicate "
          "reads ({})",
          name, fmt::join(used.tensors, ", ")));
    }
    if (found->rows < 1 || found->length < 0 ||
        static_cast<std::int64_t>(found->rows) * found->length !=
            static_cast<std::int64_t>(found->values.size())) {
      throw Error(fmt::format(
          "predicate tensor '{}': got rows {}, length {} and {} values; accepted: rows >= 1 "
          "(1 or the batch size), length >= 0, rows * length values",
          name, found->rows, found->length, found->values.size()));
    }
    tensors_.push_back(std::move(*found));
  }
  int height = 0;
  for (const PredicateNode& node : predicate.nodes) {
    Instruction instruction{node.op, node.value};
    if (node.op == PredicateOp::scalar) {
      instruction = {PredicateOp::literal, bindings.scalars[node.value]};
    } else if (node.op == PredicateOp::tensor_read) {
      for (std::size_t slot = 0; slot < used.tensors.size(); ++slot) {
        if (used.tensors[slot] == node.tensor) instruction.operand = static_cast<int>(slot);
      }
    }
    program_.push_back(instruction);
    height += 1 - arity(node.op);
    stack_size_ = std::max(stack_size_, height);
  }
  internal_check(height == 1 && stack_size_ <= static_cast<int>(Stack().size()),
                 "PredicateEvaluator: stack program out of bounds");
}

bool PredicateEvaluator::visible(int b, int h, int q, int k) const {
  return value(b, h, q, k) != 0;
}

std::int32_t PredicateEvaluator::value(int b, int h, int q, int k) const {
  Stack stack;
  int top = 0;  // number of values on the stack
  for (const Instruction& instruction : program_) {
    switch (instruction.op) {
      case PredicateOp::literal:
        stack[top++] = instruction.operand;
        break;
      case PredicateOp::batch:
        stack[top++] = b;
        break;
      case PredicateOp::head:
        stack[top++] = h;
        break;
      case PredicateOp::query:
        stack[top++] = q;
        break;
      case PredicateOp::key:
        stack[top++] = k;
        break;
      case PredicateOp::tensor_read: {
        const PredicateTensor& tensor = tensors_[instruction.operand];
        const std::int32_t index = stack[top - 1];
        if (tensor.rows > 1 && (b < 0 || b >= tensor.rows)) {
          throw Error(fmt::format(
              "predicate tensor '{}': read for batch {}; accepted: a batch in [0, {}) (its rows)",
              tensor.name, b, tensor.rows));
        }
        const std::int64_t row = tensor.rows > 1 ? b : 0;
        stack[top - 1] =
            index >= 0 && index < tensor.length ? tensor.values[row * tensor.length + index] : 0;
        break;
      }
      case PredicateOp::negate:
        stack[top - 1] = wrap(0u - static_cast<std::uint32_t>(stack[top - 1]));
        break;
      case PredicateOp::logical_not:
        stack[top - 1] = stack[top - 1] == 0;
        break;
      case PredicateOp::abs:
        if (stack[top - 1] < 0)
          stack[top - 1] = wrap(0u - static_cast<std::uint32_t>(stack[top - 1]));
        break;
      default:
        --top;
        stack[top - 1] = apply(instruction.op, stack[top - 1], stack[top]);
        break;
    }
  }
  return stack[0];
}

}  // namespace attnjit
