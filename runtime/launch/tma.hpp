// TMA tensor maps encoded on the host (cuTensorMapEncodeTiled through the dlopen'ed driver)
// for the kernels that copy with TMA (templates/attnjit/sm90a/tma.cuh), and the maps of the sm90a
// forward and backward kernels.
#pragma once

#include <cstdint>

#include "attnjit/jit.hpp"
#include "attnjit/common/params.cuh"

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
/// with a box of `panel_cols` columns x `rows` rows of one (head, batch), swizzled by the
/// box's row bytes: for 16-bit elements one panel of the SmemTile layout (smem_tile.cuh;
/// 128-byte swizzle for 64 columns, 64-byte for 32); fp32 boxes of 32 columns (128 bytes).
TensorMap activation_tensor_map(const char* what, const TensorView& t, int rows, int panel_cols);

}  // namespace attnjit::runtime

namespace attnjit::jit::detail {

/// The tensor maps of the sm90a forward kernel (FwdTensorMaps: q boxes of block_m rows, k and
/// v of block_n, o of the 64 rows of a consumer warpgroup) for the tensors of `p`, whose last
/// dimensions are head_dim_qk (q, k) and head_dim_v (v, o).
FwdTensorMaps forward_tensor_maps(const FwdParams& p, DType dtype, int head_dim_qk, int head_dim_v,
                                  int block_m, int block_n);

/// The tensor maps of the sm90a backward kernel (BwdTensorMaps: q and d_o boxes of block_m
/// rows, k and v of block_n, the fp32 dQ accumulator boxes of 32 columns x block_m rows, d_k
/// and d_v of 64 rows, under GQA the fp32 dK and dV sums boxes of 32 columns x 64 rows) for the
/// tensors of `p`, whose last dimension is head_dim; p.dq_accum (and under GQA dk_partial and
/// dv_partial) are bound.
BwdTensorMaps backward_tensor_maps(const BwdParams& p, DType dtype, int head_dim, int block_m,
                                   int block_n);

}  // namespace attnjit::jit::detail
