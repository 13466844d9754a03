// Argument checks and launch helpers shared by Kernel::forward and Kernel::backward.
#include "runtime/launch/launch_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/launch/varlen.hpp"

namespace attnjit::jit::detail {
namespace {

void check_int_range(std::string_view field, std::int64_t value, std::int64_t max) {
  if (value < 0 || value > max) {
    throw_field_error(field, std::to_string(value), fmt::format("0 to {}", max));
  }
}

// The most bytes a tensor may span: beyond any device's memory, and far from the 64-bit
// offset arithmetic of the kernels overflowing.
constexpr std::int64_t kMaxSpanBytes = std::int64_t{1} << 48;

std::int64_t element_bytes(ScalarType type) {
  switch (type) {
    case ScalarType::e4m3:
      return 1;
    case ScalarType::fp16:
    case ScalarType::bf16:
      return 2;
    default:
      return 4;
  }
}

}  // namespace

void check_span(std::string_view name, const TensorView& t) {
  __int128 span = 1;
  int widest = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.stride[d] < 0) {
      throw_field_error(fmt::format("{}.stride[{}]", name, d), std::to_string(t.stride[d]), ">= 0");
    }
    span += static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
    if (t.stride[d] > t.stride[widest]) widest = d;
  }
  if (span * element_bytes(t.dtype) > kMaxSpanBytes) {
    throw_field_error(fmt::format("{}.stride[{}]", name, widest), std::to_string(t.stride[widest]),
                      fmt::format("strides and shape whose tensor spans at most 2^48 bytes (the "
                                  "shape is [{}])",
                                  fmt::join(t.shape.begin(), t.shape.begin() + t.rank, ", ")));
  }
}

// Taken by increasing stride, every dimension of extent > 1 steps over everything the smaller
// ones span.
void check_no_overlap(std::string_view name, const TensorView& t) {
  std::vector<int> dims;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] > 1) dims.push_back(d);
  }
  // Ties inner dimension first, so that the message names the innermost culprit.
  std::sort(dims.begin(), dims.end(), [&](int a, int b) {
    return t.stride[a] != t.stride[b] ? t.stride[a] < t.stride[b] : a > b;
  });
  __int128 span = 1;
  for (const int d : dims) {
    if (t.stride[d] < span) {
      throw_field_error(
          fmt::format("{}.stride[{}]", name, d), std::to_string(t.stride[d]),
          fmt::format("{} (the output {} is written, so its elements must not overlap)",
                      t.stride[d] == 0 ? std::string("a nonzero stride")
                                       : fmt::format("at least {}", static_cast<long long>(span)),
                      name));
    }
    span += static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
  }
}

void check_row_layout(std::string_view name, const TensorView& t) {
  if (t.stride[t.rank - 1] != 1) {
    throw_field_error(fmt::format("{}.stride[{}]", name, t.rank - 1),
                      std::to_string(t.stride[t.rank - 1]), "1 (the head dim must be contiguous)");
  }
  const std::int64_t row_elements = 16 / element_bytes(t.dtype);
  for (int d = 0; d + 1 < t.rank; ++d) {
    if (t.stride[d] < 0 || t.stride[d] % row_elements != 0) {
      throw_field_error(fmt::format("{}.stride[{}]", name, d), std::to_string(t.stride[d]),
                        fmt::format("a non-negative multiple of {} elements (16-byte aligned rows)",
                                    row_elements));
    }
  }
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
    throw_field_error(fmt::format("{}.data", name), fmt::format("{}", t.data),
                      "a 16-byte aligned address");
  }
  check_span(name, t);
}

void check_cache_type(std::string_view name, const TensorView& t, const AttentionSpec& spec) {
  if (!spec.kv_dtype || t.data == nullptr) return;
  const ScalarType type = input_type(*spec.kv_dtype);
  if (t.dtype != type) {
    throw_field_error(fmt::format("{}.dtype", name), name_of(t.dtype),
                      fmt::format("{} (the spec's kv_dtype: the cache's type)", name_of(type)));
  }
}

