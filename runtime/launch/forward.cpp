// Kernel::forward: checks the tensors against the spec, fills FwdParams and launches the
// plan (runtime/plan_launch) or the reference kernel.
#include <fmt/format.h>

#include <cstdint>

#include "attnjit/common/params.cuh"
#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/debug_mode.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/jit/kernel_set.hpp"
#include "runtime/launch/launch_support.hpp"
#include "runtime/launch/plan_launch.hpp"
#include "runtime/launch/predicate_launch.hpp"
#include "runtime/launch/varlen.hpp"
#include "runtime/masks/interval_check.hpp"

namespace attnjit {

std::string_view name_of(ScalarType type) {
  switch (type) {
    case ScalarType::fp16:
      return "fp16";
    case ScalarType::bf16:
      return "bf16";
    case ScalarType::fp32:
      return "fp32";
    case ScalarType::int32:
      return "int32";
    case ScalarType::e4m3:
      return "e4m3";
  }
  throw InternalError("unknown ScalarType");
}

TensorView contiguous_view(void* data, ScalarType dtype,
                           std::initializer_list<std::int64_t> shape) {
  if (shape.size() > 4)
    throw Error(fmt::format("tensor rank: got {}; accepted: 0 to 4", shape.size()));
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.rank = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t extent : shape) view.shape[i++] = extent;
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.stride[d] = stride;
    stride *= view.shape[d];
  }
  return view;
}

namespace jit {
namespace {

using detail::check_args;
using detail::Shapes;

FwdParams make_params(const detail::KernelSet& set, const ForwardArgs& a, const Shapes& s) {
  FwdParams p{};
  detail::fill_common_params(p, set.spec, a, s);
  const bool packed = set.spec.varlen != VarlenMode::off;
  p.predicate = detail::predicate_inputs(set.spec, set.predicate, a.predicate,
                                         packed ? detail::sequences(a.varlen) : s.batch, packed);
  detail::fill_varlen(p.varlen, a.varlen, a.startend_row_indices);
  detail::fill_kv_cache(p.kv_cache, set.spec, a);
  detail::fill_descales(p, set.spec, a, s);
  return p;
}

Shapes checked_shapes(const detail::KernelSet& set, const ForwardArgs& args) {
  if (set.spec.direction != Direction::forward) {
    throw Error(
        "forward: this kernel was compiled for direction=backward; accepted: a kernel compiled "
        "with direction=forward (call backward() on this one)");
  }
  return check_args(set.spec, args, set.spec.return_lse || !set.plan);
}

void launch_reference(const detail::KernelSet& set, FwdParams& params, CUstream stream) {
  const detail::LoadedKernel& kernel = set.kernels_in_current_context().front();
  // Q's row, the scores and kReferenceSlack floats: ptxas merges the P V loop's last loads
  // into one 12-byte read past the scores (compute-sanitizer memcheck reported it at Sk = 517).
  constexpr int kReferenceSlack = 4;
  const std::int64_t smem =
      (static_cast<std::int64_t>(set.spec.head_dim_qk) + params.seqlen_k + kReferenceSlack) * 4;
  const int limit = runtime::current_device().max_smem_optin;
  if (smem > limit) {
    throw_field_error("k.shape[1] (seqlen_k) for the reference kernel",
                      std::to_string(params.seqlen_k),
                      fmt::format("at most {} keys on this device",
                                  limit / 4 - set.spec.head_dim_qk - kReferenceSlack));
  }
  int current = 0;
  runtime::check(runtime::driver().cuFuncGetAttribute(
                     &current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.function),
                 "cuFuncGetAttribute");
  if (smem > current) {
    runtime::check(runtime::driver().cuFuncSetAttribute(
                       kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                       static_cast<int>(smem)),
                   "cuFuncSetAttribute(reference kernel shared memory)");
  }
  runtime::LaunchConfig config;
  config.grid[0] = static_cast<unsigned>(params.seqlen_q);
  config.grid[1] = static_cast<unsigned>(params.heads);
  config.grid[2] = static_cast<unsigned>(params.batch);
  config.block[0] = static_cast<unsigned>(kernel.threads);
  config.dynamic_smem_bytes = static_cast<unsigned>(smem);
  void* args[] = {&params};
  runtime::launch(kernel.function, config, stream, args);
}

}  // namespace

void Kernel::forward(const ForwardArgs& args, Stream stream_handle) const {
  if (const auto with_scalars = detail::with_spec_scalars(args, predicate_scalars_)) {
    return forward(*with_scalars, stream_handle);
  }
  const detail::KernelSet& set = *set_;
  const std::optional<ForwardArgs> packed = detail::packed_as_batch(set.spec, args);
  const std::optional<ForwardArgs> ragged =
      packed ? std::nullopt : detail::ragged_as_batch(set.spec, args);
  const ForwardArgs& a = packed ? *packed : ragged ? *ragged : args;
  Shapes shapes = checked_shapes(set, a);
  if (set.plan) detail::allow_prefill(*set.plan, a, shapes);
  FwdParams params = make_params(set, a, shapes);
  // Ragged new tokens: the prefill kernel's maps view q and o as their packed rows.
  if (ragged) params.kv_cache.total_q = static_cast<int>(args.q.shape[0]);
  if (shapes.batch == 0 || shapes.seqlen_q == 0 || shapes.heads == 0) return;
  CUstream stream = static_cast<CUstream>(stream_handle);
  // Over a KV cache the vectors' rows are positions in the sequence, up to its capacity.
  const bool positions = set.spec.kv_cache != KvCache::none;
  detail::validate_intervals_on_request(
      a.validate_mask, set.spec.mask, a.startend_row_indices,
      positions ? shapes.seqlen_k : detail::vector_rows(a, packed.has_value(), shapes.seqlen_q),
      stream, positions);
  if (!set.plan) {
    launch_reference(set, params, stream);
    return;
  }
  if (set.spec.kv_cache != KvCache::none && runtime::debug_mode()) {
    detail::check_kv_cache_contents(set.spec, a, shapes, ragged ? args.q.shape[0] : 0, stream);
  }
  const detail::VarlenCheck check(packed && (a.validate_mask || runtime::debug_mode()), stream);
  params.varlen.first_error = check.device();
  detail::launch_plan(set, params, shapes, a.workspace, stream);
  check.finish(a.varlen, shapes.seqlen_q, shapes.seqlen_k);
}

std::size_t Kernel::workspace_size(const ForwardArgs& args) const {
  const detail::KernelSet& set = *set_;
  if (!set.plan) return 0;
  detail::Shapes shapes = detail::launch_shapes(args, set.spec.varlen);
  detail::add_kv_cache_shapes(set.spec, args, shapes);
  detail::allow_prefill(*set.plan, args, shapes);
  return detail::cached_schedule(set, detail::launch_extents(shapes)).workspace_bytes;
}

}  // namespace jit
}  // namespace attnjit
