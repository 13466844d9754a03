// Warpgroup MMA (wgmma, sm_90a only) on the swizzled shared tiles of smem_tile.cuh.
//
// An SmemTile whose width is a multiple of 64 is the 128-byte-swizzle canonical layout the
// tensor cores address through matrix descriptors: 64-column panels of 128-byte rows, each
// 16-byte chunk at chunk ^ (row % 8), tile bases 1024-byte aligned (base offset 0); other
// widths (96) are 32-column panels of 64-byte rows in the 64-byte swizzle (chunk ^
// ((row / 2) % 4)), the same reads with halved strides. A tile is read either
//   K-major (the reduction runs along the row, as K and Q in S^T = K Q^T): SBO = 1024 bytes
//   between 8-row groups; a k16 step moves 32 bytes inside the row, four steps per panel;
//   MN-major (the reduction runs down the rows, as dO in dV = P^T dO): transposed operand,
//   LBO = the distance between 64-column panels, SBO = 1024; a k16 step moves 16 rows.
// Accumulators: fp32 d[kN / 8][4] per thread, d[nt][e] at row 16 * (warp % 4) + lane / 4 +
// 8 * (e / 2) and column 8 nt + 2 (lane % 4) + e % 2 of the warpgroup's m64 x kN tile: the
// mma.sync m16n8 C layout, kN / 8 tiles side by side. A 16-bit A operand in registers has the
// mma.sync A layout: for k16 step kk of accumulators d of the same m64 tile, the pairs
// {d[2 kk][0, 1], d[2 kk][2, 3], d[2 kk + 1][0, 1], d[2 kk + 1][2, 3]}.
// e4m3 products (k32 steps) take both operands K-major (no transpose forms): an 8-bit tile is
// laid out as the 16-bit tile of half its columns (SmemTile8), so that a k32 step is the same 32
// bytes of a row as a 16-bit k16 step and the descriptors above serve both. An 8-bit A operand
// in registers has the mma.sync m16n8k32 layout (row g: bytes of columns 4 t .. 4 t + 3 and
// 16 + 4 t .. 19 + 4 t); packed from an fp32 accumulator (pack_e4m3_operand) its positions hold
// keys in the order fp8_operand_key gives, which the B operand's columns must follow.
#pragma once

#include "attnjit/common/primitives.cuh"

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

