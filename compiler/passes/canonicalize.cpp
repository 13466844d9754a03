// canonicalize: one spelling per signature.
#include "compiler/ir/predicate.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {

Lowering canonicalize(const Lowering& in) {
  Lowering out = in;
  if (out.spec.head_dim_v == 0) out.spec.head_dim_v = out.spec.head_dim_qk;
  // The backward reads the LSE (it never returns one); the forward is deterministic anyway.
  if (out.spec.direction == Direction::backward) out.spec.return_lse = false;
  if (out.spec.direction == Direction::forward) out.spec.deterministic = false;
  // A bare backward shape is the key-slab layout.
  if (out.spec.direction == Direction::backward && !out.spec.tiles.is_auto() &&
      out.spec.tiles.layout == TileLayout::automatic) {
    out.spec.tiles.layout = TileLayout::slabs;
  }
  // Redundant parentheses and spaces do not make another kernel (validate parsed it), nor do
  // the values of lifted literals: they are launch arguments.
  if (out.predicate) out.spec.mask.predicate = to_string(*out.predicate);
  out.spec.mask.scalars.clear();
  return out;
}

}  // namespace attnjit
