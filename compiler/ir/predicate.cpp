// Predicate structure: the builders, the canonical printer, literal lifting, info and the CUDA
// expression. The parser is in predicate_parse.cpp, the host evaluator in predicate_eval.cpp.
#include "compiler/ir/predicate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>

namespace attnjit {
namespace {

// Precedence of each operator, tighter binds higher; operands of primaries never need
// parentheses.
constexpr int kPrimary = 100;
constexpr int kUnary = 13;

struct OpTraits {
  std::string_view text;  ///< operator text, or the function name
  int precedence;
  int arity;
};

OpTraits traits(PredicateOp op) {
  switch (op) {
    case PredicateOp::literal:
    case PredicateOp::scalar:
      return {"", kPrimary, 0};
    case PredicateOp::batch:
      return {"b", kPrimary, 0};
    case PredicateOp::head:
      return {"h", kPrimary, 0};
    case PredicateOp::query:
      return {"q", kPrimary, 0};
    case PredicateOp::key:
      return {"k", kPrimary, 0};
    case PredicateOp::tensor_read:
      return {"", kPrimary, 1};
    case PredicateOp::negate:
      return {"-", kUnary, 1};
    case PredicateOp::logical_not:
      return {"!", kUnary, 1};
    case PredicateOp::mul:
      return {"*", 12, 2};
    case PredicateOp::div:
      return {"/", 12, 2};
    case PredicateOp::mod:
      return {"%", 12, 2};
    case PredicateOp::add:
      return {"+", 11, 2};
    case PredicateOp::sub:
      return {"-", 11, 2};
    case PredicateOp::less:
      return {"<", 9, 2};
    case PredicateOp::less_equal:
      return {"<=", 9, 2};
    case PredicateOp::greater:
      return {">", 9, 2};
    case PredicateOp::greater_equal:
      return {">=", 9, 2};
    case PredicateOp::equal:
      return {"==", 8, 2};
    case PredicateOp::not_equal:
      return {"!=", 8, 2};
    case PredicateOp::logical_and:
      return {"&&", 4, 2};
    case PredicateOp::logical_or:
      return {"||", 3, 2};
    case PredicateOp::min:
      return {"min", kPrimary, 2};
    case PredicateOp::max:
      return {"max", kPrimary, 2};
    case PredicateOp::abs:
      return {"abs", kPrimary, 1};
  }
  throw InternalError("predicate: unknown PredicateOp");
}

// Operators whose C++ form has type bool.
bool is_boolean(PredicateOp op) {
  switch (op) {
    case PredicateOp::logical_not:
    case PredicateOp::less:
    case PredicateOp::less_equal:
    case PredicateOp::greater:
    case PredicateOp::greater_equal:
    case PredicateOp::equal:
    case PredicateOp::not_equal:
    case PredicateOp::logical_and:
    case PredicateOp::logical_or:
      return true;
    default:
      return false;
  }
}

// Checks the post-order layout (each operand is the whole subtree just before its user) and
// returns the tree's depth. A malformed Predicate is a bug of whoever built it.
int checked_depth(const Predicate& predicate) {
  const std::vector<PredicateNode>& nodes = predicate.nodes;
  internal_check(!nodes.empty(), "predicate: no nodes");
  std::vector<int> size(nodes.size()), depth(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const PredicateNode& node = nodes[i];
    const int arity = traits(node.op).arity;
    const int at = static_cast<int>(i);
    int expected_lhs = -1, expected_rhs = -1;
    if (arity == 2) {
      expected_rhs = at - 1;
      expected_lhs = expected_rhs >= 0 ? expected_rhs - size[expected_rhs] : -1;
    } else if (arity == 1) {
      expected_lhs = at - 1;
    }
    internal_check(
        node.lhs == expected_lhs && node.rhs == expected_rhs && (arity < 1 || node.lhs >= 0),
        "predicate: nodes not in post-order");
    internal_check(
        node.op != PredicateOp::scalar || (node.value >= 0 && node.value < kMaxPredicateSlots),
        "predicate: scalar slot out of range");
    internal_check((node.op == PredicateOp::tensor_read) != node.tensor.empty(),
                   "predicate: a tensor name on a node that is not a tensor read, or none on one");
    size[i] = 1 + (node.lhs >= 0 ? size[node.lhs] : 0) + (node.rhs >= 0 ? size[node.rhs] : 0);
    depth[i] =
        1 + std::max(node.lhs >= 0 ? depth[node.lhs] : 0, node.rhs >= 0 ? depth[node.rhs] : 0);
  }
  internal_check(size.back() == static_cast<int>(nodes.size()), "predicate: more than one root");
  return depth.back();
}

Predicate combine(PredicateNode node, std::initializer_list<const Predicate*> operands) {
  Predicate out;
  int depth = 0;
  int* operand_index[2] = {&node.lhs, &node.rhs};
  int which = 0;
  for (const Predicate* operand : operands) {
    depth = std::max(depth, checked_depth(*operand));
    const int offset = static_cast<int>(out.nodes.size());
    for (PredicateNode child : operand->nodes) {
      if (child.lhs >= 0) child.lhs += offset;
      if (child.rhs >= 0) child.rhs += offset;
      out.nodes.push_back(std::move(child));
    }
    *operand_index[which++] = static_cast<int>(out.nodes.size()) - 1;
  }
  if (depth + 1 > kMaxPredicateDepth) {
    throw Error(fmt::format("mask expression: got a tree {} levels deep; accepted: at most {}",
                            depth + 1, kMaxPredicateDepth));
  }
  out.nodes.push_back(std::move(node));
  return out;
}

void print(const Predicate& p, int at, std::string& out) {
  const PredicateNode& node = p.nodes[at];
  const OpTraits op = traits(node.op);
  auto operand = [&](int child, bool parenthesize) {
    if (parenthesize) out += '(';
    print(p, child, out);
    if (parenthesize) out += ')';
  };
  switch (node.op) {
    case PredicateOp::literal:
      out += std::to_string(node.value);
      return;
    case PredicateOp::scalar:
      out += fmt::format("${}", node.value);
      return;
    case PredicateOp::tensor_read:
      out += node.tensor;
      out += '[';
      operand(node.lhs, false);
      out += ']';
      return;
    default:
      break;
  }
  if (op.arity == 0) {
    out += op.text;
  } else if (op.precedence == kPrimary) {
    out += op.text;
    out += '(';
    operand(node.lhs, false);
    if (node.rhs >= 0) {
      out += ',';
      operand(node.rhs, false);
    }
    out += ')';
  } else if (op.arity == 1) {
    const PredicateNode& child = p.nodes[node.lhs];
    // `-5` reads back as the literal -5, so the negation of a literal keeps parentheses.
    const bool literal =
        node.op == PredicateOp::negate && child.op == PredicateOp::literal && child.value >= 0;
    out += op.text;
    operand(node.lhs, literal || traits(child.op).precedence < kUnary);
  } else {
    operand(node.lhs, traits(p.nodes[node.lhs].op).precedence < op.precedence);
    out += op.text;
    operand(node.rhs, traits(p.nodes[node.rhs].op).precedence <= op.precedence);
  }
}

void collect_tensors(const Predicate& p, int at, std::vector<std::string>& names) {
  const PredicateNode& node = p.nodes[at];
  if (node.op == PredicateOp::tensor_read &&
      std::find(names.begin(), names.end(), node.tensor) == names.end()) {
    names.push_back(node.tensor);
  }
  if (node.lhs >= 0) collect_tensors(p, node.lhs, names);
  if (node.rhs >= 0) collect_tensors(p, node.rhs, names);
}

std::string cuda_literal(std::int32_t value) {
  if (value == INT_MIN) return "(-2147483647-1)";
  if (value < 0) return fmt::format("({})", value);
  return std::to_string(value);
}

std::string emit(const Predicate& p, int at, const std::vector<std::string>& tensors) {
  const PredicateNode& node = p.nodes[at];
  auto lhs = [&] { return emit(p, node.lhs, tensors); };
  auto rhs = [&] { return emit(p, node.rhs, tensors); };
  auto call = [&](std::string_view helper) {
    return node.rhs >= 0 ? fmt::format("{}({},{})", helper, lhs(), rhs())
                         : fmt::format("{}({})", helper, lhs());
  };
  switch (node.op) {
    case PredicateOp::literal:
      return cuda_literal(node.value);
    case PredicateOp::scalar:
      return fmt::format("scalar_at({})", node.value);
    case PredicateOp::tensor_read: {
      const auto slot = std::find(tensors.begin(), tensors.end(), node.tensor) - tensors.begin();
      return fmt::format("tensor_at({},{})", slot, lhs());
    }
    case PredicateOp::negate:
      return fmt::format("pred_sub(0,{})", lhs());
    case PredicateOp::logical_not:
      return fmt::format("(!{})", lhs());
    case PredicateOp::mul:
      return call("pred_mul");
    case PredicateOp::div:
      return call("pred_div");
    case PredicateOp::mod:
      return call("pred_mod");
    case PredicateOp::add:
      return call("pred_add");
    case PredicateOp::sub:
      return call("pred_sub");
    case PredicateOp::min:
      return call("pred_min");
    case PredicateOp::max:
      return call("pred_max");
    case PredicateOp::abs:
      return call("pred_abs");
    default:
      break;
  }
  const OpTraits op = traits(node.op);
  if (op.arity == 0) return std::string(op.text);
  return fmt::format("({}{}{})", lhs(), op.text, rhs());
}

}  // namespace

int arity(PredicateOp op) {
  return traits(op).arity;
}

std::string to_string(const Predicate& predicate) {
  checked_depth(predicate);
  std::string out;
  print(predicate, static_cast<int>(predicate.nodes.size()) - 1, out);
  return out;
}

Predicate make_literal(std::int32_t value) {
  return Predicate{{PredicateNode{PredicateOp::literal, value}}};
}

Predicate make_scalar(int slot) {
  if (slot < 0 || slot >= kMaxPredicateSlots) {
    throw_field_error("mask expression scalar slot", std::to_string(slot),
                      fmt::format("0 .. {}", kMaxPredicateSlots - 1));
  }
  return Predicate{{PredicateNode{PredicateOp::scalar, slot}}};
}

Predicate make_variable(PredicateOp op) {
  internal_check(op == PredicateOp::batch || op == PredicateOp::head || op == PredicateOp::query ||
                     op == PredicateOp::key,
                 "make_variable: not a variable");
  return Predicate{{PredicateNode{op}}};
}

Predicate make_tensor_read(std::string name, const Predicate& index) {
  const bool valid =
      !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
      std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(c) || c == '_'; }) &&
      name != "b" && name != "h" && name != "q" && name != "k" && name != "min" && name != "max" &&
      name != "abs";
  if (!valid) {
    throw_field_error("mask expression tensor name", name,
                      "[A-Za-z_][A-Za-z0-9_]* other than b, h, q, k, min, max, abs");
  }
  PredicateNode node{PredicateOp::tensor_read};
  node.tensor = std::move(name);
  return combine(std::move(node), {&index});
}

