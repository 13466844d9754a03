// The kernel-family registry: one row per kernel kind (role) and family. A row is the one
// place that says which template implements the kernel, what it supports, which tile shapes
// it takes and how much shared memory they need, how it is launched (grid, phases, computed
// arguments), which parameter block it reads and which scratch buffers it uses.
// select_target picks a family per attention kernel from the rows that support the spec;
// select_tiles walks the chosen rows' candidates; plan_kernels builds each kernel's launch
// from its row; the emitters bind its template. The runtime reads only the resulting plan.
// Adding a kernel family is one row (in the rows_*.cpp of its kind) plus one .cuh.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/lowering.hpp"

namespace attnjit {

/// How much per-element mask work (and so how many registers) a kernel carries: causal by
/// index only, FlashMask vectors with one masked interval per column (causal), vectors with a
/// lower and an upper interval (non-causal), a runtime window, or a generated element
/// predicate (any expression, tensor reads included).
enum class MaskCost { index, vectors, two_intervals, window, predicate };
MaskCost mask_cost(const MaskLowering& mask);

/// One tile shape an attention row can take; a row lists them in its order of preference.
struct TileCandidate {
  int head_dim = 0;  ///< head_dim_qk
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  int dim_warps = 1;                     ///< backward key slabs: warps sharing one key slab
  int kv_stages = 0;                     ///< forward: K/V shared-memory stages
  bool q_in_registers = false;           ///< sm80 forward: Q fragments kept in registers
  MaskCost up_to = MaskCost::predicate;  ///< the costliest mask it compiles for without spilling
  bool softcap = true;                   ///< room for soft-capping's registers
  bool alibi = true;                     ///< room for ALiBi's
  int head_dim_v = 0;                    ///< 0: head_dim (equal head dims)
  bool fp8_kv = false;                   ///< decode: a shape of an e4m3 cache (kv_dtype)

  /// Whether it is a shape of the spec's head dims (head_dim_qk, head_dim_v).
  constexpr bool has_head_dims(const AttentionSpec& spec) const {
    return head_dim == spec.head_dim_qk &&
           (head_dim_v != 0 ? head_dim_v : head_dim) == spec.head_dim_v;
  }
};

/// What a row's kernel supports besides its candidates' head dims.
struct RowSupport {
  std::vector<Arch> targets;    ///< the archs it compiles for
  bool predicate_masks = true;  ///< mask=predicate (element bits follow its fragments)
  bool deterministic = true;    ///< deterministic=true (no atomic dQ product, or ordered_dq)
  /// deterministic=true by ordering its own dQ reductions between its CTAs (no dQ kernel;
  /// its CTAs start in an index order, never in a CTA order)
  bool ordered_dq = false;
  bool atomic = true;              ///< deterministic=false
  bool auto_deterministic = true;  ///< picked without `tiles=` in deterministic mode
  /// deterministic=false under GQA: the main kernel adds each query head's dK and dV into fp32
  /// sums per K/V head (zeroed scratch) instead of writing per-query-head partials, and
  /// backward_reduce_dkdv only converts them
  bool sums_dkdv = false;
  /// Under GQA its CTAs may walk every query head of their KV head (BwdParams::head_group,
  /// Extent::head_group): dK and dV are then summed in registers, with no partials
  bool groups_heads = false;
  /// head_dim_v != head_dim_qk: the pairs its candidates list (with `tiles=`, those its
  /// explicit_tiles accepts)
  bool unequal_head_dims = false;
  bool fp8 = false;     ///< dtype=e4m3
  bool fp8_kv = false;  ///< kv_dtype=e4m3
};

/// A scratch buffer a kernel binds to one of its parameter block's pointer fields. Kernels
/// that name the same buffer share it (the planner checks that their sizes agree).
struct BufferNeed {
  ParamField field = ParamField::minmax;
  ScratchBuffer buffer;
};

/// The launch of one kernel: its phases and the computed int arguments of every phase.
struct RowLaunch {
  std::vector<LaunchPhase> phases;
  std::vector<ScalarBinding> scalars;
  /// A persistent kernel's works, the grid its CTAs take in turn (schedule.cuh), which the
  /// CTA order and its buffers count; other kernels' works are their first phase's grid.
  std::optional<LaunchGrid> works;
};

/// Compile-time constants an attention template's Config takes (the emitter writes each).
enum class ConfigField {
  head_dim,        ///< kHeadDim
  head_dims_qk_v,  ///< kHeadDimQK, kHeadDimV
  block_m,
  block_n,
  warps,
  dim_warps,
  kv_stages,
  q_in_registers,
  return_lse,
  atomic_dq,
  ping_pong,       ///< kPingPong: consumer warpgroups take turns (head dims up to 128)
  register_split,  ///< kProducerRegisters (the row's producer_registers), kConsumerRegisters
  persistent,      ///< kPersistent (the row's persistent)
  kv_cache,        ///< kKvCache: how the kernel reads a KV cache (forward.cuh's KvLayout)
  kv_element,      ///< KvElement: the type of the cache's K and V (kv_dtype, else Element)
  packed,          ///< kPacked: a packed batch (varlen=true|shared)
};

/// One kernel kind in one family.
struct KernelRow {
  std::string_view id;  ///< e.g. "backward_grid.sm80"
  KernelRole role = KernelRole::forward;
  KernelFamily family = KernelFamily::sm80;
  std::string_view header;         ///< the templates/ header, e.g. "attnjit/sm80/forward.cuh"
  std::string_view kernel_struct;  ///< attention rows: the struct whose kSmemBytes the plan checks
  std::string_view body;           ///< the device function the entry point calls
  ParamBlock params = ParamBlock::attention;
  int threads = 0;            ///< utility rows: the block size (attention rows: their tiles')
  int min_blocks_per_sm = 0;  ///< __launch_bounds__'s second argument; 0 leaves it out
  /// On sm_90 targets the kernel is launched as a programmatic dependent of the kernel before
  /// it (KernelDesc::dependent_launch): its template waits (wait_for_prior_grids) before it
  /// reads memory, on any target.
  bool dependent_launch = false;
  /// Attention rows whose CTAs per SM depend on the tile shape: that count, which replaces
  /// min_blocks_per_sm (and sets the register split's starting registers).
  int (*ctas_per_sm)(const KernelTiles&) = nullptr;
  RowSupport support;

