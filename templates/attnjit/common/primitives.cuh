// Device primitives in inline PTX: 16-bit float packing, mma.sync m16n8k16, ldmatrix,
// cp.async, exp2, warp shuffles. No CUDA headers needed (NVRTC compiles this alone).
#pragma once

namespace attnjit {

/// `type` is A when kFirst, else B (a std::conditional for the templates).
template <bool kFirst, class A, class B>
struct Select {
  typedef A type;
};
template <class A, class B>
struct Select<false, A, B> {
  typedef B type;
};

typedef unsigned int u32;
typedef unsigned short u16;

/// Element tags: the storage is 16 bits either way; they select the PTX type names.
struct bf16 {
  u16 bits;
};
struct fp16 {
  u16 bits;
};
/// FP8 E4M3 (OCP's "fn": no infinities, largest finite 448): 8 bits, for the FP8 products.
struct e4m3 {
  unsigned char bits;
};

/// Whether Element is e4m3 (the wgmma forms' k32 steps; a decode kernel's FP8 cache).
template <class Element>
__device__ constexpr bool is_e4m3() {
  return false;
}
template <>
__device__ constexpr bool is_e4m3<e4m3>() {
  return true;
}

/// Packs two floats into one register of two 16-bit values (lo in the low half).
template <class Element>
__device__ __forceinline__ u32 pack2(float lo, float hi);

template <>
__device__ __forceinline__ u32 pack2<bf16>(float lo, float hi) {
  u32 out;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  return out;
}

template <>
__device__ __forceinline__ u32 pack2<fp16>(float lo, float hi) {
  u32 out;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
  return out;
}

/// Packs four floats into one register of four e4m3 values (x0 in the lowest byte), rounded to
/// nearest even and saturated to +-448 (NaN stays NaN).
__device__ __forceinline__ u32 pack4_e4m3(float x0, float x1, float x2, float x3) {
  u32 out;
  // cvt's first source goes to the upper byte of the pair.
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\nmov.b32 %0, {lo, hi};\n}"
      : "=r"(out)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return out;
}

/// The four e4m3 values of x (x0 in the lowest byte) widened exactly to fp16: lo = {x0, x1},
/// hi = {x2, x3}, each pair's first value in the low half (sm_89 and later).
__device__ __forceinline__ void widen_e4m3x4(u32 x, u32& lo, u32& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
      "cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

/// Byte i of the result is byte (selector >> 4 i) & 7 of {y, x} (x bytes 0-3, y bytes 4-7).
__device__ __forceinline__ u32 byte_perm(u32 x, u32 y, u32 selector) {
  u32 out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(x), "r"(y), "r"(selector));
  return out;
}

/// Converts one 16-bit value to float.
template <class Element>
__device__ __forceinline__ float to_float(u16 bits);

template <>
__device__ __forceinline__ float to_float<bf16>(u16 bits) {
  return __uint_as_float(static_cast<u32>(bits) << 16);
}

template <>
__device__ __forceinline__ float to_float<fp16>(u16 bits) {
  float out;
  asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(bits));
  return out;
}

/// The two floats of a packed pair (inverse of pack2, up to its rounding).
template <class Element>
__device__ __forceinline__ float unpack_lo(u32 pair) {
  return to_float<Element>(static_cast<u16>(pair & 0xffffu));
}

template <class Element>
__device__ __forceinline__ float unpack_hi(u32 pair) {
  return to_float<Element>(static_cast<u16>(pair >> 16));
}

/// D += A * B for one m16n8k16 tile, fp32 accumulators (fragment layouts in kernel-notes).
template <class Element>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<bf16>(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                   u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<fp16>(float (&d)[4], const u32 (&a)[4], u32 b0,
                                                   u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ u32 smem_address(const void* ptr) {
  return static_cast<u32>(__cvta_generic_to_shared(ptr));
}

/// Four 8x8 16-bit matrices; lane l gives the address of row l%8 of matrix l/8.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// As ldmatrix_x4, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// Two consecutive floats from shared memory by 32-bit shared address (8-byte aligned; no
/// 64-bit generic pointer needed).
__device__ __forceinline__ void load_shared_v2_f32(u32 address, float& x, float& y) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(x), "=f"(y) : "r"(address));
}

