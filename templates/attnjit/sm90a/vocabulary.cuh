// The words the sm90a family's kernels are written in (wgmma, TMA, mbarrier, warp
// specialization): register fragments and warpgroup MMAs, swizzled shared tiles, TMA copies,
// mbarrier pipelines and named barriers, the masks and score modifiers, the CTA schedule and the
// parameter blocks.
#pragma once

#include "attnjit/common/fragment.cuh"
#include "attnjit/common/params.cuh"
#include "attnjit/common/primitives.cuh"
#include "attnjit/common/schedule.cuh"
#include "attnjit/common/score_mod.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/masks/mask.cuh"
#include "attnjit/sm90a/barrier.cuh"
#include "attnjit/sm90a/mbarrier.cuh"
#include "attnjit/sm90a/pipeline.cuh"
#include "attnjit/sm90a/tma.cuh"
#include "attnjit/sm90a/wgmma.cuh"
