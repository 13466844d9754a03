// Warpgroup MMAs of every width the kernels use (templates/attnjit/sm90a/wgmma.cuh): the SS form on
// two K-major swizzled tiles (S = Q K^T), the RS form with A packed in registers and B an
// MN-major tile (O += P V), bf16 and fp16, in the 128-byte swizzle of 64-column panels and
// the 64-byte swizzle of 32-column panels (head dim 96); and the e4m3 forms: SS on two K-major
// 8-bit tiles, RS with A packed from an fp32 accumulator (P) and B = V^T written in the packed
// operand's key order. Small integer inputs make every sum exact.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "gpu/sm90_kernel.hpp"
#include "runtime/jit/driver.hpp"
#include "support/half_round.hpp"

using namespace attnjit;

namespace {

// {0}: N, {1}: the element type, {2}: 1 for the RS form, {3}: K (128: two 64-column panels of
// the K-major tiles; 96: three 32-column panels).
constexpr const char* kSource = R"(#include "attnjit/common/smem_tile.cuh"
#include "attnjit/sm90a/wgmma.cuh"
using namespace attnjit;
constexpr int kN = {0};
constexpr int kK = {3};
constexpr bool kRs = {2};
typedef {1} Element;
typedef SmemTile<64, kK> ATile;                      // A, K-major (SS)
typedef SmemTile<kRs ? kK : kN, kRs ? kN : kK> BTile;  // B: [n][k] K-major or [k][n] MN-major
extern "C" __global__ void __launch_bounds__(128) wgmma_test(const u16* a, const u16* b,
                                                             float* d) {{
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 shared_a = (smem_address(smem) + 1023) & ~1023u;
  const u32 shared_b = shared_a + ATile::kBytes;
  unsigned char* base = smem + (shared_a - smem_address(smem));
  for (int i = threadIdx.x; i < 64 * kK; i += 128) {{
    *reinterpret_cast<u16*>(base + ATile::element_offset(i / kK, i % kK)) = a[i];
  }}
  constexpr int kBCols = kRs ? kN : kK;
  for (int i = threadIdx.x; i < kN * kK; i += 128) {{
    *reinterpret_cast<u16*>(base + ATile::kBytes + BTile::element_offset(i / kBCols, i % kBCols)) =
        b[i];
  }}
  fence_async_shared();
  __syncthreads();
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int row = 16 * warp + g;
  // A in registers: the mma.sync m16n8k16 A fragment of the warp's 16 rows.
  u32 regs[kK / 16][4];
  for (int kk = 0; kk < kK / 16; ++kk) {{
    for (int e = 0; e < 4; ++e) {{
      const int r = row + 8 * (e % 2), c = 16 * kk + 2 * t + 8 * (e / 2);
      regs[kk][e] = a[r * kK + c] | (static_cast<u32>(a[r * kK + c + 1]) << 16);
    }}
  }}
  float acc[kN / 8][4];
  wgmma_fence();
  for (int kk = 0; kk < kK / 16; ++kk) {{
    if constexpr (kRs) {{
      wgmma_rs<Element, kN, 1>(acc, regs[kk], mn_major_descriptor<BTile>(shared_b, 0, kk), kk > 0);
    }} else {{
      wgmma_ss<Element, kN, 0, 0>(acc, k_major_descriptor<ATile>(shared_a, 0, kk),
                                  k_major_descriptor<BTile>(shared_b, 0, kk), kk > 0);
    }}
  }}
  wgmma_commit();
  wgmma_wait<0>();
  fence_accumulators(acc);
  for (int nt = 0; nt < kN / 8; ++nt) {{
    for (int e = 0; e < 4; ++e) {{
      d[(row + 8 * (e / 2)) * kN + 8 * nt + 2 * t + e % 2] = acc[nt][e];
    }}
  }}
}}
)";

// Runs a test kernel (one CTA of 128 threads) on the operands' bytes and counts the outputs of
// its m64 x n product that differ from the exact product of the integers they hold: A [64][k],
// B [n][k] (SS) or [k][n] (RS).
int wrong_outputs(const gpu_test::Sm90Kernel& kernel, int smem, std::span<const std::byte> a_bytes,
                  std::span<const std::byte> b_bytes, const std::vector<int>& a,
                  const std::vector<int>& b, int n, int k, bool rs) {
  runtime::DeviceBuffer a_dev(a_bytes.size()), b_dev(b_bytes.size()), d_dev(64 * n * 4);
  a_dev.upload(a_bytes.data(), a_bytes.size());
  b_dev.upload(b_bytes.data(), b_bytes.size());
  d_dev.fill_bytes(0xff);
  void* a_ptr = a_dev.data();
  void* b_ptr = b_dev.data();
  void* d_ptr = d_dev.data();
  gpu_test::run_sm90_kernel(kernel, 1, 128, smem, {&a_ptr, &b_ptr, &d_ptr});
  std::vector<float> d(64 * n);
  d_dev.download(d.data(), d.size() * 4);
  int wrong = 0;
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < n; ++c) {
      int expected = 0;
      for (int i = 0; i < k; ++i) expected += a[r * k + i] * (rs ? b[i * n + c] : b[c * k + i]);
      wrong += d[r * n + c] != static_cast<float>(expected);
    }
  }
  return wrong;
}

