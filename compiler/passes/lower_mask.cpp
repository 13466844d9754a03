// lower_mask: index arithmetic for causal and sliding window, interval vectors for FlashMask.
#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {
namespace {

// Column roles of startend_row_indices (flashmask.md): causal C=1: LTS; causal C=2: LTS,
// LTE; non-causal C=2: LTS, UTE; non-causal C=4: LTS, LTE, UTS, UTE.
std::vector<IntervalVector> flashmask_vectors(const MaskSpec& mask) {
  using V = IntervalVector;
  if (mask.causal && mask.columns == 1) return {V::lts};
  if (mask.causal && mask.columns == 2) return {V::lts, V::lte};
  if (!mask.causal && mask.columns == 2) return {V::lts, V::ute};
  if (!mask.causal && mask.columns == 4) return {V::lts, V::lte, V::uts, V::ute};
  throw InternalError("lower_mask: flashmask arity not validated");
}

}  // namespace

Lowering lower_mask(const Lowering& in) {
  Lowering out = in;
  MaskLowering mask;
  switch (in.spec.mask.kind) {
    case MaskKind::none:
      break;
    case MaskKind::causal:
      mask.causal_by_index = true;
      break;
    case MaskKind::sliding_window:
      mask.window_by_index = true;
      break;
    case MaskKind::flashmask:
      mask.causal_by_index = in.spec.mask.causal;
      mask.vectors = flashmask_vectors(in.spec.mask);
      mask.needs_minmax = true;
      break;
    case MaskKind::predicate:
      throw_field_error("mask", to_string(in.spec.mask),
                        "none, causal, sliding_window, flashmask(...); kernels for element "
                        "predicates are not available in this build");
  }
  out.mask = mask;
  return out;
}

}  // namespace attnjit
