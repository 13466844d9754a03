// The words the sm80 family's kernels are written in (mma.sync, ldmatrix, cp.async): register
// fragments and warp MMAs, swizzled shared tiles, the block walks and key block loads, the
// masks and score modifiers, the CTA schedule and the parameter blocks.
#pragma once

#include "attnjit/common/block_walk.cuh"
#include "attnjit/common/fragment.cuh"
#include "attnjit/common/kv_block.cuh"
#include "attnjit/common/mask_apply.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/common/score_mod.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/common/warp_mma.cuh"
#include "attnjit/masks/mask.cuh"