namespace {

// The names of an activation's first three dims in messages, e.g. {"batch", "seqlen_q", "heads"}.
struct DimNames {
  std::string_view batch, seqlen, heads;
};

// q/k/v/o: 16-bit, rank 4, extents in range, last dim contiguous, 16-byte rows, given head
// dim.
void check_padded(std::string_view name, const TensorView& t, ScalarType dtype, int head_dim,
                  DimNames dims) {
  check_activation(
      name, t, dtype, head_dim,
      {{dims.batch, kMaxGridYZ}, {dims.seqlen, INT32_MAX / 2}, {dims.heads, kMaxGridYZ}},
      "4 ([batch, seq, heads, head_dim])");
}

}  // namespace

void check_activation(std::string_view name, const TensorView& t, ScalarType dtype, int head_dim,
                      std::initializer_list<LeadingDim> dims, std::string_view rank_text) {
  if (t.data == nullptr)
    throw Error(fmt::format("{}: data is null; accepted: a device pointer", name));
  if (t.dtype != dtype) {
    throw_field_error(fmt::format("{}.dtype", name), name_of(t.dtype),
                      fmt::format("{} (the spec's dtype)", name_of(dtype)));
  }
  const int rank = static_cast<int>(dims.size()) + 1;
  if (t.rank != rank) {
    throw_field_error(fmt::format("{}.rank", name), std::to_string(t.rank), rank_text);
  }
  // The extents come before the strides: a batch of 2^40 is the batch's fault, not the
  // stride's whose span it makes too large.
  int d = 0;
  for (const LeadingDim& dim : dims) {
    check_int_range(fmt::format("{}.shape[{}] ({})", name, d, dim.name), t.shape[d], dim.max);
    ++d;
  }
  if (t.shape[d] != head_dim) {
    throw_field_error(fmt::format("{}.shape[{}]", name, d), std::to_string(t.shape[d]),
                      fmt::format("{} (the spec's head dim)", head_dim));
  }
  check_row_layout(name, t);
}

void check_packed_lse(const TensorView& lse, std::int64_t heads, std::int64_t total_q,
                      std::string_view why) {
  if (lse.dtype != ScalarType::fp32) throw_field_error("lse.dtype", name_of(lse.dtype), "fp32");
  if (lse.rank != 2) {
    throw_field_error("lse.rank", std::to_string(lse.rank),
                      fmt::format("2 ([heads, total_q]: {})", why));
  }
  check_same("lse.shape[0] (heads)", lse.shape[0], heads, "heads of q");
  check_same("lse.shape[1] (total_q)", lse.shape[1], total_q, "total_q of q");
  if (lse.stride[1] != 1) throw_field_error("lse.stride[1]", std::to_string(lse.stride[1]), "1");
}

void check_same(std::string_view field, std::int64_t got, std::int64_t expected,
                std::string_view what) {
  if (got != expected) {
    throw_field_error(field, std::to_string(got), fmt::format("{} ({})", expected, what));
  }
}

ScalarType input_type(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return ScalarType::bf16;
    case DType::e4m3:
      return ScalarType::e4m3;
    case DType::fp16:
      break;
  }
  return ScalarType::fp16;
}

ScalarType output_type(DType dtype) {
  return dtype == DType::e4m3 ? ScalarType::bf16 : input_type(dtype);
}

