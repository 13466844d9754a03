// The sm90a forward forced by an explicit `tiles=BMxBNxW:warpgroups` with the shape the registry's
// automatic choice gives the spec on sm_90a (compiler/registry/rows_forward_sm90a.cpp: the
// widest key block whose warpgroups compile without spilling for the spec's mask and score
// modifiers; three consumer warpgroups at d64 without tables or windows), so the tests take
// the explicit path with the shapes users get.
#pragma once

#include <string>

#include "attnjit/error.hpp"
#include "attnjit/spec.hpp"
#include "compiler/passes/pipeline.hpp"

namespace attnjit::testing {

/// The registry row of the sm90a forward.
inline constexpr const char* kSm90aForwardRow = "forward.sm90a";

/// The spec forced onto the sm90a forward (target sm_90a, the automatic tiles made explicit).
inline AttentionSpec sm90a_forward_spec(AttentionSpec spec) {
  spec.target = Arch::sm_90a;
  spec.tiles = {};
  const KernelTiles tiles = lower(spec).tiles_of(KernelRole::forward);
  internal_check(tiles.row == kSm90aForwardRow, "the sm90a forward takes the spec's head dim");
  spec.tiles = {tiles.block_m, tiles.block_n, tiles.warps, TileLayout::warpgroups};
  return spec;
}

}  // namespace attnjit::testing