void check_product(int n, DType dtype, bool rs, int kK = 128) {
  INFO("N = " << n << ", K = " << kK << ", " << name_of(dtype) << (rs ? ", RS" : ", SS"));
  const int smem = 1024 + 64 * kK * 2 + n * kK * 2;
  const gpu_test::Sm90Kernel kernel = gpu_test::compile_sm90_kernel(
      fmt::format(kSource, n, dtype == DType::bf16 ? "bf16" : "fp16", rs ? 1 : 0, kK), "wgmma_test",
      smem);
  std::mt19937 rng(n * 3 + rs);
  std::uniform_int_distribution<int> small(-4, 4);
  const auto bits = [&](int v) {
    return dtype == DType::bf16 ? testing::float_to_bf16_bits(static_cast<float>(v))
                                : testing::float_to_fp16_bits(static_cast<float>(v));
  };
  std::vector<int> a(64 * kK), b(n * kK);  // b: [n][k] for SS, [k][n] for RS
  for (int& x : a) x = small(rng);
  for (int& x : b) x = small(rng);
  std::vector<std::uint16_t> a_bits(a.size()), b_bits(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) a_bits[i] = bits(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) b_bits[i] = bits(b[i]);
  CHECK(wrong_outputs(kernel, smem, std::as_bytes(std::span(a_bits)),
                      std::as_bytes(std::span(b_bits)), a, b, n, kK, rs) == 0);
}

// {0}: N, {1}: K (the reduction: head dim for SS, keys for RS), {2}: 1 for the RS form. SS: a
// holds A [64][K] and b B [N][K] as e4m3 bytes; RS: a holds P [64][K] as floats (packed into
// the A operand by pack_e4m3_operand) and b V [K][N] as e4m3 bytes, written transposed into
// the K-major B tile (V^T [N][K]) in fp8_operand_key's order.
constexpr const char* kFp8Source = R"(#include "attnjit/common/smem_tile.cuh"
#include "attnjit/sm90a/wgmma.cuh"
using namespace attnjit;
constexpr int kN = {0};
constexpr int kK = {1};
constexpr bool kRs = {2};
typedef SmemTile8<64, kK> ATile;
typedef SmemTile8<kN, kK> BTile;
extern "C" __global__ void __launch_bounds__(128)
    wgmma_fp8_test(const void* a, const unsigned char* b, float* d) {{
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 shared_a = (smem_address(smem) + 1023) & ~1023u;
  const u32 shared_b = shared_a + ATile::kBytes;
  unsigned char* base = smem + (shared_a - smem_address(smem));
  for (int i = threadIdx.x; i < kN * kK; i += 128) {{
    const int n = i / kK, k = i % kK;
    // RS: column k of V^T (step k / 32, position k % 32) holds V's row of the packed key there.
    base[ATile::kBytes + BTile::element_offset(n, k)] =
        kRs ? b[(32 * (k / 32) + fp8_operand_key(k % 32)) * kN + n] : b[i];
  }}
  if constexpr (!kRs) {{
    const unsigned char* a8 = static_cast<const unsigned char*>(a);
    for (int i = threadIdx.x; i < 64 * kK; i += 128) {{
      base[ATile::element_offset(i / kK, i % kK)] = a8[i];
    }}
  }}
  fence_async_shared();
  __syncthreads();
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const int row = 16 * warp + g;
  float acc[kN / 8][4];
  if constexpr (kRs) {{
    // P as the fp32 accumulator of an m64 x kK product.
    const float* p = static_cast<const float*>(a);
    float pd[kK / 8][4];
    for (int nt = 0; nt < kK / 8; ++nt) {{
      for (int e = 0; e < 4; ++e) pd[nt][e] = p[(row + 8 * (e / 2)) * kK + 8 * nt + 2 * t + e % 2];
    }}
    u32 regs[kK / 32][4];
    for (int kk = 0; kk < kK / 32; ++kk) pack_e4m3_operand(pd, kk, regs[kk]);
    wgmma_fence();
    for (int kk = 0; kk < kK / 32; ++kk) {{
      wgmma_rs<e4m3, kN, 0>(acc, regs[kk], k_major_descriptor<BTile::Layout>(shared_b, 0, kk),
                            kk > 0);
    }}
  }} else {{
    wgmma_fence();
    for (int kk = 0; kk < kK / 32; ++kk) {{
      wgmma_ss<e4m3, kN, 0, 0>(acc, k_major_descriptor<ATile::Layout>(shared_a, 0, kk),
                               k_major_descriptor<BTile::Layout>(shared_b, 0, kk), kk > 0);
    }}
  }}
  wgmma_commit();
  wgmma_wait<0>();
  fence_accumulators(acc);
  for (int nt = 0; nt < kN / 8; ++nt) {{
    for (int e = 0; e < 4; ++e) {{
      d[(row + 8 * (e / 2)) * kN + 8 * nt + 2 * t + e % 2] = acc[nt][e];
    }}
  }}
}}
)";

