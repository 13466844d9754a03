// The sm90a family's codegen hooks, which its registry rows reference: the wgmma shapes a
// kernel instantiates (wgmma.cuh's defines) and the forward's products as one asm statement
// each (WgmmaSteps specialisations). Depends on the IR only, so that the rows can name them.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/lowering.hpp"

namespace attnjit::codegen {

/// The `#define`s of the wgmma shapes (m64nNk16) a kernel of `tiles` instantiates: N is a query
/// or key block or half of one, the head dim or half of it, or 64.
std::vector<std::string> wgmma_shape_defines(const KernelTiles& tiles, const AttentionSpec& spec);

/// WgmmaSteps specialisations (in namespace attnjit) that issue the sm90a forward's products,
/// S = Q K^T and O += P V, as one asm statement each.
std::string wgmma_forward_products(const KernelTiles& tiles, const AttentionSpec& spec);

}  // namespace attnjit::codegen
