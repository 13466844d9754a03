// TMA copies (templates/attnjit/sm90a/tma.cuh) with tensor maps encoded on the host
// (runtime/launch/tma.cpp): a box of a strided [B, S, H, D] tensor lands in shared memory in the
// SmemTile panel layout (128-byte swizzle for 64-column panels, 64-byte for 32), rows past S
// read as zeros; a store writes a box back and drops its rows past S.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "gpu/sm90_kernel.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/launch/tma.hpp"

using namespace attnjit;

namespace {

constexpr const char* kLoadSource = R"(#include "attnjit/sm90a/mbarrier.cuh"
#include "attnjit/sm90a/tma.cuh"
using namespace attnjit;
// Loads the panels of one box (rows x panels * panel_cols) and copies the raw shared tile out.
extern "C" __global__ void tma_load_test(const __grid_constant__ TensorMap map, u16* out,
                                         int row0, int head, int batch, int panels,
                                         int panel_cols, int rows) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) unsigned long long barrier;
  const u32 bar = smem_address(&barrier);
  const u32 tile = (smem_address(smem) + 1023) & ~1023u;
  const int panel_bytes = rows * panel_cols * 2;
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma_prefetch_map(map);
    mbarrier_arrive_expect_tx(bar, panels * panel_bytes);
    for (int p = 0; p < panels; ++p) {
      tma_load(tile + p * panel_bytes, map, bar, p * panel_cols, row0, head, batch);
    }
  }
  mbarrier_wait(bar, 0);
  for (int i = threadIdx.x; i < panels * panel_bytes / 4; i += blockDim.x) {
    reinterpret_cast<u32*>(out)[i] = load_shared_u32(tile + 4 * i);
  }
}
)";

constexpr const char* kStoreSource = R"(#include "attnjit/sm90a/tma.cuh"
#include "attnjit/sm90a/wgmma.cuh"
using namespace attnjit;
// Writes `in` (the raw shared tile) to shared memory and stores it as one box per panel.
extern "C" __global__ void tma_store_test(const __grid_constant__ TensorMap map, const u16* in,
                                          int row0, int head, int batch, int panels,
                                          int panel_cols, int rows) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 tile = (smem_address(smem) + 1023) & ~1023u;
  const int panel_bytes = rows * panel_cols * 2;
  for (int i = threadIdx.x; i < panels * panel_bytes / 4; i += blockDim.x) {
    store_shared_u32(tile + 4 * i, reinterpret_cast<const u32*>(in)[i]);
  }
  fence_async_shared();
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int p = 0; p < panels; ++p) {
      tma_store(map, tile + p * panel_bytes, p * panel_cols, row0, head, batch);
    }
    tma_store_commit();
    tma_store_wait<0>();
  }
}
)";

struct Layout {
  int batch, seqlen, heads, head_dim;
  std::int64_t row_stride, batch_stride;  // elements; head stride = head_dim
  std::size_t elements() const { return static_cast<std::size_t>(batch) * batch_stride; }
  std::size_t index(int b, int s, int h, int d) const {
    return static_cast<std::size_t>(b * batch_stride + s * row_stride + h * head_dim + d);
  }
};

// Byte offset of element (row, col) of a rows x cols shared tile in the SmemTile layout:
// panels of panel_cols columns, 16-byte chunks XOR-swizzled by the row (TMA's pattern).
std::size_t tile_offset(int row, int col, int rows, int panel_cols) {
  const int panel = col / panel_cols;
  const int chunk = (col % panel_cols) / 8;
  const int swizzle = panel_cols == 64 ? row % 8 : (row / 2) % 4;
  return static_cast<std::size_t>(panel) * rows * panel_cols * 2 + row * panel_cols * 2 +
         ((chunk ^ swizzle) * 16) + (col % 8) * 2;
}

TensorView view_of(void* data, const Layout& l) {
  TensorView t;
  t.data = data;
  t.dtype = ScalarType::bf16;
  t.rank = 4;
  t.shape = {l.batch, l.seqlen, l.heads, l.head_dim};
  t.stride = {l.batch_stride, l.row_stride, l.head_dim, 1};
  return t;
}

}  // namespace

