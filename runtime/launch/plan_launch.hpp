// Launching a kernel plan: the plan's launch expressions evaluated for a call's shapes (the
// schedule), its scratch buffers laid out in one workspace, and each kernel launched with
// the parameter block its row names, filled from the call's attention arguments and the
// plan's bindings. The same code launches every plan; nothing here knows a kernel family.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "attnjit/tensor.hpp"
#include "compiler/ir/lowering.hpp"
#include "runtime/jit/kernel_set.hpp"
#include "runtime/launch/launch_support.hpp"

namespace attnjit::jit::detail {

/// The extents a call's launch expressions read (ATTNJIT_PREDICATE_BITS_MIB for the bits;
/// the SMs of the current context's device, 0 where no context is current).
LaunchExtents launch_extents(const Shapes& shapes);

/// Whether a kv_cache launch that may run the prefill kernel (Shapes::prefill_allowed) does:
/// where the decode kernel's 16-row tiles would read the cache at least a fifth as often as
/// the prefill kernel's 128-row tiles, counted as at least `sm_count` (0: 132) tiles.
bool runs_prefill(const Shapes& shapes, std::int64_t sm_count);

/// The key splits of a decode launch (Shapes::decode): the requested count, else enough CTAs
/// for two per SM (`sm_count`; 0: 132; one for a contiguous cache from head dim 128) with at
/// least 64 keys each; 1 for other launches and where the launch runs the prefill kernel.
std::int64_t decode_splits(const Shapes& shapes, std::int64_t sm_count);

/// The query heads each CTA of a head-grouping backward main kernel walks (Extent::head_group):
/// all H / Hkv of its KV head where at least two rounds of the grouped CTAs fill the SMs
/// (`sm_count`; 0: 132); else 1.
std::int64_t backward_head_group(const Shapes& shapes, std::int64_t sm_count);

/// Caps the SM count launch_extents gives (0: no cap), so that a persistent kernel's CTAs take
/// many works each on small problems too (the GPU tests).
void set_sm_count_limit(int limit);

/// One launch of a plan's kernel for a call's extents.
struct ScheduledLaunch {
  int kernel = 0;  ///< index into KernelPlan::kernels
  int phase = 0;
  std::array<unsigned, 3> grid{};
  unsigned threads = 0;
  /// The kernel's and the phase's computed int arguments, evaluated.
  std::vector<std::pair<ParamScalar, int>> scalars;
};

/// A plan evaluated for a call's extents.
struct LaunchSchedule {
  static constexpr std::size_t kAlignment = 256;
  std::vector<std::size_t> offsets;  ///< of each scratch buffer in the workspace
  std::vector<std::size_t> bytes;    ///< of each scratch buffer
  std::size_t workspace_bytes = 0;
  /// In launch order; launches whose grid has a zero dimension are left out.
  std::vector<ScheduledLaunch> launches;
};

/// Evaluates the plan; throws Error when a grid dimension, a buffer or a computed argument
/// leaves the range the driver or the parameter block takes.
LaunchSchedule schedule_plan(const KernelPlan& plan, const LaunchExtents& extents);

/// schedule_plan of `set`'s plan, kept per thread for the last extents seen (a repeated call
/// with the same shapes evaluates nothing).
const LaunchSchedule& cached_schedule(const KernelSet& set, const LaunchExtents& extents);

/// Launches `set`'s plan on `stream`: scratch buffers from `workspace` (checked against the
/// schedule) or stream-ordered memory, zeroed where the plan says, then every scheduled
/// launch (only those of role `only` when given). `attention` is the call's FwdParams or
/// BwdParams without any scratch pointer.
template <class Params>
void launch_plan(const KernelSet& set, const Params& attention, const Shapes& shapes,
                 const Workspace& workspace, CUstream stream,
                 std::optional<KernelRole> only = std::nullopt);

}  // namespace attnjit::jit::detail