template <class Args>
Shapes check_args(const AttentionSpec& spec, const Args& a, bool lse_required) {
  const ScalarType dtype = input_type(spec.dtype);
  check_padded("q", a.q, dtype, spec.head_dim_qk, {"batch", "seqlen_q", "heads"});
  // A cache of kv_dtype (an FP8 KV cache under 16-bit queries) or of dtype.
  const ScalarType kv_dtype = input_type(spec.kv_dtype.value_or(spec.dtype));
  check_cache_type("k", a.k, spec);
  check_cache_type("v", a.v, spec);
  const bool paged = spec.kv_cache == KvCache::paged;
  if (paged) {
    // A page pool: its pages are not a grid dimension, its page size is at most the capacity.
    for (const auto& [name, t, dim] :
         {std::tuple{"k", &a.k, spec.head_dim_qk}, std::tuple{"v", &a.v, spec.head_dim_v}}) {
      check_activation(name, *t, kv_dtype, dim,
                       {{"num_pages", INT32_MAX}, {"page_size", 1 << 20}, {"kv heads", kMaxGridYZ}},
                       "4 ([num_pages, page_size, kv heads, head_dim])");
    }
  } else {
    check_padded("k", a.k, kv_dtype, spec.head_dim_qk, {"batch", "seqlen_k", "kv heads"});
    check_padded("v", a.v, kv_dtype, spec.head_dim_v, {"batch", "seqlen_k", "kv heads"});
  }
  check_padded("o", a.o, output_type(spec.dtype), spec.head_dim_v, {"batch", "seqlen_q", "heads"});
  Shapes s;
  s.batch = static_cast<int>(a.q.shape[0]);
  s.seqlen_q = static_cast<int>(a.q.shape[1]);
  s.heads = static_cast<int>(a.q.shape[2]);
  s.seqlen_k = static_cast<int>(a.k.shape[1]);
  s.kv_heads = static_cast<int>(a.k.shape[2]);
  if (!paged) check_same("k.shape[0]", a.k.shape[0], s.batch, "batch of q");
  check_same("v.shape[0]", a.v.shape[0], paged ? a.k.shape[0] : s.batch,
             paged ? "pages of k" : "batch of q");
  check_same("v.shape[1]", a.v.shape[1], s.seqlen_k, paged ? "page size of k" : "seqlen of k");
  check_same("v.shape[2]", a.v.shape[2], s.kv_heads, "heads of k");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0) {
    throw_field_error("k.shape[2] (kv heads)", std::to_string(s.kv_heads),
                      fmt::format("a divisor of the {} query heads (GQA/MQA)", s.heads));
  }
  check_same("o.shape[0]", a.o.shape[0], s.batch, "batch of q");
  check_same("o.shape[1]", a.o.shape[1], s.seqlen_q, "seqlen of q");
  check_same("o.shape[2]", a.o.shape[2], s.heads, "heads of q");
  constexpr bool backward = std::is_same_v<Args, BackwardArgs>;
  // Ragged new tokens (KvCacheArgs::cu_seqlens_q): o and lse were checked in their packed
  // shapes (ragged_as_batch); their padded views share rows by design (batch stride 0).
  bool ragged = false;
  if constexpr (!backward) {
    ragged = !a.kv_cache.cu_seqlens_q.empty();
    if (!ragged) check_no_overlap("o", a.o);
    check_kv_cache(spec, a, s);
  }
  if constexpr (backward) {
    for (const auto& [name, t, like_name, like] :
         {std::tuple{"d_q", &a.d_q, "q", &a.q}, std::tuple{"d_k", &a.d_k, "k", &a.k},
          std::tuple{"d_v", &a.d_v, "v", &a.v}}) {
      check_same_layout(name, *t, like_name, *like);
      check_no_overlap(name, *t);
    }
  }

  if (lse_required) {
    const TensorView& l = a.lse;
    if (l.data == nullptr) {
      throw Error(
          "lse: missing; accepted: an fp32 [batch, heads, seqlen_q] tensor (the forward writes "
          "it with return_lse=true; the backward reads it)");
    }
    if (l.dtype != ScalarType::fp32) throw_field_error("lse.dtype", name_of(l.dtype), "fp32");
    if (l.rank != 3)
      throw_field_error("lse.rank", std::to_string(l.rank), "3 ([batch, heads, seqlen_q])");
    check_same("lse.shape[0]", l.shape[0], s.batch, "batch of q");
    check_same("lse.shape[1]", l.shape[1], s.heads, "heads of q");
    check_same("lse.shape[2]", l.shape[2], s.seqlen_q, "seqlen of q");
    if (l.stride[2] != 1) throw_field_error("lse.stride[2]", std::to_string(l.stride[2]), "1");
    check_span("lse", l);
    if (!ragged) check_no_overlap("lse", l);
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
          fmt::format("startend_row_indices: missing; accepted: for mask={} an int32 [batch, "
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
    check_same(
        "startend_row_indices.shape[2]", m.shape[2], s.seqlen_k,
        spec.kv_cache == KvCache::none ? "seqlen of k" : "the cache's capacity: a row per key");
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
  check_score_mod_args(spec, a, s.heads);
  return s;
}

template Shapes check_args<ForwardArgs>(const AttentionSpec&, const ForwardArgs&, bool);
template Shapes check_args<BackwardArgs>(const AttentionSpec&, const BackwardArgs&, bool);

namespace {

// How the messages of check_head_vector name a tensor of one fp32 value per query head.
struct HeadVector {
  std::string_view name;  ///< the field, e.g. `alibi_slopes`
  std::string_view flag;  ///< the spec's key that asks for it, e.g. `alibi`
  std::string_view what;  ///< what its values are, e.g. `one slope per query head`
  std::string_view why;   ///< what compiling with the flag would do, e.g. `to add the bias`
};

// `t` (an fp32 [heads] tensor, contiguous, 4-byte aligned) when the spec's flag is set, else
// absent. Throws Error naming the field, the value and what is accepted.
void check_head_vector(const HeadVector& v, bool wanted, const TensorView& t, int heads) {
  if (!wanted) {
    if (!t.empty()) {
      throw Error(fmt::format(
          "{0}: given, but the spec has {1}=false; accepted: no {0} (compile with {1}=true {2})",
          v.name, v.flag, v.why));
    }
    return;
  }
  if (t.data == nullptr) {
    throw Error(
        fmt::format("{}: missing; accepted: for {}=true an fp32 [{}] tensor ({}) in device memory",
                    v.name, v.flag, heads, v.what));
  }
  if (t.dtype != ScalarType::fp32)
    throw_field_error(fmt::format("{}.dtype", v.name), name_of(t.dtype), "fp32");
  if (t.rank != 1) {
    throw_field_error(fmt::format("{}.rank", v.name), std::to_string(t.rank),
                      fmt::format("1 ([heads], {})", v.what));
  }
  check_same(fmt::format("{}.shape[0]", v.name), t.shape[0], heads, "heads of q");
  if (t.shape[0] > 1 && t.stride[0] != 1) {
    throw_field_error(fmt::format("{}.stride[0]", v.name), std::to_string(t.stride[0]),
                      "1 (the tensor must be contiguous)");
  }
  if (reinterpret_cast<std::uintptr_t>(t.data) % 4 != 0) {
    throw_field_error(fmt::format("{}.data", v.name), fmt::format("{}", t.data),
                      "a 4-byte aligned address");
  }
}

}  // namespace

template <class Args>
void check_score_mod_args(const AttentionSpec& spec, const Args& a, int heads) {
  if (spec.softcap) {
    if (!(a.softcap > 0.f) || !std::isfinite(a.softcap)) {
      throw_field_error("softcap", fmt::format("{}", a.softcap),
                        "a finite value > 0 (the spec has softcap=true)");
    }
  } else if (a.softcap != 0.f) {
    throw_field_error("softcap", fmt::format("{}", a.softcap),
                      "0 (the spec has softcap=false; compile with softcap=true to cap scores)");
  }
  check_head_vector({"alibi_slopes", "alibi", "one slope per query head", "to add the bias"},
                    spec.alibi, a.alibi_slopes, heads);
  check_head_vector({"sinks", "sinks", "one sink logit per query head", "to add sink logits"},
                    spec.sinks, a.sinks, heads);
  if constexpr (std::is_same_v<Args, BackwardArgs>) {
    constexpr std::string_view kGradient =
        "the sinks' gradient, one per query head, written by the backward";
    check_head_vector({"d_sinks", "sinks", kGradient, "to return the sinks' gradient"}, spec.sinks,
                      a.d_sinks, heads);
  }
}

template void check_score_mod_args<ForwardArgs>(const AttentionSpec&, const ForwardArgs&, int);
template void check_score_mod_args<BackwardArgs>(const AttentionSpec&, const BackwardArgs&, int);

void check_same_layout(std::string_view name, const TensorView& t, std::string_view like_name,
                       const TensorView& like) {
  if (t.data == nullptr) {
    throw Error(fmt::format("{}: data is null; accepted: a device pointer", name));
  }
  if (t.dtype != like.dtype) {
    throw_field_error(fmt::format("{}.dtype", name), name_of(t.dtype),
                      fmt::format("{} (that of {})", name_of(like.dtype), like_name));
  }
  if (t.rank != like.rank) {
    throw_field_error(fmt::format("{}.rank", name), std::to_string(t.rank),
                      fmt::format("{} (that of {})", like.rank, like_name));
  }
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] != like.shape[d]) {
      throw_field_error(fmt::format("{}.shape[{}]", name, d), std::to_string(t.shape[d]),
                        fmt::format("{} (that of {})", like.shape[d], like_name));
    }
  }
  check_row_layout(name, t);
}