TEST_CASE("TMA loads land in the swizzled panel layout, zeros past the rows", "[gpu][sm90a]") {
  if (!gpu_test::sm90_device_or_skip("TMA loads")) return;
  const gpu_test::Sm90Kernel kernel =
      gpu_test::compile_sm90_kernel(kLoadSource, "tma_load_test", 1024 + 64 * 128 * 2);
  for (const int head_dim : {128, 96, 64}) {
    const int panel_cols = head_dim % 64 == 0 ? 64 : 32;
    const Layout l{2, 100, 3, head_dim, 3 * head_dim + 24, 100 * (3 * head_dim + 24) + 40};
    std::vector<std::uint16_t> host(l.elements());
    std::mt19937 rng(head_dim);
    for (auto& x : host) x = static_cast<std::uint16_t>(rng() & 0x7fff);
    runtime::DeviceBuffer tensor(host.size() * 2);
    tensor.upload(host.data(), host.size() * 2);
    const int rows = 64;
    const TensorMap map =
        runtime::activation_tensor_map("x", view_of(tensor.data(), l), rows, panel_cols);
    runtime::DeviceBuffer out(rows * head_dim * 2);
    // A box inside the tensor and one that runs past its 100 rows.
    for (const int row0 : {5, 64}) {
      INFO("head_dim " << head_dim << ", rows from " << row0);
      out.fill_bytes(0xff);
      void* out_ptr = out.data();
      int r0 = row0, head = 2, batch = 1, panels = head_dim / panel_cols, cols = panel_cols,
          box_rows = rows;
      gpu_test::run_sm90_kernel(
          kernel, 1, 128, 1024 + rows * head_dim * 2,
          {const_cast<TensorMap*>(&map), &out_ptr, &r0, &head, &batch, &panels, &cols, &box_rows});
      std::vector<std::uint16_t> got(rows * head_dim);
      out.download(got.data(), got.size() * 2);
      int mismatches = 0;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < head_dim; ++c) {
          const std::uint16_t expected = row0 + r < l.seqlen ? host[l.index(1, row0 + r, 2, c)] : 0;
          mismatches += got[tile_offset(r, c, rows, panel_cols) / 2] != expected;
        }
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("TMA stores write the box from the panel layout and clip rows past the end",
          "[gpu][sm90a]") {
  if (!gpu_test::sm90_device_or_skip("TMA stores")) return;
  const int rows = 64;
  const gpu_test::Sm90Kernel kernel =
      gpu_test::compile_sm90_kernel(kStoreSource, "tma_store_test", 1024 + rows * 128 * 2);
  for (const int head_dim : {128, 96}) {
    const int panel_cols = head_dim % 64 == 0 ? 64 : 32;
    const Layout l{2, 90, 2, head_dim, 2 * head_dim + 8, 90 * (2 * head_dim + 8) + 16};
    runtime::DeviceBuffer tensor(l.elements() * 2);
    tensor.fill_bytes(0xff);
    const TensorMap map =
        runtime::activation_tensor_map("x", view_of(tensor.data(), l), rows, panel_cols);
    // The tile holds element (r, c) = r * 256 + c at its swizzled place.
    std::vector<std::uint16_t> tile(rows * head_dim);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < head_dim; ++c) {
        tile[tile_offset(r, c, rows, panel_cols) / 2] = static_cast<std::uint16_t>(r * 256 + c);
      }
    }
    runtime::DeviceBuffer in(tile.size() * 2);
    in.upload(tile.data(), tile.size() * 2);
    void* in_ptr = in.data();
    int row0 = 50, head = 1, batch = 0, panels = head_dim / panel_cols, cols = panel_cols,
        box_rows = rows;
    gpu_test::run_sm90_kernel(
        kernel, 1, 128, 1024 + rows * head_dim * 2,
        {const_cast<TensorMap*>(&map), &in_ptr, &row0, &head, &batch, &panels, &cols, &box_rows});
    std::vector<std::uint16_t> got(l.elements());
    tensor.download(got.data(), got.size() * 2);
    int written = 0, wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const int b = static_cast<int>(i / l.batch_stride);
      const std::int64_t in_batch = static_cast<std::int64_t>(i) - b * l.batch_stride;
      const int s = static_cast<int>(in_batch / l.row_stride);
      const std::int64_t in_row = in_batch - s * l.row_stride;
      const int h = static_cast<int>(in_row / head_dim);
      const int c = static_cast<int>(in_row % head_dim);
      const bool inside =
          b == 0 && h == 1 && s >= row0 && s < l.seqlen && s < row0 + rows && in_row < 2 * head_dim;
      const std::uint16_t expected =
          inside ? static_cast<std::uint16_t>((s - row0) * 256 + c) : std::uint16_t{0xffff};
      written += inside;
      wrong += got[i] != expected;
    }
    INFO("head_dim " << head_dim);
    CHECK(written == (l.seqlen - row0) * head_dim);
    CHECK(wrong == 0);
  }
}
