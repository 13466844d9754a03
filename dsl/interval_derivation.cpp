// The derivation of FlashMask intervals: a predicate becomes a tree of row sets per key column
// (SetNode); each node carries the shape its sets provably have, and at build time the tree is
// evaluated per (batch row, key column) into sorted row intervals that are fitted to the layout.
#include "dsl/interval_derivation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <utility>

#include "attnjit/error.hpp"

namespace attnjit::dsl {
namespace {

// A set of rows [0, Sq) per column as `prefix` ([0, x)), `middle` inner intervals and `suffix`
// ([y, Sq)), each possibly empty; all zero: a column-constant set (all rows or none).
struct Shape {
  int prefix = 0;
  int middle = 0;
  int suffix = 0;
};

int count(const Shape& s) {
  return s.prefix + s.middle + s.suffix;
}
Shape complement(const Shape& s) {
  if (count(s) == 0) return s;
  return {1 - s.prefix, count(s) - 1, 1 - s.suffix};
}
Shape unite(const Shape& a, const Shape& b) {
  return {std::max(a.prefix, b.prefix), a.middle + b.middle, std::max(a.suffix, b.suffix)};
}
Shape intersect(const Shape& a, const Shape& b) {
  return complement(unite(complement(a), complement(b)));
}

// One node of the row-set tree.
struct SetNode {
  enum class Kind { constant, linear, read, all, any, negation };
  Kind kind = Kind::constant;
  PredicateOp op = PredicateOp::less;  ///< linear, read: the comparison, the q side on the left
  Predicate lhs;                       ///< constant: the condition; linear: c1; read: unused
  Predicate rhs;                       ///< linear: c2; read: the compared value
  int lhs_sign = 0;                    ///< linear: coefficient of q on the left side
  int rhs_sign = 0;                    ///< linear: coefficient of q on the right side
  std::string tensor;                  ///< read: the tensor read at q
  bool diagonal = false;               ///< exactly `q>=k` (or `k<=q`)
  std::vector<int> children;           ///< all, any, negation
  Shape shape;                         ///< the set's shape over [0, Sq)
  Shape relative;                      ///< the shape of its intersection with [k, Sq)
};

PredicateOp mirrored(PredicateOp op) {
  switch (op) {
    case PredicateOp::less:
      return PredicateOp::greater;
    case PredicateOp::less_equal:
      return PredicateOp::greater_equal;
    case PredicateOp::greater:
      return PredicateOp::less;
    case PredicateOp::greater_equal:
      return PredicateOp::less_equal;
    default:
      return op;
  }
}

bool is_comparison(PredicateOp op) {
  return op == PredicateOp::less || op == PredicateOp::less_equal || op == PredicateOp::greater ||
         op == PredicateOp::greater_equal || op == PredicateOp::equal ||
         op == PredicateOp::not_equal;
}

// Shape of {q : q op t}, and of {q : T[q] op v} for a nondecreasing T.
Shape comparison_shape(PredicateOp op) {
  switch (op) {
    case PredicateOp::less:
    case PredicateOp::less_equal:
      return {1, 0, 0};
    case PredicateOp::greater:
    case PredicateOp::greater_equal:
      return {0, 0, 1};
    case PredicateOp::equal:
      return {0, 1, 0};
    default:
      return {1, 0, 1};
  }
}

class SetCompiler {
 public:
  explicit SetCompiler(const Predicate& p)
      : p_(p), start_(p.nodes.size()), uses_q_(p.nodes.size()) {
    for (std::size_t i = 0; i < p.nodes.size(); ++i) {
      const PredicateNode& n = p.nodes[i];
      start_[i] = n.lhs >= 0 ? start_[n.lhs] : static_cast<int>(i);
      uses_q_[i] = n.op == PredicateOp::query || (n.lhs >= 0 && uses_q_[n.lhs]) ||
                   (n.rhs >= 0 && uses_q_[n.rhs]);
      supported_ = supported_ && n.op != PredicateOp::head && n.op != PredicateOp::scalar;
    }
  }

