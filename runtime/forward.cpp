// Kernel::forward: checks the tensors against the spec, fills FwdParams and launches the
// plan's kernels (FlashMask min/max, then the forward kernel) or the reference kernel.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <optional>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "attnjit/params.cuh"
#include "runtime/driver.hpp"
#include "runtime/kernel_set.hpp"

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

constexpr std::int64_t kMaxGridYZ = 65535;

struct Shapes {
  int batch = 0, seqlen_q = 0, seqlen_k = 0, heads = 0, kv_heads = 0, mask_heads = 1;
};

void check_int_range(std::string_view field, std::int64_t value, std::int64_t max) {
  if (value < 0 || value > max) {
    throw_field_error(field, std::to_string(value), fmt::format("0 to {}", max));
  }
}

// q/k/v/o: 16-bit, rank 4, last dim contiguous, 16-byte rows, given head dim.
void check_activation(std::string_view name, const TensorView& t, ScalarType dtype, int head_dim) {
  if (t.data == nullptr)
    throw Error(fmt::format("{}: data is null; accepted: a device pointer", name));
  if (t.dtype != dtype) {
    throw_field_error(fmt::format("{}.dtype", name), name_of(t.dtype),
                      fmt::format("{} (the spec's dtype)", name_of(dtype)));
  }
  if (t.rank != 4) {
    throw_field_error(fmt::format("{}.rank", name), std::to_string(t.rank),
                      "4 ([batch, seq, heads, head_dim])");
  }
  if (t.shape[3] != head_dim) {
    throw_field_error(fmt::format("{}.shape[3]", name), std::to_string(t.shape[3]),
                      fmt::format("{} (the spec's head dim)", head_dim));
  }
  if (t.stride[3] != 1) {
    throw_field_error(fmt::format("{}.stride[3]", name), std::to_string(t.stride[3]),
                      "1 (the head dim must be contiguous)");
  }
  for (int d = 0; d < 3; ++d) {
    if (t.stride[d] < 0 || t.stride[d] % 8 != 0) {
      throw_field_error(fmt::format("{}.stride[{}]", name, d), std::to_string(t.stride[d]),
                        "a non-negative multiple of 8 elements (16-byte aligned rows)");
    }
  }
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
    throw_field_error(fmt::format("{}.data", name), fmt::format("{}", t.data),
                      "a 16-byte aligned address");
  }
}

void check_same(std::string_view field, std::int64_t got, std::int64_t expected,
                std::string_view what) {
  if (got != expected) {
    throw_field_error(field, std::to_string(got), fmt::format("{} ({})", expected, what));
  }
}