/// Matrix descriptor of an operand at shared address `address` (lead / stride byte offsets
/// as above) in the swizzle of `row_bytes`-byte panel rows: 128 (64 columns) or 64 (32).
__device__ __forceinline__ u64 matrix_descriptor(u32 address, u32 lead_bytes, u32 stride_bytes,
                                                 int row_bytes = 128) {
  // Layout field (bits 62-63): 1 = 128-byte swizzle, 2 = 64-byte.
  const u64 swizzle = row_bytes == 128 ? 1 : 2;
  return static_cast<u64>((address & 0x3FFFF) >> 4) |
         (static_cast<u64>((lead_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((stride_bytes >> 4) & 0x3FFF) << 32) | (swizzle << 62);
}

/// K-major operand: rows [row0, row0 + 64) (row0 % 8 == 0) of Tile at k16 step kk. A k16
/// step is 32 bytes of a panel row: 4 steps per 128-byte row (64-column panels), 2 per
/// 64-byte row (32-column panels, head dim 96); 8-row groups are 8 rows apart.
template <class Tile>
__device__ __forceinline__ u64 k_major_descriptor(u32 tile, int row0, int kk) {
  constexpr int kRowBytes = Tile::kPanelCols * 2;
  constexpr int kSteps = kRowBytes / 32;
  return matrix_descriptor(
      tile + (kk / kSteps) * Tile::kPanelBytes + row0 * kRowBytes + (kk % kSteps) * 32, 16,
      8 * kRowBytes, kRowBytes);
}

/// MN-major operand: the columns from panel `panel` on, rows (the reduction) [16 kk,
/// 16 kk + 16) of Tile: the next panel's columns are a panel apart (lead), 8-row groups 8
/// rows apart (stride).
template <class Tile>
__device__ __forceinline__ u64 mn_major_descriptor(u32 tile, int panel, int kk) {
  constexpr int kRowBytes = Tile::kPanelCols * 2;
  return matrix_descriptor(tile + panel * Tile::kPanelBytes + kk * 16 * kRowBytes,
                           Tile::kPanelBytes, 8 * kRowBytes, kRowBytes);
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

// The asm operand lists of one product of kN columns: "+f" constraints of the kN / 2
// accumulators (ATTNJIT_ACCS_<kN/2>, two n8 tiles per ATTNJIT_ACC8) and the register list
// "%0, ..., %<kN/2 - 1>" naming them in the instruction (ATTNJIT_REGS_<kN/2>).
#define ATTNJIT_ACC4(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define ATTNJIT_ACC8(d, i) ATTNJIT_ACC4(d, i), ATTNJIT_ACC4(d, i + 1)
#define ATTNJIT_R8_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define ATTNJIT_R8_1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define ATTNJIT_R8_2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define ATTNJIT_R8_3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define ATTNJIT_R8_4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define ATTNJIT_R8_5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define ATTNJIT_R8_6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define ATTNJIT_R8_7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define ATTNJIT_R8_8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define ATTNJIT_R8_9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define ATTNJIT_R8_10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define ATTNJIT_R8_11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define ATTNJIT_R8_12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define ATTNJIT_R8_13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define ATTNJIT_R8_14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define ATTNJIT_R8_15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define ATTNJIT_REGS_8 ATTNJIT_R8_0
#define ATTNJIT_REGS_16 ATTNJIT_REGS_8 ", " ATTNJIT_R8_1
#define ATTNJIT_REGS_24 ATTNJIT_REGS_16 ", " ATTNJIT_R8_2
#define ATTNJIT_REGS_32 ATTNJIT_REGS_24 ", " ATTNJIT_R8_3
#define ATTNJIT_REGS_40 ATTNJIT_REGS_32 ", " ATTNJIT_R8_4
#define ATTNJIT_REGS_48 ATTNJIT_REGS_40 ", " ATTNJIT_R8_5
#define ATTNJIT_REGS_56 ATTNJIT_REGS_48 ", " ATTNJIT_R8_6
#define ATTNJIT_REGS_64 ATTNJIT_REGS_56 ", " ATTNJIT_R8_7
#define ATTNJIT_REGS_72 ATTNJIT_REGS_64 ", " ATTNJIT_R8_8
#define ATTNJIT_REGS_80 ATTNJIT_REGS_72 ", " ATTNJIT_R8_9
#define ATTNJIT_REGS_88 ATTNJIT_REGS_80 ", " ATTNJIT_R8_10
#define ATTNJIT_REGS_96 ATTNJIT_REGS_88 ", " ATTNJIT_R8_11
#define ATTNJIT_REGS_104 ATTNJIT_REGS_96 ", " ATTNJIT_R8_12
#define ATTNJIT_REGS_112 ATTNJIT_REGS_104 ", " ATTNJIT_R8_13
#define ATTNJIT_REGS_120 ATTNJIT_REGS_112 ", " ATTNJIT_R8_14
#define ATTNJIT_REGS_128 ATTNJIT_REGS_120 ", " ATTNJIT_R8_15
#define ATTNJIT_ACCS_8(d) ATTNJIT_ACC8(d, 0)
#define ATTNJIT_ACCS_16(d) ATTNJIT_ACCS_8(d), ATTNJIT_ACC8(d, 2)
#define ATTNJIT_ACCS_24(d) ATTNJIT_ACCS_16(d), ATTNJIT_ACC8(d, 4)
#define ATTNJIT_ACCS_32(d) ATTNJIT_ACCS_24(d), ATTNJIT_ACC8(d, 6)
#define ATTNJIT_ACCS_40(d) ATTNJIT_ACCS_32(d), ATTNJIT_ACC8(d, 8)
#define ATTNJIT_ACCS_48(d) ATTNJIT_ACCS_40(d), ATTNJIT_ACC8(d, 10)
#define ATTNJIT_ACCS_56(d) ATTNJIT_ACCS_48(d), ATTNJIT_ACC8(d, 12)
#define ATTNJIT_ACCS_64(d) ATTNJIT_ACCS_56(d), ATTNJIT_ACC8(d, 14)
#define ATTNJIT_ACCS_72(d) ATTNJIT_ACCS_64(d), ATTNJIT_ACC8(d, 16)
#define ATTNJIT_ACCS_80(d) ATTNJIT_ACCS_72(d), ATTNJIT_ACC8(d, 18)
#define ATTNJIT_ACCS_88(d) ATTNJIT_ACCS_80(d), ATTNJIT_ACC8(d, 20)
#define ATTNJIT_ACCS_96(d) ATTNJIT_ACCS_88(d), ATTNJIT_ACC8(d, 22)
#define ATTNJIT_ACCS_104(d) ATTNJIT_ACCS_96(d), ATTNJIT_ACC8(d, 24)
#define ATTNJIT_ACCS_112(d) ATTNJIT_ACCS_104(d), ATTNJIT_ACC8(d, 26)
#define ATTNJIT_ACCS_120(d) ATTNJIT_ACCS_112(d), ATTNJIT_ACC8(d, 28)
#define ATTNJIT_ACCS_128(d) ATTNJIT_ACCS_120(d), ATTNJIT_ACC8(d, 30)

// Both operands from shared memory: after the accumulators come A's descriptor, B's, the
// accumulate flag and the two transpose immediates (operand numbers IA .. ITB).
#define ATTNJIT_WGMMA_SS(SHAPE, REGS, IA, IB, IS, ITA, ITB, ...)                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\nwgmma.mma_async.sync.aligned." SHAPE \
               " {" REGS "}, %" IA ", %" IB ", p, 1, 1, %" ITA ", %" ITB ";\n}\n"                  \
               : __VA_ARGS__                                                                       \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB))

// A from four registers: then its 32-bit registers (A), B's descriptor, the accumulate flag
// and B's transpose immediate.
#define ATTNJIT_WGMMA_RS(SHAPE, REGS, A, IB, IS, ITB, ...)                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\nwgmma.mma_async.sync.aligned." SHAPE \
               " {" REGS "}, " A ", %" IB ", p, 1, 1, %" ITB ";\n}\n"                              \
               : __VA_ARGS__                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate),         \
                 "n"(kTransB))