  /// The tree, or nullopt when the predicate leaves the derivation's atoms.
  std::optional<std::vector<SetNode>> compile() {
    if (!supported_) return std::nullopt;
    if (set(static_cast<int>(p_.nodes.size()) - 1) < 0) return std::nullopt;
    return std::move(nodes_);
  }

 private:
  // A side of a comparison affine in q: q's coefficient and the column-constant rest.
  struct Linear {
    int sign = 0;
    Predicate rest;
  };

  Predicate subtree(int n) const {
    Predicate out;
    const int first = start_[n];
    for (int i = first; i <= n; ++i) {
      PredicateNode node = p_.nodes[i];
      if (node.lhs >= 0) node.lhs -= first;
      if (node.rhs >= 0) node.rhs -= first;
      out.nodes.push_back(std::move(node));
    }
    return out;
  }

  std::optional<Linear> linear(int n) const {
    const PredicateNode& node = p_.nodes[n];
    if (!uses_q_[n]) return Linear{0, subtree(n)};
    if (node.op == PredicateOp::query) return Linear{1, make_literal(0)};
    if (node.op == PredicateOp::negate) {
      auto inner = linear(node.lhs);
      if (!inner) return std::nullopt;
      return Linear{-inner->sign, make_unary(PredicateOp::negate, inner->rest)};
    }
    if (node.op != PredicateOp::add && node.op != PredicateOp::sub) return std::nullopt;
    auto a = linear(node.lhs);
    auto b = linear(node.rhs);
    if (!a || !b) return std::nullopt;
    const int sign = node.op == PredicateOp::add ? a->sign + b->sign : a->sign - b->sign;
    if (sign < -1 || sign > 1 || (a->sign != 0 && b->sign != 0)) return std::nullopt;
    return Linear{sign, make_binary(node.op, a->rest, b->rest)};
  }

  bool is_read_at_q(int n) const {
    const PredicateNode& node = p_.nodes[n];
    return node.op == PredicateOp::tensor_read && p_.nodes[node.lhs].op == PredicateOp::query;
  }

  // Subtree a with q read as k equals subtree b: then the set of q holds q = k.
  bool same_with_q_as_k(int a, int b) const {
    const PredicateNode& x = p_.nodes[a];
    const PredicateNode& y = p_.nodes[b];
    if (x.op == PredicateOp::query) return y.op == PredicateOp::key;
    if (x.op != y.op || x.value != y.value || x.tensor != y.tensor) return false;
    if ((x.lhs >= 0) != (y.lhs >= 0) || (x.rhs >= 0) != (y.rhs >= 0)) return false;
    return (x.lhs < 0 || same_with_q_as_k(x.lhs, y.lhs)) &&
           (x.rhs < 0 || same_with_q_as_k(x.rhs, y.rhs));
  }

  int add(SetNode node) {
    nodes_.push_back(std::move(node));
    return static_cast<int>(nodes_.size()) - 1;
  }

  // Compiles predicate node n as a row set; -1 when unsupported.
  int set(int n) {
    const PredicateNode& node = p_.nodes[n];
    if (!uses_q_[n]) {
      SetNode s;
      s.lhs = subtree(n);
      return add(std::move(s));
    }
    if (node.op == PredicateOp::logical_and || node.op == PredicateOp::logical_or) {
      SetNode s;
      s.kind = node.op == PredicateOp::logical_and ? SetNode::Kind::all : SetNode::Kind::any;
      for (int operand : {node.lhs, node.rhs}) {
        const int child = set(operand);
        if (child < 0) return -1;
        // Flatten a chain of one operator, so the top-level conjuncts are the children.
        if (nodes_[child].kind == s.kind) {
          s.children.insert(s.children.end(), nodes_[child].children.begin(),
                            nodes_[child].children.end());
        } else {
          s.children.push_back(child);
        }
      }
      s.shape = s.relative = Shape{};
      bool first = true;
      for (int child : s.children) {
        const SetNode& c = nodes_[child];
        const bool all = s.kind == SetNode::Kind::all;
        s.shape = first ? c.shape : all ? intersect(s.shape, c.shape) : unite(s.shape, c.shape);
        s.relative = first ? c.relative
                     : all ? intersect(s.relative, c.relative)
                           : unite(s.relative, c.relative);
        first = false;
      }
      return add(std::move(s));
    }
    if (node.op == PredicateOp::logical_not) {
      const int child = set(node.lhs);
      if (child < 0) return -1;
      SetNode s;
      s.kind = SetNode::Kind::negation;
      s.children = {child};
      s.shape = complement(nodes_[child].shape);
      s.relative = complement(nodes_[child].relative);
      return add(std::move(s));
    }
    if (!is_comparison(node.op)) return -1;
    return comparison(n);
  }