void check_fp8_product(int n, int k, bool rs) {
  INFO("e4m3, N = " << n << ", K = " << k << (rs ? ", RS" : ", SS"));
  const int smem = 1024 + 64 * k + n * k;
  const gpu_test::Sm90Kernel kernel = gpu_test::compile_sm90_kernel(
      fmt::format(kFp8Source, n, k, rs ? 1 : 0), "wgmma_fp8_test", smem);
  std::mt19937 rng(n * 7 + k + rs);
  std::uniform_int_distribution<int> small(-6, 6);
  std::vector<int> a(64 * k), b(n * k);  // b: [n][k] for SS, V [k][n] for RS
  for (int& x : a) x = small(rng);
  for (int& x : b) x = small(rng);
  std::vector<std::uint8_t> b_bits(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    b_bits[i] = testing::float_to_e4m3_bits(static_cast<float>(b[i]));
  }
  std::vector<std::uint8_t> a_bytes;
  if (rs) {
    std::vector<float> p(a.begin(), a.end());
    a_bytes.resize(p.size() * 4);
    std::memcpy(a_bytes.data(), p.data(), a_bytes.size());
  } else {
    for (int x : a) a_bytes.push_back(testing::float_to_e4m3_bits(static_cast<float>(x)));
  }
  CHECK(wrong_outputs(kernel, smem, std::as_bytes(std::span(a_bytes)),
                      std::as_bytes(std::span(b_bits)), a, b, n, k, rs) == 0);
}

}  // namespace

TEST_CASE("wgmma e4m3 products match the exact product", "[gpu][sm90a]") {
  if (!gpu_test::sm90_device_or_skip("wgmma e4m3")) return;
  // SS (S = Q K^T): head dims 64 (64-byte rows), 128 and 256 (two panels), key blocks of
  // 64 to 256.
  for (const auto& [n, k] : {std::pair{128, 128}, std::pair{64, 128}, std::pair{256, 128},
                             std::pair{224, 128}, std::pair{128, 64}, std::pair{176, 256}}) {
    check_fp8_product(n, k, false);
  }
  // RS (O += P V): head dims 64 to 256 as N, key blocks of 64 to 256 as K.
  for (const auto& [n, k] : {std::pair{128, 128}, std::pair{64, 128}, std::pair{256, 64},
                             std::pair{128, 256}, std::pair{64, 192}}) {
    check_fp8_product(n, k, true);
  }
}

TEST_CASE("wgmma SS products of every width match the exact product", "[gpu][sm90a]") {
  if (!gpu_test::sm90_device_or_skip("wgmma SS")) return;
  for (int n : {16, 48, 64, 80, 112, 128, 176, 192, 256}) check_product(n, DType::bf16, false);
  check_product(64, DType::fp16, false);
  check_product(176, DType::fp16, false);
  // K = 96: both operands in the 64-byte swizzle.
  check_product(128, DType::bf16, false, 96);
  check_product(80, DType::fp16, false, 96);
}

TEST_CASE("wgmma RS products with A from registers match the exact product", "[gpu][sm90a]") {
  if (!gpu_test::sm90_device_or_skip("wgmma RS")) return;
  for (int n : {64, 128, 192, 256}) check_product(n, DType::bf16, true);
  check_product(128, DType::fp16, true);
  // N = 96: B in 32-column panels (64-byte swizzle), A's K in registers.
  check_product(96, DType::bf16, true);
  check_product(96, DType::fp16, true, 96);
}