Predicate make_unary(PredicateOp op, const Predicate& operand) {
  internal_check(
      op == PredicateOp::negate || op == PredicateOp::logical_not || op == PredicateOp::abs,
      "make_unary: not a unary operator");
  return combine(PredicateNode{op}, {&operand});
}

Predicate make_binary(PredicateOp op, const Predicate& lhs, const Predicate& rhs) {
  internal_check(traits(op).arity == 2, "make_binary: not a binary operator");
  return combine(PredicateNode{op}, {&lhs, &rhs});
}

Predicate lift_literals(const Predicate& predicate, std::vector<std::int32_t>& values) {
  checked_depth(predicate);
  const std::size_t given = values.size();
  const auto literals = static_cast<std::size_t>(
      std::count_if(predicate.nodes.begin(), predicate.nodes.end(),
                    [](const PredicateNode& node) { return node.op == PredicateOp::literal; }));
  // The limit of the spec (validate): a lifted predicate beyond it would compile nowhere.
  if (given + literals > static_cast<std::size_t>(kPredicateScalarLimit)) {
    throw_field_error("mask predicate", fmt::format("{} scalar slots", given + literals),
                      fmt::format("at most {} scalars ($0 .. ${}); each number in the "
                                  "expression takes one",
                                  kPredicateScalarLimit, kPredicateScalarLimit - 1));
  }
  Predicate out = predicate;
  for (PredicateNode& node : out.nodes) {
    if (node.op == PredicateOp::scalar && static_cast<std::size_t>(node.value) >= given) {
      throw Error(fmt::format(
          "mask predicate: got slot ${} with {} scalar values; accepted: a value for every slot "
          "(write numbers in the expression: they become the scalars)",
          node.value, given));
    }
    if (node.op != PredicateOp::literal) continue;
    values.push_back(node.value);
    node.op = PredicateOp::scalar;
    node.value = static_cast<std::int32_t>(values.size() - 1);
  }
  return out;
}

PredicateInfo info(const Predicate& predicate) {
  checked_depth(predicate);
  PredicateInfo out;
  collect_tensors(predicate, static_cast<int>(predicate.nodes.size()) - 1, out.tensors);
  for (const PredicateNode& node : predicate.nodes) {
    switch (node.op) {
      case PredicateOp::scalar:
        out.scalar_count = std::max(out.scalar_count, node.value + 1);
        break;
      case PredicateOp::literal:
        ++out.literal_count;
        break;
      case PredicateOp::batch:
        out.uses_batch = true;
        break;
      case PredicateOp::head:
        out.uses_head = true;
        break;
      case PredicateOp::query:
        out.uses_q = true;
        break;
      case PredicateOp::key:
        out.uses_k = true;
        break;
      default:
        break;
    }
  }
  return out;
}

std::string emit_cuda_expression(const Predicate& predicate) {
  const PredicateInfo used = info(predicate);
  const std::string body =
      emit(predicate, static_cast<int>(predicate.nodes.size()) - 1, used.tensors);
  if (is_boolean(predicate.root().op)) return body;
  return fmt::format("({}!=0)", body);
}

}  // namespace attnjit
