// select_tiles: the tile shape of each attention kernel, from the candidates of its family's
// registry rows, or the spec's explicit shape.
#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"
#include "compiler/registry/kernel_registry.hpp"

namespace attnjit {
namespace {

KernelTiles make_tiles(KernelRole role, const KernelRow& row, const TileCandidate& c, int smem) {
  KernelTiles tiles;
  tiles.role = role;
  tiles.row = std::string(row.id);
  tiles.block_m = c.block_m;
  tiles.block_n = c.block_n;
  tiles.warps = c.warps;
  tiles.dim_warps = c.dim_warps;
  tiles.kv_stages = c.kv_stages;
  tiles.q_in_registers = c.q_in_registers;
  tiles.smem_bytes = smem;
  return tiles;
}

// The spec's `tiles=` shape on the row its layout forces, checked by the row and against the
// target's shared memory.
KernelTiles explicit_tiles(KernelRole role, const Lowering& in) {
  const TargetInfo& target = *in.target;
  const KernelRow& row = explicit_row(role, in.spec, *in.mask, target.arch);
  const TileCandidate c = row.explicit_tiles(in.spec.tiles, in.spec, *in.mask);
  const int smem = row.smem_bytes(c, in.spec, *in.mask);
  if (smem > target.max_dynamic_smem_bytes) {
    throw_field_error("tiles", to_string(in.spec.tiles),
                      fmt::format("shapes whose shared memory ({} bytes here) fits {}'s {} bytes",
                                  smem, name_of(target.arch), target.max_dynamic_smem_bytes));
  }
  return make_tiles(role, row, c, smem);
}

// The first candidate that fits, over the family's rows in their order of preference.
KernelTiles automatic_tiles(const FamilyChoice& choice, const Lowering& in) {
  const TargetInfo& target = *in.target;
  const KernelRow* row = automatic_row(choice.role, choice.family, in.spec, *in.mask, target.arch,
                                       target.max_dynamic_smem_bytes);
  if (row == nullptr) {
    throw InternalError(
        fmt::format("select_tiles: no {} tile shape for head_dim {} within {} bytes",
                    name_of(choice.role), in.spec.head_dim_qk, target.max_dynamic_smem_bytes));
  }
  const TileCandidate c = *first_candidate(*row, in.spec, *in.mask, target.max_dynamic_smem_bytes);
  return make_tiles(choice.role, *row, c, row->smem_bytes(c, in.spec, *in.mask));
}

}  // namespace

Lowering select_tiles(const Lowering& in) {
  internal_check(in.mask && in.target, "select_tiles runs after lower_mask and select_target");
  Lowering out = in;
  out.tiles.clear();
  const std::vector<FamilyChoice>& families = in.target->families;
  for (std::size_t i = 0; i < families.size(); ++i) {
    const bool forced = i == 0 && !in.spec.tiles.is_auto();
    out.tiles.push_back(forced ? explicit_tiles(families[i].role, in)
                               : automatic_tiles(families[i], in));
  }
  return out;
}

}  // namespace attnjit