__device__ __forceinline__ void store_shared_f32(u32 address, float x) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(address), "f"(x));
}

/// Stores two consecutive floats (8-byte aligned address).
__device__ __forceinline__ void store_shared_v2_f32(u32 address, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(address), "f"(x), "f"(y));
}

/// Four 32-bit words to shared memory (16-byte aligned).
__device__ __forceinline__ void store_shared_v4(u32 address, u32 x, u32 y, u32 z, u32 w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(address), "r"(x), "r"(y), "r"(z),
               "r"(w));
}

/// Four consecutive floats to shared memory (16-byte aligned).
__device__ __forceinline__ void store_shared_v4_f32(u32 address, float x, float y, float z,
                                                    float w) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(address), "f"(x), "f"(y), "f"(z),
               "f"(w));
}

__device__ __forceinline__ u32 load_shared_u32(u32 address) {
  u32 out;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(out) : "r"(address));
  return out;
}

__device__ __forceinline__ void store_shared_u32(u32 address, u32 value) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(address), "r"(value));
}

/// Loads 16 bytes of shared memory (16-byte aligned).
__device__ __forceinline__ uint4 load_shared_v4(u32 address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address));
  return v;
}

/// Zeroes 16 bytes of shared memory (16-byte aligned).
__device__ __forceinline__ void store_shared_zero16(u32 address) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(address), "r"(0u) : "memory");
}

__device__ __forceinline__ int load_shared_s32(u32 address) {
  int out;
  asm volatile("ld.shared.s32 %0, [%1];" : "=r"(out) : "r"(address));
  return out;
}

/// kWords ints from shared memory at `address` (a multiple of 8 bytes) by volatile 8-byte
/// loads: ptxas keeps volatile loads where they stand, so an unrolled loop of them does not
/// hoist every iteration's values into registers at once.
template <int kWords>
__device__ __forceinline__ void load_shared_volatile_s32(u32 address, int (&out)[kWords]) {
  static_assert(kWords % 2 == 0, "whole 8-byte loads");
#pragma unroll
  for (int i = 0; i < kWords; i += 2) {
    asm volatile("ld.volatile.shared.v2.s32 {%0, %1}, [%2];"
                 : "=r"(out[i]), "=r"(out[i + 1])
                 : "r"(address + 4 * i));
  }
}

/// 16-byte global -> shared copy, bypassing L1; bytes past src_bytes are zero-filled.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}

/// 4-byte global -> shared copy; zero-filled when src_bytes is 0.
__device__ __forceinline__ void cp_async_4(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;");
}

/// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
}

/// Hides `value` from the optimizer inside a loop, so that values derived from it are
/// recomputed there instead of being hoisted out and held in registers across the loop.
__device__ __forceinline__ u32 opaque(u32 value) {
  asm volatile("" : "+r"(value));
  return value;
}

__device__ __forceinline__ long long opaque(long long value) {
  asm volatile("" : "+l"(value));
  return value;
}

/// a x b + c with a 64-bit product of two 32-bit factors (one wide multiply-add, where 64-bit
/// factors take three multiplies; the compiler does not narrow them once it has hoisted the
/// sign extensions out of a loop).
__device__ __forceinline__ long long wide_mad(int a, int b, long long c) {
  long long out;
  asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(out) : "r"(a), "r"(b), "l"(c));
  return out;
}

/// The thread index read from its special register at the point of use (volatile, so not
/// hoisted): inside long loops this keeps it out of the register budget.
__device__ __forceinline__ int read_tid_x() {
  int out;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(out));
  return out;
}

/// 2^x (approximate, flushes denormals; exact enough for softmax weights).
__device__ __forceinline__ float exp2_approx(float x) {
  float out;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(out) : "f"(x));
  return out;
}

__device__ __forceinline__ float log2_approx(float x) {
  float out;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(out) : "f"(x));
  return out;
}

/// Max / sum over the four lanes of a quad (the lanes that share an accumulator row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Programmatic dependent launch (sm_90 and later; nothing elsewhere, and nothing where the
// kernel was not launched as a dependent): wait_for_prior_grids returns once the grids before
// this one on the stream have finished and their writes are visible; allow_dependent_grids
// lets the grid after this one start launching (it still waits for this one's writes).
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float negative_infinity() {
  return __int_as_float(0xff800000);
}

}  // namespace attnjit