Shapes check_args(const AttentionSpec& spec, const ForwardArgs& a, bool lse_required) {
  const ScalarType dtype = spec.dtype == DType::bf16 ? ScalarType::bf16 : ScalarType::fp16;
  check_activation("q", a.q, dtype, spec.head_dim_qk);
  check_activation("k", a.k, dtype, spec.head_dim_qk);
  check_activation("v", a.v, dtype, spec.head_dim_v);
  check_activation("o", a.o, dtype, spec.head_dim_v);
  Shapes s;
  check_int_range("q.shape[0] (batch)", a.q.shape[0], kMaxGridYZ);
  check_int_range("q.shape[1] (seqlen_q)", a.q.shape[1], INT32_MAX / 2);
  check_int_range("q.shape[2] (heads)", a.q.shape[2], kMaxGridYZ);
  check_int_range("k.shape[1] (seqlen_k)", a.k.shape[1], INT32_MAX / 2);
  s.batch = static_cast<int>(a.q.shape[0]);
  s.seqlen_q = static_cast<int>(a.q.shape[1]);
  s.heads = static_cast<int>(a.q.shape[2]);
  s.seqlen_k = static_cast<int>(a.k.shape[1]);
  s.kv_heads = static_cast<int>(a.k.shape[2]);
  check_same("k.shape[0]", a.k.shape[0], s.batch, "batch of q");
  check_same("v.shape[0]", a.v.shape[0], s.batch, "batch of q");
  check_same("v.shape[1]", a.v.shape[1], s.seqlen_k, "seqlen of k");
  check_same("v.shape[2]", a.v.shape[2], s.kv_heads, "heads of k");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0) {
    throw_field_error("k.shape[2] (kv heads)", std::to_string(s.kv_heads),
                      fmt::format("a divisor of the {} query heads (GQA/MQA)", s.heads));
  }
  check_same("o.shape[0]", a.o.shape[0], s.batch, "batch of q");
  check_same("o.shape[1]", a.o.shape[1], s.seqlen_q, "seqlen of q");
  check_same("o.shape[2]", a.o.shape[2], s.heads, "heads of q");

  if (lse_required) {
    const TensorView& l = a.lse;
    if (l.data == nullptr) {
      throw Error(
          "lse: missing; the spec has return_lse=true: pass an fp32 [batch, heads, seqlen_q] "
          "tensor");
    }
    if (l.dtype != ScalarType::fp32) throw_field_error("lse.dtype", name_of(l.dtype), "fp32");
    if (l.rank != 3)
      throw_field_error("lse.rank", std::to_string(l.rank), "3 ([batch, heads, seqlen_q])");
    check_same("lse.shape[0]", l.shape[0], s.batch, "batch of q");
    check_same("lse.shape[1]", l.shape[1], s.heads, "heads of q");
    check_same("lse.shape[2]", l.shape[2], s.seqlen_q, "seqlen of q");
    if (l.stride[2] != 1) throw_field_error("lse.stride[2]", std::to_string(l.stride[2]), "1");
  } else if (!a.lse.empty()) {
    throw Error("lse: given, but the spec has return_lse=false; accepted: no lse tensor");
  }

  const bool window = spec.mask.kind == MaskKind::sliding_window;
  if (!window && (a.window_left != -1 || a.window_right != 0)) {
    throw Error(
        fmt::format("window_left/window_right: got {}/{}, but they apply to "
                    "mask=sliding_window only; accepted: -1/0 (the defaults)",
                    a.window_left, a.window_right));
  }
  if (window) {
    if (a.window_left < -1)
      throw_field_error("window_left", std::to_string(a.window_left), "-1 (unbounded) or >= 0");
    if (a.window_right < -1)
      throw_field_error("window_right", std::to_string(a.window_right), "-1 (unbounded) or >= 0");
  }
  if (!(a.softmax_scale >= 0.f) || !std::isfinite(a.softmax_scale)) {
    throw_field_error("softmax_scale", fmt::format("{}", a.softmax_scale),
                      "a finite value > 0, or 0 for 1/sqrt(head_dim)");
  }

  const TensorView& m = a.startend_row_indices;
  if (spec.mask.kind == MaskKind::flashmask) {
    const int columns = spec.mask.columns;
    if (m.data == nullptr) {
      throw Error(
          fmt::format("startend_row_indices: missing; mask={} needs an int32 [batch, "
                      "mask_heads, seqlen_k, {}] tensor",
                      to_string(spec.mask), columns));
    }
    if (m.dtype != ScalarType::int32)
      throw_field_error("startend_row_indices.dtype", name_of(m.dtype), "int32");
    if (m.rank != 4)
      throw_field_error("startend_row_indices.rank", std::to_string(m.rank),
                        "4 ([batch, mask_heads, seqlen_k, columns])");
    check_same("startend_row_indices.shape[0]", m.shape[0], s.batch, "batch of q");
    if (m.shape[1] != 1 && m.shape[1] != s.kv_heads) {
      throw_field_error("startend_row_indices.shape[1] (mask heads)", std::to_string(m.shape[1]),
                        fmt::format("1 or {} (the kv heads)", s.kv_heads));
    }
    check_same("startend_row_indices.shape[2]", m.shape[2], s.seqlen_k, "seqlen of k");
    check_same("startend_row_indices.shape[3]", m.shape[3], columns, "columns of the spec's mask");
    const std::int64_t expected[4] = {m.shape[1] * m.shape[2] * columns, m.shape[2] * columns,
                                      columns, 1};
    for (int d = 0; d < 4; ++d) {
      if (m.shape[d] > 1 && m.stride[d] != expected[d]) {
        throw_field_error(fmt::format("startend_row_indices.stride[{}]", d),
                          std::to_string(m.stride[d]),
                          fmt::format("{} (the tensor must be contiguous)", expected[d]));
      }
    }
    s.mask_heads = static_cast<int>(m.shape[1]);
  } else if (!m.empty()) {
    throw Error(
        fmt::format("startend_row_indices: given, but mask={} reads no vectors; "
                    "accepted: no startend_row_indices",
                    to_string(spec.mask)));
  }
  return s;
}