  int comparison(int n) {
    const PredicateNode& node = p_.nodes[n];
    SetNode s;
    const bool contains_k =
        same_with_q_as_k(node.lhs, node.rhs) || same_with_q_as_k(node.rhs, node.lhs);
    if (is_read_at_q(node.lhs) || is_read_at_q(node.rhs)) {
      const bool left = is_read_at_q(node.lhs);
      const int value = left ? node.rhs : node.lhs;
      if (uses_q_[value]) return -1;
      s.kind = SetNode::Kind::read;
      s.op = left ? node.op : mirrored(node.op);
      s.tensor = p_.nodes[left ? node.lhs : node.rhs].tensor;
      s.rhs = subtree(value);
    } else {
      auto a = linear(node.lhs);
      auto b = linear(node.rhs);
      if (!a || !b || a->sign - b->sign < -1 || a->sign - b->sign > 1) return -1;
      s.kind = SetNode::Kind::linear;
      s.op = a->sign - b->sign == -1 ? mirrored(node.op) : node.op;
      s.lhs = std::move(a->rest);
      s.rhs = std::move(b->rest);
      s.lhs_sign = a->sign;
      s.rhs_sign = b->sign;
      if (a->sign == b->sign) {
        s.shape = s.relative = Shape{};
        return add(std::move(s));
      }
      const PredicateOp l = p_.nodes[node.lhs].op;
      const PredicateOp r = p_.nodes[node.rhs].op;
      s.diagonal =
          (node.op == PredicateOp::greater_equal && l == PredicateOp::query &&
           r == PredicateOp::key) ||
          (node.op == PredicateOp::less_equal && l == PredicateOp::key && r == PredicateOp::query);
    }
    s.shape = comparison_shape(s.op);
    s.relative = s.shape;
    if (contains_k && s.op == PredicateOp::equal) s.relative = {1, 0, 0};
    if (contains_k && s.op == PredicateOp::not_equal) s.relative = {0, 0, 1};
    if (s.diagonal) s.relative = Shape{};
    return add(std::move(s));
  }