// The e4m3 forms: K-major operands only, so no transpose immediates.
#define ATTNJIT_WGMMA_SS8(SHAPE, REGS, IA, IB, IS, ...)                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\nwgmma.mma_async.sync.aligned." SHAPE \
               " {" REGS "}, %" IA ", %" IB ", p, 1, 1;\n}\n"                                      \
               : __VA_ARGS__                                                                       \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
#define ATTNJIT_WGMMA_RS8(SHAPE, REGS, A, IB, IS, ...)                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\nwgmma.mma_async.sync.aligned." SHAPE \
               " {" REGS "}, " A ", %" IB ", p, 1, 1;\n}\n"                                        \
               : __VA_ARGS__                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate))

/// The m64nNk16 products of one N (a multiple of 16 up to 256), both forms, both 16-bit types,
/// and the m64nNk32 e4m3 ones.
/// A kernel's source may define ATTNJIT_WGMMA_SOME_SHAPES and ATTNJIT_WGMMA_N<N> for the N it
/// uses before including this header: the other shapes are not defined (their operand lists
/// take most of the header's parse time).
template <int kN>
struct WgmmaShape;

// I0 .. I6: the operand numbers after the kN / 2 accumulators.
#define ATTNJIT_DEFINE_WGMMA(N, REGS, ACCS, I0, I1, I2, I3, I4, I5, I6)                            \
  template <>                                                                                      \
  struct WgmmaShape<N> {                                                                           \
    template <class Element, int kTransA, int kTransB>                                             \
    __device__ static __forceinline__ void ss(float (&d)[N / 8][4], u64 desc_a, u64 desc_b,        \
                                              int accumulate) {                                    \
      if constexpr (is_e4m3<Element>()) {                                                          \
        static_assert(kTransA == 0 && kTransB == 0, "e4m3 operands are K-major");                  \
        ATTNJIT_WGMMA_SS8("m64n" #N "k32.f32.e4m3.e4m3", REGS, #I0, #I1, #I2, ACCS(d));            \
      } else if constexpr (is_bf16<Element>()) {                                                   \
        ATTNJIT_WGMMA_SS("m64n" #N "k16.f32.bf16.bf16", REGS, #I0, #I1, #I2, #I3, #I4, ACCS(d));   \
      } else {                                                                                     \
        ATTNJIT_WGMMA_SS("m64n" #N "k16.f32.f16.f16", REGS, #I0, #I1, #I2, #I3, #I4, ACCS(d));     \
      }                                                                                            \
    }                                                                                              \
    /* One empty asm naming every accumulator: an ordering point for them. */                      \
    __device__ static __forceinline__ void fence(float (&d)[N / 8][4]) {                           \
      asm volatile("" : ACCS(d)::"memory");                                                        \
    }                                                                                              \
    template <class Element, int kTransB>                                                          \
    __device__ static __forceinline__ void rs(float (&d)[N / 8][4], const u32 (&a)[4], u64 desc_b, \
                                              int accumulate) {                                    \
      if constexpr (is_e4m3<Element>()) {                                                          \
        static_assert(kTransB == 0, "e4m3 operands are K-major");                                  \
        ATTNJIT_WGMMA_RS8("m64n" #N "k32.f32.e4m3.e4m3", REGS,                                     \
                          "{%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}", #I4, #I5, ACCS(d));          \
      } else if constexpr (is_bf16<Element>()) {                                                   \
        ATTNJIT_WGMMA_RS("m64n" #N "k16.f32.bf16.bf16", REGS,                                      \
                         "{%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}", #I4, #I5, #I6, ACCS(d));      \
      } else {                                                                                     \
        ATTNJIT_WGMMA_RS("m64n" #N "k16.f32.f16.f16", REGS,                                        \
                         "{%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}", #I4, #I5, #I6, ACCS(d));      \
      }                                                                                            \
    }                                                                                              \
  };

#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N16)
ATTNJIT_DEFINE_WGMMA(16, ATTNJIT_REGS_8, ATTNJIT_ACCS_8, 8, 9, 10, 11, 12, 13, 14)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N32)
ATTNJIT_DEFINE_WGMMA(32, ATTNJIT_REGS_16, ATTNJIT_ACCS_16, 16, 17, 18, 19, 20, 21, 22)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N48)
ATTNJIT_DEFINE_WGMMA(48, ATTNJIT_REGS_24, ATTNJIT_ACCS_24, 24, 25, 26, 27, 28, 29, 30)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N64)
ATTNJIT_DEFINE_WGMMA(64, ATTNJIT_REGS_32, ATTNJIT_ACCS_32, 32, 33, 34, 35, 36, 37, 38)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N80)
ATTNJIT_DEFINE_WGMMA(80, ATTNJIT_REGS_40, ATTNJIT_ACCS_40, 40, 41, 42, 43, 44, 45, 46)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N96)
ATTNJIT_DEFINE_WGMMA(96, ATTNJIT_REGS_48, ATTNJIT_ACCS_48, 48, 49, 50, 51, 52, 53, 54)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N112)
ATTNJIT_DEFINE_WGMMA(112, ATTNJIT_REGS_56, ATTNJIT_ACCS_56, 56, 57, 58, 59, 60, 61, 62)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N128)
ATTNJIT_DEFINE_WGMMA(128, ATTNJIT_REGS_64, ATTNJIT_ACCS_64, 64, 65, 66, 67, 68, 69, 70)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N144)
ATTNJIT_DEFINE_WGMMA(144, ATTNJIT_REGS_72, ATTNJIT_ACCS_72, 72, 73, 74, 75, 76, 77, 78)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N160)
ATTNJIT_DEFINE_WGMMA(160, ATTNJIT_REGS_80, ATTNJIT_ACCS_80, 80, 81, 82, 83, 84, 85, 86)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N176)
ATTNJIT_DEFINE_WGMMA(176, ATTNJIT_REGS_88, ATTNJIT_ACCS_88, 88, 89, 90, 91, 92, 93, 94)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N192)
ATTNJIT_DEFINE_WGMMA(192, ATTNJIT_REGS_96, ATTNJIT_ACCS_96, 96, 97, 98, 99, 100, 101, 102)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N208)
ATTNJIT_DEFINE_WGMMA(208, ATTNJIT_REGS_104, ATTNJIT_ACCS_104, 104, 105, 106, 107, 108, 109, 110)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N224)
ATTNJIT_DEFINE_WGMMA(224, ATTNJIT_REGS_112, ATTNJIT_ACCS_112, 112, 113, 114, 115, 116, 117, 118)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N240)
ATTNJIT_DEFINE_WGMMA(240, ATTNJIT_REGS_120, ATTNJIT_ACCS_120, 120, 121, 122, 123, 124, 125, 126)
#endif
#if !defined(ATTNJIT_WGMMA_SOME_SHAPES) || defined(ATTNJIT_WGMMA_N256)
ATTNJIT_DEFINE_WGMMA(256, ATTNJIT_REGS_128, ATTNJIT_ACCS_128, 128, 129, 130, 131, 132, 133, 134)
#endif

