// lower_mask: index arithmetic for causal and sliding window, interval vectors for FlashMask,
// an element predicate with block tables for predicates.
#include <algorithm>

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

// A packed batch is one row of keys whose vectors (built on the device from cu_seqlens and the
// user's per-sequence vectors, varlen_intervals.cuh) hide the other sequences and apply the
// mask in each sequence's local positions. Under shared boundaries every sequence's causal
// diagonal is the packed row's (total_q = total_k), so causal runs by index, as causal
// documents do; with keys of their own it is a row bound of each key.
bool packed_causal_by_index(const AttentionSpec& spec) {
  const bool causal = spec.mask.kind == MaskKind::causal ||
                      (spec.mask.kind == MaskKind::flashmask && spec.mask.causal);
  return causal && spec.varlen == VarlenMode::shared;
}

// The packed vectors. A key's visible rows [begin, end) (its sequence, cut by a causal mask or
// a window) fold into a one-sided vector: LTS without LTE hides rows from LTS on, so LTS takes
// min(LTS, end); UTE without UTS hides the rows before UTE, so UTE takes max(UTE, begin). Where
// the user's interval has both ends (LTE, or UTS), the bound takes a vector of its own.
std::vector<IntervalVector> packed_vectors(const AttentionSpec& spec, bool causal_by_index) {
  using V = IntervalVector;
  std::vector<V> user;
  if (spec.mask.kind == MaskKind::flashmask) user = flashmask_vectors(spec.mask);
  const auto has = [&](V v) { return std::ranges::find(user, v) != user.end(); };
  std::vector<V> out = {V::lts};
  if (has(V::lte)) out.push_back(V::lte);
  if (has(V::uts)) out.push_back(V::uts);
  if (has(V::ute) || !causal_by_index) out.push_back(V::ute);
  if (has(V::uts)) out.push_back(V::visible_begin);
  if (has(V::lte)) out.push_back(V::visible_end);
  return out;
}

}  // namespace

Lowering lower_mask(const Lowering& in) {
  Lowering out = in;
  MaskLowering mask;
  if (in.spec.varlen != VarlenMode::off && in.spec.mask.kind == MaskKind::predicate) {
    // The block tables are built over the packed row, which is one batch row: the predicate
    // sees each sequence's index as b (predicate_blocks.cuh).
    internal_check(in.predicate.has_value(), "lower_mask runs after validate");
    mask.element_predicate = true;
    mask.varlen = true;
    mask.table_per_head = info(*in.predicate).uses_head;
    out.mask = mask;
    return out;
  }
  if (in.spec.varlen != VarlenMode::off) {
    mask.needs_minmax = true;
    mask.varlen = true;
    mask.causal_by_index = packed_causal_by_index(in.spec);
    mask.vectors = packed_vectors(in.spec, mask.causal_by_index);
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
      // The table needs a row per batch when a tensor row may differ between batches, and
      // over a KV cache, where each sequence has its own keys and positions.
      internal_check(in.predicate.has_value(), "lower_mask runs after validate");
      const PredicateInfo used = info(*in.predicate);
      mask.element_predicate = true;
      mask.table_per_batch =
          used.uses_batch || !used.tensors.empty() || in.spec.kv_cache != KvCache::none;
      mask.table_per_head = used.uses_head;
      mask.decode_table = in.spec.kv_cache != KvCache::none && !used.uses_head;
      break;
    }
  }
  out.mask = mask;
  return out;
}

}  // namespace attnjit
