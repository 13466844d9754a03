// select_tiles: the forward tile shape per head dim and arch, or the spec's explicit shape.
#include <fmt/format.h>

#include <array>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {
namespace {

struct Candidate {
  int head_dim, block_m, block_n, warps;
  char q_mode;  // 'q': Q fragments in registers, 's': Q re-read from shared memory
};

// Preferred first; the first that fits the target's shared memory wins. Each warp owns
// 16-row slabs of the CTA's rows. Two-slab warps (d = 32) read every K/V fragment once for
// two MMAs. From d = 64 on, one-slab warps: a two-slab accumulator next to the scores does
// not fit in 255 registers without spilling. At d = 128 a 128-key block with Q held in
// registers measured fastest among spill-free shapes on an H100 (305 TFLOP/s against 247 for
// 128x64 with Q in shared memory; docs/benchmarks/forward-d128.md). The narrower shapes fit
// sm_80 with FlashMask staging and the ~99 KB of sm_86/sm_89.
constexpr std::array<Candidate, 16> kCandidates{{
    {32, 128, 128, 4, 's'},
    {32, 128, 64, 4, 's'},
    {64, 128, 128, 8, 'q'},
    {64, 128, 64, 8, 'q'},
    {64, 64, 64, 4, 'q'},
    {96, 128, 64, 8, 'q'},
    {96, 64, 64, 4, 'q'},
    {128, 128, 128, 8, 'q'},
    {128, 128, 64, 8, 'q'},
    {128, 64, 64, 4, 'q'},
    {192, 128, 64, 8, 's'},
    {192, 64, 32, 4, 's'},
    {256, 128, 64, 8, 's'},
    {256, 128, 32, 8, 's'},
    {256, 64, 32, 4, 's'},
    {256, 32, 32, 2, 's'},
}};

constexpr int kKvStages = 2;

int smem_bytes(int block_m, int block_n, const AttentionSpec& spec, const MaskLowering& mask) {
  const int element = size_of(spec.dtype);
  const int q_tile = block_m * spec.head_dim_qk * element;
  const int kv_tile = block_n * (spec.head_dim_qk + spec.head_dim_v) * element;
  const int vector_tile = block_n * static_cast<int>(mask.vectors.size()) * 4;
  return q_tile + kKvStages * (kv_tile + vector_tile);
}

TileConfig make_config(int block_m, int block_n, int warps, char q_mode, int smem) {
  TileConfig tiles;
  tiles.block_m = block_m;
  tiles.block_n = block_n;
  tiles.warps = warps;
  tiles.kv_stages = kKvStages;
  // Without an explicit choice, one-slab warps keep Q in registers (two-slab warps could
  // not hold it next to their accumulators).
  tiles.q_in_registers = q_mode == 'q' || (q_mode == 0 && tiles.rows_per_warp() == 16);
  tiles.smem_bytes = smem;
  return tiles;
}

// Checks an explicit `tiles=` shape: whole 16-row slabs per warp, MMA-sized key blocks,
// and shared memory within the target.
void check_explicit(const TileShape& shape, int smem, const TargetInfo& target) {
  const std::string value = to_string(shape);
  if (shape.warps != 1 && shape.warps != 2 && shape.warps != 4 && shape.warps != 8) {
    throw_field_error("tiles warps", value, "1, 2, 4 or 8 warps");
  }
  const int rows_per_warp = shape.block_m / shape.warps;
  if (shape.block_m % shape.warps != 0 || (rows_per_warp != 16 && rows_per_warp != 32)) {
    throw_field_error("tiles block_m", value, "16 or 32 rows per warp (block_m = 16*W or 32*W)");
  }
  if (shape.block_n != 16 && shape.block_n != 32 && shape.block_n != 64 &&
      shape.block_n != 128) {
    throw_field_error("tiles block_n", value, "16, 32, 64 or 128");
  }
  if (smem > target.max_dynamic_smem_bytes) {
    throw_field_error("tiles", value,
                      fmt::format("shapes whose shared memory ({} bytes here) fits {}'s {} bytes",
                                  smem, name_of(target.arch), target.max_dynamic_smem_bytes));
  }
}

}  // namespace

Lowering select_tiles(const Lowering& in) {
  internal_check(in.mask && in.target, "select_tiles runs after lower_mask and select_target");
  const AttentionSpec& spec = in.spec;
  const TargetInfo& target = *in.target;
  Lowering out = in;
  if (!spec.tiles.is_auto()) {
    const TileShape& shape = spec.tiles;
    const int smem = smem_bytes(shape.block_m, shape.block_n, spec, *in.mask);
    check_explicit(shape, smem, target);
    out.tiles = make_config(shape.block_m, shape.block_n, shape.warps, shape.q_mode, smem);
    return out;
  }
  for (const Candidate& c : kCandidates) {
    if (c.head_dim != spec.head_dim_qk) continue;
    const int smem = smem_bytes(c.block_m, c.block_n, spec, *in.mask);
    if (smem > target.max_dynamic_smem_bytes) continue;
    out.tiles = make_config(c.block_m, c.block_n, c.warps, c.q_mode, smem);
    return out;
  }
  throw InternalError(fmt::format("select_tiles: no tile shape for head_dim {} within {} bytes",
                                  spec.head_dim_qk, target.max_dynamic_smem_bytes));
}

}  // namespace attnjit