#undef ATTNJIT_DEFINE_WGMMA
#undef ATTNJIT_WGMMA_RS
#undef ATTNJIT_WGMMA_SS
#undef ATTNJIT_WGMMA_RS8
#undef ATTNJIT_WGMMA_SS8

/// Keeps the compiler from moving accesses of accumulators across wgmma_wait: their registers
/// change asynchronously until then. One empty asm naming them all (compile time grows with
/// the number of asm statements).
template <int kTiles>
__device__ __forceinline__ void fence_accumulators(float (&d)[kTiles][4]) {
  if constexpr (kTiles % 2 == 0 && kTiles <= 32) {
    WgmmaShape<kTiles * 8>::fence(d);
  } else {
#pragma unroll
    for (int nt = 0; nt < kTiles; ++nt) {
      asm volatile("" : "+f"(d[nt][0]), "+f"(d[nt][1]), "+f"(d[nt][2]), "+f"(d[nt][3])::"memory");
    }
  }
}

/// d (m64 x kN) = A B (+ d when accumulate), A (m64 x k16) and B (k16 x kN) by descriptor
/// (k32 for e4m3); kTransA / kTransB = 1 for MN-major operands. kN: a multiple of 16 up to 256.
template <class Element, int kN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 8][4], u64 desc_a, u64 desc_b,
                                         int accumulate) {
  static_assert(kN % 16 == 0 && kN >= 16 && kN <= 256, "m64nNk16 with N = 16, 32, ..., 256");
  WgmmaShape<kN>::template ss<Element, kTransA, kTransB>(d, desc_a, desc_b, accumulate);
}

