// The key-block walk (templates/attnjit/common/block_walk.cuh) on the device: over one query block's
// key blocks it visits, last to first, exactly those the FlashMask min/max tables do not skip,
// and each iteration's stage holds that block's K, V (zero past Sk) and FlashMask values, with
// three stages in flight and Sk not a multiple of the block.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "attnjit/common/params.cuh"
#include "gpu/vocabulary_gpu.hpp"

using namespace attnjit;

TEST_CASE("KeyBlockWalk visits the active key blocks last to first with their K, V and values",
          "[gpu][vocabulary][walk]") {
  const runtime::LoadedModule module = gpu_test::load_vocabulary_program("key_walk_test.cu");
  constexpr int kBlockN = 32, kHeadDim = 32, kColumns = 2, kStages = 3;
  constexpr int kSeqQ = 64, kSeqK = 150, kBlocks = (kSeqK + kBlockN - 1) / kBlockN;
  std::mt19937 rng(31);
  std::vector<std::uint16_t> k(kSeqK * kHeadDim), v(kSeqK * kHeadDim);
  for (auto& x : k) x = static_cast<std::uint16_t>(rng() | 1u);  // never 0: zero-fill shows
  for (auto& x : v) x = static_cast<std::uint16_t>(rng() | 1u);
  std::vector<int> intervals(kSeqK * kColumns);
  for (int& x : intervals) x = 1 + static_cast<int>(rng() % 1000);
  // Blocks 1 and 3 hide every row (LTS 0, LTE Sq); the others hide none (LTS = LTE = Sq).
  std::vector<int> minmax(kBlocks * 2 * kColumns);
  for (int n = 0; n < kBlocks; ++n) {
    const bool skipped = n == 1 || n == 3;
    const int start = skipped ? 0 : kSeqQ;
    minmax[n * 4 + 0] = minmax[n * 4 + 1] = start;
    minmax[n * 4 + 2] = minmax[n * 4 + 3] = kSeqQ;
  }
  const std::vector<int> expected_blocks = {4, 2, 0};

  const runtime::DeviceBuffer d_k = gpu_test::upload(k), d_v = gpu_test::upload(v),
                              d_intervals = gpu_test::upload(intervals),
                              d_minmax = gpu_test::upload(minmax);
  runtime::DeviceBuffer d_blocks((kBlocks + 1) * sizeof(int));
  runtime::DeviceBuffer d_kv(kBlocks * 2 * kBlockN * kHeadDim * 2);
  runtime::DeviceBuffer d_vectors(kBlocks * kBlockN * kColumns * sizeof(int));
  d_blocks.fill_bytes(0x7f);
  d_kv.fill_bytes(0xff);
  d_vectors.fill_bytes(0xff);

  FwdParams p{};
  p.k = d_k.data();
  p.v = d_v.data();
  p.intervals = static_cast<const int*>(d_intervals.data());
  p.minmax = static_cast<const int*>(d_minmax.data());
  p.k_batch_stride = p.v_batch_stride = kSeqK * kHeadDim;
  p.k_row_stride = p.v_row_stride = kHeadDim;
  p.k_head_stride = p.v_head_stride = kHeadDim;
  p.batch = p.heads = p.kv_heads = p.mask_heads = 1;
  p.seqlen_q = kSeqQ;
  p.seqlen_k = kSeqK;
  p.window_left = p.window_right = -1;
  void* pb = d_blocks.data();
  void* pkv = d_kv.data();
  void* pvec = d_vectors.data();
  void* args[] = {&p, &pb, &pkv, &pvec};
  const int smem = kStages * (2 * kBlockN * kHeadDim * 2 + kBlockN * kColumns * 4);
  runtime::LaunchConfig config;
  config.grid[0] = 2;  // the paired-head grid of one head: the second CTA has no head
  config.block[0] = 128;
  config.dynamic_smem_bytes = smem;
  runtime::launch(module.function("key_walk_test", smem), config, nullptr, args);

  std::vector<int> blocks(kBlocks + 1);
  d_blocks.download(blocks.data(), blocks.size() * sizeof(int));
  std::vector<std::uint16_t> kv(kBlocks * 2 * kBlockN * kHeadDim);
  d_kv.download(kv.data(), kv.size() * 2);
  std::vector<int> vectors(kBlocks * kBlockN * kColumns);
  d_vectors.download(vectors.data(), vectors.size() * sizeof(int));

  const std::size_t visited = expected_blocks.size();
  for (std::size_t it = 0; it < visited; ++it) CHECK(blocks[it] == expected_blocks[it]);
  CHECK(blocks[visited] == -1);
  int bad_kv = 0, bad_vectors = 0;
  for (std::size_t it = 0; it < visited; ++it) {
    const int key0 = expected_blocks[it] * kBlockN;
    for (int row = 0; row < kBlockN; ++row) {
      const int key = key0 + row;
      for (int col = 0; col < kHeadDim; ++col) {
        const std::uint16_t want_k = key < kSeqK ? k[key * kHeadDim + col] : 0;
        const std::uint16_t want_v = key < kSeqK ? v[key * kHeadDim + col] : 0;
        const std::size_t at = (it * 2 * kBlockN + row) * kHeadDim + col;
        bad_kv += kv[at] != want_k;
        bad_kv += kv[at + kBlockN * kHeadDim] != want_v;
      }
      for (int c = 0; c < kColumns; ++c) {
        const int want = key < kSeqK ? intervals[key * kColumns + c] : 0;
        bad_vectors += vectors[(it * kBlockN + row) * kColumns + c] != want;
      }
    }
  }
  CHECK(bad_kv == 0);
  CHECK(bad_vectors == 0);
}
