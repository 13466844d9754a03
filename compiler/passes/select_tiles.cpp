// select_tiles: the forward tile shape per head dim and arch, or the spec's explicit shape.
#include <fmt/format.h>

#include <array>
#include <vector>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {
namespace {

// How much per-element mask work (and so how many registers) a kernel carries: causal by
// index only, FlashMask vectors with one masked interval per column (causal), vectors with a
// lower and an upper interval (non-causal), a runtime window, or a generated element
// predicate (any expression, tensor reads included).
enum MaskCost {
  kIndexMask = 0,
  kVectorMask = 1,
  kTwoIntervalMask = 2,
  kWindowMask = 3,
  kPredicateMask = 4
};

MaskCost mask_cost(const MaskLowering& mask) {
  if (mask.element_predicate) return kPredicateMask;
  if (mask.window_by_index) return kWindowMask;
  if (mask.vectors.empty()) return kIndexMask;
  return mask.causal_by_index ? kVectorMask : kTwoIntervalMask;
}

struct Candidate {
  int head_dim, block_m, block_n, warps;
  char variant;    // 'q': Q fragments in registers, 's': Q re-read from shared memory
  MaskCost up_to;  // the costliest mask this shape compiles for without spilling
};

// Preferred first; the first that fits the target's shared memory and the mask wins. Each
// warp owns 16-row slabs of the CTA's rows. Two-slab warps (32 rows) read every K/V
// fragment once for two MMAs, which an H100 rewards (d64: 318 TFLOP/s against 226 for
// one-slab warps; d96: 327 against 239), so they are used wherever their accumulators fit
// in 255 registers without spilling: the key block shrinks as the head dim grows and as the
// mask needs more registers. d192/d256 use one-slab warps. The later shapes fit sm_80 with
// FlashMask staging and the ~99 KB of sm_86/sm_89. Measurements: docs/benchmarks/.
constexpr std::array<Candidate, 18> kCandidates{{
    {32, 128, 128, 4, 's', kIndexMask},
    {32, 128, 64, 4, 's', kPredicateMask},
    {64, 128, 96, 4, 's', kIndexMask},
    {64, 128, 64, 4, 's', kPredicateMask},
    {64, 64, 64, 4, 'q', kWindowMask},
    {96, 128, 64, 4, 's', kTwoIntervalMask},
    {96, 128, 32, 4, 's', kWindowMask},
    {96, 64, 64, 4, 'q', kPredicateMask},
    {128, 128, 48, 4, 's', kVectorMask},
    {128, 128, 32, 4, 's', kWindowMask},
    {128, 128, 64, 8, 'q', kPredicateMask},
    {192, 128, 64, 8, 's', kPredicateMask},
    {192, 128, 32, 8, 's', kPredicateMask},
    {192, 64, 32, 4, 's', kPredicateMask},
    {256, 128, 64, 8, 's', kPredicateMask},
    {256, 128, 32, 8, 's', kPredicateMask},
    {256, 64, 32, 4, 's', kPredicateMask},
    {256, 32, 32, 2, 's', kPredicateMask},
}};

constexpr int kKvStages = 2;

// Score modifiers add registers to the softmax step. Measured with the NVRTC sweep (sm_80 and
// sm_90, every mask): two-slab warps keep them without spilling while their accumulators,
// head_dim (O) + block_n (S) per thread, stay within 160; d128's 128 x 48 shape does not.
bool fits_score_mods(const Candidate& c) {
  return c.block_m / c.warps == 16 || c.head_dim + c.block_n <= 160;
}

int smem_bytes(int block_m, int block_n, const AttentionSpec& spec, const MaskLowering& mask) {
  const int element = size_of(spec.dtype);
  const int q_tile = block_m * spec.head_dim_qk * element;
  const int kv_tile = block_n * (spec.head_dim_qk + spec.head_dim_v) * element;
  const int vector_tile = block_n * static_cast<int>(mask.vectors.size()) * 4;
  return q_tile + kKvStages * (kv_tile + vector_tile);
}

TileConfig make_config(int block_m, int block_n, int warps, char variant, int smem) {
  TileConfig tiles;
  tiles.block_m = block_m;
  tiles.block_n = block_n;
  tiles.warps = warps;
  tiles.kv_stages = kKvStages;
  // Without an explicit choice, one-slab warps keep Q in registers (two-slab warps could
  // not hold it next to their accumulators).
  tiles.q_in_registers = variant == 'q' || (variant == 0 && tiles.rows_per_warp() == 16);
  tiles.smem_bytes = smem;
  return tiles;
}

// Shared memory of the sm90a forward (fwd_sm90a.cuh's kSmemBytes): alignment slack, Q, the K
// and V stages, each K stage's FlashMask values, the barriers.
int warpgroup_smem_bytes(int block_m, int block_n, int stages, const AttentionSpec& spec,
                         const MaskLowering& mask) {
  const int element = size_of(spec.dtype);
  const int vectors = block_n * static_cast<int>(mask.vectors.size()) * 4;
  return 1024 + block_m * spec.head_dim_qk * element +
         stages * (block_n * (spec.head_dim_qk + spec.head_dim_v) * element + vectors) + 8 +
         2 * (2 * stages * 8);
}

// An explicit `tiles=128xBNx12w` for the forward: the sm90a kernel (fwd_sm90a.cuh), a TMA
// producer warpgroup and two consumer warpgroups of 64 rows, on sm_90a only.
TileConfig explicit_warpgroup_forward(const AttentionSpec& spec, const MaskLowering& mask,
                                      const TargetInfo& target) {
  const TileShape& shape = spec.tiles;
  const std::string value = to_string(shape);
  if (target.arch != Arch::sm_90a) {
    throw_field_error("tiles", value, "the w suffix with target=sm_90a (wgmma, TMA)");
  }
  if (spec.head_dim_qk == 32) {
    throw_field_error("tiles", value, "the w suffix with head_dim 64, 96, 128, 192 or 256");
  }
  const int max_block_n = mask.element_predicate ? 128 : 256;
  if (shape.block_m != 128 || shape.warps != 12 || shape.block_n % 16 != 0 || shape.block_n < 16 ||
      shape.block_n > max_block_n) {
    throw_field_error(
        "tiles", value,
        fmt::format("128xBNx12w with BN a multiple of 16 up to {} for the warpgroup forward",
                    max_block_n));
  }
  constexpr int kStages = 2;
  const int smem = warpgroup_smem_bytes(shape.block_m, shape.block_n, kStages, spec, mask);
  if (smem > target.max_dynamic_smem_bytes) {
    throw_field_error("tiles", value,
                      fmt::format("shapes whose shared memory ({} bytes here) fits {}'s {} bytes",
                                  smem, name_of(target.arch), target.max_dynamic_smem_bytes));
  }
  TileConfig tiles;
  tiles.block_m = shape.block_m;
  tiles.block_n = shape.block_n;
  tiles.warps = shape.warps;
  tiles.kv_stages = kStages;
  tiles.smem_bytes = smem;
  tiles.warpgroup = true;
  return tiles;
}

// Checks an explicit `tiles=` shape: whole 16-row slabs per warp, MMA-sized key blocks,
// and shared memory within the target.
void check_explicit(const TileShape& shape, int smem, const TargetInfo& target) {
  const std::string value = to_string(shape);
  if (shape.variant == 'g') {
    throw_field_error("tiles", value, "BMxBNxW with an optional q, s or w suffix for the forward");
  }
  if (shape.warps != 1 && shape.warps != 2 && shape.warps != 4 && shape.warps != 8) {
    throw_field_error("tiles warps", value, "1, 2, 4 or 8 warps");
  }
  const int rows_per_warp = shape.block_m / shape.warps;
  if (shape.block_m % shape.warps != 0 || (rows_per_warp != 16 && rows_per_warp != 32)) {
    throw_field_error("tiles block_m", value, "16 or 32 rows per warp (block_m = 16*W or 32*W)");
  }
  if (shape.block_n % 16 != 0 || shape.block_n < 16 || shape.block_n > 128) {
    throw_field_error("tiles block_n", value, "a multiple of 16 from 16 to 128");
  }
  if (smem > target.max_dynamic_smem_bytes) {
    throw_field_error("tiles", value,
                      fmt::format("shapes whose shared memory ({} bytes here) fits {}'s {} bytes",
                                  smem, name_of(target.arch), target.max_dynamic_smem_bytes));
  }
}

// Backward main kernel. The warp-grid layout (bwd_grid_sm80.cuh) gives each product its own
// grid of 32-row warp tiles and passes P^T and dS^T through shared memory: block_n / 32 key
// warps, the rest splitting the queries of S^T / dP^T and the head dim of dK / dV; dQ = dS K
// by block_m / 32 row warps x the rest. It reads each operand fragment for two MMAs where
// the key-slab layout reads it for one, which at head dim 128 (where the shared-memory reads
// set the key-slab kernel's speed) is the faster kernel on an H100 (docs/benchmarks/). Key
// slabs (bwd_sm80.cuh): 16 keys per key warp; dim_warps > 1 splits a wide head dim's dK/dV
// accumulators over warps sharing the same keys (they recompute S^T and dP^T); dQ = dS K as
// (block_m / 16) row slabs x (warps / that) column groups of 16-multiples. Predicate masks
// with element bits, whose stored bits follow the key-slab fragments, and the deterministic
// mode, whose main kernel has no dQ product, use key slabs. On sm_90a the warpgroup layout
// (bwd_wgmma_sm90.cuh) comes first at head dims 64 and 128: 64 keys per warpgroup, every
// product on wgmma with its shared operands read by the tensor cores, the one layout past the
// mma.sync ceiling (docs/benchmarks/); it has an atomic dQ product and no element bits, so the
// deterministic mode and predicate masks keep the sm80 layouts.
struct BackwardCandidate {
  int head_dim, block_m, block_n, warps, dim_warps;
  BackwardLayout layout = BackwardLayout::key_slabs;
};

constexpr BackwardLayout kGrid = BackwardLayout::warp_grid;
constexpr BackwardLayout kWarpgroup = BackwardLayout::warpgroup;

// clang-format off
constexpr std::array<BackwardCandidate, 20> kBackwardCandidates{{
    {32, 64, 128, 8, 1},
    {32, 64, 64, 4, 1},
    {64, 64, 128, 8, 1, kWarpgroup},  // sm_90a only
    {64, 64, 128, 8, 2, kGrid},
    {64, 64, 128, 8, 1},
    {64, 64, 64, 4, 1},
    {96, 64, 128, 8, 1},
    {96, 64, 64, 8, 2},
    {96, 32, 32, 4, 2},
    {128, 64, 128, 8, 1, kWarpgroup},  // sm_90a only
    {128, 64, 128, 8, 2, kGrid},
    {128, 64, 128, 8, 1},
    {128, 64, 64, 8, 2},
    {128, 32, 64, 8, 2},
    {192, 64, 64, 8, 2},
    {192, 32, 64, 8, 2},
    {192, 32, 32, 4, 2},
    {256, 64, 64, 8, 2},
    {256, 32, 64, 8, 2},
    {256, 32, 32, 4, 2},
}};
// clang-format on

// Deterministic dQ kernel: one-slab warps (block_m = 16 * warps) over key blocks.
struct DqCandidate {
  int max_head_dim, warps, block_n;
};

constexpr std::array<DqCandidate, 5> kDqCandidates{{
    {128, 4, 64},
    {128, 4, 32},
    {256, 4, 32},
    {256, 2, 32},
    {256, 2, 16},
}};

// Score modifiers add registers to the backward: soft-capping keeps the 16-bit
// P^T (1 - tanh^2) through dP^T = V dO^T, ALiBi its slope and distances. Warps that hold more
// than 64 dK/dV columns next to 64 queries have no room for them (the NVRTC sweep over every
// mask showed spills from d96 to d256 with softcap, and at d256 with ALiBi alone in fp16), so
// modifier specs skip those shapes.
bool fits_score_mods(const BackwardCandidate& c, const AttentionSpec& spec) {
  // The warp grid keeps 32 keys x 64 columns of dK and dV per warp at d128; ALiBi's slope
  // and distances spilled there on sm_90 (NVRTC sweep), soft-capping did not.
  if (c.layout == BackwardLayout::warp_grid) return !spec.alibi;
  // The warpgroup layout compiles with both modifiers at 255 registers without spilling.
  if (c.layout == BackwardLayout::warpgroup) return true;
  return c.head_dim / c.dim_warps <= 64 || c.block_m <= 32;
}

int backward_smem(const BackwardCandidate& c, const AttentionSpec& spec, int columns) {
  const int d = spec.head_dim_qk;
  const int kv = 2 * c.block_n * d * 2;
  if (c.layout == BackwardLayout::warpgroup) {
    // 1024-byte aligned tiles: alignment slack, stages padded to 1 KB, dS^T.
    const int stage = 2 * c.block_m * d * 2 + (2 * c.block_m * 4 + 1023) / 1024 * 1024;
    return 1024 + kv + 2 * stage + c.block_n * c.block_m * 2 + c.block_n * columns * 4;
  }
  const int stages = 2 * (2 * c.block_m * d * 2 + 2 * c.block_m * 4);
  // Key slabs: dS^T for the atomic dQ product only; grid: P^T and dS^T always.
  const int tile = c.block_n * c.block_m * 2;
  const int staged = c.layout == BackwardLayout::warp_grid ? 2 * tile
                     : spec.deterministic                  ? 0
                                                           : tile;
  return kv + stages + staged + c.block_n * columns * 4;
}

int dq_smem(const DqCandidate& c, const AttentionSpec& spec, int columns) {
  const int d = spec.head_dim_qk;
  return 2 * (16 * c.warps) * d * 2 + 2 * (2 * c.block_n * d * 2 + c.block_n * columns * 4);
}

// An explicit backward shape whose shared memory fits the target, else the `tiles` error.
BackwardCandidate checked_smem(const BackwardCandidate& c, const AttentionSpec& spec,
                               const TargetInfo& target, int columns) {
  const int smem = backward_smem(c, spec, columns);
  if (smem > target.max_dynamic_smem_bytes) {
    throw_field_error("tiles", to_string(spec.tiles),
                      fmt::format("shapes whose shared memory ({} bytes here) fits {}'s {} bytes",
                                  smem, name_of(target.arch), target.max_dynamic_smem_bytes));
  }
  return c;
}

// An explicit `tiles=BMxBNxWg` for the backward main kernel: the warp-grid layout, whose
// three grids (block_n / 32 key warps; block_m / 32 dQ row warps) divide the warps and leave
// whole n16 pairs of query and head-dim columns to every warp.
BackwardCandidate explicit_backward_grid(const AttentionSpec& spec, const TargetInfo& target,
                                         int columns, const MaskLowering& mask) {
  const TileShape& shape = spec.tiles;
  const std::string value = to_string(shape);
  const int d = spec.head_dim_qk;
  if (mask.element_predicate) {
    throw_field_error("tiles", value, "BMxBNxW without the g suffix for mask=predicate");
  }
  const int key_warps = shape.block_n / 32;
  const int row_warps = shape.block_m / 32;
  const bool valid =
      shape.block_n % 32 == 0 && shape.block_m % 32 == 0 && key_warps >= 1 && row_warps >= 1 &&
      shape.warps % key_warps == 0 && shape.warps % row_warps == 0 &&
      shape.block_m % (16 * (shape.warps / key_warps)) == 0 &&
      d % (16 * (shape.warps / key_warps)) == 0 && d % (16 * (shape.warps / row_warps)) == 0;
  if (!valid) {
    throw_field_error("tiles", value,
                      "block_n and block_m multiples of 32 whose 32-row warp tiles (block_n/32 key "
                      "warps, block_m/32 dQ row warps) divide the warps, the other warps splitting "
                      "the queries and the head dim in multiples of 16");
  }
  const BackwardCandidate c{d,           shape.block_m,           shape.block_n,
                            shape.warps, shape.warps / key_warps, BackwardLayout::warp_grid};
  return checked_smem(c, spec, target, columns);
}

// An explicit `tiles=BMxBNxWw` for the backward main kernel: the warpgroup layout, which
// needs an sm_90a target and the atomic dQ product, and has one shape per head dim.
BackwardCandidate explicit_backward_warpgroup(const AttentionSpec& spec, const TargetInfo& target,
                                              int columns, const MaskLowering& mask) {
  const TileShape& shape = spec.tiles;
  const std::string value = to_string(shape);
  if (target.arch != Arch::sm_90a) {
    throw_field_error("tiles", value, "the w suffix with target=sm_90a (wgmma)");
  }
  if (mask.element_predicate) {
    throw_field_error("tiles", value, "BMxBNxW without the w suffix for mask=predicate");
  }
  if (spec.deterministic) {
    throw_field_error("tiles", value, "BMxBNxW without the w suffix with deterministic=true");
  }
  const int d = spec.head_dim_qk;
  if ((d != 64 && d != 128) || shape.block_m != 64 || shape.warps != 8 || shape.block_n != 128) {
    throw_field_error("tiles", value, "64x128x8w (head_dim 64 or 128) for the warpgroup layout");
  }
  return checked_smem({d, 64, 128, 8, 1, BackwardLayout::warpgroup}, spec, target, columns);
}

// An explicit `tiles=BMxBNxW` for the backward main kernel: block_n / 16 key warps, the rest
// of the warps splitting the head dim, and the dQ product's warp grid, all in whole tiles.
BackwardCandidate explicit_backward(const AttentionSpec& spec, const TargetInfo& target,
                                    int columns, const MaskLowering& mask) {
  const TileShape& shape = spec.tiles;
  const std::string value = to_string(shape);
  const int d = spec.head_dim_qk;
  if (shape.warps > 16) throw_field_error("tiles warps", value, "at most 16 warps (512 threads)");
  if (shape.variant == 'g') return explicit_backward_grid(spec, target, columns, mask);
  if (shape.variant == 'w') return explicit_backward_warpgroup(spec, target, columns, mask);
  if (shape.variant != 0) {
    throw_field_error("tiles", value, "BMxBNxW with an optional g or w suffix for the backward");
  }
  const int key_warps = shape.block_n / 16;
  if (shape.block_n % 16 != 0 || key_warps < 1 || shape.warps % key_warps != 0 ||
      d % (16 * (shape.warps / key_warps)) != 0) {
    throw_field_error("tiles", value,
                      "block_n a multiple of 16 whose key slabs (block_n/16) divide the warps, "
                      "the other warps splitting the head dim in multiples of 16");
  }
  const int row_warps = shape.block_m / 16;
  if (shape.block_m % 32 != 0 || shape.warps % row_warps != 0 ||
      d % (16 * (shape.warps / row_warps)) != 0) {
    throw_field_error("tiles", value,
                      "block_m a multiple of 32 whose 16-row slabs divide the warps (dQ product)");
  }
  const BackwardCandidate c{d, shape.block_m, shape.block_n, shape.warps, shape.warps / key_warps};
  return checked_smem(c, spec, target, columns);
}

BackwardTiles select_backward_tiles(const AttentionSpec& spec, const MaskLowering& mask,
                                    const TargetInfo& target) {
  const int columns = static_cast<int>(mask.vectors.size());
  BackwardTiles tiles;
  std::vector<BackwardCandidate> candidates(kBackwardCandidates.begin(), kBackwardCandidates.end());
  if (!spec.tiles.is_auto()) candidates = {explicit_backward(spec, target, columns, mask)};
  for (const BackwardCandidate& c : candidates) {
    if (c.head_dim != spec.head_dim_qk) continue;
    // The grid's gain is in the dQ product; without it (deterministic mode) key slabs were
    // faster on an H100 (d128, 8K: none 6.19 against 6.44 ms, causal 3.14 against 3.31).
    // An explicit shape (the only candidate then) is taken as given.
    if (spec.tiles.is_auto() && c.layout != BackwardLayout::key_slabs &&
        (mask.element_predicate || spec.deterministic)) {
      continue;
    }
    if (c.layout == BackwardLayout::warpgroup && target.arch != Arch::sm_90a) continue;
    if ((spec.softcap || spec.alibi) && spec.tiles.is_auto() && !fits_score_mods(c, spec)) continue;
    const int smem = backward_smem(c, spec, columns);
    if (smem > target.max_dynamic_smem_bytes) continue;
    tiles.layout = c.layout;
    tiles.block_m = c.block_m;
    tiles.block_n = c.block_n;
    tiles.warps = c.warps;
    tiles.dim_warps = c.dim_warps;
    tiles.smem_bytes = smem;
    break;
  }
  for (const DqCandidate& c : kDqCandidates) {
    if (!spec.deterministic) break;
    if (spec.head_dim_qk > c.max_head_dim) continue;
    const int smem = dq_smem(c, spec, columns);
    if (smem > target.max_dynamic_smem_bytes) continue;
    tiles.dq_block_m = 16 * c.warps;
    tiles.dq_block_n = c.block_n;
    tiles.dq_warps = c.warps;
    tiles.dq_smem_bytes = smem;
    break;
  }
  if (tiles.block_m == 0 || (spec.deterministic && tiles.dq_block_m == 0)) {
    throw InternalError(
        fmt::format("select_tiles: no backward tile shape for head_dim {} within {} bytes",
                    spec.head_dim_qk, target.max_dynamic_smem_bytes));
  }
  return tiles;
}

}  // namespace

