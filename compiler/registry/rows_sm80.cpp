// The rows of the sm80 family: the sm80 forward, the two layouts of the sm80 backward
// main kernel and the deterministic dQ kernel, with their tile candidates (the fastest measured
// shapes, kept spill-free by the NVRTC sweep), shared-memory formulas and the checks of
// explicit `tiles=` shapes.
#include <array>

#include "attnjit/error.hpp"
#include "compiler/registry/rows.hpp"

namespace attnjit::registry {
namespace {

// ---------------------------------------------------------------------------------------------
// Forward, sm80 (sm80/forward.cuh).

constexpr int kForwardStages = 2;

// Score modifiers add registers to the softmax step. Measured with the NVRTC sweep (sm_80 and
// sm_90, every mask): two-slab warps keep them without spilling while their accumulators,
// head_dim_v (O) + block_n (S) per thread, stay within 160; d128's 128 x 48 shape does not.
constexpr TileCandidate forward_pair(int d_qk, int d_v, int block_m, int block_n, int warps,
                                     TileLayout q, MaskCost up_to) {
  const bool room = block_m / warps == 16 || d_v + block_n <= 160;
  const bool q_in_registers = q == TileLayout::q_registers;
  return {d_qk, block_m, block_n, warps, 1, kForwardStages, q_in_registers, up_to, room, room, d_v};
}
constexpr TileCandidate forward_candidate(int d, int block_m, int block_n, int warps, TileLayout q,
                                          MaskCost up_to) {
  return forward_pair(d, d, block_m, block_n, warps, q, up_to);
}

// Preferred first; the first that fits the target's shared memory and the mask wins. Each
// warp owns 16-row slabs of the CTA's rows. Two-slab warps (32 rows) read every K/V
// fragment once for two MMAs, which is much faster than one-slab warps, so they are used
// wherever their accumulators fit in 255 registers without spilling: the key block shrinks as
// the head dim grows and as the mask needs more registers. d192/d256 use one-slab warps. The
// later shapes fit sm_80 with FlashMask staging and the ~99 KB of sm_86/sm_89. Unequal head
// dims take the shapes of the equal dims whose O accumulator (head_dim_v) they share, Q and K
// staying in shared memory where head_dim_qk is wider.
constexpr std::array<TileCandidate, 29> kForwardCandidates{{
    forward_candidate(32, 128, 128, 4, TileLayout::q_shared, MaskCost::index),
    forward_candidate(32, 128, 64, 4, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(64, 128, 96, 4, TileLayout::q_shared, MaskCost::index),
    forward_candidate(64, 128, 64, 4, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(64, 64, 64, 4, TileLayout::q_registers, MaskCost::window),
    forward_pair(64, 128, 128, 48, 4, TileLayout::q_shared, MaskCost::vectors),
    forward_pair(64, 128, 128, 32, 4, TileLayout::q_shared, MaskCost::window),
    forward_pair(64, 128, 128, 64, 8, TileLayout::q_registers, MaskCost::predicate),
    forward_candidate(96, 128, 64, 4, TileLayout::q_shared, MaskCost::two_intervals),
    forward_candidate(96, 128, 32, 4, TileLayout::q_shared, MaskCost::window),
    forward_candidate(96, 64, 64, 4, TileLayout::q_registers, MaskCost::predicate),
    forward_candidate(128, 128, 48, 4, TileLayout::q_shared, MaskCost::vectors),
    forward_candidate(128, 128, 32, 4, TileLayout::q_shared, MaskCost::window),
    forward_candidate(128, 128, 64, 8, TileLayout::q_registers, MaskCost::predicate),
    forward_pair(128, 64, 128, 64, 4, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(192, 128, 64, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(192, 128, 32, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(192, 64, 32, 4, TileLayout::q_shared, MaskCost::predicate),
    forward_pair(192, 128, 128, 48, 4, TileLayout::q_shared, MaskCost::vectors),
    forward_pair(192, 128, 128, 64, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_pair(192, 128, 128, 32, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_pair(192, 128, 64, 32, 4, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(256, 128, 64, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(256, 128, 32, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(256, 64, 32, 4, TileLayout::q_shared, MaskCost::predicate),
    forward_candidate(256, 32, 32, 2, TileLayout::q_shared, MaskCost::predicate),
    forward_pair(256, 128, 128, 64, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_pair(256, 128, 128, 32, 8, TileLayout::q_shared, MaskCost::predicate),
    forward_pair(256, 128, 64, 32, 4, TileLayout::q_shared, MaskCost::predicate),
}};

constexpr std::array<TileLayout, 3> kForwardLayouts{TileLayout::automatic, TileLayout::q_registers,
                                                    TileLayout::q_shared};

constexpr std::array<ConfigField, 7> kForwardConfig{
    ConfigField::head_dims_qk_v, ConfigField::block_m,   ConfigField::block_n,
    ConfigField::warps,          ConfigField::kv_stages, ConfigField::q_in_registers,
    ConfigField::return_lse};

// Q, then the stages of K, V and the FlashMask values of their key block.
int forward_smem(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  const int element = size_of(spec.dtype);
  const int q_tile = c.block_m * spec.head_dim_qk * element;
  const int kv_tile = c.block_n * (spec.head_dim_qk + spec.head_dim_v) * element;
  const int vector_tile = c.block_n * static_cast<int>(mask.vectors.size()) * 4;
  return q_tile + c.kv_stages * (kv_tile + vector_tile);
}

// Whole 16-row slabs per warp (one or two), MMA-sized key blocks. Without a layout, one-slab
// warps keep Q in registers (two-slab warps could not hold it next to their accumulators).
TileCandidate forward_explicit(const TileShape& shape, const AttentionSpec& spec,
                               const MaskLowering&) {
  const std::string value = to_string(shape);
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
  TileCandidate c{spec.head_dim_qk, shape.block_m, shape.block_n, shape.warps, 1, kForwardStages};
  c.head_dim_v = spec.head_dim_v;
  c.q_in_registers = shape.layout == TileLayout::q_registers ||
                     (shape.layout == TileLayout::automatic && rows_per_warp == 16);
  return c;
}

// ---------------------------------------------------------------------------------------------
// Backward main kernel.

constexpr std::array<ConfigField, 5> kBackwardConfig{ConfigField::head_dims_qk_v,
                                                     ConfigField::block_m, ConfigField::block_n,
                                                     ConfigField::warps, ConfigField::atomic_dq};
constexpr std::array<ConfigField, 6> kKeySlabConfig{
    ConfigField::head_dims_qk_v, ConfigField::block_m,   ConfigField::block_n,
    ConfigField::warps,          ConfigField::dim_warps, ConfigField::atomic_dq};

// The warp grid (sm80/backward_grid.cuh) keeps 32 keys x 64 columns of dK and dV per warp at
// d128; ALiBi's slope and distances spilled there on sm_90 (NVRTC sweep), soft-capping did
// not. (128, 64) holds fewer dK/dV columns than d128; (64, 128) spilled (NVRTC sweep, sm_80)
// and takes key slabs.
constexpr TileCandidate grid_candidate(int d_qk, int d_v, int block_m, int block_n, int warps,
                                       int dim_warps) {
  TileCandidate c{d_qk, block_m, block_n, warps, dim_warps};
  c.alibi = false;
  c.head_dim_v = d_v;
  return c;
}
constexpr std::array<TileLayout, 1> kGridLayouts{TileLayout::grid};
constexpr std::array<TileCandidate, 3> kGridCandidates{{
    grid_candidate(64, 64, 64, 128, 8, 2),
    grid_candidate(128, 128, 64, 128, 8, 2),
    grid_candidate(128, 64, 64, 128, 8, 2),
}};

// Key slabs (sm80/backward_slabs.cuh): warps that hold more than 64 + 64 dK/dV columns next to
// 64 queries have no room for the modifiers (the NVRTC sweep over every mask showed spills from
// d96 to d256 with softcap, and at d256 with ALiBi alone in fp16).
constexpr TileCandidate slab_pair(int d_qk, int d_v, int block_m, int block_n, int warps,
                                  int dim_warps) {
  const bool room = (d_qk + d_v) / dim_warps <= 128 || block_m <= 32;
  return {d_qk, block_m, block_n, warps, dim_warps, 0, false, MaskCost::predicate, room, room, d_v};
}
constexpr TileCandidate slab_candidate(int d, int block_m, int block_n, int warps, int dim_warps) {
  return slab_pair(d, d, block_m, block_n, warps, dim_warps);
}
// A bare shape too: the backward's default layout (canonicalize spells it `slabs`).
constexpr std::array<TileLayout, 2> kKeySlabLayouts{TileLayout::automatic, TileLayout::slabs};
// Unequal head dims take the shapes of the equal dims with as many dK + dV columns or more.
constexpr std::array<TileCandidate, 28> kKeySlabCandidates{{
    slab_candidate(32, 64, 128, 8, 1),  slab_candidate(32, 64, 64, 4, 1),
    slab_candidate(64, 64, 128, 8, 1),  slab_candidate(64, 64, 64, 4, 1),
    slab_pair(64, 128, 64, 128, 8, 1),  slab_pair(64, 128, 64, 64, 8, 2),
    slab_pair(64, 128, 32, 64, 8, 2),   slab_candidate(96, 64, 128, 8, 1),
    slab_candidate(96, 64, 64, 8, 2),   slab_candidate(96, 32, 32, 4, 2),
    slab_candidate(128, 64, 128, 8, 1), slab_candidate(128, 64, 64, 8, 2),
    slab_candidate(128, 32, 64, 8, 2),  slab_pair(128, 64, 64, 128, 8, 1),
    slab_pair(128, 64, 64, 64, 8, 2),   slab_pair(128, 64, 32, 64, 8, 2),
    slab_candidate(192, 64, 64, 8, 2),  slab_candidate(192, 32, 64, 8, 2),
    slab_candidate(192, 32, 32, 4, 2),  slab_pair(192, 128, 64, 64, 8, 2),
    slab_pair(192, 128, 32, 64, 8, 2),  slab_pair(192, 128, 32, 32, 4, 2),
    slab_candidate(256, 64, 64, 8, 2),  slab_candidate(256, 32, 64, 8, 2),
    slab_candidate(256, 32, 32, 4, 2),  slab_pair(256, 128, 64, 64, 8, 2),
    slab_pair(256, 128, 32, 64, 8, 2),  slab_pair(256, 128, 32, 32, 4, 2),
}};

int columns(const MaskLowering& mask) {
  return static_cast<int>(mask.vectors.size());
}

// K and V, two stages of (Q, dO, LSE, D), the staged 16-bit tiles (grid: P^T and dS^T; key
// slabs: dS^T for the atomic dQ product only) and the vector values. Q and K have head_dim_qk
// columns, V and dO head_dim_v.
int sm80_backward_smem(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask,
                       int staged_tiles) {
  const int dims = spec.head_dim_qk + spec.head_dim_v;
  const int kv = c.block_n * dims * 2;
  const int stages = 2 * (c.block_m * dims * 2 + 2 * c.block_m * 4);
  return kv + stages + staged_tiles * c.block_n * c.block_m * 2 + c.block_n * columns(mask) * 4;
}

int grid_smem(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  return sm80_backward_smem(c, spec, mask, 2);
}

int key_slab_smem(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  return sm80_backward_smem(c, spec, mask, spec.deterministic ? 0 : 1);
}

void check_backward_warps(const TileShape& shape) {
  if (shape.warps > 16) {
    throw_field_error("tiles warps", to_string(shape), "at most 16 warps (512 threads)");
  }
}

// Three grids of 32-row warp tiles (block_n / 32 key warps; block_m / 32 dQ row warps) divide
// the warps and leave whole n16 pairs of query and head-dim columns to every warp.
TileCandidate grid_explicit(const TileShape& shape, const AttentionSpec& spec,
                            const MaskLowering&) {
  check_backward_warps(shape);
  const int d_qk = spec.head_dim_qk;
  const int d_v = spec.head_dim_v;
  const int key_warps = shape.block_n / 32;
  const int row_warps = shape.block_m / 32;
  const bool valid =
      shape.block_n % 32 == 0 && shape.block_m % 32 == 0 && key_warps >= 1 && row_warps >= 1 &&
      shape.warps % key_warps == 0 && shape.warps % row_warps == 0 &&
      shape.block_m % (16 * (shape.warps / key_warps)) == 0 &&
      d_qk % (16 * (shape.warps / key_warps)) == 0 && d_v % (16 * (shape.warps / key_warps)) == 0 &&
      d_qk % (16 * (shape.warps / row_warps)) == 0;
  if (!valid) {
    throw_field_error("tiles", to_string(shape),
                      "block_n and block_m multiples of 32 whose 32-row warp tiles (block_n/32 key "
                      "warps, block_m/32 dQ row warps) divide the warps, the other warps splitting "
                      "the queries and the head dims in multiples of 16");
  }
  TileCandidate c{d_qk, shape.block_m, shape.block_n, shape.warps, shape.warps / key_warps};
  c.head_dim_v = d_v;
  return c;
}

// block_n / 16 key warps, the rest of the warps splitting the head dim, and the dQ product's
// warp grid, all in whole tiles.
TileCandidate key_slab_explicit(const TileShape& shape, const AttentionSpec& spec,
                                const MaskLowering&) {
  check_backward_warps(shape);
  const std::string value = to_string(shape);
  const int d_qk = spec.head_dim_qk;
  const int d_v = spec.head_dim_v;
  const int key_warps = shape.block_n / 16;
  if (shape.block_n % 16 != 0 || key_warps < 1 || shape.warps % key_warps != 0 ||
      d_qk % (16 * (shape.warps / key_warps)) != 0 || d_v % (16 * (shape.warps / key_warps)) != 0) {
    throw_field_error("tiles", value,
                      "block_n a multiple of 16 whose key slabs (block_n/16) divide the warps, "
                      "the other warps splitting the head dims in multiples of 16");
  }
  const int row_warps = shape.block_m / 16;
  if (shape.block_m % 32 != 0 || shape.warps % row_warps != 0 ||
      d_qk % (16 * (shape.warps / row_warps)) != 0) {
    throw_field_error("tiles", value,
                      "block_m a multiple of 32 whose 16-row slabs divide the warps (dQ product)");
  }
  TileCandidate c{d_qk, shape.block_m, shape.block_n, shape.warps, shape.warps / key_warps};
  c.head_dim_v = d_v;
  return c;
}

KernelRow backward_row(std::string_view id, KernelFamily family, std::string_view header,
                       std::string_view kernel_struct, std::string_view body) {
  KernelRow row;
  row.id = id;
  row.role = KernelRole::backward;
  row.family = family;
  row.header = header;
  row.kernel_struct = kernel_struct;
  row.body = body;
  row.params = ParamBlock::attention;
  // All 255 registers per thread: ptxas could otherwise cap a 256-thread kernel at 128 to fit
  // two blocks, and spill.
  row.min_blocks_per_sm = 1;
  row.support.targets.assign(kAllArchs.begin(), kAllArchs.end());
  row.support.unequal_head_dims = true;
  row.config = kBackwardConfig;
  row.launch = key_block_launch;
  row.buffers = backward_buffers;
  return row;
}

// ---------------------------------------------------------------------------------------------
// Deterministic dQ kernel (sm80/backward_dq.cuh): one-slab warps (block_m = 16 * warps) over key
// blocks; head dims up to 128 take the first two shapes. Unequal head dims take those of their
// dQ's head_dim_qk.
constexpr TileCandidate dq_pair(int d_qk, int d_v, int warps, int block_n) {
  TileCandidate c{d_qk, 16 * warps, block_n, warps};
  c.head_dim_v = d_v;
  return c;
}
constexpr TileCandidate dq_candidate(int d, int warps, int block_n) {
  return dq_pair(d, d, warps, block_n);
}
constexpr std::array<TileCandidate, 24> kDqCandidates{{
    dq_candidate(32, 4, 64),  dq_candidate(32, 4, 32),  dq_candidate(64, 4, 64),
    dq_candidate(64, 4, 32),  dq_pair(64, 128, 4, 64),  dq_pair(64, 128, 4, 32),
    dq_candidate(96, 4, 64),  dq_candidate(96, 4, 32),  dq_candidate(128, 4, 64),
    dq_candidate(128, 4, 32), dq_pair(128, 64, 4, 64),  dq_pair(128, 64, 4, 32),
    dq_candidate(192, 4, 32), dq_candidate(192, 2, 32), dq_candidate(192, 2, 16),
    dq_pair(192, 128, 4, 32), dq_pair(192, 128, 2, 32), dq_pair(192, 128, 2, 16),
    dq_candidate(256, 4, 32), dq_candidate(256, 2, 32), dq_candidate(256, 2, 16),
    dq_pair(256, 128, 4, 32), dq_pair(256, 128, 2, 32), dq_pair(256, 128, 2, 16),
}};

constexpr std::array<ConfigField, 4> kDqConfig{ConfigField::head_dims_qk_v, ConfigField::block_m,
                                               ConfigField::block_n, ConfigField::warps};

// Q (head_dim_qk columns) and dO (head_dim_v), two stages of K, V and the vector values.
int dq_smem(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  const int dims = spec.head_dim_qk + spec.head_dim_v;
  return c.block_m * dims * 2 + 2 * (c.block_n * dims * 2 + c.block_n * columns(mask) * 4);
}

std::vector<BufferNeed> dq_buffers(const KernelDesc& kernel, const Lowering& ir) {
  std::vector<BufferNeed> needs =
      attention_mask_buffers(kernel, ir, ParamField::minmax_dq, ParamField::predicate_bits_dq);
  needs.push_back(row_dot(ir));
  needs.push_back(lse_log2(ir));
  return needs;
}

}  // namespace

RowLaunch key_block_launch(const KernelDesc& kernel, const Lowering&) {
  return single_phase(kernel, paired_heads(ceil_div(Extent::seqlen_k, kernel.block_n)));
}

std::vector<BufferNeed> backward_buffers(const KernelDesc& kernel, const Lowering& ir) {
  std::vector<BufferNeed> needs =
      attention_mask_buffers(kernel, ir, ParamField::minmax, ParamField::predicate_bits);
  needs.push_back(row_dot(ir));
  needs.push_back(lse_log2(ir));
  if (dq_accumulated(ir)) needs.push_back(dq_accum(ir));
  needs.push_back(dk_partial(ir));
  needs.push_back(dv_partial(ir));
  return needs;
}

RowLaunch query_block_launch(const KernelDesc& kernel, const Lowering&) {
  return single_phase(kernel, paired_heads(ceil_div(Extent::seqlen_q, kernel.block_m)));
}

std::vector<BufferNeed> forward_buffers(const KernelDesc& kernel, const Lowering& ir) {
  return attention_mask_buffers(kernel, ir, ParamField::minmax, ParamField::predicate_bits);
}

KernelRow forward_sm80() {
  KernelRow row;
  row.id = "forward.sm80";
  row.role = KernelRole::forward;
  row.header = "attnjit/sm80/forward.cuh";
  row.kernel_struct = "ForwardSm80";
  row.body = "forward_sm80";
  row.params = ParamBlock::attention;
  row.support.targets.assign(kAllArchs.begin(), kAllArchs.end());
  row.support.unequal_head_dims = true;
  row.tiles_layouts = kForwardLayouts;
  row.candidates = kForwardCandidates;
  row.config = kForwardConfig;
  row.smem_bytes = forward_smem;
  row.explicit_tiles = forward_explicit;
  row.launch = query_block_launch;
  row.buffers = forward_buffers;
  return row;
}

KernelRow backward_grid_sm80() {
  KernelRow row =
      backward_row("backward_grid.sm80", KernelFamily::sm80, "attnjit/sm80/backward_grid.cuh",
                   "BackwardGridSm80", "backward_grid_sm80");
  // Its gain is in the dQ product; without it (deterministic mode) key slabs are faster, so
  // it is taken there only when asked for.
  row.support.auto_deterministic = false;
  row.support.predicate_masks = false;
  row.tiles_layouts = kGridLayouts;
  row.candidates = kGridCandidates;
  row.smem_bytes = grid_smem;
  row.explicit_tiles = grid_explicit;
  return row;
}

KernelRow backward_slabs_sm80() {
  KernelRow row =
      backward_row("backward_slabs.sm80", KernelFamily::sm80, "attnjit/sm80/backward_slabs.cuh",
                   "BackwardSlabsSm80", "backward_slabs_sm80");
  row.tiles_layouts = kKeySlabLayouts;
  row.candidates = kKeySlabCandidates;
  row.config = kKeySlabConfig;
  row.smem_bytes = key_slab_smem;
  row.explicit_tiles = key_slab_explicit;
  return row;
}

KernelRow backward_dq_sm80() {
  KernelRow row =
      backward_row("backward_dq.sm80", KernelFamily::sm80, "attnjit/sm80/backward_dq.cuh",
                   "BackwardDqSm80", "backward_dq_sm80");
  row.role = KernelRole::backward_dq;
  row.support.atomic = false;
  row.candidates = kDqCandidates;
  row.config = kDqConfig;
  row.smem_bytes = dq_smem;
  row.launch = query_block_launch;
  row.buffers = dq_buffers;
  return row;
}

}  // namespace attnjit::registry
