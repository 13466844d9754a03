// Building, folding, evaluating and printing launch expressions.
#include "compiler/ir/launch_expr.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"

namespace attnjit {
namespace {

// Precedence for printing: sums bind loosest, products next, calls and leaves tightest.
constexpr int kSum = 1;
constexpr int kProduct = 2;

}  // namespace

std::string_view name_of(Extent extent) {
  switch (extent) {
    case Extent::batch:
      return "B";
    case Extent::seqlen_q:
      return "Sq";
    case Extent::seqlen_k:
      return "Sk";
    case Extent::heads:
      return "H";
    case Extent::kv_heads:
      return "Hkv";
    case Extent::mask_heads:
      return "Hm";
    case Extent::gqa:
      return "gqa";
    case Extent::bits_budget:
      return "bits";
    case Extent::sm_count:
      return "SMs";
    case Extent::splits:
      return "splits";
    case Extent::query_groups:
      return "GSq";
    case Extent::new_tokens:
      return "Snew";
    case Extent::prefill:
      return "prefill";
    case Extent::head_group:
      return "Hg";
  }
  throw InternalError("unknown Extent");
}

LaunchExpr::LaunchExpr(std::int64_t constant) : nodes_{{Op::constant, constant, -1, -1}} {}

LaunchExpr::LaunchExpr(Extent extent)
    : nodes_{{Op::extent, static_cast<std::int64_t>(extent), -1, -1}} {}

LaunchExpr LaunchExpr::binary(Op op, const LaunchExpr& a, const LaunchExpr& b) {
  LaunchExpr out;
  out.nodes_ = a.nodes_;
  const int offset = static_cast<int>(a.nodes_.size());
  for (Node node : b.nodes_) {
    if (node.lhs >= 0) node.lhs += offset;
    if (node.rhs >= 0) node.rhs += offset;
    out.nodes_.push_back(node);
  }
  out.nodes_.push_back({op, 0, offset - 1, static_cast<int>(out.nodes_.size()) - 1});
  return out;
}

LaunchExpr operator+(const LaunchExpr& a, const LaunchExpr& b) {
  if (a.is_constant() && b.is_constant()) return a.constant() + b.constant();
  if (a.is_constant() && a.constant() == 0) return b;
  if (b.is_constant() && b.constant() == 0) return a;
  return LaunchExpr::binary(LaunchExpr::Op::add, a, b);
}

LaunchExpr operator*(const LaunchExpr& a, const LaunchExpr& b) {
  if (a.is_constant() && b.is_constant()) return a.constant() * b.constant();
  if (a.is_constant() && a.constant() == 1) return b;
  if (b.is_constant() && b.constant() == 1) return a;
  return LaunchExpr::binary(LaunchExpr::Op::mul, a, b);
}

LaunchExpr ceil_div(const LaunchExpr& a, const LaunchExpr& b) {
  internal_check(!b.is_constant() || b.constant() > 0, "ceil_div by a positive divisor");
  if (b.is_constant() && b.constant() == 1) return a;
  if (a.is_constant() && b.is_constant()) return (a.constant() + b.constant() - 1) / b.constant();
  return LaunchExpr::binary(LaunchExpr::Op::ceil_div, a, b);
}

LaunchExpr floor_div(const LaunchExpr& a, const LaunchExpr& b) {
  internal_check(!b.is_constant() || b.constant() > 0, "floor_div by a positive divisor");
  if (b.is_constant() && b.constant() == 1) return a;
  if (a.is_constant() && b.is_constant()) return a.constant() / b.constant();
  return LaunchExpr::binary(LaunchExpr::Op::floor_div, a, b);
}

LaunchExpr min(const LaunchExpr& a, const LaunchExpr& b) {
  if (a.is_constant() && b.is_constant()) return std::min(a.constant(), b.constant());
  return LaunchExpr::binary(LaunchExpr::Op::min, a, b);
}

bool LaunchExpr::is_constant() const {
  return nodes_.size() == 1 && nodes_.back().op == Op::constant;
}

std::int64_t LaunchExpr::constant() const {
  internal_check(is_constant(), "LaunchExpr::constant of an expression reading extents");
  return nodes_.back().value;
}

std::int64_t LaunchExpr::evaluate(const LaunchExtents& extents) const {
  return evaluate(static_cast<int>(nodes_.size()) - 1, extents);
}

std::int64_t LaunchExpr::evaluate(int index, const LaunchExtents& extents) const {
  const Node& node = nodes_[index];
  if (node.op == Op::constant) return node.value;
  if (node.op == Op::extent) return extents[static_cast<Extent>(node.value)];
  const std::int64_t a = evaluate(node.lhs, extents);
  const std::int64_t b = evaluate(node.rhs, extents);
  std::int64_t out = 0;
  bool overflow = false;
  switch (node.op) {
    case Op::add:
      overflow = __builtin_add_overflow(a, b, &out);
      break;
    case Op::mul:
      overflow = __builtin_mul_overflow(a, b, &out);
      break;
    case Op::ceil_div:
      internal_check(b > 0 && a >= 0, "ceil_div of a non-negative value by a positive one");
      out = a / b + (a % b != 0);
      break;
    case Op::floor_div:
      internal_check(b > 0 && a >= 0, "floor_div of a non-negative value by a positive one");
      out = a / b;
      break;
    case Op::min:
      out = std::min(a, b);
      break;
    case Op::constant:
    case Op::extent:
      break;
  }
  if (overflow) {
    throw Error(fmt::format("launch size {}: does not fit in 64 bits; accepted: smaller shapes",
                            to_string()));
  }
  return out;
}

std::string LaunchExpr::to_string() const {
  return to_string(static_cast<int>(nodes_.size()) - 1, 0);
}

std::string LaunchExpr::to_string(int index, int parent_precedence) const {
  const Node& node = nodes_[index];
  switch (node.op) {
    case Op::constant:
      return std::to_string(node.value);
    case Op::extent:
      return std::string(name_of(static_cast<Extent>(node.value)));
    case Op::add: {
      const std::string text = to_string(node.lhs, kSum) + "+" + to_string(node.rhs, kSum);
      return parent_precedence > kSum ? "(" + text + ")" : text;
    }
    case Op::mul: {
      const std::string text =
          to_string(node.lhs, kProduct) + "*" + to_string(node.rhs, kProduct + 1);
      return parent_precedence > kProduct ? "(" + text + ")" : text;
    }
    case Op::ceil_div:
      return "ceil(" + to_string(node.lhs, kProduct) + "/" + to_string(node.rhs, kProduct + 1) +
             ")";
    case Op::floor_div:
      return "floor(" + to_string(node.lhs, kProduct) + "/" + to_string(node.rhs, kProduct + 1) +
             ")";
    case Op::min:
      return "min(" + to_string(node.lhs, 0) + ", " + to_string(node.rhs, 0) + ")";
  }
  throw InternalError("unknown LaunchExpr op");
}

std::string LaunchGrid::to_string() const {
  return fmt::format("({}, {}, {})", x.to_string(), y.to_string(), z.to_string());
}

}  // namespace attnjit
