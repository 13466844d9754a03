// The schedule of a plan and its launch.
#include "runtime/launch/plan_launch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "attnjit/common/params.cuh"
#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/launch/predicate_launch.hpp"
#include "runtime/launch/tma.hpp"

namespace attnjit::jit::detail {
namespace {

static_assert(kPredicateTensorLimit == kMaxPredicateTensors &&
                  kPredicateScalarLimit == kMaxPredicateScalars,
              "validate's predicate limits are the sizes of the kernels' PredicateInputs");

// An int argument of a parameter block: the expression's value, which must fit in int32.
int scalar_value(const KernelDesc& kernel, const ScalarBinding& scalar,
                 const LaunchExtents& extents) {
  const std::int64_t value = scalar.value.evaluate(extents);
  if (value < 0 || value > INT32_MAX) {
    throw Error(fmt::format(
        "shapes: kernel {} would take {} = {} ({}); accepted: shapes for which it stays within "
        "0 to 2147483647",
        kernel.name, name_of(scalar.field), value, scalar.value.to_string()));
  }
  return static_cast<int>(value);
}

unsigned grid_value(const KernelDesc& kernel, const LaunchExpr& dimension,
                    const LaunchExtents& extents) {
  const std::int64_t value = dimension.evaluate(extents);
  if (value > INT32_MAX) {
    throw Error(fmt::format(
        "shapes: kernel {} would need a grid dimension of {} ({}); accepted: at most 2147483647",
        kernel.name, value, dimension.to_string()));
  }
  return static_cast<unsigned>(value);
}

template <class Params>
void bind_attention(Params& p, ParamField field, void* pointer) {
  switch (field) {
    case ParamField::minmax:
      p.minmax = static_cast<const int*>(pointer);
      return;
    case ParamField::predicate_bits:
      p.predicate_bits = static_cast<const unsigned*>(pointer);
      return;
    case ParamField::cta_order:
      p.cta_order = static_cast<const int*>(pointer);
      return;
    case ParamField::varlen_intervals:
      p.intervals = static_cast<const int*>(pointer);
      p.varlen.intervals = static_cast<int*>(pointer);
      return;
    default:
      break;
  }
  if constexpr (std::is_same_v<Params, FwdParams>) {
    switch (field) {
      case ParamField::work_counter:
        p.work_counter = static_cast<unsigned*>(pointer);
        return;
      case ParamField::o_partial:
        p.kv_cache.o_partial = static_cast<float*>(pointer);
        return;
      case ParamField::lse_partial:
        p.kv_cache.lse_partial = static_cast<float*>(pointer);
        return;
      default:
        break;
    }
  }
  if constexpr (std::is_same_v<Params, BwdParams>) {
    float* values = static_cast<float*>(pointer);
    switch (field) {
      case ParamField::minmax_dq:
        p.minmax_dq = static_cast<const int*>(pointer);
        return;
      case ParamField::predicate_bits_dq:
        p.predicate_bits_dq = static_cast<const unsigned*>(pointer);
        return;
      case ParamField::row_dot:
        p.row_dot = values;
        return;
      case ParamField::lse_log2:
        p.lse_log2 = values;
        return;
      case ParamField::dq_accum:
        p.dq_accum = values;
        return;
      case ParamField::dq_turns:
        p.dq_turns = static_cast<int*>(pointer);
        return;
      case ParamField::dk_partial:
        p.dk_partial = values;
        return;
      case ParamField::dv_partial:
        p.dv_partial = values;
        return;
      default:
        break;
    }
  }
  throw InternalError(fmt::format("plan binds {} in an attention block", name_of(field)));
}

// An attention block's computed argument: the decode kernels' key splits, the backward's
// head group.
template <class Params>
void set_attention(Params& p, ParamScalar field, int value) {
  if constexpr (std::is_same_v<Params, FwdParams>) {
    if (field == ParamScalar::num_splits) {
      p.kv_cache.num_splits = value;
      return;
    }
  }
  if constexpr (std::is_same_v<Params, BwdParams>) {
    if (field == ParamScalar::head_group) {
      p.head_group = value;
      return;
    }
  }
  (void)p;
  (void)value;
  throw InternalError(fmt::format("plan sets {} of an attention block", name_of(field)));
}

void bind_minmax(MinMaxParams& p, ParamField field, void* pointer) {
  if (field == ParamField::varlen_intervals) {
    p.intervals = static_cast<const int*>(pointer);
    return;
  }
  internal_check(field == ParamField::table_out, "a min/max kernel binds its table or vectors");
  p.minmax = static_cast<int*>(pointer);
}

void set_minmax(MinMaxParams& p, ParamScalar field, int value) {
  internal_check(field == ParamScalar::num_key_blocks, "a min/max kernel takes num_key_blocks");
  p.num_key_blocks = value;
}

void bind_blocks(PredicateBlocksParams& p, ParamField field, void* pointer) {
  switch (field) {
    case ParamField::table_out:
      p.table = static_cast<int*>(pointer);
      return;
    case ParamField::bits_out:
      p.bits = static_cast<unsigned*>(pointer);
      return;
    case ParamField::bits_used:
      p.bits_used = static_cast<unsigned*>(pointer);
      return;
    default:
      throw InternalError(fmt::format("plan binds {} in a block classification", name_of(field)));
  }
}

void set_blocks(PredicateBlocksParams& p, ParamScalar field, int value) {
  switch (field) {
    case ParamScalar::table_batch:
      p.table_batch = value;
      return;
    case ParamScalar::table_heads:
      p.table_heads = value;
      return;
    case ParamScalar::blocks_m:
      p.blocks_m = value;
      return;
    case ParamScalar::blocks_n:
      p.blocks_n = value;
      return;
    case ParamScalar::bits_capacity:
      p.bits_capacity = value;
      return;
    default:
      throw InternalError(fmt::format("plan sets {} of a block classification", name_of(field)));
  }
}

template <class Params>
void bind_order(CtaOrderParams<Params>& p, ParamField field, void* pointer) {
  switch (field) {
    case ParamField::order_table:
      p.table = static_cast<const int*>(pointer);
      return;
    case ParamField::order_cost:
      p.cost = static_cast<int*>(pointer);
      return;
    case ParamField::order_out:
      p.order = static_cast<int*>(pointer);
      return;
    case ParamField::varlen_intervals:
      bind_attention(p.attention, field, pointer);
      return;
    default:
      throw InternalError(fmt::format("plan binds {} in a CTA order", name_of(field)));
  }
}

template <class Params>
void set_order(CtaOrderParams<Params>& p, ParamScalar field, int value) {
  switch (field) {
    case ParamScalar::grid_x:
      p.grid_x = value;
      return;
    case ParamScalar::grid_y:
      p.grid_y = value;
      return;
    case ParamScalar::grid_z:
      p.grid_z = value;
      return;
    case ParamScalar::max_cost:
      p.max_cost = value;
      return;
    case ParamScalar::group_pairs:
      p.group_pairs = value;
      return;
    case ParamScalar::phase:
      p.phase = value;
      return;
    case ParamScalar::head_group:
      set_attention(p.attention, field, value);
      return;
    default:
      throw InternalError(fmt::format("plan sets {} of a CTA order", name_of(field)));
  }
}

// No second kernel argument.
struct NoMaps {};

// The parameter block of one launch: built from the call's attention arguments, the
// kernel's buffers and its computed arguments; `maps`, when given, makes the kernel's second
// argument (its TMA maps) from the bound block.
template <class Block, class Bind, class Set, class Maps = NoMaps>
void launch_block(Block block, const KernelDesc& kernel, const LaunchSchedule& schedule,
                  unsigned char* workspace, Bind bind, Set set, const LoadedKernel& loaded,
                  const ScheduledLaunch& launch, CUstream stream, Maps maps = {}) {
  for (const BufferBinding& binding : kernel.buffers) {
    void* pointer =
        schedule.bytes[binding.buffer] > 0 ? workspace + schedule.offsets[binding.buffer] : nullptr;
    bind(block, binding.field, pointer);
  }
  for (const auto& [field, value] : launch.scalars) set(block, field, value);
  runtime::LaunchConfig config;
  std::copy(launch.grid.begin(), launch.grid.end(), config.grid);
  config.block[0] = launch.threads;
  config.dynamic_smem_bytes = static_cast<unsigned>(kernel.dynamic_smem_bytes);
  config.dependent = kernel.dependent_launch;
  if constexpr (std::is_same_v<Maps, NoMaps>) {
    void* args[] = {&block, nullptr};
    runtime::launch(loaded.function, config, stream, args);
  } else {
    auto second = maps(block);
    void* args[] = {&block, &second};
    runtime::launch(loaded.function, config, stream, args);
  }
}

std::atomic<int> g_sm_count_limit{0};

// The SMs of the current context's device (kept per thread for the last device), or 0 where
// no context is current or no driver loads; at most set_sm_count_limit's.
int current_sm_count() {
  if (!runtime::driver_available()) return 0;
  const runtime::DriverApi& api = runtime::driver();
  CUcontext context = nullptr;
  if (api.cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) return 0;
  CUdevice device = 0;
  runtime::check(api.cuCtxGetDevice(&device), "cuCtxGetDevice");
  thread_local CUdevice cached_device = -1;
  thread_local int cached_count = 0;
  if (device != cached_device) {
    int count = 0;
    runtime::check(
        api.cuDeviceGetAttribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
        "cuDeviceGetAttribute(SM count)");
    cached_device = device;
    cached_count = count;
  }
  const int limit = g_sm_count_limit.load(std::memory_order_relaxed);
  return limit > 0 ? std::min(limit, cached_count) : cached_count;
}

// The SMs a launch rule counts: `sm_count`, or an H100's 132 where no context is current
// (workspace_size before any launch).
std::int64_t rule_sms(std::int64_t sm_count) {
  return sm_count > 0 ? sm_count : 132;
}

}  // namespace

bool runs_prefill(const Shapes& s, std::int64_t sm_count) {
  if (!s.prefill_allowed || s.kv_heads <= 0 || s.heads <= 0) return false;
  const std::int64_t sms = rule_sms(sm_count);
  // Both kernels read every visible key once per tile of query rows: the decode kernel's tiles
  // are 16 packed rows (G x Sq of a KV head), the prefill kernel's 128 rows of one query head,
  // and its grid fills the SMs only with enough tiles (below it, each of fewer CTAs walks the
  // whole cache). Per row and key the decode kernel's mma.sync tiles took 5 to 7 times the
  // prefill kernel's wgmma tiles (H200, d64 and d128, 1 to 16 sequences of 8K to 32K keys).
  const std::int64_t decode_rows =
      std::int64_t{s.batch} * s.kv_heads * 16 * ((s.heads / s.kv_heads * s.seqlen_q + 15) / 16);
  const std::int64_t prefill_rows =
      128 *
      std::max<std::int64_t>(std::int64_t{s.batch} * s.heads * ((s.seqlen_q + 127) / 128), sms);
  return 5 * decode_rows >= prefill_rows;
}

std::int64_t decode_splits(const Shapes& s, std::int64_t sm_count) {
  if (!s.decode || runs_prefill(s, sm_count)) return 1;
  if (s.num_splits > 0) return s.num_splits;
  const std::int64_t sms = rule_sms(sm_count);
  const std::int64_t row_tiles = s.kv_heads > 0 ? (s.heads / s.kv_heads * s.seqlen_q + 15) / 16 : 1;
  const std::int64_t ctas =
      std::max<std::int64_t>(1, std::int64_t{s.batch} * s.kv_heads * row_tiles);
  // Both CTA slots of every SM (a decode CTA holds about 100 KB of shared memory, most of it
  // in flight) for a paged cache (whose copies wait on block-table reads) and head dims below
  // 128: with one CTA per SM they fell well short of the copy's bandwidth. A contiguous cache
  // from head dim 128 streams at it with one CTA per SM, and the second slot's splits only
  // added merge work (3-8% slower from 1 to 16 sequences). An e4m3 cache's rows are half as
  // long, and its warps widen every byte they read: both slots. A second wave only adds time.
  // The smallest count that fills at least 90% of the slots, each split keeping at least one
  // 64-key block (short splits finish in one memory round trip), and more splits only add
  // merge work.
  const std::int64_t most =
      std::clamp<std::int64_t>((std::int64_t{s.seqlen_k} + 63) / 64, 1, kMaxDecodeSplits);
  const std::int64_t slots = (s.paged || s.fp8_kv || s.head_dim_qk < 128 ? 2 : 1) * sms;
  const std::int64_t wanted = (9 * slots + 10 * ctas - 1) / (10 * ctas);
  return std::clamp<std::int64_t>(wanted, 1, most);
}

std::int64_t backward_head_group(const Shapes& s, std::int64_t sm_count) {
  if (s.kv_heads <= 0 || s.heads == s.kv_heads) return 1;
  // The heads of a KV head read the same row of startend_row_indices (mask heads are 1 or Hkv:
  // check_args), so they visit the same query blocks. Grouped, each CTA does the work of H / Hkv
  // CTAs: kept where at least two rounds of the grouped CTAs (of 128 keys) fill the SMs, so that
  // the longer CTAs still balance.
  const std::int64_t sms = rule_sms(sm_count);
  const std::int64_t ctas = std::int64_t{s.batch} * s.kv_heads * ((s.seqlen_k + 127) / 128);
  return ctas >= 2 * sms ? s.heads / s.kv_heads : 1;
}

void set_sm_count_limit(int limit) {
  g_sm_count_limit.store(limit, std::memory_order_relaxed);
}

LaunchExtents launch_extents(const Shapes& s) {
  LaunchExtents e;
  e[Extent::batch] = s.batch;
  e[Extent::seqlen_q] = s.seqlen_q;
  e[Extent::seqlen_k] = s.seqlen_k;
  e[Extent::heads] = s.heads;
  e[Extent::kv_heads] = s.kv_heads;
  e[Extent::mask_heads] = s.mask_heads;
  e[Extent::gqa] = s.heads != s.kv_heads ? 1 : 0;
  e[Extent::bits_budget] = static_cast<std::int64_t>(predicate_bits_budget());
  e[Extent::sm_count] = current_sm_count();
  e[Extent::splits] = decode_splits(s, e[Extent::sm_count]);
  e[Extent::new_tokens] = s.new_tokens;
  e[Extent::prefill] = runs_prefill(s, e[Extent::sm_count]) ? 1 : 0;
  e[Extent::query_groups] =
      s.kv_heads > 0 ? static_cast<std::int64_t>(s.heads / s.kv_heads) * s.seqlen_q : 0;
  e[Extent::head_group] = backward_head_group(s, e[Extent::sm_count]);
  return e;
}

LaunchSchedule schedule_plan(const KernelPlan& plan, const LaunchExtents& extents) {
  LaunchSchedule schedule;
  for (const ScratchBuffer& buffer : plan.scratch) {
    const std::int64_t bytes = buffer.bytes.evaluate(extents);
    internal_check(bytes >= 0, "scratch sizes are not negative");
    schedule.offsets.push_back(schedule.workspace_bytes);
    schedule.bytes.push_back(static_cast<std::size_t>(bytes));
    const std::size_t aligned = (static_cast<std::size_t>(bytes) + LaunchSchedule::kAlignment - 1) /
                                LaunchSchedule::kAlignment * LaunchSchedule::kAlignment;
    if (__builtin_add_overflow(schedule.workspace_bytes, aligned, &schedule.workspace_bytes)) {
      throw Error(fmt::format("shapes: scratch buffer {} ({} bytes) overflows the workspace size",
                              buffer.name, bytes));
    }
  }
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const KernelDesc& kernel = plan.kernels[k];
    for (std::size_t phase = 0; phase < kernel.phases.size(); ++phase) {
      const LaunchGrid& grid = kernel.phases[phase].grid;
      ScheduledLaunch launch;
      launch.kernel = static_cast<int>(k);
      launch.phase = static_cast<int>(phase);
      launch.grid = {grid_value(kernel, grid.x, extents), grid_value(kernel, grid.y, extents),
                     grid_value(kernel, grid.z, extents)};
      launch.threads = static_cast<unsigned>(kernel.phases[phase].threads);
      if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0) continue;
      for (const std::vector<ScalarBinding>* scalars :
           {&kernel.scalars, &kernel.phases[phase].scalars}) {
        for (const ScalarBinding& scalar : *scalars) {
          launch.scalars.emplace_back(scalar.field, scalar_value(kernel, scalar, extents));
        }
      }
      schedule.launches.push_back(std::move(launch));
    }
  }
  return schedule;
}

