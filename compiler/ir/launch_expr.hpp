// Integer expressions over the runtime extents of a launch (batch, lengths, head counts):
// the plan writes every grid dimension, scratch-buffer size and computed kernel argument as
// one, the IR prints it, and the runtime evaluates the same expression to launch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnjit {

/// A runtime extent a launch expression reads.
enum class Extent {
  batch,         ///< B
  seqlen_q,      ///< Sq
  seqlen_k,      ///< Sk
  heads,         ///< H (query heads)
  kv_heads,      ///< Hkv
  mask_heads,    ///< Hm (heads of startend_row_indices)
  gqa,           ///< 1 when H != Hkv, else 0
  bits_budget,   ///< bytes a predicate's element bits may take per table
                 ///< (ATTNJIT_PREDICATE_BITS_MIB)
  sm_count,      ///< SMs of the launching device (persistent grids; 0 where none is current)
  splits,        ///< key splits of a decode launch (KvCacheArgs::num_splits or chosen), else 1
  query_groups,  ///< decode: query rows per KV head, G x Sq (G = H / Hkv query heads per KV head)
  new_tokens,    ///< decode: the rows appended to each sequence's cache (KvCacheArgs::k_new), or 0
  prefill,       ///< kv_cache: 1 where the launch runs the prefill kernel (not decode's), else 0
  head_group,    ///< query heads a CTA of a head-grouping backward walks: H / Hkv or 1
};
inline constexpr int kExtentCount = 14;

/// The values of the extents for one launch.
struct LaunchExtents {
  std::int64_t values[kExtentCount] = {};

  std::int64_t& operator[](Extent e) { return values[static_cast<int>(e)]; }
  std::int64_t operator[](Extent e) const { return values[static_cast<int>(e)]; }
  bool operator==(const LaunchExtents&) const = default;
};

/// A value-type expression tree: constants, extents, +, *, ceil(a/b), floor(a/b), min(a, b).
/// Constants fold as the expression is built, so `2 * ceil_div(Sq, 128)` stays readable.
class LaunchExpr {
 public:
  LaunchExpr() : LaunchExpr(std::int64_t{0}) {}
  LaunchExpr(std::int64_t constant);  // NOLINT: constants convert implicitly
  LaunchExpr(int constant) : LaunchExpr(static_cast<std::int64_t>(constant)) {}  // NOLINT
  LaunchExpr(Extent extent);                                                     // NOLINT

  friend LaunchExpr operator+(const LaunchExpr& a, const LaunchExpr& b);
  friend LaunchExpr operator*(const LaunchExpr& a, const LaunchExpr& b);
  /// ceil(a / b); b must be a positive constant or an extent.
  friend LaunchExpr ceil_div(const LaunchExpr& a, const LaunchExpr& b);
  /// floor(a / b); b as for ceil_div.
  friend LaunchExpr floor_div(const LaunchExpr& a, const LaunchExpr& b);
  friend LaunchExpr min(const LaunchExpr& a, const LaunchExpr& b);

  /// Its value for `extents`; throws Error when an intermediate value leaves int64.
  std::int64_t evaluate(const LaunchExtents& extents) const;
  /// The constant it folds to, when it reads no extent.
  bool is_constant() const;
  std::int64_t constant() const;

  /// Infix text, e.g. `2*ceil(Sq/128)` or `ceil(B*Hm*ceil(Sk/64)/4)`.
  std::string to_string() const;

  bool operator==(const LaunchExpr&) const = default;

 private:
  enum class Op { constant, extent, add, mul, ceil_div, floor_div, min };
  struct Node {
    Op op = Op::constant;
    std::int64_t value = 0;  ///< constant, or the Extent
    int lhs = -1, rhs = -1;  ///< operand nodes
    bool operator==(const Node&) const = default;
  };
  static LaunchExpr binary(Op op, const LaunchExpr& a, const LaunchExpr& b);
  std::int64_t evaluate(int node, const LaunchExtents& extents) const;
  std::string to_string(int node, int parent_precedence) const;

  std::vector<Node> nodes_;  ///< the root last
};

LaunchExpr operator+(const LaunchExpr& a, const LaunchExpr& b);
LaunchExpr operator*(const LaunchExpr& a, const LaunchExpr& b);
LaunchExpr ceil_div(const LaunchExpr& a, const LaunchExpr& b);
LaunchExpr floor_div(const LaunchExpr& a, const LaunchExpr& b);
LaunchExpr min(const LaunchExpr& a, const LaunchExpr& b);

/// The short name of an extent as expressions print it: B, Sq, Sk, H, Hkv, Hm, gqa, bits, Hg.
std::string_view name_of(Extent extent);

/// A grid (x, y, z) of launch expressions.
struct LaunchGrid {
  LaunchExpr x = 1, y = 1, z = 1;

  std::string to_string() const;  ///< `(x, y, z)`
  bool operator==(const LaunchGrid&) const = default;
};

}  // namespace attnjit