  // Attention rows only.
  /// The layouts of `tiles=BMxBNxW[:LAYOUT]` that force this row (automatic: a bare shape).
  std::span<const TileLayout> tiles_layouts;
  std::span<const TileCandidate> candidates;
  std::span<const ConfigField> config;
  /// Dynamic shared memory of a candidate for the spec (the template's kSmemBytes).
  int (*smem_bytes)(const TileCandidate&, const AttentionSpec&, const MaskLowering&) = nullptr;
  /// Whether a candidate has the registers for the spec's mask and score modifiers; when
  /// null, its up_to, softcap and alibi fields say.
  bool (*fits)(const TileCandidate&, const AttentionSpec&, const MaskLowering&) = nullptr;
  /// Rows with ConfigField::register_split (warp-specialized: 65536 registers over the
  /// threads of the CTAs an SM holds): the registers the producer warpgroup keeps after
  /// setmaxnreg for these tiles; the consumer warpgroups share the rest.
  int (*producer_registers)(const KernelTiles&, const AttentionSpec&,
                            const MaskLowering&) = nullptr;
  /// Rows with ConfigField::persistent: whether the kernel with these tiles takes several works
  /// per CTA (its launch then gives RowLaunch::works).
  bool (*persistent)(const KernelTiles&, const AttentionSpec&, const MaskLowering&) = nullptr;
  /// `#define`s the kernel's source sets before the template's #include (the sm90a rows: the
  /// wgmma shapes it instantiates); null: none.
  std::vector<std::string> (*header_defines)(const KernelTiles&, const AttentionSpec&) = nullptr;
  /// Source the kernel's translation unit holds between the #include and its Config (the sm90a
  /// forward: its products as one asm statement each); null: none.
  std::string (*prelude)(const KernelTiles&, const AttentionSpec&) = nullptr;
  /// ParamBlock::attention_tma rows: the struct of TMA maps the entry takes after its
  /// parameter block, e.g. "FwdTensorMaps" (templates/attnjit/common/params.cuh).
  std::string_view tensor_maps_type;
  /// Checks an explicit `tiles=` shape for this row; throws the `tiles` Error otherwise.
  TileCandidate (*explicit_tiles)(const TileShape&, const AttentionSpec&,
                                  const MaskLowering&) = nullptr;

  /// The kernel's phases and computed arguments, for a planned `kernel` of this row.
  RowLaunch (*launch)(const KernelDesc& kernel, const Lowering& ir) = nullptr;
  /// ParamBlock::attention_tma rows: the boxes of the TMA maps the kernel copies through, as
  /// its template lays them out (the launch encodes them; the generated source asserts them).
  std::vector<TensorMapBox> (*tensor_maps)(const KernelDesc& kernel, const Lowering& ir) = nullptr;
  /// The scratch buffers the kernel binds.
  std::vector<BufferNeed> (*buffers)(const KernelDesc& kernel, const Lowering& ir) = nullptr;