/// d (m64 x kN) = A B (+ d when accumulate), A (m64 x k16) in registers (layout above), B
/// (k16 x kN) by descriptor.
template <class Element, int kN, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 8][4], const u32 (&a)[4], u64 desc_b,
                                         int accumulate) {
  static_assert(kN % 16 == 0 && kN >= 16 && kN <= 256, "m64nNk16 with N = 16, 32, ..., 256");
  WgmmaShape<kN>::template rs<Element, kTransB>(d, a, desc_b, accumulate);
}

/// The kSteps k16 steps of one product into d (m64 x kN): step kk takes desc_a(kk) and
/// desc_b(kk) (SS: A and B by descriptor) or a[kk] and desc_b(kk) (RS: A's four registers),
/// the first step adding to d only when `accumulate`. Here each step is its own asm statement;
/// a kernel's generated source may specialize WgmmaSteps for its products' (kN, kSteps) with
/// one statement per product (compiler/codegen/emit.cpp), which NVVM then handles once instead
/// of once per step.
template <int kN, int kSteps>
struct WgmmaSteps {
  template <class Element, int kTransA, int kTransB, class DescA, class DescB>
  __device__ static __forceinline__ void ss(float (&d)[kN / 8][4], DescA desc_a, DescB desc_b,
                                            int accumulate) {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      wgmma_ss<Element, kN, kTransA, kTransB>(d, desc_a(kk), desc_b(kk), kk > 0 ? 1 : accumulate);
    }
  }
  template <class Element, int kTransB, class DescB>
  __device__ static __forceinline__ void rs(float (&d)[kN / 8][4], const u32 (&a)[kSteps][4],
                                            DescB desc_b, int accumulate) {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      wgmma_rs<Element, kN, kTransB>(d, a[kk], desc_b(kk), kk > 0 ? 1 : accumulate);
    }
  }
};