  const Predicate& p_;
  std::vector<int> start_;
  std::vector<bool> uses_q_;
  bool supported_ = true;
  std::vector<SetNode> nodes_;
};

using Rows = std::vector<std::pair<int, int>>;  // sorted disjoint nonempty [lo, hi)

Rows rows_between(std::int64_t lo, std::int64_t hi, int sq) {
  lo = std::clamp<std::int64_t>(lo, 0, sq);
  hi = std::clamp<std::int64_t>(hi, 0, sq);
  if (lo >= hi) return {};
  return {{static_cast<int>(lo), static_cast<int>(hi)}};
}

Rows complement_rows(const Rows& a, int sq) {
  Rows out;
  int from = 0;
  for (const auto& [lo, hi] : a) {
    if (lo > from) out.emplace_back(from, lo);
    from = hi;
  }
  if (from < sq) out.emplace_back(from, sq);
  return out;
}

Rows unite_rows(const Rows& a, const Rows& b) {
  Rows all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  Rows out;
  for (const auto& r : all) {
    if (!out.empty() && r.first <= out.back().second) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

Rows intersect_rows(const Rows& a, const Rows& b) {
  Rows out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int lo = std::max(a[i].first, b[j].first);
    const int hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second ? i : j)++;
  }
  return out;
}

// {q in [0, sq) : q op t}.
Rows compare_rows(PredicateOp op, std::int64_t t, int sq) {
  switch (op) {
    case PredicateOp::less:
      return rows_between(0, t, sq);
    case PredicateOp::less_equal:
      return rows_between(0, t + 1, sq);
    case PredicateOp::greater:
      return rows_between(t + 1, sq, sq);
    case PredicateOp::greater_equal:
      return rows_between(t, sq, sq);
    case PredicateOp::equal:
      return rows_between(t, t + 1, sq);
    default:
      return complement_rows(rows_between(t, t + 1, sq), sq);
  }
}

bool holds(PredicateOp op, std::int32_t a, std::int32_t b) {
  switch (op) {
    case PredicateOp::less:
      return a < b;
    case PredicateOp::less_equal:
      return a <= b;
    case PredicateOp::greater:
      return a > b;
    case PredicateOp::greater_equal:
      return a >= b;
    case PredicateOp::equal:
      return a == b;
    default:
      return a != b;
  }
}

std::string describe_rows(const Rows& rows) {
  if (rows.empty()) return "none";
  std::string out;
  for (const auto& [lo, hi] : rows)
    out += fmt::format("{}[{}, {})", out.empty() ? "" : " ", lo, hi);
  return out;
}

// Evaluates the tree per (batch row, key column) from the data.
class SetEvaluator {
 public:
  SetEvaluator(const std::vector<SetNode>& tree, const PredicateBindings& bindings, int batch,
               int seqlen_q)
      : tree_(tree), sq_(seqlen_q) {
    for (const SetNode& node : tree) {
      lhs_.push_back(evaluator(node.lhs, bindings));
      rhs_.push_back(evaluator(node.rhs, bindings));
      if (node.kind == SetNode::Kind::read && !runs_.count(node.tensor)) {
        runs_[node.tensor] = checked_runs(node.tensor, bindings, batch);
      }
    }
  }

  Rows rows(int b, int k) const { return eval(static_cast<int>(tree_.size()) - 1, b, k); }

 private:
  static std::unique_ptr<PredicateEvaluator> evaluator(const Predicate& p,
                                                       const PredicateBindings& bindings) {
    if (p.nodes.empty()) return nullptr;
    return std::make_unique<PredicateEvaluator>(p, PredicateBindings{bindings.tensors, {}});
  }

  // The values read at q = 0 .. Sq-1 of every row, checked nondecreasing.
  std::vector<std::vector<std::int32_t>> checked_runs(const std::string& name,
                                                      const PredicateBindings& bindings,
                                                      int batch) const {
    const auto t = std::find_if(bindings.tensors.begin(), bindings.tensors.end(),
                                [&](const PredicateTensor& x) { return x.name == name; });
    internal_check(t != bindings.tensors.end(), "derive_intervals: tensors are checked first");
    std::vector<std::vector<std::int32_t>> rows(std::min(t->rows, batch));
    for (std::size_t r = 0; r < rows.size(); ++r) {
      rows[r].resize(sq_);
      for (int i = 0; i < sq_; ++i) {
        rows[r][i] = i < t->length ? t->values[r * t->length + i] : 0;
        if (i > 0 && rows[r][i] < rows[r][i - 1]) {
          throw Error(fmt::format(
              "tensor {}: row {} decreases at index {} ({}[{}] = {} < {}[{}] = {}{}); accepted "
              "for the interval form: a tensor nondecreasing over [0, seqlen_q) when q indexes "
              "it (runs of equal values); write predicate(...) for the predicate form",
              name, r, i, name, i, rows[r][i], name, i - 1, rows[r][i - 1],
              i >= t->length ? ", read past its length" : ""));
        }
      }
    }
    return rows;
  }

  std::int32_t value(const std::unique_ptr<PredicateEvaluator>& e, int b, int k) const {
    return e->value(b, 0, 0, k);
  }

