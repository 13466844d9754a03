// Warpgroup MMA (wgmma, sm_90a only) on the swizzled shared tiles of smem_tile.cuh.
//
// An SmemTile whose width is a multiple of 64 is the 128-byte-swizzle canonical layout the
// tensor cores address through matrix descriptors: 64-column panels of 128-byte rows, each
// 16-byte chunk at chunk ^ (row % 8), tile bases 1024-byte aligned (base offset 0). A tile
// is read either
//   K-major (the reduction runs along the row, as K and Q in S^T = K Q^T): SBO = 1024 bytes
//   between 8-row groups; a k16 step moves 32 bytes inside the row, four steps per panel;
//   MN-major (the reduction runs down the rows, as dO in dV = P^T dO): transposed operand,
//   LBO = the distance between 64-column panels, SBO = 1024; a k16 step moves 16 rows.
// Accumulators: fp32 d[kN / 8][4] per thread, d[nt][e] at row 16 * (warp % 4) + lane / 4 +
// 8 * (e / 2) and column 8 nt + 2 (lane % 4) + e % 2 of the warpgroup's m64 x kN tile: the
// mma.sync m16n8 C layout, kN / 8 tiles side by side. A 16-bit A operand in registers has the
// mma.sync A layout: for k16 step kk of accumulators d of the same m64 tile, the pairs
// {d[2 kk][0, 1], d[2 kk][2, 3], d[2 kk + 1][0, 1], d[2 kk + 1][2, 3]}.
#pragma once

#include "attnjit/primitives.cuh"

namespace attnjit {

typedef unsigned long long u64;

/// Whether Element selects the bf16 forms of wgmma (else f16); a function, so that no
/// constant lands in the PTX of kernels that include this header without using it.
template <class Element>
__device__ constexpr bool is_bf16() {
  return false;
}
template <>
__device__ constexpr bool is_bf16<bf16>() {
  return true;
}

/// Matrix descriptor of a 128-byte-swizzled operand at shared address `address`
/// (lead / stride byte offsets as above).
__device__ __forceinline__ u64 matrix_descriptor(u32 address, u32 lead_bytes, u32 stride_bytes) {
  return static_cast<u64>((address & 0x3FFFF) >> 4) |
         (static_cast<u64>((lead_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((stride_bytes >> 4) & 0x3FFF) << 32) | (static_cast<u64>(1) << 62);
}

/// K-major operand: rows [row0, row0 + 64) (row0 % 8 == 0) of Tile at k16 step kk.
template <class Tile>
__device__ __forceinline__ u64 k_major_descriptor(u32 tile, int row0, int kk) {
  static_assert(Tile::kPanelCols == 64, "128-byte swizzle needs 64-column panels");
  return matrix_descriptor(tile + (kk / 4) * Tile::kPanelBytes + row0 * 128 + (kk % 4) * 32, 16,
                           1024);
}

/// MN-major operand: the columns from 64-column panel `panel` on, rows (the reduction)
/// [16 kk, 16 kk + 16) of Tile.
template <class Tile>
__device__ __forceinline__ u64 mn_major_descriptor(u32 tile, int panel, int kk) {
  static_assert(Tile::kPanelCols == 64, "128-byte swizzle needs 64-column panels");
  return matrix_descriptor(tile + panel * Tile::kPanelBytes + kk * 16 * 128, Tile::kPanelBytes,
                           1024);
}

/// Orders register writes before the wgmma that read them (operands and accumulators).
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

/// Waits until at most kPending committed wgmma groups of this warpgroup are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

/// Makes this thread's ordinary shared-memory stores (and completed cp.async copies) visible
/// to the tensor cores' reads that a following barrier orders after them.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/// Keeps the compiler from moving accesses of accumulators across wgmma_wait: their registers
/// change asynchronously until then.
template <int kTiles>
__device__ __forceinline__ void fence_accumulators(float (&d)[kTiles][4]) {
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[nt][e])::"memory");
  }
}

#define ATTNJIT_ACC4(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define ATTNJIT_ACC16(d, i) \
  ATTNJIT_ACC4(d, i), ATTNJIT_ACC4(d, i + 1), ATTNJIT_ACC4(d, i + 2), ATTNJIT_ACC4(d, i + 3)
#define ATTNJIT_ACC_N64(d) ATTNJIT_ACC16(d, 0), ATTNJIT_ACC16(d, 4)
#define ATTNJIT_ACC_N128(d) \
  ATTNJIT_ACC16(d, 0), ATTNJIT_ACC16(d, 4), ATTNJIT_ACC16(d, 8), ATTNJIT_ACC16(d, 12)
