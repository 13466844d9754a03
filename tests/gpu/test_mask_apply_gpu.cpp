// Mask application on fragments (templates/attnjit/common/mask_apply.cuh) on the device:
// column-wise masking over mma slabs and row-wise masking over a wgmma fragment hide exactly the
// elements the rule hides, at the coordinates passed in, reading each column's (row's) state once
// per thread that holds it; bit masks hide their elements; read_tile returns the table entry and
// the stored bits of the thread's fragment rows (zeros without a slot, untouched words for
// tiles that are not partial).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gpu/vocabulary_gpu.hpp"

using namespace attnjit;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool hidden_by_rule(int state, int row, int col) {
  return (7 * row + 3 * col + state) % 5 == 0;
}

std::vector<float> random_floats(std::size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  std::vector<float> out(count);
  for (float& x : out) x = value(rng);
  return out;
}

std::vector<int> download_ints(const runtime::DeviceBuffer& buffer, std::size_t count) {
  std::vector<int> host(count);
  buffer.download(host.data(), count * sizeof(int));
  return host;
}

/// Runs a mask kernel taking (in, values, out, calls) over a rows x cols tile.
struct Masked {
  std::vector<float> out;
  std::vector<int> calls;
};
Masked run_rule_kernel(CUfunction function, int threads, const std::vector<float>& in,
                       const std::vector<int>& values, int rows, int cols) {
  const runtime::DeviceBuffer d_in = gpu_test::upload(in), d_values = gpu_test::upload(values);
  runtime::DeviceBuffer d_out = gpu_test::poisoned_floats(in.size());
  runtime::DeviceBuffer d_calls(values.size() * sizeof(int));
  d_calls.fill_bytes(0);
  gpu_test::launch_on_buffers(function, threads, {&d_in, &d_values, &d_out, &d_calls});
  return {gpu_test::download_floats(d_out, static_cast<std::size_t>(rows) * cols),
          download_ints(d_calls, values.size())};
}

/// Runs the rule kernel `name` (`threads` threads) over a `rows` x 32 tile whose rows start at
/// `row0` and columns at `col0`, with one random state per column (`by_column`) or per row;
/// checks that it hides exactly what the rule hides, and something. Returns the state reads.
std::vector<int> check_rule_kernel(const runtime::LoadedModule& module, const char* name,
                                   int threads, int rows, bool by_column, int row0, int col0,
                                   std::mt19937& rng) {
  constexpr int cols = 32;
  const std::vector<float> in = random_floats(static_cast<std::size_t>(rows) * cols, rng);
  std::vector<int> values(by_column ? cols : rows);
  std::uniform_int_distribution<int> pick(0, 1000);
  for (int& v : values) v = pick(rng);
  const Masked got = run_rule_kernel(module.function(name, 0), threads, in, values, rows, cols);
  int bad = 0, hidden = 0;
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      const bool hide = hidden_by_rule(values[by_column ? j : i], row0 + i, col0 + j);
      hidden += hide;
      const float want = hide ? -kInf : in[i * cols + j];
      if (got.out[i * cols + j] != want) ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(hidden > 0);
  return got.calls;
}

}  // namespace

TEST_CASE("mask_by_columns and mask_by_rows hide what the rule hides, one state per line",
          "[gpu][vocabulary][mask]") {
  const runtime::LoadedModule module = gpu_test::load_vocabulary_program("mask_test.cu");
  std::mt19937 rng(21);

  SECTION("columns: mma slabs, rows from 100, columns from 200") {
    const std::vector<int> calls =
        check_rule_kernel(module, "mask_columns_test", 32, 32, /*by_column=*/true, 100, 200, rng);
    // Each column is held by the 8 lanes of one t; each reads its state once.
    for (int j = 0; j < 32; ++j) CHECK(calls[j] == 8);
  }

  SECTION("rows: the m64 wgmma fragment, rows from 50, columns from 300") {
    const std::vector<int> calls =
        check_rule_kernel(module, "mask_rows_test", 128, 64, /*by_column=*/false, 50, 300, rng);
    // Each row is held by the 4 lanes of one quad; each reads its state once.
    for (int i = 0; i < 64; ++i) CHECK(calls[i] == 4);
  }
}