  // Throws unless sign * q + c stays in int32 for q in [0, Sq): then wrap-around never happens.
  void check_no_wrap(int sign, std::int32_t c, int b, int k) const {
    if (sign == 0) return;
    const std::int64_t far =
        static_cast<std::int64_t>(c) + sign * static_cast<std::int64_t>(sq_ - 1);
    if (far < INT32_MIN || far > INT32_MAX) {
      throw Error(
          fmt::format("mask: batch {}, key column {}: a comparison with q wraps around "
                      "int32 (q {} {} for q up to {}); accepted for the interval form: "
                      "values that fit int32; write predicate(...) for the predicate form",
                      b, k, sign > 0 ? "+" : "-", c, sq_ - 1));
    }
  }

  Rows eval(int n, int b, int k) const {
    const SetNode& node = tree_[n];
    switch (node.kind) {
      case SetNode::Kind::constant:
        return value(lhs_[n], b, k) != 0 ? rows_between(0, sq_, sq_) : Rows{};
      case SetNode::Kind::linear: {
        const std::int32_t c1 = value(lhs_[n], b, k);
        const std::int32_t c2 = value(rhs_[n], b, k);
        check_no_wrap(node.lhs_sign, c1, b, k);
        check_no_wrap(node.rhs_sign, c2, b, k);
        const int d = node.lhs_sign - node.rhs_sign;
        if (d == 0) {
          return holds(node.op, c1, c2) ? rows_between(0, sq_, sq_) : Rows{};
        }
        const std::int64_t t = d == 1 ? std::int64_t{c2} - c1 : std::int64_t{c1} - c2;
        return compare_rows(node.op, t, sq_);
      }
      case SetNode::Kind::read: {
        const auto& runs = runs_.at(node.tensor);
        const std::vector<std::int32_t>& row = runs[runs.size() == 1 ? 0 : b];
        const std::int32_t v = value(rhs_[n], b, k);
        const int lo = static_cast<int>(std::lower_bound(row.begin(), row.end(), v) - row.begin());
        const int hi = static_cast<int>(std::upper_bound(row.begin(), row.end(), v) - row.begin());
        switch (node.op) {
          case PredicateOp::equal:
            return rows_between(lo, hi, sq_);
          case PredicateOp::less:
            return rows_between(0, lo, sq_);
          case PredicateOp::less_equal:
            return rows_between(0, hi, sq_);
          case PredicateOp::greater:
            return rows_between(hi, sq_, sq_);
          case PredicateOp::greater_equal:
            return rows_between(lo, sq_, sq_);
          default:
            return complement_rows(rows_between(lo, hi, sq_), sq_);
        }
      }
      case SetNode::Kind::negation:
        return complement_rows(eval(node.children[0], b, k), sq_);
      default: {
        Rows out = eval(node.children[0], b, k);
        for (std::size_t i = 1; i < node.children.size(); ++i) {
          const Rows next = eval(node.children[i], b, k);
          out = node.kind == SetNode::Kind::all ? intersect_rows(out, next) : unite_rows(out, next);
        }
        return out;
      }
    }
  }

