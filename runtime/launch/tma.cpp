// Encoding TMA tensor maps on the host: the boxes the plan gives, over the tensors of a launch.
#include "runtime/launch/tma.hpp"

#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "attnjit/error.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/launch/launch_support.hpp"

namespace attnjit::runtime {
namespace {

CUtensorMapSwizzle swizzle_of(const char* what, int bytes) {
  switch (bytes) {
    case 0:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      break;
  }
  throw InternalError(fmt::format("{}: swizzle of {} bytes", what, bytes));
}

}  // namespace

TensorMap encode_tensor_map(const char* what, const void* base, ScalarType element,
                            const TensorMapShape& shape) {
  internal_check(element != ScalarType::int32, "tensor maps of fp16, bf16 or fp32");
  internal_check(shape.rank >= 1 && shape.rank <= 5, "tensor map rank 1 to 5");
  if (reinterpret_cast<std::uintptr_t>(base) % 16 != 0) {
    throw_field_error(fmt::format("{}.data", what), fmt::format("{}", base),
                      "a 16-byte aligned address (TMA copies)");
  }
  for (int d = 0; d + 1 < shape.rank; ++d) {
    if (shape.stride_bytes[d] % 16 != 0 || shape.stride_bytes[d] >= (std::uint64_t{1} << 40)) {
      throw_field_error(fmt::format("{} stride {} (bytes)", what, d + 1),
                        std::to_string(shape.stride_bytes[d]),
                        "a multiple of 16 below 2^40 (TMA copies)");
    }
  }
  const std::uint32_t inner_bytes = shape.box[0] * (element == ScalarType::fp32 ? 4 : 2);
  internal_check(inner_bytes % 16 == 0 && (shape.swizzle_bytes == 0 ||
                                           inner_bytes <= std::uint32_t(shape.swizzle_bytes)),
                 "the inner box spans whole 16-byte chunks within the swizzle");
  cuuint64_t dims[5];
  cuuint64_t strides[4];
  cuuint32_t box[5];
  cuuint32_t element_strides[5];
  for (int d = 0; d < shape.rank; ++d) {
    internal_check(shape.box[d] >= 1 && shape.box[d] <= 256, "TMA boxes span 1 to 256 elements");
    // An empty extent (never copied from: the kernels return first) still needs a valid map.
    dims[d] = shape.dims[d] > 0 ? shape.dims[d] : 1;
    box[d] = shape.box[d];
    element_strides[d] = 1;
    if (d + 1 < shape.rank) strides[d] = shape.stride_bytes[d];
  }
  CUtensorMap map;
  check(driver().cuTensorMapEncodeTiled(
            &map,
            element == ScalarType::fp32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
            : element == ScalarType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                          : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            static_cast<cuuint32_t>(shape.rank), const_cast<void*>(base), dims, strides, box,
            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_of(what, shape.swizzle_bytes),
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        fmt::format("cuTensorMapEncodeTiled({})", what));
  static_assert(sizeof(CUtensorMap) == sizeof(TensorMap) && alignof(TensorMap) == 64,
                "TensorMap mirrors CUtensorMap");
  TensorMap out;
  std::memcpy(&out, &map, sizeof(out));
  return out;
}

TensorMap activation_tensor_map(const char* what, const TensorView& t, int rows, int cols,
                                int swizzle_bytes) {
  internal_check(t.rank == 4 && t.stride[3] == 1, "activations are [B, S, H, D], D contiguous");
  // e4m3 rows are copied as pairs of bytes (the kernels' 8-bit tiles are laid out as 16-bit
  // tiles of half the columns): a 16-bit map of D / 2 columns, `cols` counting pairs.
  const bool pairs = t.dtype == ScalarType::e4m3;
  const std::uint64_t element = t.dtype == ScalarType::fp32 ? 4 : pairs ? 1 : 2;
  TensorMapShape shape;
  shape.rank = 4;
  shape.dims[0] = static_cast<std::uint64_t>(pairs ? t.shape[3] / 2 : t.shape[3]);
  shape.dims[1] = static_cast<std::uint64_t>(t.shape[1]);
  shape.dims[2] = static_cast<std::uint64_t>(t.shape[2]);
  shape.dims[3] = static_cast<std::uint64_t>(t.shape[0]);
  shape.stride_bytes[0] = static_cast<std::uint64_t>(t.stride[1]) * element;
  shape.stride_bytes[1] = static_cast<std::uint64_t>(t.stride[2]) * element;
  shape.stride_bytes[2] = static_cast<std::uint64_t>(t.stride[0]) * element;
  shape.box[0] = static_cast<std::uint32_t>(cols);
  shape.box[1] = static_cast<std::uint32_t>(rows);
  shape.box[2] = 1;
  shape.box[3] = 1;
  shape.swizzle_bytes = swizzle_bytes;
  // The pairs' map moves 16-bit elements: bf16's type (TMA copies bits; boxes past the tensor
  // read as zeros either way).
  return encode_tensor_map(what, t.data, pairs ? ScalarType::bf16 : t.dtype, shape);
}

TensorMap activation_tensor_map(const char* what, const TensorView& t, int rows, int panel_cols) {
  // e4m3: panel_cols counts pairs of bytes.
  const int element = t.dtype == ScalarType::fp32 ? 4 : 2;
  return activation_tensor_map(what, t, rows, panel_cols, panel_cols * element);
}

}  // namespace attnjit::runtime

namespace attnjit::jit::detail {

namespace {

// A [B, S, H, D] view of one tensor of a parameter block.
TensorView activation_view(ScalarType dtype, const void* data, int batch, int seqlen, int heads,
                           int dim, long long batch_stride, long long row_stride,
                           long long head_stride) {
  TensorView t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.rank = 4;
  t.shape = {batch, seqlen, heads, dim};
  t.stride = {batch_stride, row_stride, head_stride, 1};
  return t;
}

// A contiguous fp32 buffer [B, H, S, D] (the dQ accumulator, GQA's dK and dV sums) viewed as
// [B, S, H, D].
TensorView fp32_head_major_view(float* data, int batch, int seqlen, int heads, int dim) {
  TensorView t;
  t.data = data;
  t.dtype = ScalarType::fp32;
  t.rank = 4;
  t.shape = {batch, seqlen, heads, dim};
  const long long row = dim;
  t.stride = {row * seqlen * heads, row, row * seqlen, 1};
  return t;
}

// The view of map_view's tensor in `p` (a forward or a backward parameter block): head_dim_qk
// wide for q, k, d_k and the dQ and dK buffers, head_dim_v for the others.
template <class Params>
std::optional<TensorView> map_view(const Params& p, const AttentionSpec& spec, MapTensor tensor) {
  const ScalarType dtype = input_type(spec.dtype);
  const int head_dim_qk = spec.head_dim_qk;
  const int head_dim_v = spec.head_dim_v;
  switch (tensor) {
    case MapTensor::q:
      return activation_view(dtype, p.q, p.batch, p.seqlen_q, p.heads, head_dim_qk,
                             p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    case MapTensor::k:
      return activation_view(dtype, p.k, p.batch, p.seqlen_k, p.kv_heads, head_dim_qk,
                             p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    case MapTensor::v:
      return activation_view(dtype, p.v, p.batch, p.seqlen_k, p.kv_heads, head_dim_v,
                             p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    default:
      break;
  }
  if constexpr (std::is_same_v<Params, FwdParams>) {
    if (tensor == MapTensor::o) {
      return activation_view(output_type(spec.dtype), p.o, p.batch, p.seqlen_q, p.heads, head_dim_v,
                             p.o_batch_stride, p.o_row_stride, p.o_head_stride);
    }
  } else {
    switch (tensor) {
      case MapTensor::d_o:
        return activation_view(dtype, p.d_o, p.batch, p.seqlen_q, p.heads, head_dim_v,
                               p.do_batch_stride, p.do_row_stride, p.do_head_stride);
      case MapTensor::dq_accum:
        internal_check(p.dq_accum != nullptr || p.seqlen_q == 0 || p.batch == 0 || p.heads == 0,
                       "the dQ accumulator is bound before its map");
        return fp32_head_major_view(p.dq_accum, p.batch, p.seqlen_q, p.heads, head_dim_qk);
      case MapTensor::d_k:
        return activation_view(dtype, p.d_k, p.batch, p.seqlen_k, p.kv_heads, head_dim_qk,
                               p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
      case MapTensor::d_v:
        return activation_view(dtype, p.d_v, p.batch, p.seqlen_k, p.kv_heads, head_dim_v,
                               p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
      case MapTensor::dk_sum:
        if (p.dk_partial == nullptr) return std::nullopt;
        return fp32_head_major_view(p.dk_partial, p.batch, p.seqlen_k, p.kv_heads, head_dim_qk);
      case MapTensor::dv_sum:
        if (p.dv_partial == nullptr) return std::nullopt;
        return fp32_head_major_view(p.dv_partial, p.batch, p.seqlen_k, p.kv_heads, head_dim_v);
      default:
        break;
    }
  }
  throw InternalError(fmt::format("no {} map in this kernel's tensor maps", name_of(tensor)));
}

// The field of `maps` that holds the map of `tensor` (map_view has checked that it has one).
template <class Maps>
TensorMap& map_field(Maps& maps, MapTensor tensor) {
  switch (tensor) {
    case MapTensor::q:
      return maps.q;
    case MapTensor::k:
      return maps.k;
    case MapTensor::v:
      return maps.v;
    default:
      break;
  }
  if constexpr (std::is_same_v<Maps, FwdTensorMaps>) {
    return maps.o;
  } else {
    switch (tensor) {
      case MapTensor::d_o:
        return maps.d_o;
      case MapTensor::dq_accum:
        return maps.dq_accum;
      case MapTensor::d_k:
        return maps.d_k;
      case MapTensor::d_v:
        return maps.d_v;
      case MapTensor::dk_sum:
        return maps.dk_sum;
      default:
        return maps.dv_sum;
    }
  }
}

// A box of a paged cache's key block (TensorMapBox::page_rows): K or V viewed as the pool
// [num_pages, page_size, Hkv, D], the box a page's rows where a page holds fewer than the
// block's largest power-of-two divisor (forward_producer.cuh's kPageBoxRows), which copies the
// block as several boxes.
template <class Params>
void view_pages(const Params& p, TensorView& view, int& rows) {
  if constexpr (std::is_same_v<Params, FwdParams>) {
    const KvCacheInputs& c = p.kv_cache;
    internal_check(c.block_table != nullptr, "page boxes map a paged cache");
    view.shape[0] = c.num_pages;
    view.shape[1] = std::int64_t{1} << c.page_shift;
    rows = std::min(rows & -rows, 1 << c.page_shift);
  } else {
    throw InternalError("page boxes are the forward's");
  }
}

// Ragged new tokens over a KV cache (the prefill kernel): q and o, viewed per sequence with
// batch stride 0, as the one sequence of their total_q packed rows that they are.
template <class Params>
void view_packed_rows(const Params& p, MapTensor tensor, TensorView& view) {
  if constexpr (std::is_same_v<Params, FwdParams>) {
    if (p.kv_cache.total_q <= 0 || (tensor != MapTensor::q && tensor != MapTensor::o)) return;
    view.shape[0] = 1;
    view.shape[1] = p.kv_cache.total_q;
    view.stride[0] = std::int64_t{p.kv_cache.total_q} * view.stride[1];
  }
}

template <class Maps, class Params>
Maps encode_maps(const Params& p, const AttentionSpec& spec, std::span<const TensorMapBox> boxes) {
  Maps maps{};
  for (const TensorMapBox& box : boxes) {
    std::optional<TensorView> view = map_view(p, spec, box.tensor);
    if (!view) continue;
    view_packed_rows(p, box.tensor, *view);
    int rows = box.rows;
    if (box.page_rows) view_pages(p, *view, rows);
    // name_of's views are of string literals, so data() is a C string.
    map_field(maps, box.tensor) = runtime::activation_tensor_map(name_of(box.tensor).data(), *view,
                                                                 rows, box.cols, box.swizzle_bytes);
  }
  return maps;
}

}  // namespace

std::optional<TensorView> forward_map_view(const FwdParams& p, const AttentionSpec& spec,
                                           MapTensor tensor) {
  return map_view(p, spec, tensor);
}

std::optional<TensorView> backward_map_view(const BwdParams& p, const AttentionSpec& spec,
                                            MapTensor tensor) {
  return map_view(p, spec, tensor);
}

FwdTensorMaps forward_tensor_maps(const FwdParams& p, const AttentionSpec& spec,
                                  std::span<const TensorMapBox> boxes) {
  return encode_maps<FwdTensorMaps>(p, spec, boxes);
}

BwdTensorMaps backward_tensor_maps(const BwdParams& p, const AttentionSpec& spec,
                                   std::span<const TensorMapBox> boxes) {
  return encode_maps<BwdTensorMaps>(p, spec, boxes);
}

}  // namespace attnjit::jit::detail