const LaunchSchedule& cached_schedule(const KernelSet& set, const LaunchExtents& extents) {
  // The cache key names the plan: equal keys are equal plans, whichever set holds them.
  thread_local std::string key;
  thread_local LaunchExtents last;
  thread_local LaunchSchedule schedule;
  if (key != set.entry.key || !(last == extents)) {
    schedule = schedule_plan(*set.plan, extents);
    key = set.entry.key;
    last = extents;
  }
  return schedule;
}

template <class Params>
void launch_plan(const KernelSet& set, const Params& attention, const Shapes& shapes,
                 const Workspace& workspace, CUstream stream, std::optional<KernelRole> only) {
  internal_check(set.plan.has_value(), "launch_plan needs a planned kernel set");
  const KernelPlan& plan = *set.plan;
  LaunchExtents extents = launch_extents(shapes);
  const LaunchSchedule* scheduled = &cached_schedule(set, extents);
  // The caller's workspace first: a bad one is the caller's error on any machine.
  const bool given = workspace.data != nullptr || workspace.bytes != 0;
  if (given) check_workspace(workspace, scheduled->workspace_bytes);
  const std::vector<LoadedKernel>& kernels = set.kernels_in_current_context();
  if (extents[Extent::sm_count] == 0) {
    // No context was current before the kernels were loaded: persistent grids need its SMs.
    extents = launch_extents(shapes);
    internal_check(extents[Extent::sm_count] > 0, "a current context has SMs");
    scheduled = &cached_schedule(set, extents);
  }
  const LaunchSchedule& schedule = *scheduled;
  internal_check(kernels.size() == plan.kernels.size(), "one compiled kernel per planned kernel");

  std::optional<StreamScratch> owned;
  unsigned char* base = static_cast<unsigned char*>(workspace.data);
  if (!given && schedule.workspace_bytes > 0) {
    owned.emplace(schedule.workspace_bytes, stream);
    base = owned->as<unsigned char>();
  }
  for (std::size_t b = 0; b < plan.scratch.size(); ++b) {
    if (!plan.scratch[b].zeroed || schedule.bytes[b] == 0) continue;
    internal_check(schedule.bytes[b] % 4 == 0, "zeroed buffers hold 32-bit words");
    runtime::check(
        runtime::driver().cuMemsetD32Async(
            static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(base + schedule.offsets[b])),
            0, schedule.bytes[b] / 4, stream),
        "cuMemsetD32Async(zeroed scratch buffer)");
  }
  for (const ScheduledLaunch& launch : schedule.launches) {
    const KernelDesc& kernel = plan.kernels[launch.kernel];
    if (only && kernel.role != *only) continue;
    const LoadedKernel& loaded = kernels[launch.kernel];
    switch (kernel.params) {
      case ParamBlock::attention:
        launch_block(attention, kernel, schedule, base, bind_attention<Params>,
                     set_attention<Params>, loaded, launch, stream);
        break;
      case ParamBlock::attention_tma: {
        const AttentionSpec& spec = set.spec;
        if constexpr (std::is_same_v<Params, FwdParams>) {
          launch_block(attention, kernel, schedule, base, bind_attention<Params>,
                       set_attention<Params>, loaded, launch, stream, [&](const FwdParams& bound) {
                         return forward_tensor_maps(bound, spec, kernel.tensor_maps);
                       });
        } else {
          // After binding: the dQ accumulator's map needs its scratch address.
          launch_block(attention, kernel, schedule, base, bind_attention<Params>,
                       set_attention<Params>, loaded, launch, stream, [&](const BwdParams& bound) {
                         return backward_tensor_maps(bound, spec, kernel.tensor_maps);
                       });
        }
        break;
      }
      case ParamBlock::minmax: {
        MinMaxParams block{};
        block.intervals = attention.intervals;
        block.batch = attention.batch;
        block.mask_heads = attention.mask_heads;
        block.seqlen_k = attention.seqlen_k;
        launch_block(block, kernel, schedule, base, bind_minmax, set_minmax, loaded, launch,
                     stream);
        break;
      }
      case ParamBlock::predicate_blocks: {
        PredicateBlocksParams block{};
        block.predicate = attention.predicate;
        block.varlen = attention.varlen;
        block.seqlen_q = attention.seqlen_q;
        block.seqlen_k = attention.seqlen_k;
        if constexpr (std::is_same_v<Params, FwdParams>) block.kv_cache = attention.kv_cache;
        launch_block(block, kernel, schedule, base, bind_blocks, set_blocks, loaded, launch,
                     stream);
        break;
      }
      case ParamBlock::cta_order: {
        CtaOrderParams<Params> block{};
        block.attention = attention;
        launch_block(block, kernel, schedule, base, bind_order<Params>, set_order<Params>, loaded,
                     launch, stream);
        break;
      }
    }
  }
}

template void launch_plan(const KernelSet&, const FwdParams&, const Shapes&, const Workspace&,
                          CUstream, std::optional<KernelRole>);
template void launch_plan(const KernelSet&, const BwdParams&, const Shapes&, const Workspace&,
                          CUstream, std::optional<KernelRole>);

}  // namespace attnjit::jit::detail
