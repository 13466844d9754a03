// The registry's table, its lookups, and the launch pieces rows share.
#include "compiler/registry/kernel_registry.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "compiler/registry/rows.hpp"

namespace attnjit {

MaskCost mask_cost(const MaskLowering& mask) {
  if (mask.element_predicate) return MaskCost::predicate;
  if (mask.window_by_index) return MaskCost::window;
  if (mask.vectors.empty()) return MaskCost::index;
  return mask.causal_by_index ? MaskCost::vectors : MaskCost::two_intervals;
}

bool KernelRow::compiles_for(Arch arch) const {
  return std::ranges::find(support.targets, arch) != support.targets.end();
}

bool KernelRow::supports(const AttentionSpec& spec, const MaskLowering& mask, Arch arch,
                         bool automatic) const {
  if (!compiles_for(arch)) return false;
  if (spec.head_dim_v != spec.head_dim_qk && !support.unequal_head_dims) return false;
  if (spec.dtype == DType::e4m3 && !support.fp8) return false;
  if (spec.kv_dtype && !support.fp8_kv) return false;
  if (mask.element_predicate && !support.predicate_masks) return false;
  if (spec.deterministic && (!support.deterministic || (automatic && !support.auto_deterministic)))
    return false;
  if (!spec.deterministic && !support.atomic) return false;
  return !automatic || std::ranges::any_of(candidates, [&](const TileCandidate& c) {
    return c.has_head_dims(spec);
  });
}

int min_blocks_per_sm(const KernelRow& row, const KernelTiles& tiles) {
  return row.ctas_per_sm != nullptr ? row.ctas_per_sm(tiles) : row.min_blocks_per_sm;
}

std::span<const KernelRow> kernel_rows() {
  // Attention rows of one role: the more specialised family first, then the sm80 layouts in
  // their order of preference.
  static const std::vector<KernelRow> rows{
      registry::forward_sm90a(),       registry::forward_sm80(),
      registry::backward_sm90a(),      registry::backward_grid_sm80(),
      registry::backward_slabs_sm80(), registry::backward_dq_sm80(),
      registry::decode(),              registry::decode_combine(),
      registry::prefill_sm90a(),       registry::kv_append(),
      registry::varlen_intervals(),    registry::flashmask_minmax(),
      registry::predicate_blocks(),    registry::cta_order(),
      registry::backward_preprocess(), registry::backward_sinks(),
      registry::backward_convert_dq(), registry::backward_reduce_dkdv(),
  };
  return rows;
}

const KernelRow& kernel_row(std::string_view id) {
  for (const KernelRow& row : kernel_rows()) {
    if (row.id == id) return row;
  }
  throw InternalError(fmt::format("kernel registry: no row '{}'", id));
}

std::vector<const KernelRow*> kernel_rows(KernelRole role, KernelFamily family) {
  std::vector<const KernelRow*> out;
  for (const KernelRow& row : kernel_rows()) {
    if (row.role == role && row.family == family) out.push_back(&row);
  }
  return out;
}

const KernelRow& utility_row(KernelRole role) {
  const std::vector<const KernelRow*> rows = kernel_rows(role, KernelFamily::sm80);
  internal_check(rows.size() == 1 && rows.front()->candidates.empty(),
                 "utility_row: one row without tile candidates");
  return *rows.front();
}

bool candidate_fits(const KernelRow& row, const TileCandidate& c, const AttentionSpec& spec,
                    const MaskLowering& mask) {
  if (row.fits != nullptr) return row.fits(c, spec, mask);
  if (mask_cost(mask) > c.up_to) return false;
  return !(spec.softcap && !c.softcap) && !(spec.alibi && !c.alibi);
}

std::optional<TileCandidate> first_candidate(const KernelRow& row, const AttentionSpec& spec,
                                             const MaskLowering& mask, int smem_limit) {
  for (const TileCandidate& c : row.candidates) {
    if (!c.has_head_dims(spec) || !candidate_fits(row, c, spec, mask)) continue;
    if (row.smem_bytes(c, spec, mask) > smem_limit) continue;
    return c;
  }
  return std::nullopt;
}

const KernelRow* automatic_row(KernelRole role, KernelFamily family, const AttentionSpec& spec,
                               const MaskLowering& mask, Arch arch, int smem_limit) {
  for (const KernelRow* row : kernel_rows(role, family)) {
    if (row->supports(spec, mask, arch, /*automatic=*/true) &&
        first_candidate(*row, spec, mask, smem_limit)) {
      return row;
    }
  }
  return nullptr;
}

bool orders_dq_reductions(const Lowering& ir) {
  if (ir.spec.direction != Direction::backward || !ir.spec.deterministic) return false;
  return kernel_row(ir.tiles_of(KernelRole::backward).row).support.ordered_dq;
}

bool runs_in_cta_order(const Lowering& ir, KernelRole role) {
  const MaskLowering& mask = *ir.mask;
  if (!mask.needs_minmax && !mask.element_predicate) return false;
  // A decode CTA's keys are its split of the visible blocks: equal work, no order to sort. The
  // prefill kernel's works are few, and its rows positions the order's costs do not know.
  if (role == KernelRole::decode || role == KernelRole::prefill) return false;
  return !(role == KernelRole::backward && orders_dq_reductions(ir));
}

bool dq_accumulated(const Lowering& ir) {
  return !ir.spec.deterministic || orders_dq_reductions(ir);
}

bool dkdv_summed(const Lowering& ir) {
  if (ir.spec.direction != Direction::backward || ir.spec.deterministic) return false;
  return kernel_row(ir.tiles_of(KernelRole::backward).row).support.sums_dkdv;
}

bool groups_heads(const Lowering& ir) {
  // The deterministic mode's dQ turns would chain the heads of every key block behind those
  // of the key block after it: measured 12% slower grouped (d128 causal, 32/8 heads, 8K).
  if (ir.spec.direction != Direction::backward || ir.spec.deterministic) return false;
  if (ir.mask && ir.mask->table_per_head) return false;
  return kernel_row(ir.tiles_of(KernelRole::backward).row).support.groups_heads;
}

LaunchExpr dkdv_partials(const Lowering& ir) {
  // floor(1 / Hg): 1 for one head per CTA, 0 for a group.
  return groups_heads(ir) ? LaunchExpr(Extent::gqa) * floor_div(1, Extent::head_group)
                          : LaunchExpr(Extent::gqa);
}

namespace {

// How messages name shapes of `layout`, e.g. `BMxBNxW:grid`.
std::string shape_form(TileLayout layout) {
  return layout == TileLayout::automatic ? "BMxBNxW" : fmt::format("BMxBNxW:{}", name_of(layout));
}

// What messages accept instead of `layout` where its row does not take the spec.
std::string other_layout(TileLayout layout) {
  return layout == TileLayout::automatic
             ? "BMxBNxW:LAYOUT"
             : fmt::format("BMxBNxW with a layout other than {}", name_of(layout));
}

}  // namespace

const KernelRow& explicit_row(KernelRole role, const AttentionSpec& spec, const MaskLowering& mask,
                              Arch arch) {
  const std::string value = to_string(spec.tiles);
  const TileLayout layout = spec.tiles.layout;
  const Direction direction =
      role == KernelRole::forward ? Direction::forward : Direction::backward;
  if (!takes(direction, layout)) {
    throw_field_error(
        "tiles", fmt::format("{} with direction={}", value, name_of(direction)),
        fmt::format("BMxBNxW[:LAYOUT], LAYOUT one of {}", tile_layouts_of(direction)));
  }
  const KernelRow* found = nullptr;
  for (const KernelRow& row : kernel_rows()) {
    if (row.role == role &&
        std::ranges::find(row.tiles_layouts, layout) != row.tiles_layouts.end()) {
      found = &row;
    }
  }
  internal_check(found != nullptr, "every tile layout a direction takes forces a row");
  const KernelRow& row = *found;
  if (!row.compiles_for(arch)) {
    std::string targets;
    for (Arch target : row.support.targets) {
      targets += fmt::format("{}{}", targets.empty() ? "" : " or ", name_of(target));
    }
    throw_field_error("tiles", value,
                      fmt::format("{} with target={} ({} family)", shape_form(layout), targets,
                                  name_of(row.family)));
  }
  if (spec.head_dim_v != spec.head_dim_qk && !row.support.unequal_head_dims) {
    throw_field_error(
        "tiles", value,
        fmt::format("{} for head_dim_qk={} head_dim_v={} (the {} family takes "
                    "equal head dims only)",
                    other_layout(layout), spec.head_dim_qk, spec.head_dim_v, name_of(row.family)));
  }
  if (mask.element_predicate && !row.support.predicate_masks) {
    throw_field_error("tiles", value, fmt::format("{} for mask=predicate", other_layout(layout)));
  }
  if (spec.deterministic && !row.support.deterministic) {
    throw_field_error("tiles", value,
                      fmt::format("{} with deterministic=true", other_layout(layout)));
  }
  if (!spec.deterministic && !row.support.atomic) {
    throw_field_error("tiles", value,
                      fmt::format("{} with deterministic=false", other_layout(layout)));
  }
  return row;
}

namespace registry {
namespace {

std::string tile_tag(int block_m, int block_n, bool key_rows) {
  return fmt::format("bm{}_bn{}{}", block_m, block_n, key_rows ? "_key_rows" : "");
}

// Bytes of a predicate's element bits of one partial tile (one bit per element, rows padded
// to whole 32-bit words).
int predicate_slot_bytes(int block_m, int block_n, bool key_rows) {
  const int rows = key_rows ? block_n : block_m;
  const int cols = key_rows ? block_m : block_n;
  return rows * ((cols + 31) / 32) * 4;
}

BufferNeed float_rows(ParamField field, std::string name, const LaunchExpr& columns) {
  const LaunchExpr rows = LaunchExpr(Extent::batch) * Extent::heads * Extent::seqlen_q;
  return {field, {std::move(name), rows * columns * 4}};
}

// `columns` fp32 per key: head_dim_qk for dK, head_dim_v for dV.
BufferNeed float_keys(ParamField field, std::string name, int columns, const Lowering& ir) {
  // Only under GQA (zero bytes, a null pointer, otherwise): per query head, or the zeroed sums
  // per K/V head of a main kernel that adds into them (dkdv_summed).
  const bool summed = dkdv_summed(ir);
  const LaunchExpr keys = dkdv_partials(ir) * Extent::batch *
                          (summed ? Extent::kv_heads : Extent::heads) * Extent::seqlen_k;
  return {field, {std::move(name), keys * columns * 4, /*zeroed=*/summed}};
}

}  // namespace

LaunchGrid paired_heads(const LaunchExpr& blocks, const LaunchExpr& heads) {
  return {2 * blocks, ceil_div(heads, 2), Extent::batch};
}

RowLaunch single_phase(const KernelDesc& kernel, LaunchGrid grid) {
  RowLaunch launch;
  launch.phases.push_back({std::move(grid), kernel.threads, {}});
  return launch;
}

LaunchGrid attention_grid(const KernelTiles& tiles, const Lowering& ir) {
  KernelDesc kernel;
  kernel.role = tiles.role;
  kernel.block_m = tiles.block_m;
  kernel.block_n = tiles.block_n;
  kernel.threads = tiles.threads();
  const RowLaunch launch = kernel_row(tiles.row).launch(kernel, ir);
  return launch.works ? *launch.works : launch.phases.front().grid;
}

LaunchExpr only_where_run(const LaunchExpr& count, KernelRole reader, const Lowering& ir) {
  if (reader == KernelRole::prefill) return count * Extent::prefill;
  if (reader == KernelRole::decode && ir.target->chooses(KernelRole::prefill)) {
    return count * (1 + LaunchExpr(Extent::prefill) * -1);
  }
  return count;
}

LaunchExpr predicate_tiles(KernelRole reader, int block_m, int block_n, const Lowering& ir) {
  const LaunchExpr batch = ir.mask->table_per_batch ? LaunchExpr(Extent::batch) : 1;
  const LaunchExpr heads = ir.mask->table_per_head ? LaunchExpr(Extent::heads) : 1;
  return only_where_run(
      batch * heads * ceil_div(Extent::seqlen_q, block_m) * ceil_div(Extent::seqlen_k, block_n),
      reader, ir);
}

ScratchBuffer minmax_table(int block_n, const Lowering& ir) {
  const int columns = static_cast<int>(ir.mask->vectors.size());
  return {fmt::format("minmax_bn{}", block_n), LaunchExpr(Extent::batch) * Extent::mask_heads *
                                                   ceil_div(Extent::seqlen_k, block_n) *
                                                   (2 * columns * 4)};
}

ScratchBuffer predicate_table(KernelRole reader, int block_m, int block_n, const Lowering& ir) {
  return {"predicate_table_" + tile_tag(block_m, block_n, reader == KernelRole::backward),
          predicate_tiles(reader, block_m, block_n, ir) * 4};
}

LaunchExpr predicate_bits_capacity(KernelRole reader, int block_m, int block_n,
                                   const Lowering& ir) {
  // The decode kernel evaluates its partial blocks itself.
  if (reader == KernelRole::decode) return 0;
  // A table entry holds (slot + 1) << 2 in an int32, so at most 2^29 - 1 slots.
  constexpr std::int64_t kMaxSlots = (std::int64_t{1} << 29) - 1;
  const int slot = predicate_slot_bytes(block_m, block_n, reader == KernelRole::backward);
  return min(predicate_tiles(reader, block_m, block_n, ir),
             min(floor_div(Extent::bits_budget, slot), kMaxSlots));
}

ScratchBuffer predicate_bits(KernelRole reader, int block_m, int block_n, const Lowering& ir) {
  const bool key_rows = reader == KernelRole::backward;
  return {"predicate_bits_" + tile_tag(block_m, block_n, key_rows),
          predicate_bits_capacity(reader, block_m, block_n, ir) *
              predicate_slot_bytes(block_m, block_n, key_rows)};
}

ScratchBuffer predicate_bits_used(KernelRole reader, int block_m, int block_n) {
  return {"predicate_slots_" + tile_tag(block_m, block_n, reader == KernelRole::backward), 4,
          /*zeroed=*/true};
}

ScratchBuffer cta_costs(KernelRole orders, const Lowering& ir) {
  const LaunchGrid grid = attention_grid(ir.tiles_of(orders), ir);
  return {fmt::format("cta_costs_{}", name_of(orders)), grid.x * grid.y * grid.z * 4};
}

ScratchBuffer cta_order_buffer(KernelRole orders, const Lowering& ir) {
  const LaunchGrid grid = attention_grid(ir.tiles_of(orders), ir);
  return {fmt::format("cta_order_{}", name_of(orders)), grid.x * grid.y * grid.z * 4};
}

std::vector<BufferNeed> attention_mask_buffers(const KernelDesc& kernel, const Lowering& ir,
                                               ParamField table, ParamField bits) {
  std::vector<BufferNeed> needs;
  const MaskLowering& mask = *ir.mask;
  if (mask.needs_minmax) needs.push_back({table, minmax_table(kernel.block_n, ir)});
  if (mask.element_predicate) {
    // The backward main kernel masks S^T: its bits have a row per key.
    needs.push_back({table, predicate_table(kernel.role, kernel.block_m, kernel.block_n, ir)});
    needs.push_back({bits, predicate_bits(kernel.role, kernel.block_m, kernel.block_n, ir)});
  }
  if (runs_in_cta_order(ir, kernel.role)) {
    needs.push_back({ParamField::cta_order, cta_order_buffer(kernel.role, ir)});
  }
  return needs;
}

BufferNeed row_dot(const Lowering&) {
  return float_rows(ParamField::row_dot, "row_dot", 1);
}

BufferNeed lse_log2(const Lowering&) {
  return float_rows(ParamField::lse_log2, "lse_log2", 1);
}

BufferNeed dq_accum(const Lowering& ir) {
  return float_rows(ParamField::dq_accum, "dq_accum", ir.spec.head_dim_qk);
}

BufferNeed dk_partial(const Lowering& ir) {
  return float_keys(ParamField::dk_partial, "dk_partial", ir.spec.head_dim_qk, ir);
}

BufferNeed dv_partial(const Lowering& ir) {
  return float_keys(ParamField::dv_partial, "dv_partial", ir.spec.head_dim_v, ir);
}

}  // namespace registry
}  // namespace attnjit
