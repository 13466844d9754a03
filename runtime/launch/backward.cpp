// Kernel::backward: checks the tensors against the spec, fills BwdParams and launches the
// plan (runtime/plan_launch): the mask's tables and CTA orders, preprocess, the sinks' gradient,
// main kernel, deterministic dQ kernel or dQ conversion, and the GQA reduction of dK/dV.
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

namespace attnjit::jit {
namespace {

using detail::Shapes;

BwdParams make_params(const detail::KernelSet& set, const BackwardArgs& a, const Shapes& s) {
  BwdParams p{};
  detail::fill_common_params(p, set.spec, a, s);
  p.d_o = a.d_o.data;
  p.d_q = a.d_q.data;
  p.d_k = a.d_k.data;
  p.d_v = a.d_v.data;
  p.d_sinks = static_cast<float*>(a.d_sinks.data);
  // One query head per CTA unless the plan groups them (ParamScalar::head_group).
  p.head_group = 1;
  detail::set_strides(a.d_o, p.do_batch_stride, p.do_row_stride, p.do_head_stride);
  detail::set_strides(a.d_q, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
  detail::set_strides(a.d_k, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
  detail::set_strides(a.d_v, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
  const bool packed = set.spec.varlen != VarlenMode::off;
  p.predicate = detail::predicate_inputs(set.spec, set.predicate, a.predicate,
                                         packed ? detail::sequences(a.varlen) : s.batch, packed);
  detail::fill_varlen(p.varlen, a.varlen, a.startend_row_indices);
  return p;
}

Shapes checked_shapes(const detail::KernelSet& set, const BackwardArgs& args) {
  if (set.spec.direction != Direction::backward || !set.plan) {
    throw Error(
        "backward: this kernel was compiled for direction=forward; accepted: a kernel compiled "
        "with direction=backward (e.g. `dtype=bf16 head_dim=128 mask=causal direction=backward`)");
  }
  const Shapes s = detail::check_args(set.spec, args, /*lse_required=*/true);
  detail::check_same_layout("d_o", args.d_o, "o", args.o);
  detail::check_same_layout("d_q", args.d_q, "q", args.q);
  detail::check_same_layout("d_k", args.d_k, "k", args.k);
  detail::check_same_layout("d_v", args.d_v, "v", args.v);
  return s;
}

}  // namespace

void Kernel::backward(const BackwardArgs& args, Stream stream_handle) const {
  if (const auto with_scalars = detail::with_spec_scalars(args, predicate_scalars_)) {
    return backward(*with_scalars, stream_handle);
  }
  const detail::KernelSet& set = *set_;
  const std::optional<BackwardArgs> packed = detail::packed_as_batch(set.spec, args);
  const BackwardArgs& a = packed ? *packed : args;
  const Shapes s = checked_shapes(set, a);
  BwdParams params = make_params(set, a, s);
  const CUstream stream = static_cast<CUstream>(stream_handle);
  if (s.batch == 0 || s.heads == 0 || (s.seqlen_q == 0 && s.seqlen_k == 0)) {
    // No row: the sinks' gradient is 0, and d_sinks is written by every call.
    if (set.spec.sinks && s.heads > 0) {
      runtime::check(runtime::driver().cuMemsetD32Async(
                         static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(params.d_sinks)),
                         0, static_cast<std::size_t>(s.heads), stream),
                     "cuMemsetD32Async(d_sinks)");
    }
    return;
  }
  detail::validate_intervals_on_request(a.validate_mask, set.spec.mask, a.startend_row_indices,
                                        detail::vector_rows(a, packed.has_value(), s.seqlen_q),
                                        stream);
  const detail::VarlenCheck check(packed && (a.validate_mask || runtime::debug_mode()), stream);
  params.varlen.first_error = check.device();
  detail::launch_plan(set, params, s, a.workspace, stream);
  check.finish(a.varlen, s.seqlen_q, s.seqlen_k);
}

std::size_t Kernel::workspace_size(const BackwardArgs& args) const {
  const detail::KernelSet& set = *set_;
  if (!set.plan) return 0;
  return detail::cached_schedule(
             set, detail::launch_extents(detail::launch_shapes(args, set.spec.varlen)))
      .workspace_bytes;
}

}  // namespace attnjit::jit