/// The key (0 .. 31, within a k32 step) whose probabilities pack_e4m3_operand puts at position
/// `position` of the step's A operand: thread t's bytes 4 t + i (and 16 + 4 t + i) hold its
/// accumulator's columns 2 t, 2 t + 1 of n8 tiles 0 and 1 (2 and 3) of the step. The B operand
/// (V^T, K-major) must hold that key's row of V at the same position of the step.
__device__ constexpr int fp8_operand_key(int position) {
  return 16 * (position / 16) + 8 * ((position % 4) / 2) + 2 * ((position % 16) / 4) + position % 2;
}

/// k32 step kk's e4m3 A operand from the fp32 accumulator d of an m64 x kN product (P from S):
/// the four n8 tiles 4 kk .. 4 kk + 3, in fp8_operand_key's order, rounded to nearest even.
template <int kTiles>
__device__ __forceinline__ void pack_e4m3_operand(const float (&d)[kTiles][4], int kk,
                                                  u32 (&a)[4]) {
  const int j = 4 * kk;
  a[0] = pack4_e4m3(d[j][0], d[j][1], d[j + 1][0], d[j + 1][1]);
  a[1] = pack4_e4m3(d[j][2], d[j][3], d[j + 1][2], d[j + 1][3]);
  a[2] = pack4_e4m3(d[j + 2][0], d[j + 2][1], d[j + 3][0], d[j + 3][1]);
  a[3] = pack4_e4m3(d[j + 2][2], d[j + 2][3], d[j + 3][2], d[j + 3][3]);
}

/// Stores four 8 x 8 matrices of 16-bit elements (stmatrix, sm_90): register j of each lane
/// holds row lane / 4, elements 2 (lane % 4) and 2 (lane % 4) + 1, of matrix j; lane 8 j + i
/// gives the address of row i of matrix j.
__device__ __forceinline__ void stmatrix_x4(u32 address, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
}

/// As stmatrix_x4, each matrix transposed: register j of each lane holds matrix j's fragment
/// (mma layout), lane 8 j + i gives the address of stored row i (the fragment's column i).
__device__ __forceinline__ void stmatrix_x4_trans(u32 address, const u32 (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]));
}

#undef ATTNJIT_R8_0
#undef ATTNJIT_R8_1
#undef ATTNJIT_R8_2
#undef ATTNJIT_R8_3
#undef ATTNJIT_R8_4
#undef ATTNJIT_R8_5
#undef ATTNJIT_R8_6
#undef ATTNJIT_R8_7
#undef ATTNJIT_R8_8
#undef ATTNJIT_R8_9
#undef ATTNJIT_R8_10
#undef ATTNJIT_R8_11
#undef ATTNJIT_R8_12
#undef ATTNJIT_R8_13
#undef ATTNJIT_R8_14
#undef ATTNJIT_R8_15
#undef ATTNJIT_REGS_8
#undef ATTNJIT_REGS_16
#undef ATTNJIT_REGS_24
#undef ATTNJIT_REGS_32
#undef ATTNJIT_REGS_40
#undef ATTNJIT_REGS_48
#undef ATTNJIT_REGS_56
#undef ATTNJIT_REGS_64
#undef ATTNJIT_REGS_72
#undef ATTNJIT_REGS_80
#undef ATTNJIT_REGS_88
#undef ATTNJIT_REGS_96
#undef ATTNJIT_REGS_104
#undef ATTNJIT_REGS_112
#undef ATTNJIT_REGS_120
#undef ATTNJIT_REGS_128
#undef ATTNJIT_ACCS_8
#undef ATTNJIT_ACCS_16
#undef ATTNJIT_ACCS_24
#undef ATTNJIT_ACCS_32
#undef ATTNJIT_ACCS_40
#undef ATTNJIT_ACCS_48
#undef ATTNJIT_ACCS_56
#undef ATTNJIT_ACCS_64
#undef ATTNJIT_ACCS_72
#undef ATTNJIT_ACCS_80
#undef ATTNJIT_ACCS_88
#undef ATTNJIT_ACCS_96
#undef ATTNJIT_ACCS_104
#undef ATTNJIT_ACCS_112
#undef ATTNJIT_ACCS_120
#undef ATTNJIT_ACCS_128
#undef ATTNJIT_ACC8
#undef ATTNJIT_ACC4

}  // namespace attnjit