FwdParams make_params(const AttentionSpec& spec, const ForwardArgs& a, const Shapes& s) {
  FwdParams p{};
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.o = a.o.data;
  p.lse = static_cast<float*>(a.lse.data);
  p.intervals = static_cast<const int*>(a.startend_row_indices.data);
  p.minmax = nullptr;
  p.q_batch_stride = a.q.stride[0];
  p.q_row_stride = a.q.stride[1];
  p.q_head_stride = a.q.stride[2];
  p.k_batch_stride = a.k.stride[0];
  p.k_row_stride = a.k.stride[1];
  p.k_head_stride = a.k.stride[2];
  p.v_batch_stride = a.v.stride[0];
  p.v_row_stride = a.v.stride[1];
  p.v_head_stride = a.v.stride[2];
  p.o_batch_stride = a.o.stride[0];
  p.o_row_stride = a.o.stride[1];
  p.o_head_stride = a.o.stride[2];
  p.lse_batch_stride = a.lse.stride[0];
  p.lse_head_stride = a.lse.stride[1];
  p.batch = s.batch;
  p.heads = s.heads;
  p.kv_heads = s.kv_heads;
  p.mask_heads = s.mask_heads;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_k = s.seqlen_k;
  p.softmax_scale = a.softmax_scale > 0.f ? a.softmax_scale
                                          : 1.f / std::sqrt(static_cast<float>(spec.head_dim_qk));
  p.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  return p;
}

// Stream-ordered scratch memory, returned to the pool after the work queued on the stream.
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, CUstream stream) : stream_(stream) {
    runtime::check(runtime::driver().cuMemAllocAsync(&ptr_, bytes, stream),
                   "cuMemAllocAsync(flashmask min/max)");
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  ~StreamScratch() {
    if (const runtime::DriverApi* driver = runtime::detail::driver_for_cleanup()) {
      driver->cuMemFreeAsync(ptr_, stream_);
    }
  }
  int* data() const { return reinterpret_cast<int*>(static_cast<std::uintptr_t>(ptr_)); }

 private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
};

unsigned ceil_div(std::int64_t a, std::int64_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

void launch_reference(const detail::KernelSet& set, FwdParams& params, CUstream stream) {
  const detail::LoadedKernel& kernel = set.kernels_in_current_context().front();
  const std::int64_t smem = (static_cast<std::int64_t>(set.spec.head_dim_qk) + params.seqlen_k) * 4;
  const int limit = runtime::current_device().max_smem_optin;
  if (smem > limit) {
    throw_field_error(
        "k.shape[1] (seqlen_k) for the reference kernel", std::to_string(params.seqlen_k),
        fmt::format("at most {} keys on this device", limit / 4 - set.spec.head_dim_qk));
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
  const detail::KernelSet& set = *set_;
  const bool is_reference = !set.ir.has_value();
  const Shapes shapes = check_args(set.spec, args, set.spec.return_lse || is_reference);
  FwdParams params = make_params(set.spec, args, shapes);
  if (shapes.batch == 0 || shapes.seqlen_q == 0 || shapes.heads == 0) return;
  CUstream stream = static_cast<CUstream>(stream_handle);
  if (is_reference) {
    launch_reference(set, params, stream);
    return;
  }

  const std::vector<detail::LoadedKernel>& kernels = set.kernels_in_current_context();
  const KernelPlan& plan = *set.ir->plan;
  const TileConfig& tiles = *set.ir->tiles;
  std::optional<StreamScratch> minmax;
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const KernelDesc& desc = plan.kernels[i];
    const detail::LoadedKernel& kernel = kernels[i];
    runtime::LaunchConfig config;
    config.block[0] = static_cast<unsigned>(kernel.threads);
    config.dynamic_smem_bytes = static_cast<unsigned>(kernel.dynamic_smem_bytes);
    if (desc.role == KernelRole::flashmask_minmax) {
      const int key_blocks = static_cast<int>(ceil_div(shapes.seqlen_k, tiles.block_n));
      const std::int64_t warps =
          static_cast<std::int64_t>(shapes.batch) * shapes.mask_heads * key_blocks;
      const std::size_t bytes =
          static_cast<std::size_t>(warps) * 2 * set.spec.mask.columns * sizeof(int);
      if (warps == 0) continue;
      minmax.emplace(bytes, stream);
      params.minmax = minmax->data();
      MinMaxParams mm{};
      mm.intervals = params.intervals;
      mm.minmax = minmax->data();
      mm.batch = shapes.batch;
      mm.mask_heads = shapes.mask_heads;
      mm.seqlen_k = shapes.seqlen_k;
      mm.num_key_blocks = key_blocks;
      config.grid[0] = ceil_div(warps, kernel.threads / 32);
      void* mm_args[] = {&mm};
      runtime::launch(kernel.function, config, stream, mm_args);
    } else {
      config.grid[0] = ceil_div(shapes.seqlen_q, tiles.block_m);
      config.grid[1] = static_cast<unsigned>(shapes.heads);
      config.grid[2] = static_cast<unsigned>(shapes.batch);
      void* fwd_args[] = {&params};
      runtime::launch(kernel.function, config, stream, fwd_args);
    }
  }
}

}  // namespace jit
}  // namespace attnjit
