// lower_mask: index arithmetic for causal and sliding window, interval vectors for FlashMask,
// an element predicate with block tables for predicates.
#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {
namespace {

// Column roles of startend_row_indices (docs/masks.md): causal C=1: LTS; causal C=2: LTS,
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
  if (in.spec.varlen != VarlenMode::off) {
    // A packed batch is one row of keys whose FlashMask vectors (built on the device from
    // cu_seqlens, varlen_intervals.cuh) hide the other sequences and apply the mask in each
    // sequence's local positions: every row of key j lies in [UTE, LTS). Under shared
    // boundaries every sequence's causal diagonal is the packed row's (total_q = total_k), so
    // causal runs by index with LTS alone, as causal documents do.
    mask.needs_minmax = true;
    mask.varlen = true;
    if (in.spec.varlen == VarlenMode::shared && in.spec.mask.kind == MaskKind::causal) {
      mask.causal_by_index = true;
      mask.vectors = {IntervalVector::lts};
    } else {
      mask.vectors = {IntervalVector::lts, IntervalVector::ute};
    }
    out.mask = mask;
    return out;
  }
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
    case MaskKind::predicate: {
      // The table needs a row per batch when a tensor row may differ between batches.
      internal_check(in.predicate.has_value(), "lower_mask runs after validate");
      const PredicateInfo used = info(*in.predicate);
      mask.element_predicate = true;
      mask.table_per_batch = used.uses_batch || !used.tensors.empty();
      mask.table_per_head = used.uses_head;
      break;
    }
  }
  out.mask = mask;
  return out;
}

}  // namespace attnjit
