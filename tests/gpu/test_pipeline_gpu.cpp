// The mbarrier pipeline (templates/attnjit/sm90a/pipeline.cuh, mbarrier.cuh): one producer warp
// streams blocks through a ring of 2 and 3 stages (lane 0 by TMA with expected transaction
// bytes, every lane a cp.async side value arriving through .noinc) to two consumer
// warpgroups, which copy each stage out and release it; many passes over the ring, so the
// phase bits wrap. Waits are bounded: a protocol error traps instead of hanging.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "gpu/sm90_kernel.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/launch/tma.hpp"

using namespace attnjit;

namespace {

// {0}: stages.
constexpr const char* kSource = R"(#include "attnjit/sm90a/pipeline.cuh"
#include "attnjit/sm90a/tma.cuh"
using namespace attnjit;
constexpr int kStages = {0};
constexpr int kTileBytes = 64 * 64 * 2;
extern "C" __global__ void __launch_bounds__(384, 1)
pipeline_test(const __grid_constant__ TensorMap map, const int* side, unsigned* out,
              int* side_out, int iterations) {{
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) unsigned long long barriers[2 * kStages];
  __shared__ int side_stages[kStages][32];
  const u32 tiles = (smem_address(smem) + 1023) & ~1023u;
  const Pipeline<kStages> pipe{{smem_address(barriers)}};
  if (threadIdx.x == 0) {{
    pipe.init(/*producer_arrivals=*/1 + 32, /*consumer_arrivals=*/8);
    mbarrier_init_fence();
  }}
  __syncthreads();
  const int lane = threadIdx.x % 32;
  PipelineState<kStages> state;
  if (threadIdx.x < 128) {{
    if (threadIdx.x >= 32) return;
    for (int i = 0; i < iterations; ++i) {{
      pipe.producer_acquire(state);
      if (lane == 0) {{
        pipe.producer_commit(state, kTileBytes);
        tma_load(tiles + state.index * kTileBytes, map, pipe.full(state.index), 0, 64 * i, 0, 0);
      }}
      cp_async_4(smem_address(&side_stages[state.index][lane]), side + 32 * i + lane, 4);
      pipe.producer_commit_cp_async(state);
      state.advance();
    }}
    return;
  }}
  const int consumer = threadIdx.x - 128;  // 0 .. 255
  for (int i = 0; i < iterations; ++i) {{
    pipe.consumer_wait(state);
    const u32 stage = tiles + state.index * kTileBytes;
    for (int w = consumer; w < kTileBytes / 4; w += 256) {{
      out[static_cast<long long>(i) * (kTileBytes / 4) + w] = load_shared_u32(stage + 4 * w);
    }}
    if (consumer < 32) side_out[32 * i + consumer] = side_stages[state.index][consumer];
    __syncwarp();
    if (lane == 0) pipe.consumer_release(state);
    state.advance();
  }}
}}
)";

}  // namespace

TEST_CASE("an mbarrier pipeline streams TMA and cp.async stages through its ring", "[gpu][sm90a]") {
  if (!gpu_test::sm90_device_or_skip("mbarrier pipeline")) return;
  constexpr int kIterations = 13;
  constexpr int kRows = 64 * kIterations;
  std::vector<std::uint16_t> host(kRows * 64);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::uint16_t>(i * 7 + 3);
  std::vector<int> side(32 * kIterations);
  for (std::size_t i = 0; i < side.size(); ++i) side[i] = static_cast<int>(i * 11 - 5);
  runtime::DeviceBuffer tensor(host.size() * 2), side_in(side.size() * 4);
  tensor.upload(host.data(), host.size() * 2);
  side_in.upload(side.data(), side.size() * 4);
  TensorView view = contiguous_view(tensor.data(), ScalarType::bf16, {1, kRows, 1, 64});
  const TensorMap map = runtime::activation_tensor_map("x", view, 64, 64);
  for (const int stages : {2, 3}) {
    INFO(stages << " stages");
    const int smem = 1024 + stages * 64 * 64 * 2;
    const gpu_test::Sm90Kernel kernel =
        gpu_test::compile_sm90_kernel(fmt::format(kSource, stages), "pipeline_test", smem);
    runtime::DeviceBuffer out(host.size() * 2), side_out(side.size() * 4);
    out.fill_bytes(0);
    side_out.fill_bytes(0);
    void* out_ptr = out.data();
    void* side_ptr = side_in.data();
    void* side_out_ptr = side_out.data();
    int iterations = kIterations;
    gpu_test::run_sm90_kernel(
        kernel, 1, 384, smem,
        {const_cast<TensorMap*>(&map), &side_ptr, &out_ptr, &side_out_ptr, &iterations});
    std::vector<std::uint16_t> got(host.size());
    out.download(got.data(), got.size() * 2);
    std::vector<int> got_side(side.size());
    side_out.download(got_side.data(), got_side.size() * 4);
    int wrong = 0;
    for (int r = 0; r < kRows; ++r) {
      const int row = r % 64;
      for (int c = 0; c < 64; ++c) {
        // Block r / 64, row r % 64 of the 128-byte swizzled tile.
        const std::size_t at = (r / 64) * 4096 + row * 64 + (((c / 8) ^ (row % 8)) * 8) + c % 8;
        wrong += got[at] != host[r * 64 + c];
      }
    }
    CHECK(wrong == 0);
    CHECK(got_side == side);
  }
}