  const std::vector<SetNode>& tree_;
  int sq_;
  std::vector<std::unique_ptr<PredicateEvaluator>> lhs_;
  std::vector<std::unique_ptr<PredicateEvaluator>> rhs_;
  std::map<std::string, std::vector<std::vector<std::int32_t>>> runs_;
};

// Writes the vectors of one column holding exactly the visible rows `v`, or throws.
void fit(const DerivedLayout& layout, const Rows& v, int b, int k, int sq, int sk,
         std::int32_t* out) {
  const Rows range =
      layout.causal ? rows_between(std::int64_t{k} + sq - sk, sq, sq) : rows_between(0, sq, sq);
  const Rows masked = intersect_rows(complement_rows(v, sq), range);
  const bool inside = intersect_rows(v, range) == v;
  bool fits = inside;
  if (layout.causal) {
    fits = fits && masked.size() <= 1 &&
           (layout.columns == 2 || masked.empty() || masked.back().second == sq);
  } else {
    fits = fits && (layout.columns == 2 ? v.size() <= 1 : masked.size() <= 2);
  }
  if (!fits) {
    throw Error(fmt::format(
        "mask: batch {}, key column {}: visible rows {} do not fit the interval form chosen for "
        "the expression's structure ({}, {} columns{}); accepted: data that fits it; write "
        "predicate(...) for the predicate form",
        b, k, describe_rows(v), layout.causal ? "causal" : "not causal", layout.columns,
        layout.causal && sq != sk ? ", whose diagonal is bottom-right aligned while q>=k is "
                                    "top-left: use seqlen_q == seqlen_k"
                                  : ""));
  }
  if (layout.causal) {
    out[0] = masked.empty() ? sq : masked[0].first;
    if (layout.columns == 2) out[1] = masked.empty() ? sq : masked[0].second;
  } else if (layout.columns == 2) {
    out[0] = v.empty() ? 0 : v[0].second;
    out[1] = v.empty() ? 0 : v[0].first;
  } else {
    out[0] = out[1] = sq;
    out[2] = out[3] = 0;
    const bool upper_first = !masked.empty() && masked[0].first == 0;
    for (std::size_t i = 0; i < masked.size(); ++i) {
      const bool upper = masked.size() == 2 ? i == 0 : upper_first;
      out[upper ? 2 : 0] = masked[i].first;
      out[upper ? 3 : 1] = masked[i].second;
    }
  }
}

}  // namespace

std::optional<DerivedLayout> derive_layout(const Predicate& predicate) {
  std::optional<std::vector<SetNode>> tree = SetCompiler(predicate).compile();
  if (!tree) return std::nullopt;
  const SetNode& root = tree->back();
  std::vector<int> conjuncts;
  if (root.kind == SetNode::Kind::all) {
    conjuncts = root.children;
  } else {
    conjuncts = {static_cast<int>(tree->size()) - 1};
  }
  const auto diagonal =
      std::find_if(conjuncts.begin(), conjuncts.end(), [&](int c) { return (*tree)[c].diagonal; });
  if (diagonal != conjuncts.end()) {
    if (conjuncts.size() == 1) return DerivedLayout{true, 0};
    Shape rest;
    for (int c : conjuncts) {
      if (c != *diagonal) rest = intersect(rest, (*tree)[c].relative);
    }
    if (rest.middle == 0 && rest.suffix == 0) return DerivedLayout{true, 1};
    if (rest.middle == 0) return DerivedLayout{true, 2};
  }
  if (count(root.shape) <= 1) return DerivedLayout{false, 2};
  if (count(complement(root.shape)) <= 2) return DerivedLayout{false, 4};
  return std::nullopt;
}

IntervalVectors derive_intervals(const Predicate& predicate, const DerivedLayout& layout,
                                 const PredicateBindings& bindings, int batch, int seqlen_q,
                                 int seqlen_k) {
  const std::optional<std::vector<SetNode>> tree = SetCompiler(predicate).compile();
  internal_check(tree.has_value() && layout.columns > 0,
                 "derive_intervals: a layout from derive_layout with vectors");
  const SetEvaluator evaluator(*tree, bindings, batch, seqlen_q);
  IntervalVectors m;
  m.causal = layout.causal;
  m.columns = layout.columns;
  m.batch = batch;
  m.heads = 1;
  m.seqlen_q = seqlen_q;
  m.seqlen_k = seqlen_k;
  validate_shape(m);
  m.data.resize(static_cast<std::size_t>(batch) * seqlen_k * layout.columns);
  for (int b = 0; b < batch; ++b) {
    for (int k = 0; k < seqlen_k; ++k) {
      const std::size_t at = (static_cast<std::size_t>(b) * seqlen_k + k) * layout.columns;
      fit(layout, evaluator.rows(b, k), b, k, seqlen_q, seqlen_k, m.data.data() + at);
    }
  }
  validate(m);
  return m;
}

}  // namespace attnjit::dsl