TEST_CASE("mask_by_bits hides element 4 nt + e of each slab's bits", "[gpu][vocabulary][mask]") {
  const runtime::LoadedModule module = gpu_test::load_vocabulary_program("mask_test.cu");
  std::mt19937_64 rng(22);
  std::mt19937 rng32(23);
  const std::vector<float> in = random_floats(32 * 64, rng32);
  std::vector<unsigned long long> bits(64);
  for (auto& b : bits) b = rng() & rng();  // about a quarter of the elements
  bits[5] = 0;
  bits[6] = ~0ull;
  const runtime::DeviceBuffer d_in = gpu_test::upload(in), d_bits = gpu_test::upload(bits);
  runtime::DeviceBuffer d_out = gpu_test::poisoned_floats(in.size());
  gpu_test::launch_on_buffers(module.function("mask_bits_test", 0), 32, {&d_in, &d_bits, &d_out});
  const std::vector<float> out = gpu_test::download_floats(d_out, in.size());
  int bad = 0;
  for (int lane = 0; lane < 32; ++lane) {
    for (int s = 0; s < 2; ++s) {
      for (int nt = 0; nt < 8; ++nt) {
        for (int e = 0; e < 4; ++e) {
          // The mma.sync C layout (fragment.cuh), written out independently here.
          const int row = 16 * s + lane / 4 + 8 * (e / 2);
          const int col = 8 * nt + 2 * (lane % 4) + e % 2;
          const bool hide = (bits[lane * 2 + s] >> (4 * nt + e)) & 1;
          const float want = hide ? -kInf : in[row * 64 + col];
          if (out[row * 64 + col] != want) ++bad;
        }
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("read_tile returns the tile's class and the stored bits of the thread's rows",
          "[gpu][vocabulary][mask]") {
  const runtime::LoadedModule module = gpu_test::load_vocabulary_program("mask_test.cu");
  std::mt19937 rng(24);
  // A 200 x 300 problem in 64 x 64 tiles: 4 query blocks x 5 key blocks. Query block 1's key
  // blocks: skipped, full, partial without a slot, partial in slot 0, partial in slot 2.
  constexpr int kBlocksM = 4, kBlocksN = 5, kSlotWords = 64 * 2;
  std::vector<int> table(kBlocksM * kBlocksN, 2);
  const int row_block = 1;
  const int entries[kBlocksN] = {0, 2, 1, 1 | (1 << 2), 1 | (3 << 2)};
  for (int n = 0; n < kBlocksN; ++n) table[row_block * kBlocksN + n] = entries[n];
  std::vector<unsigned> bits(3 * kSlotWords);
  for (unsigned& w : bits) w = rng();
  const runtime::DeviceBuffer d_table = gpu_test::upload(table), d_bits = gpu_test::upload(bits);
  runtime::DeviceBuffer d_tiles(kBlocksN * sizeof(int)), d_words(kBlocksN * 64 * 2 * 4 * 4),
      d_frag(kBlocksN * 64 * 2 * 8);
  d_tiles.fill_bytes(0xff);
  struct {
    const int* minmax;
    const unsigned* predicate_bits;
  } params{static_cast<const int*>(d_table.data()), static_cast<const unsigned*>(d_bits.data())};
  int row_begin = row_block * 64;
  void* pt = d_tiles.data();
  void* pw = d_words.data();
  void* pf = d_frag.data();
  void* args[] = {&params, &row_begin, &pt, &pw, &pf};
  gpu_test::launch_one_block(module.function("read_tile_test", 0), 64, args);
  const std::vector<int> tiles = download_ints(d_tiles, kBlocksN);
  std::vector<unsigned> words(kBlocksN * 64 * 2 * 4);
  d_words.download(words.data(), words.size() * sizeof(unsigned));
  std::vector<unsigned long long> frag(kBlocksN * 64 * 2);
  d_frag.download(frag.data(), frag.size() * sizeof(unsigned long long));

  int bad_words = 0, bad_bits = 0;
  for (int n = 0; n < kBlocksN; ++n) {
    INFO("key block " << n);
    CHECK(tiles[n] == entries[n]);
    const bool partial = (entries[n] & 3) == 1;
    const int slot = (entries[n] >> 2) - 1;
    for (int thread = 0; thread < 64; ++thread) {
      const int lane = thread % 32, warp_row = 32 * (thread / 32);
      for (int s = 0; s < 2; ++s) {
        const int at = (n * 64 + thread) * 2 + s;
        const int row_local = warp_row + 16 * s + lane / 4;
        for (int i = 0; i < 4; ++i) {
          const int r = i / 2, w = i % 2;
          const unsigned want = !partial   ? 0xA5A5A5A5u
                                : slot < 0 ? 0u
                                           : bits[slot * kSlotWords + (row_local + 8 * r) * 2 + w];
          if (words[at * 4 + i] != want) ++bad_words;
        }
        if (!partial) continue;
        unsigned long long want = 0;
        for (int nt = 0; nt < 8; ++nt) {
          for (int r = 0; r < 2; ++r) {
            for (int c = 0; c < 2; ++c) {
              const int row = row_local + 8 * r, col = 8 * nt + 2 * (lane % 4) + c;
              const bool set =
                  slot >= 0 && ((bits[slot * kSlotWords + row * 2 + col / 32] >> (col % 32)) & 1);
              if (set) want |= 1ull << (4 * nt + 2 * r + c);
            }
          }
        }
        if (frag[at] != want) ++bad_bits;
      }
    }
  }
  CHECK(bad_words == 0);
  CHECK(bad_bits == 0);
}