namespace {

int extent(std::string_view tensor, const TensorView& t, int dim) {
  if (t.shape[dim] < 0 || t.shape[dim] > INT32_MAX) {
    throw_field_error(fmt::format("{}.shape[{}]", tensor, dim), std::to_string(t.shape[dim]),
                      "0 to 2147483647");
  }
  return static_cast<int>(t.shape[dim]);
}

// launch_shapes' sizes of q and k (and a ragged decode launch's boundaries).
template <class Args>
Shapes activation_shapes(const Args& a, VarlenMode varlen) {
  const bool packed = varlen != VarlenMode::off;
  if constexpr (std::is_same_v<Args, ForwardArgs>) {
    // Ragged new tokens of a decode launch: q [total_q, heads, dim], B + 1 boundaries.
    const KvCacheArgs& c = a.kv_cache;
    if (c.cu_seqlens_q.rank == 1 && a.q.rank == 3 && a.k.rank == 4) {
      Shapes s;
      s.batch = std::max(extent("kv_cache.cu_seqlens_q", c.cu_seqlens_q, 0) - 1, 0);
      s.seqlen_q = c.max_seqlen_q;
      s.heads = extent("q", a.q, 1);
      s.seqlen_k = extent("k", a.k, 1);
      s.kv_heads = extent("k", a.k, 2);
      return s;
    }
  }
  for (const auto& [name, view, total] :
       {std::tuple<std::string_view, const TensorView&, std::string_view>{"q", a.q, "total_q"},
        std::tuple<std::string_view, const TensorView&, std::string_view>{"k", a.k, "total_k"}}) {
    if (view.rank != (packed ? 3 : 4)) {
      throw_field_error(fmt::format("{}.rank", name), std::to_string(view.rank),
                        packed ? fmt::format("3 ([{}, heads, head_dim]: the spec has varlen={})",
                                             total, name_of(varlen))
                               : std::string("4 ([batch, seq, heads, dim])"));
    }
  }
  Shapes s;
  const int rows = packed ? 0 : 1;  // a packed batch has no batch dim: [total, heads, dim]
  s.batch = packed ? 1 : extent("q", a.q, 0);
  s.seqlen_q = extent("q", a.q, rows);
  s.heads = extent("q", a.q, rows + 1);
  s.seqlen_k = extent("k", a.k, rows);
  s.kv_heads = extent("k", a.k, rows + 1);
  return s;
}

}  // namespace

