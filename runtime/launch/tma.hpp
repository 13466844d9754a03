// TMA tensor maps encoded on the host (cuTensorMapEncodeTiled through the dlopen'ed driver)
// for the kernels that copy with TMA (templates/attnjit/sm90a/tma.cuh): the boxes a kernel's
// plan gives, over the tensors of a launch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "attnjit/common/params.cuh"
#include "attnjit/jit.hpp"
#include "compiler/ir/lowering.hpp"

namespace attnjit::runtime {

/// The shape of one tiled tensor map: up to 5 dimensions, innermost first.
struct TensorMapShape {
  int rank = 0;
  std::uint64_t dims[5] = {};          ///< extents in elements
  std::uint64_t stride_bytes[4] = {};  ///< of dimensions 1 .. rank-1 (dimension 0 is contiguous)
  std::uint32_t box[5] = {};           ///< the box one copy moves, in elements
  int swizzle_bytes = 128;             ///< 128, 64, 32 or 0 (none): the shared-memory pattern
};

/// Encodes a tensor map over `base` of `element`s (fp16, bf16 or fp32), loads past the extents
/// filled with zeros, stores and reductions past them dropped. Throws Error naming `what` when
/// the shape breaks TMA's rules (16-byte aligned base and strides, box <= 256 per dimension,
/// inner box of the swizzle span), DeviceError when the driver refuses it.
TensorMap encode_tensor_map(const char* what, const void* base, ScalarType element,
                            const TensorMapShape& shape);

/// The map of a [B, S, H, D] activation (strides in elements, last one 1) as 4-D (D, S, H, B)
/// with a box of `cols` columns x `rows` rows of one (head, batch), in the shared-memory
/// pattern of `swizzle_bytes`.
TensorMap activation_tensor_map(const char* what, const TensorView& t, int rows, int cols,
                                int swizzle_bytes);

/// The same, swizzled by the box's row bytes: for 16-bit elements one panel of the SmemTile
/// layout (smem_tile.cuh; 128-byte swizzle for 64 columns, 64-byte for 32).
TensorMap activation_tensor_map(const char* what, const TensorView& t, int rows, int panel_cols);

}  // namespace attnjit::runtime

namespace attnjit::jit::detail {

/// The [B, S, H, D] tensor of `p` that a map of `tensor` covers, D being spec.head_dim_qk for
/// q, k, d_k, the dQ accumulator and GQA's dK sums and spec.head_dim_v for v, o, d_o, d_v and
/// GQA's dV sums; none for GQA's sums where they are unbound (the kernel reads their maps only
/// under GQA). Throws InternalError for a tensor that the parameter block has no map of.
std::optional<TensorView> forward_map_view(const FwdParams& p, const AttentionSpec& spec,
                                           MapTensor tensor);
std::optional<TensorView> backward_map_view(const BwdParams& p, const AttentionSpec& spec,
                                            MapTensor tensor);

/// The TMA maps of a forward kernel (FwdTensorMaps), one per box of its plan
/// (KernelDesc::tensor_maps), over forward_map_view's tensors.
FwdTensorMaps forward_tensor_maps(const FwdParams& p, const AttentionSpec& spec,
                                  std::span<const TensorMapBox> boxes);

/// The TMA maps of a backward kernel (BwdTensorMaps), one per box of its plan, over
/// backward_map_view's tensors; p.dq_accum is bound where a box names it.
BwdTensorMaps backward_tensor_maps(const BwdParams& p, const AttentionSpec& spec,
                                   std::span<const TensorMapBox> boxes);

}  // namespace attnjit::jit::detail