  bool compiles_for(Arch arch) const;
  /// The spec's head dims, dtype, mask, direction mode and score modifiers are ones this row
  /// supports on `arch`, and some candidate has its head dims (`automatic`: as select_tiles
  /// would pick it without `tiles=`).
  bool supports(const AttentionSpec& spec, const MaskLowering& mask, Arch arch,
                bool automatic) const;
};

/// __launch_bounds__'s second argument for the row's kernel of shape `tiles` (0: none).
int min_blocks_per_sm(const KernelRow& row, const KernelTiles& tiles);

/// Every row, attention rows of one role in their order of preference (the more specialised
/// family first).
std::span<const KernelRow> kernel_rows();

/// The row with this id; InternalError if none.
const KernelRow& kernel_row(std::string_view id);

/// The rows of `role` in `family`, in order.
std::vector<const KernelRow*> kernel_rows(KernelRole role, KernelFamily family);

/// Whether candidate `c` of `row` has the registers for the spec's mask and score modifiers
/// (the row's `fits`, else c.up_to, c.softcap and c.alibi).
bool candidate_fits(const KernelRow& row, const TileCandidate& c, const AttentionSpec& spec,
                    const MaskLowering& mask);

/// The first candidate of `row` that select_tiles takes without `tiles=`: the spec's head dims,
/// room for its mask and score modifiers (candidate_fits), shared memory within
/// `smem_limit`; nullopt if none.
std::optional<TileCandidate> first_candidate(const KernelRow& row, const AttentionSpec& spec,
                                             const MaskLowering& mask, int smem_limit);

/// The row select_tiles takes for `role` in `family` without `tiles=`: the first that
/// supports the spec on `arch` and has a candidate within `smem_limit`; null if none.
const KernelRow* automatic_row(KernelRole role, KernelFamily family, const AttentionSpec& spec,
                               const MaskLowering& mask, Arch arch, int smem_limit);

/// Whether the backward of `ir` (tiles chosen) orders its dQ reductions between CTAs: the
/// deterministic mode on a row with support.ordered_dq. Its dQ then goes through the fp32
/// accumulator and the conversion, as in the atomic mode, and its CTAs run in an index order.
bool orders_dq_reductions(const Lowering& ir);

/// Whether the backward's dQ goes through the fp32 accumulator and the conversion kernel:
/// the atomic mode, or a deterministic mode that orders the reductions (no dQ kernel).
bool dq_accumulated(const Lowering& ir);

/// Whether the backward main kernel of `ir` sums dK and dV per K/V head under GQA
/// (RowSupport::sums_dkdv in the atomic mode): dk_partial/dv_partial are then zeroed sums
/// [B, Hkv, Sk, Dqk] / [B, Hkv, Sk, Dv], else per-query-head partials [B, H, Sk, Dqk/Dv].
bool dkdv_summed(const Lowering& ir);

/// Whether the backward main kernel of `ir` may group the query heads of a KV head into one CTA
/// (RowSupport::groups_heads, the atomic mode, and a mask whose data every head of a KV head
/// shares at compile time: not a predicate that reads h); the launch groups them where
/// Extent::head_group > 1.
bool groups_heads(const Lowering& ir);

/// 1 where the backward of `ir` needs per-query-head partials or sums of dK and dV (GQA, its
/// CTAs not grouping the heads), else 0: a factor of their buffers and of their reduction.
LaunchExpr dkdv_partials(const Lowering& ir);

/// Whether the CTAs of attention kernel `role` start in a CTA order (cta_order.cuh): where the
/// mask makes a block's work depend on data, unless the kernel orders its dQ reductions.
bool runs_in_cta_order(const Lowering& ir, KernelRole role);

/// The row of attention kernel `role` that the layout of the spec's explicit `tiles=` forces,
/// checked against the role's direction, the spec's mask, mode and `arch`; throws the `tiles`
/// Error naming what is accepted.
const KernelRow& explicit_row(KernelRole role, const AttentionSpec& spec, const MaskLowering& mask,
                              Arch arch);

/// The single row of a utility role (min/max, predicate blocks, CTA order, the backward's
/// row kernels).
const KernelRow& utility_row(KernelRole role);

}  // namespace attnjit
