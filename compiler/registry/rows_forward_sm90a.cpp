// The forward of the sm90a family (sm90a/forward.cuh): a TMA producer warpgroup and wgmma consumer
// warpgroups of 64 query rows (two: block_m = 128, 12 warps; at d64 three or one, below), K and V
// rings of two stages; its parameters are FwdParams and the TMA maps of q, k, v and o. It is
// the automatic forward on sm_90a from head dim 64 (docs/performance.md has its speed).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit_wgmma.hpp"
#include "compiler/registry/rows.hpp"

namespace attnjit::registry {
namespace {

constexpr int kStages = 2;

// head_dim_v 0: equal head dims.
constexpr TileCandidate warpgroups(int d, int block_n, int consumers = 2, int d_v = 0) {
  TileCandidate c{d, 64 * consumers, block_n, 4 * (consumers + 1), 1, kStages};
  c.head_dim_v = d_v;
  return c;
}

// Two consumers of unequal head dims (head_dim_qk, head_dim_v).
constexpr TileCandidate pair(int d_qk, int d_v, int block_n) {
  return warpgroups(d_qk, block_n, 2, d_v);
}

// Three consumer warpgroups (192 query rows) have 160 registers each: room for the
// accumulators of head dims up to 96.
constexpr int kMaxThreeConsumerHeadDim = 96;
// Two CTAs of one consumer per SM start at 128 registers a thread: head dims up to 128 (at
// d256 ptxas stops: an instruction needs 158 registers, 128 available).
constexpr int kMaxOneConsumerHeadDim = 128;

// Per head dim, the key blocks from the widest down; `fits_registers` takes the first one the
// spec's mask and modifiers leave room for. Unequal head dims take two consumers: O's
// accumulator (head_dim_v) and S's (the key block) are what a consumer holds, as at d128; Q and
// K (head_dim_qk) stay in shared memory, whose 227 KB hold 128-key blocks up to (192, 128) and
// 96-key blocks at (256, 128).
constexpr std::array<TileCandidate, 19> kCandidates{{
    warpgroups(64, 128, 3),
    warpgroups(64, 112, 3),
    warpgroups(64, 128, 1),
    warpgroups(64, 128),
    warpgroups(96, 128),
    warpgroups(128, 128),
    warpgroups(128, 112),
    warpgroups(192, 112),
    warpgroups(192, 96),
    warpgroups(192, 80),
    warpgroups(256, 80),
    warpgroups(256, 64),
    warpgroups(256, 48),
    warpgroups(256, 32),
    // Unequal head dims (head_dim_qk, head_dim_v).
    pair(64, 128, 128),
    pair(128, 64, 128),
    pair(192, 128, 128),
    pair(192, 128, 112),
    pair(256, 128, 96),
}};

// The widest key block whose consumer warpgroups compile without spilling (NVRTC sweep,
// sm_90a): it narrows with the head dim, with the tables the walk classifies blocks from
// (FlashMask vectors, predicate block tables: the producer then keeps more registers) and
// with the score modifiers.
int widest_block_n(const AttentionSpec& spec, const MaskLowering& mask) {
  const bool predicate = mask.element_predicate;
  const bool tables = !mask.vectors.empty() || predicate;
  const bool wide_tables = predicate || mask.vectors.size() > 1;
  const bool modifiers = spec.softcap || spec.alibi;
  if (spec.head_dim_v != spec.head_dim_qk) {
    // O's accumulator is at most d128's: 128 keys, as at d128, but for (192, 128) with a
    // predicate and the score modifiers (16 bytes spilled: one CTA per work, whose producer
    // keeps 48 registers for the predicate's block table).
    return spec.head_dim_qk == 192 && predicate && modifiers ? 112 : 128;
  }
  switch (spec.head_dim_qk) {
    case 192:
      // Two or more vectors at 96 spill 12 bytes since the consumers read the CTA's mask row
      // from shared memory (a register allocation at the edge of 224).
      return predicate || wide_tables || (tables && modifiers) ? 80
             : tables || modifiers                             ? 96
                                                               : 112;
    case 256:
      return tables ? (modifiers || predicate ? 32 : 48)
                    : (modifiers || mask.window_by_index ? 64 : 80);
    default:
      // Up to d128, 128 keys under every mask: at d128 since the persistent producer keeps 24
      // registers (producer_registers; at 228 registers a consumer spilled 48 bytes with the
      // causal flag and two vectors, with predicates, and with four vectors and both
      // modifiers); 112 keys were no faster under any family.
      return 128;
  }
}

// Three consumers (d64, 160 registers each) where query blocks visit long rows of key blocks:
// the softmax's exponentials take as long as a warpgroup's products there, and two
// warpgroups' softmaxes hide behind the third's products.
//   - masks by index without a window;
//   - FlashMask with two vectors (LTS with LTE or UTE), persistent.
// Not for windows by index, one vector (causal) or four vectors: their query blocks visit few
// key blocks, many of them partial with 192 rows, where two consumers are faster; nor for
// predicates (not measured). Score modifiers narrow the key block to 112 (no spills) without
// tables; with two vectors they spilled there.
bool three_consumers_fit(const TileCandidate& c, const AttentionSpec& spec,
                         const MaskLowering& mask) {
  const bool modifiers = spec.softcap || spec.alibi;
  const bool long_rows =
      mask.vectors.empty() ? !mask.window_by_index : mask.vectors.size() == 2 && !modifiers;
  return long_rows && !mask.element_predicate && c.block_n <= (modifiers ? 112 : 128);
}

// One consumer (64 rows, two CTAs per SM: the consumer keeps 232 registers) for sliding
// windows by index at d64: their query blocks visit few key blocks, and a CTA's start and
// epilogue then run beside the other CTA's products. Under FlashMask two consumers are faster
// on most families (the CTA's heads are in shared memory). At d128 two CTAs fit only with 64-
// or 80-key blocks, which are slower. `tiles=64xBNx8:warpgroups` forces it (head dims up to
// 128).
bool one_consumer_fits(const TileCandidate& c, const AttentionSpec& spec,
                       const MaskLowering& mask) {
  return spec.head_dim_qk == 64 && mask.window_by_index && c.block_n <= 128;
}

// Masks whose block skipping reads tables (FlashMask min/max, predicate block tables): the
// template's Mask::kOrderedCtas, where the producer alone walks the blocks (kFedWalk) and the
// works can run persistent.
bool skips_by_tables(const MaskLowering& mask) {
  return mask.needs_minmax || mask.element_predicate;
}

bool fits_registers(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  // e4m3: 128-key blocks, 64 at d256 (the V^T stages and the bf16 O tile take the shared
  // memory of wider ones). Three consumers at d64 without a window or FlashMask vectors (whose
  // three consumers are persistent only, which e4m3 is not), as bf16 (two ran 17% slower there;
  // with softcap a consumer's 152 registers spill), else two (O and S take a consumer's
  // registers above d64).
  if (spec.dtype == DType::e4m3) {
    const bool three =
        spec.head_dim_qk == 64 && !spec.softcap && !mask.window_by_index && !skips_by_tables(mask);
    return c.block_m == (three ? 192 : 128) && c.block_n == (spec.head_dim_qk == 256 ? 64 : 128);
  }
  if (c.block_m == 192) return three_consumers_fit(c, spec, mask);
  if (c.block_m == 64) return one_consumer_fits(c, spec, mask);
  return c.block_n <= widest_block_n(spec, mask);
}

constexpr std::array<TileLayout, 1> kLayouts{TileLayout::warpgroups};
constexpr std::array<ConfigField, 9> kConfig{
    ConfigField::head_dims_qk_v, ConfigField::block_m,    ConfigField::block_n,
    ConfigField::kv_stages,      ConfigField::return_lse, ConfigField::ping_pong,
    ConfigField::register_split, ConfigField::persistent, ConfigField::packed};
// The prefill kernel's: the forward's and how it reads the cache.
constexpr std::array<ConfigField, 10> kPrefillConfig{
    ConfigField::head_dims_qk_v, ConfigField::block_m,    ConfigField::block_n,
    ConfigField::kv_stages,      ConfigField::return_lse, ConfigField::ping_pong,
    ConfigField::register_split, ConfigField::persistent, ConfigField::packed,
    ConfigField::kv_cache};

// Two CTAs of one consumer per SM, else one.
int ctas_per_sm(const KernelTiles& tiles) {
  return tiles.block_m == 64 ? 2 : 1;
}

// sm90a/forward.cuh's kSmemBytes without the O tile: alignment slack, Q, the K and V stages, each
// K stage's FlashMask values and block slot, the barriers (Q full and empty, the rings'); and
// the O tile's bytes (head_dim_v columns).
std::pair<int, int> smem_parts(const TileCandidate& c, const AttentionSpec& spec,
                               const MaskLowering& mask) {
  const int element = size_of(spec.dtype);
  const int vectors = c.block_n * static_cast<int>(mask.vectors.size()) * 4;
  // e4m3: the V^T stages (one byte an element) and their ring, under masks with tables each V
  // stage's slot too; O in bf16.
  const bool fp8 = spec.dtype == DType::e4m3;
  const int block_slot = skips_by_tables(mask) ? (fp8 ? 32 : 16) : 0;
  const int shared =
      1024 + c.block_m * spec.head_dim_qk * element +
      c.kv_stages * (c.block_n * (spec.head_dim_qk + spec.head_dim_v) * element +
                     (fp8 ? c.block_n * spec.head_dim_v : 0) + vectors + block_slot) +
      16 + (fp8 ? 3 : 2) * (2 * c.kv_stages * 8);
  return {shared, c.block_m * spec.head_dim_v * (fp8 ? 2 : element)};
}

// kPersistent: one CTA per SM takes works one after another (sm90a/forward.cuh), so that a
// work's first loads run under the previous work's last products and its O store under the
// next work. For masks with a CTA order (FlashMask, predicate tables: works sorted heaviest
// first, which the CTAs draw in that order from a counter), two or three consumers (one keeps
// two CTAs per SM), head_dim_v up to 128 (O's accumulator: beyond, the consumers have no
// registers for the loop) and where shared memory holds an O tile of its own (227 KB less 512
// bytes of static shared variables): there it is never slower and often faster at equal head
// dims ((192, 128) takes it with 112-key blocks, `tiles=128x112x12:warpgroups`; 128 keys leave
// no room for the O tile). Masks by index keep one CTA per work: their index order is not sorted by
// weight, and no work is short enough to gain. Three consumers under FlashMask are persistent
// only (three_consumers_fit).
bool persistent(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  const auto [shared, o_tile] = smem_parts(c, spec, mask);
  // Over a KV cache (the prefill kernel) every work is its own CTA, in the index order; e4m3's
  // descales and V transpose follow one work per CTA.
  return skips_by_tables(mask) && spec.kv_cache == KvCache::none && spec.dtype != DType::e4m3 &&
         c.block_m >= 128 && spec.head_dim_v <= 128 && shared + o_tile <= 227 * 1024 - 512;
}

// The template's kOwnOTile: persistent, or O wider than Q (O then has no room in the Q tile).
int smem_bytes(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  const auto [shared, o_tile] = smem_parts(c, spec, mask);
  const bool own_o_tile =
      persistent(c, spec, mask) || spec.head_dim_v > spec.head_dim_qk || spec.dtype == DType::e4m3;
  return own_o_tile ? shared + o_tile : shared;
}

// The rule for the tiles the emitter binds (Config::kPersistent).
bool persistent_tiles(const KernelTiles& tiles, const AttentionSpec& spec,
                      const MaskLowering& mask) {
  return persistent(warpgroups(spec.head_dim_qk, tiles.block_n, tiles.block_m / 64), spec, mask);
}

// The producer warpgroup keeps 24 registers, or 40 / 48 where it walks one / more vector
// tables or a predicate's block table for one CTA per work (ptxas spilled it below that at
// d192). A persistent producer (its works decoded into shared slots) walks every mask in 24:
// it keeps them there and gives the rest to the consumers where they need them, three
// consumers (160 registers each instead of 152: 192x128 spilled 80 bytes) and two where a head
// dim is 128 (240 instead of 228: 128-key blocks under every mask). Two consumers at d64 keep
// 40 / 48: with 24 the producer's walk of four vectors slows the kernel.
int producer_registers(const KernelTiles& tiles, const AttentionSpec& spec,
                       const MaskLowering& mask) {
  const std::size_t vectors = mask.vectors.size();
  // e4m3: warps 1 .. 3 transpose V (ForwardTransposer); 48 where the producer walks tables
  // (40 spilled 8 bytes with one vector).
  if (spec.dtype == DType::e4m3) return skips_by_tables(mask) ? 48 : 40;
  const int wider_dim = std::max(spec.head_dim_qk, spec.head_dim_v);
  if (persistent_tiles(tiles, spec, mask) && (tiles.block_m == 192 || wider_dim == 128)) {
    return 24;
  }
  return mask.element_predicate || vectors > 1 ? 48 : vectors == 1 ? 40 : 24;
}

// The rule for a planned kernel of this row.
bool persistent_kernel(const KernelDesc& kernel, const Lowering& ir) {
  return persistent(warpgroups(ir.spec.head_dim_qk, kernel.block_n, kernel.block_m / 64), ir.spec,
                    *ir.mask);
}

// Persistent: a 1-D grid of min(works, SMs) CTAs taking the works of the paired-head grid
// (schedule.cuh) in the CTA order; else that grid, one CTA per work.
RowLaunch work_launch(const KernelDesc& kernel, const Lowering& ir) {
  RowLaunch launch = query_block_launch(kernel, ir);
  if (!persistent_kernel(kernel, ir)) return launch;
  const LaunchGrid works = launch.phases.front().grid;
  launch.phases.front().grid = {min(works.x * works.y * works.z, Extent::sm_count), 1, 1};
  launch.works = works;
  return launch;
}

// The mask's buffers and, persistent, the counter from which the CTAs draw their works after
// the first (zeroed before the launch).
std::vector<BufferNeed> buffers(const KernelDesc& kernel, const Lowering& ir) {
  std::vector<BufferNeed> needs = forward_buffers(kernel, ir);
  if (persistent_kernel(kernel, ir)) {
    needs.push_back({ParamField::work_counter, {"work_counter", 4, /*zeroed=*/true}});
  }
  return needs;
}

// sm90a/forward.cuh's TMA boxes: one panel of its tiles (SmemTile's: 64 columns where the head
// dim allows, else 32; the panel's row bytes its swizzle), of the query block for Q, of the key
// block for K and V, and of a consumer's 64 rows for O.
// e4m3 inputs are copied as 16-bit tiles of half the head dim (the template's SmemTile8): their
// maps view the tensors as pairs of bytes (runtime/launch/tma.cpp), O is bf16.
std::vector<TensorMapBox> tensor_maps(const KernelDesc& kernel, const Lowering& ir) {
  const bool fp8 = ir.spec.dtype == DType::e4m3;
  const auto panel = [&](MapTensor tensor, int rows, int head_dim, bool input) {
    const int cols16 = fp8 && input ? head_dim / 2 : head_dim;
    const int cols = cols16 % 64 == 0 ? 64 : 32;
    return TensorMapBox{tensor, rows, cols, cols * 2};
  };
  return {panel(MapTensor::q, kernel.block_m, ir.spec.head_dim_qk, true),
          panel(MapTensor::k, kernel.block_n, ir.spec.head_dim_qk, true),
          panel(MapTensor::v, kernel.block_n, ir.spec.head_dim_v, true),
          panel(MapTensor::o, 64, ir.spec.head_dim_v, false)};
}

// The prefill kernel's producer keeps 40 registers: its walk reads the block table and the
// sequence's length (at 24 it spilled), 48 with more than one FlashMask vector or a
// predicate's table (as the forward's producer), 72 where it walks both the pages and the
// tables (d64 spilled at 64, d128 at 40, d256 at 56); 32 beside three consumers (160 registers
// each), which take masks by index only (no tables).
int prefill_producer_registers(const KernelTiles& tiles, const AttentionSpec& spec,
                               const MaskLowering& mask) {
  if (tiles.block_m == 192) return 32;
  if (skips_by_tables(mask) && spec.kv_cache == KvCache::paged) return 72;
  return mask.vectors.size() > 1 || mask.element_predicate ? 48 : 40;
}

// The forward's tiles of two consumers, and of three (d64's 192-row blocks) without score
// modifiers or mask tables (with softcap or ALiBi three spilled or serialized their products;
// over pages three are faster than two, as over a contiguous cache, even where the page
// boxes are what limits: the boxes of a 192-row block feed more rows). d256 spilled with 80-key
// blocks, or 64 with the score modifiers (232 registers a consumer instead of 240; (256, 128) with
// them has no candidate: the decode kernel serves it).
bool prefill_fits(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering& mask) {
  const bool modifiers = spec.softcap || spec.alibi;
  if (spec.head_dim_qk == 256 && c.block_n > (modifiers ? 48 : 64)) return false;
  const bool three = c.block_m == 192 && !modifiers && !skips_by_tables(mask);
  return (c.block_m == 128 || three) && fits_registers(c, spec, mask);
}

// The prefill kernel's works are the forward's, launched only where the launch chooses it over
// the decode kernel (Extent::prefill).
RowLaunch prefill_launch(const KernelDesc& kernel, const Lowering& ir) {
  RowLaunch launch = query_block_launch(kernel, ir);
  LaunchGrid& grid = launch.phases.front().grid;
  grid.x = grid.x * Extent::prefill;
  return launch;
}

// The forward's boxes, K and V per page over a paged cache.
std::vector<TensorMapBox> prefill_tensor_maps(const KernelDesc& kernel, const Lowering& ir) {
  std::vector<TensorMapBox> boxes = tensor_maps(kernel, ir);
  for (TensorMapBox& box : boxes) {
    box.page_rows = ir.spec.kv_cache == KvCache::paged &&
                    (box.tensor == MapTensor::k || box.tensor == MapTensor::v);
  }
  return boxes;
}

// The products as one asm statement each, but not with three consumers (d64's 192-row blocks,
// 160 registers each): there they spilled 8-16 bytes with soft-capping and ALiBi, and the
// kernels compile fast enough without them.
std::string prelude(const KernelTiles& tiles, const AttentionSpec& spec) {
  return tiles.block_m / 64 < 3 ? codegen::wgmma_forward_products(tiles, spec) : std::string();
}

// `tiles=128xBNx12:warpgroups`: two consumer warpgroups of 64 rows and a producer warpgroup,
// `192xBNx16:warpgroups`: three (both head dims up to 96), or `64xBNx8:warpgroups`: one (two
// CTAs per SM, both head dims up to 128); key blocks of whole k16 steps, at most 256 (128 for a
// predicate, whose fragment bits fit 64 bits; 128 with three consumers or one).
TileCandidate explicit_tiles(const TileShape& shape, const AttentionSpec& spec,
                             const MaskLowering& mask) {
  const std::string value = to_string(shape);
  if (spec.head_dim_qk == 32) {
    throw_field_error("tiles", fmt::format("{} with head_dim=32", value),
                      "BMxBNxW:warpgroups with head_dim 64, 96, 128, 192 or 256");
  }
  const int wider_dim = std::max(spec.head_dim_qk, spec.head_dim_v);
  const bool three = wider_dim <= kMaxThreeConsumerHeadDim;
  const int max_block_n = mask.element_predicate ? 128 : 256;
  const bool two_fit = shape.block_m == 128 && shape.warps == 12 && shape.block_n <= max_block_n;
  const bool three_fit = three && shape.block_m == 192 && shape.warps == 16 && shape.block_n <= 128;
  const bool one = wider_dim <= kMaxOneConsumerHeadDim;
  const bool one_fit = one && shape.block_m == 64 && shape.warps == 8 && shape.block_n <= 128;
  if (!(two_fit || three_fit || one_fit) || shape.block_n % 16 != 0 || shape.block_n < 16) {
    // The shapes of one and three consumers (head dims up to 128 and 96) take BN up to 128.
    const std::string narrow = three ? "192xBNx16:warpgroups or 64xBNx8:warpgroups"
                               : one ? "64xBNx8:warpgroups"
                                     : "";
    throw_field_error(
        "tiles", value,
        fmt::format(
            "128xBNx12:warpgroups with BN a multiple of 16 up to {}{} for the warpgroup forward",
            max_block_n,
            narrow.empty() ? "" : fmt::format(", {} with BN a multiple of 16 up to 128", narrow)));
  }
  return warpgroups(spec.head_dim_qk, shape.block_n, shape.block_m / 64,
                    spec.head_dim_v == spec.head_dim_qk ? 0 : spec.head_dim_v);
}

}  // namespace

KernelRow forward_sm90a() {
  KernelRow row;
  row.id = "forward.sm90a";
  row.role = KernelRole::forward;
  row.family = KernelFamily::sm90a;
  row.header = "attnjit/sm90a/forward.cuh";
  row.kernel_struct = "ForwardSm90a";
  row.body = "forward_sm90a";
  row.params = ParamBlock::attention_tma;
  row.tensor_maps_type = "FwdTensorMaps";
  // One CTA per SM (two of one consumer), whose warpgroups then trade registers (setmaxnreg).
  row.ctas_per_sm = ctas_per_sm;
  row.support.targets = {Arch::sm_90a};
  row.support.unequal_head_dims = true;
  row.support.fp8 = true;
  row.tiles_layouts = kLayouts;
  row.candidates = kCandidates;
  row.config = kConfig;
  row.smem_bytes = smem_bytes;
  row.fits = fits_registers;
  row.producer_registers = producer_registers;
  row.explicit_tiles = explicit_tiles;
  row.header_defines = codegen::wgmma_shape_defines;
  row.prelude = prelude;
  row.persistent = persistent_tiles;
  row.launch = work_launch;
  row.tensor_maps = tensor_maps;
  row.buffers = buffers;
  return row;
}

KernelRow prefill_sm90a() {
  KernelRow row = forward_sm90a();
  row.id = "prefill.sm90a";
  row.role = KernelRole::prefill;
  row.header = "attnjit/sm90a/prefill.cuh";
  row.kernel_struct = "PrefillSm90a";
  row.body = "prefill_sm90a";
  row.config = kPrefillConfig;
  row.launch = prefill_launch;
  row.tensor_maps = prefill_tensor_maps;
  row.producer_registers = prefill_producer_registers;
  row.fits = prefill_fits;
  row.support.fp8 = false;
  return row;
}

}  // namespace attnjit::registry