template <class Args>
Shapes launch_shapes(const Args& a, VarlenMode varlen) {
  Shapes s = activation_shapes(a, varlen);
  if (a.startend_row_indices.rank == 4) {
    s.mask_heads = extent("startend_row_indices", a.startend_row_indices, 1);
  }
  return s;
}

template Shapes launch_shapes(const ForwardArgs&, VarlenMode);
template Shapes launch_shapes(const BackwardArgs&, VarlenMode);

void check_workspace(const Workspace& workspace, std::size_t needed) {
  if (workspace.data == nullptr) {
    throw_field_error("workspace.data", "null",
                      fmt::format("a device pointer to {} bytes, or an empty workspace (bytes=0) "
                                  "for stream-ordered scratch memory",
                                  workspace.bytes));
  }
  if (reinterpret_cast<std::uintptr_t>(workspace.data) % 256 != 0) {
    throw_field_error("workspace.data", fmt::format("{}", workspace.data),
                      "a 256-byte aligned device pointer");
  }
  if (workspace.bytes < needed) {
    throw_field_error(
        "workspace.bytes", std::to_string(workspace.bytes),
        fmt::format("at least {} bytes for these shapes (Kernel::workspace_size)", needed));
  }
}

StreamScratch::StreamScratch(std::size_t bytes, CUstream stream) : stream_(stream) {
  runtime::check(runtime::driver().cuMemAllocAsync(&ptr_, std::max<std::size_t>(bytes, 4), stream),
                 "cuMemAllocAsync(attnjit scratch)");
}

