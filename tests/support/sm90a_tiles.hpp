// The forced tile shape of the sm90a forward used by the tests (`tiles=128xBNx12w`): the widest
// key block whose consumer warpgroups compile without spilling (NVRTC sweep, sm_90a), which
// narrows with the head dim, with tables to classify blocks (FlashMask vectors, predicate
// block tables: the producer keeps 48 registers) and with score modifiers.
#pragma once

#include <string>

#include "attnjit/spec.hpp"

namespace attnjit::testing {

inline int sm90a_block_n(const AttentionSpec& spec) {
  // The producer keeps 48 registers (consumers 224) for predicates and for more than one
  // FlashMask vector, 40 (232) for one, else 24 (240): compiler/codegen/emit.cpp.
  const bool predicate = spec.mask.kind == MaskKind::predicate;
  const bool tables = spec.mask.kind == MaskKind::flashmask || predicate;
  const bool wide_tables = predicate || (tables && spec.mask.columns > 1);
  const bool modifiers = spec.softcap || spec.alibi;
  const bool window = spec.mask.kind == MaskKind::sliding_window;
  switch (spec.head_dim_qk) {
    case 128:
      return wide_tables ? 112 : 128;
    case 192:
      return predicate || (tables && modifiers) ? 80 : tables || modifiers ? 96 : 112;
    case 256:
      return tables ? (modifiers || predicate ? 32 : 48) : modifiers || window ? 64 : 80;
    default:
      return 128;
  }
}

/// The spec forced onto the sm90a forward (target sm_90a, tiles=128xBNx12w).
inline AttentionSpec sm90a_forward_spec(AttentionSpec spec) {
  spec.target = Arch::sm_90a;
  spec.tiles = {128, sm90a_block_n(spec), 12, 'w'};
  return spec;
}

}  // namespace attnjit::testing