Lowering select_tiles(const Lowering& in) {
  internal_check(in.mask && in.target, "select_tiles runs after lower_mask and select_target");
  const AttentionSpec& spec = in.spec;
  const TargetInfo& target = *in.target;
  Lowering out = in;
  if (spec.direction == Direction::backward) {
    out.backward_tiles = select_backward_tiles(spec, *in.mask, target);
    return out;
  }
  if (spec.tiles.variant == 'w') {
    out.tiles = explicit_warpgroup_forward(spec, *in.mask, target);
    return out;
  }
  if (!spec.tiles.is_auto()) {
    const TileShape& shape = spec.tiles;
    const int smem = smem_bytes(shape.block_m, shape.block_n, spec, *in.mask);
    check_explicit(shape, smem, target);
    out.tiles = make_config(shape.block_m, shape.block_n, shape.warps, shape.variant, smem);
    return out;
  }
  const MaskCost cost = mask_cost(*in.mask);
  for (const Candidate& c : kCandidates) {
    if (c.head_dim != spec.head_dim_qk || cost > c.up_to) continue;
    if ((spec.softcap || spec.alibi) && !fits_score_mods(c)) continue;
    const int smem = smem_bytes(c.block_m, c.block_n, spec, *in.mask);
    if (smem > target.max_dynamic_smem_bytes) continue;
    out.tiles = make_config(c.block_m, c.block_n, c.warps, c.variant, smem);
    return out;
  }
  throw InternalError(fmt::format("select_tiles: no tile shape for head_dim {} within {} bytes",
                                  spec.head_dim_qk, target.max_dynamic_smem_bytes));
}

}  // namespace attnjit