StreamScratch::~StreamScratch() {
  if (const runtime::DriverApi* driver = runtime::detail::driver_for_cleanup()) {
    driver->cuMemFreeAsync(ptr_, stream_);
  }
}

void fill_descales(FwdParams& p, const AttentionSpec& spec, const ForwardArgs& a, const Shapes& s) {
  const std::pair<const char*, const TensorView*> descales[3] = {
      {"q_descale", &a.q_descale}, {"k_descale", &a.k_descale}, {"v_descale", &a.v_descale}};
  const float* bound[3] = {nullptr, nullptr, nullptr};
  p.descale_per_tensor = 0;
  p.descale_rows = 0;
  // An FP8 KV cache (kv_dtype=e4m3) has K's and V's factors; its queries are 16-bit.
  const bool fp8_cache = spec.kv_dtype == DType::e4m3;
  // A packed batch's factors are per sequence (its launch's batch is one packed row).
  const bool packed = spec.varlen != VarlenMode::off;
  const std::int64_t rows = packed ? sequences(a.varlen) : s.batch;
  for (int i = 0; i < 3; ++i) {
    const auto& [name, t] = descales[i];
    if (t->empty()) continue;
    if (spec.dtype != DType::e4m3 && !(fp8_cache && i > 0)) {
      throw_field_error(name,
                        fmt::format("given with dtype={}{}", name_of(spec.dtype),
                                    fp8_cache ? " kv_dtype=e4m3" : ""),
                        fp8_cache ? "empty (the queries are not quantized: k_descale and "
                                    "v_descale apply to the e4m3 cache)"
                                  : "empty (descale factors apply to dtype=e4m3 and to "
                                    "kv_dtype=e4m3 caches' k and v)");
    }
    if (t->dtype != ScalarType::fp32) {
      throw_field_error(fmt::format("{}.dtype", name), name_of(t->dtype), "fp32");
    }
    const bool one = t->rank == 1 && t->shape[0] == 1;
    const bool per_head = t->rank == 2 && t->shape[0] == rows && t->shape[1] == s.kv_heads &&
                          t->stride[1] == 1 && t->stride[0] == s.kv_heads;
    if (!one && !per_head) {
      throw_field_error(
          fmt::format("{}.shape", name),
          fmt::format("[{}]", fmt::join(t->shape.begin(), t->shape.begin() + t->rank, ", ")),
          fmt::format("[{}, {}] contiguous ({}, kv heads) or [1]", rows, s.kv_heads,
                      packed ? "sequences" : "batch"));
    }
    if (t->data == nullptr || reinterpret_cast<std::uintptr_t>(t->data) % 4 != 0) {
      throw_field_error(fmt::format("{}.data", name), fmt::format("{}", t->data),
                        "a 4-byte aligned device pointer");
    }
    bound[i] = static_cast<const float*>(t->data);
    if (one) p.descale_per_tensor |= 1 << i;
    if (packed && !one) p.descale_rows = 1;
  }
  p.q_descale = bound[0];
  p.k_descale = bound[1];
  p.v_descale = bound[2];
}

}  // namespace attnjit::jit::detail