#define ATTNJIT_REGS32                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ATTNJIT_REGS64                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

// Both operands from shared memory: operands after the accumulators are A's descriptor,
// B's, the accumulate flag and the two transpose immediates.
#define ATTNJIT_WGMMA_SS(SHAPE, REGS, IA, IB, IS, ITA, ITB, ...)                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\nwgmma.mma_async.sync.aligned." SHAPE \
               " " REGS ", %" IA ", %" IB ", p, 1, 1, %" ITA ", %" ITB ";\n}\n"                    \
               : __VA_ARGS__                                                                       \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB))

// A from four registers: then its 32-bit registers, B's descriptor, the accumulate flag and
// B's transpose immediate.
#define ATTNJIT_WGMMA_RS(SHAPE, REGS, A, IB, IS, ITB, ...)                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\nwgmma.mma_async.sync.aligned." SHAPE \
               " " REGS ", " A ", %" IB ", p, 1, 1, %" ITB ";\n}\n"                                \
               : __VA_ARGS__                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate),         \
                 "n"(kTransB))

/// d (m64 x kN) = A B (+ d when accumulate), A (m64 x k16) and B (k16 x kN) by descriptor;
/// kTransA / kTransB = 1 for MN-major operands.
template <class Element, int kN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 8][4], u64 desc_a, u64 desc_b,
                                         int accumulate) {
  static_assert(kN == 64 || kN == 128, "m64n64 and m64n128 products");
  if constexpr (kN == 64 && is_bf16<Element>()) {
    ATTNJIT_WGMMA_SS("m64n64k16.f32.bf16.bf16", ATTNJIT_REGS32, "32", "33", "34", "35", "36",
                     ATTNJIT_ACC_N64(d));
  } else if constexpr (kN == 64) {
    ATTNJIT_WGMMA_SS("m64n64k16.f32.f16.f16", ATTNJIT_REGS32, "32", "33", "34", "35", "36",
                     ATTNJIT_ACC_N64(d));
  } else if constexpr (is_bf16<Element>()) {
    ATTNJIT_WGMMA_SS("m64n128k16.f32.bf16.bf16", ATTNJIT_REGS64, "64", "65", "66", "67", "68",
                     ATTNJIT_ACC_N128(d));
  } else {
    ATTNJIT_WGMMA_SS("m64n128k16.f32.f16.f16", ATTNJIT_REGS64, "64", "65", "66", "67", "68",
                     ATTNJIT_ACC_N128(d));
  }
}

/// d (m64 x kN) = A B (+ d when accumulate), A (m64 x k16) in registers (layout above), B
/// (k16 x kN) by descriptor.
template <class Element, int kN, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 8][4], const u32 (&a)[4], u64 desc_b,
                                         int accumulate) {
  static_assert(kN == 64 || kN == 128, "m64n64 and m64n128 products");
  if constexpr (kN == 64 && is_bf16<Element>()) {
    ATTNJIT_WGMMA_RS("m64n64k16.f32.bf16.bf16", ATTNJIT_REGS32, "{%32, %33, %34, %35}", "36", "37",
                     "38", ATTNJIT_ACC_N64(d));
  } else if constexpr (kN == 64) {
    ATTNJIT_WGMMA_RS("m64n64k16.f32.f16.f16", ATTNJIT_REGS32, "{%32, %33, %34, %35}", "36", "37",
                     "38", ATTNJIT_ACC_N64(d));
  } else if constexpr (is_bf16<Element>()) {
    ATTNJIT_WGMMA_RS("m64n128k16.f32.bf16.bf16", ATTNJIT_REGS64, "{%64, %65, %66, %67}", "68", "69",
                     "70", ATTNJIT_ACC_N128(d));
  } else {
    ATTNJIT_WGMMA_RS("m64n128k16.f32.f16.f16", ATTNJIT_REGS64, "{%64, %65, %66, %67}", "68", "69",
                     "70", ATTNJIT_ACC_N128(d));
  }
}

#undef ATTNJIT_WGMMA_RS
#undef ATTNJIT_WGMMA_SS
#undef ATTNJIT_REGS64
#undef ATTNJIT_REGS32
#undef ATTNJIT_ACC_N128
#undef ATTNJIT_ACC_N64
#undef ATTNJIT_ACC16
#undef ATTNJIT_ACC4

}  // namespace attnjit
