// canonicalize: one spelling per signature.
#include "compiler/passes/passes.hpp"

namespace attnjit {

Lowering canonicalize(const Lowering& in) {
  Lowering out = in;
  if (out.spec.head_dim_v == 0) out.spec.head_dim_v = out.spec.head_dim_qk;
  return out;
}

}  // namespace attnjit
