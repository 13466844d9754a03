// The forced tile shape of the sm90a forward used by the tests (`tiles=128xBNx12w`): the widest
// key block whose consumer warpgroups compile without spilling (NVRTC sweep, sm_90a), which
// narrows with the head dim, with tables to classify blocks (FlashMask vectors, predicate
// block tables: the producer keeps 48 registers) and with score modifiers.
#pragma once

#include <string>

#include "attnjit/spec.hpp"

namespace attnjit::testing {

inline int sm90a_block_n(const AttentionSpec& spec) {
  const bool tables =
      spec.mask.kind == MaskKind::flashmask || spec.mask.kind == MaskKind::predicate;
  const bool modifiers = spec.softcap || spec.alibi;
  switch (spec.head_dim_qk) {
    case 192:
      return tables && modifiers ? 80 : tables || modifiers ? 96 : 112;
    case 256:
      return tables ? (modifiers ? 48 : 64) : 80;
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
