// The backward main kernel of the sm90a family (sm90a/backward.cuh): a TMA producer warpgroup and
// two wgmma consumer warpgroups, Q, dO, LSE and D streamed through a ring of stages (three at
// head_dim_qk 192, else two), dQ added to its fp32 accumulator by TMA reductions from shared
// memory, dK and dV stored by TMA; its parameters are BwdParams and the TMA maps of q, d_o, k, v,
// the dQ accumulator, d_k and d_v. Head dims 64, 96 and 128: block_n = 128, the consumers split
// the keys; head dims 192 and 256: block_n = 64, the consumers split the head dim; every mask.
// Unequal head dims (Q, K, dQ and dK head_dim_qk wide, V, dO and dV head_dim_v): (192, 128) and
// (256, 128) split the head dims, (128, 64) and (64, 128) the keys. The automatic choice on sm_90a
// at those head dims, in both modes; `tiles=64x128x12:warpgroups` / `64x64x12:warpgroups` forces
// it. At d128 without a mask or soft-capping its query blocks have 80 rows
// (`80x128x12:warpgroups`, dQ^T = K^T dS^T), which takes less time than 64 rows there.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit_wgmma.hpp"
#include "compiler/registry/rows.hpp"

namespace attnjit::registry {
namespace {

constexpr int kStages = 2;

// head_dim_v 0: equal head dims.
constexpr TileCandidate warpgroups(int d, int block_m, int d_v = 0) {
  TileCandidate c{d, block_m, 128, 12, 1, kStages};
  c.head_dim_v = d_v;
  return c;
}

// A head dim above 128 (192, 256): 64 keys per CTA, the consumers split the head dims
// (sm90a/backward.cuh's kSplitHeadDim). head_dim_v 0: equal head dims. There a stage holds the
// consumers' fp32 dQ until the writers' reductions have read it, so the next block's Q and dO
// wait for them with two stages: head_dim_qk 192 takes a third (it fits; at 256 it does not).
constexpr TileCandidate wide(int d, int d_v = 0) {
  TileCandidate c{d, 64, 64, 12, 1, d == 192 ? 3 : kStages};
  c.head_dim_v = d_v;
  return c;
}

bool is_wide(const AttentionSpec& spec) {
  return spec.head_dim_qk > 128 || spec.head_dim_v > 128;
}

// Query blocks of 80 rows at d128 without a mask (fits): dQ^T = K^T dS^T
// (backward_products.cuh). Unequal head dims up to 128 take d128's 64-row shape.
constexpr std::array<TileCandidate, 10> kCandidates{{
    warpgroups(64, 64),
    warpgroups(96, 64),
    warpgroups(128, 80),
    warpgroups(128, 64),
    wide(192),
    wide(256),
    warpgroups(128, 64, 64),
    warpgroups(64, 64, 128),
    wide(192, 128),
    wide(256, 128),
}};

constexpr std::array<ConfigField, 6> kConfig{
    ConfigField::head_dims_qk_v, ConfigField::block_m,   ConfigField::block_n,
    ConfigField::kv_stages,      ConfigField::atomic_dq, ConfigField::register_split};

constexpr std::array<TileLayout, 1> kLayouts{TileLayout::warpgroups};

// Writer warps of the producer warpgroup issue the dQ reductions: the consumers hand each dQ
// tile over instead of waiting, before their dS^T barrier, until the last tile's reductions
// have read the buffer, which is faster than the consumers issuing them. The writers (the
// producer's walk, the reductions, in the deterministic mode the dQ turns; the wide layout's
// also release its stages) need a producer warpgroup of 40 registers (ptxas spilled below that
// under FlashMask), which leaves the consumers 232 instead of 240: enough at head dim 128 under
// FlashMask too since a partial block's rule compares compile-time query offsets with bounds
// per key (backward_common.cuh's mask_scores_by_key_bounds; a query index per element spilled 4-12
// bytes under the causal masks of one or two vectors). 80-row blocks need the consumers' 240
// registers: their producer warpgroup keeps 24, without a mask (the writers' walk is trivial) and
// with warp 3 loading the row statistics (the producer warp spilled with them).
int producer_registers(const KernelTiles& tiles, const AttentionSpec&, const MaskLowering&) {
  return tiles.block_m == 80 ? 24 : 40;
}

// sm90a/backward.cuh's kSmemBytes: alignment slack, K and V, the stages (Q, dO, the extra part
// of the consumers' fp32 dQ where it outgrows them, and their LSE, D and block index), two
// [key][query] tiles (dS^T of alternate blocks, or P^T and dS^T), the fp32 dQ buffers, the key
// block's FlashMask values padded to 8 bytes, the K/V barrier and the ring's barriers.
int smem_bytes(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  const int d = spec.head_dim_qk;
  const int element = size_of(spec.dtype);
  const int kv = c.block_n * (d + spec.head_dim_v) * element;
  const int q_do = c.block_m * (d + spec.head_dim_v) * element;
  const int dq_extra = is_wide(spec) ? std::max(0, c.block_m * d * 4 - q_do) : 0;
  const int tiles = q_do + dq_extra;
  const int vectors = (c.block_n * static_cast<int>(mask.vectors.size()) * 4 + 7) / 8 * 8;
  // 64-row stages keep their statistics after the tiles, padded to 1 KB; 80-row ones in an
  // area of their own (16-byte aligned), with no alignment slack.
  const bool stats_in_stage = c.block_m % 64 == 0;
  const int align = stats_in_stage ? 1024 : 16;
  const int stats = (2 * c.block_m * 4 + 8 + align - 1) / align * align;
  // dQ buffers: none where the consumers split the head dim (dQ goes through the stages), one
  // where each consumer owns 64 or more of dQ's columns, else one per consumer.
  const int dq_buffers = is_wide(spec) ? 0 : d / 2 >= 64 ? 1 : 2;
  return (stats_in_stage ? 1024 : 0) + kv + c.kv_stages * (tiles + stats) +
         2 * c.block_n * c.block_m * element + dq_buffers * c.block_m * d * 4 + vectors + 8 +
         2 * c.kv_stages * 8;
}

// 80-row query blocks (d128): without a mask and soft-capping only. Those kernels need the
// consumers' 240 registers; the masks' and soft-capping's work spilled there (NVRTC 13.0: 8-100
// bytes under causal, soft-capping and FlashMask), and a FlashMask's values do not fit the
// shared memory beside two or four vectors.
bool eighty_rows_fit(const AttentionSpec& spec, const MaskLowering& mask) {
  return spec.head_dim_qk == 128 && spec.head_dim_v == 128 && !spec.softcap &&
         !mask.element_predicate && !mask.window_by_index && !mask.causal_by_index &&
         mask.vectors.empty();
}

bool fits(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  return c.block_m != 80 || eighty_rows_fit(spec, mask);
}

// `tiles=64x128x12:warpgroups`: 64 queries per stage, two consumer warpgroups of 64 keys and a
// producer warpgroup; head dims 64, 96 and 128 and the pairs (128, 64) and (64, 128)
// (`80x128x12:warpgroups`: 80 queries, where eighty_rows_fit). `tiles=64x64x12:warpgroups`: head dims 192 and 256 and the pairs (192, 128)
// and (256, 128), the consumers split the head dims over 64 keys.
TileCandidate explicit_tiles(const TileShape& shape, const AttentionSpec& spec,
                             const MaskLowering& mask) {
  const std::string value = to_string(shape);
  if (is_wide(spec)) {
    if (shape.block_m != 64 || shape.block_n != 64 || shape.warps != 12) {
      throw_field_error(
          "tiles", value,
          spec.head_dim_v == spec.head_dim_qk
              ? fmt::format("64x64x12:warpgroups for the sm90a backward at head_dim={}",
                            spec.head_dim_qk)
              : fmt::format("64x64x12:warpgroups for the sm90a backward at head_dim_qk={} "
                            "head_dim_v={}",
                            spec.head_dim_qk, spec.head_dim_v));
    }
    return wide(spec.head_dim_qk, spec.head_dim_v == spec.head_dim_qk ? 0 : spec.head_dim_v);
  }
  if (spec.head_dim_qk != 64 && spec.head_dim_qk != 96 && spec.head_dim_qk != 128) {
    throw_field_error("tiles", fmt::format("{} with head_dim={}", value, spec.head_dim_qk),
                      "BMxBNxW:warpgroups with head_dim 64, 96, 128, 192 or 256");
  }
  const bool eighty = shape.block_m == 80 && eighty_rows_fit(spec, mask);
  if ((shape.block_m != 64 && !eighty) || shape.block_n != 128 || shape.warps != 12) {
    throw_field_error("tiles", value,
                      "64x128x12:warpgroups for the sm90a backward, or 80x128x12:warpgroups at "
                      "head_dim=128 with mask=none and no softcap");
  }
  return warpgroups(spec.head_dim_qk, shape.block_m,
                    spec.head_dim_v == spec.head_dim_qk ? 0 : spec.head_dim_v);
}

// sm90a/backward.cuh's TMA boxes. Q, dO, K and V: one panel of their tiles (kPanelColsQK for
// Q and K, kPanelColsV for V and dO: 64 columns of the consumer's columns, all of the head dim
// or its half where the consumers split it, else 32; the panel's row bytes its swizzle) of the
// query block or of the key block; dK and dV: a panel of a consumer's 64 keys. The fp32 boxes:
// the dQ accumulator's 128-byte rows of the query block (32 columns), or where the consumers
// split the head dim one Q panel's bytes (kDqBoxCols: 16 columns at 32-column panels); in the
// atomic mode GQA's dK and dV sums, 32 columns of a consumer's 64 keys (backward_epilogue.cuh).
std::vector<TensorMapBox> tensor_maps(const KernelDesc& kernel, const Lowering& ir) {
  const bool wide_layout = is_wide(ir.spec);
  const int element = size_of(ir.spec.dtype);
  const auto panel_of = [&](int d) {
    const int cols = wide_layout ? d / 2 : d;
    return cols % 64 == 0 ? 64 : 32;
  };
  const int qk = panel_of(ir.spec.head_dim_qk);
  const int v = panel_of(ir.spec.head_dim_v);
  const int dq_cols = wide_layout ? qk / 2 : 32;
  std::vector<TensorMapBox> maps{
      {MapTensor::q, kernel.block_m, qk, qk * element},
      {MapTensor::k, kernel.block_n, qk, qk * element},
      {MapTensor::v, kernel.block_n, v, v * element},
      {MapTensor::d_o, kernel.block_m, v, v * element},
      {MapTensor::dq_accum, kernel.block_m, dq_cols, dq_cols * 4},
      {MapTensor::d_k, 64, qk, qk * element},
      {MapTensor::d_v, 64, v, v * element},
  };
  if (dkdv_summed(ir)) {
    maps.push_back({MapTensor::dk_sum, 64, 32, 128});
    maps.push_back({MapTensor::dv_sum, 64, 32, 128});
  }
  return maps;
}

// backward_buffers, and in the deterministic mode the turn counters of the ordered dQ
// reductions: per (batch, head, query block) one per consumer when the consumers split dQ's
// columns (d >= 128), else one that both take turns on (sm90a/backward.cuh).
std::vector<BufferNeed> buffers(const KernelDesc& kernel, const Lowering& ir) {
  std::vector<BufferNeed> needs = backward_buffers(kernel, ir);
  if (orders_dq_reductions(ir)) {
    const int lanes = ir.spec.head_dim_qk / 2 >= 64 ? 2 : 1;
    const LaunchExpr counters = LaunchExpr(Extent::batch) * Extent::heads *
                                ceil_div(Extent::seqlen_q, kernel.block_m) * lanes;
    needs.push_back({ParamField::dq_turns, {"dq_turns", counters * 4, /*zeroed=*/true}});
  }
  return needs;
}

// Key blocks of head pairs (schedule.cuh). Where the kernel may group heads (groups_heads), the
// grid counts groups of Hg query heads (each CTA walks its group's heads: backward_walk.cuh)
// and the kernel takes Hg.
RowLaunch launch(const KernelDesc& kernel, const Lowering& ir) {
  const LaunchExpr blocks = ceil_div(Extent::seqlen_k, kernel.block_n);
  if (!groups_heads(ir)) return single_phase(kernel, paired_heads(blocks));
  RowLaunch launch =
      single_phase(kernel, paired_heads(blocks, floor_div(Extent::heads, Extent::head_group)));
  launch.scalars.push_back({ParamScalar::head_group, Extent::head_group});
  return launch;
}

}  // namespace

KernelRow backward_sm90a() {
  KernelRow row;
  row.id = "backward.sm90a";
  row.role = KernelRole::backward;
  row.family = KernelFamily::sm90a;
  row.header = "attnjit/sm90a/backward.cuh";
  row.kernel_struct = "BackwardSm90a";
  row.body = "backward_sm90a";
  row.params = ParamBlock::attention_tma;
  row.tensor_maps_type = "BwdTensorMaps";
  // One CTA of 384 threads per SM, whose warpgroups then trade registers (setmaxnreg).
  row.min_blocks_per_sm = 1;
  row.support.targets = {Arch::sm_90a};
  // Deterministic by taking turns on each query block's dQ (key blocks in order); predicates
  // by the block tables with key rows (their stored bits match S^T's fragments).
  row.support.ordered_dq = true;
  row.support.sums_dkdv = true;
  row.support.groups_heads = true;
  row.support.unequal_head_dims = true;
  row.tiles_layouts = kLayouts;
  row.candidates = kCandidates;
  row.config = kConfig;
  row.smem_bytes = smem_bytes;
  row.fits = fits;
  row.explicit_tiles = explicit_tiles;
  row.header_defines = codegen::wgmma_shape_defines;
  row.producer_registers = producer_registers;
  row.launch = launch;
  row.tensor_maps = tensor_maps;
  row.buffers = buffers;
  return row;
}

}  // namespace attnjit::registry
