// The IR as the passes refine it: the user's AttentionSpec plus what each pass decided
// (mask lowering, target, tiles, kernel plan), with a text printer for --print-after-all.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attnjit/spec.hpp"
#include "compiler/ir/launch_expr.hpp"
#include "compiler/ir/predicate.hpp"

namespace attnjit {

/// Which interval vector a column of the kernels' vectors holds: FlashMask's four (a column
/// hides rows [LTS, LTE) and [UTS, UTE)), and in a packed batch whose mask has both ends of an
/// interval, the column's visible rows [VISIBLE_BEGIN, VISIBLE_END) (its own sequence's, cut by
/// a causal mask), which then need vectors of their own.
enum class IntervalVector { lts, lte, uts, ute, visible_begin, visible_end };
std::string_view name_of(IntervalVector vector);

/// How the kernels apply the mask (decided by lower_mask).
struct MaskLowering {
  bool causal_by_index = false;  ///< j <= i + (Sk - Sq), no vectors
  bool window_by_index = false;  ///< runtime window_left/window_right, no vectors
  /// FlashMask vectors read from startend_row_indices, in column order (empty if none).
  std::vector<IntervalVector> vectors;
  /// The per-key-block min/max tables are needed (a preprocessing kernel builds them).
  bool needs_minmax = false;
  /// mask=predicate: the element predicate is the element rule, and a block table per tile
  /// shape (built by a classification kernel) classifies the tiles.
  bool element_predicate = false;
  bool table_per_batch = false;  ///< the predicate reads b or a tensor: one table row per batch
  bool table_per_head = false;   ///< the predicate reads h: one table row per query head
  /// Over a KV cache, a predicate that does not read h: the decode kernel reads a block table
  /// of 16 new tokens x its key blocks per sequence (otherwise, one table row per query head
  /// would cost more than the CTAs' own classification of their blocks).
  bool decode_table = false;
  /// A packed batch (varlen): the vectors are built over the packed keys by the plan's
  /// varlen_intervals kernel, from cu_seqlens and the user's per-sequence FlashMask vectors, into
  /// a scratch buffer, which every kernel reading vectors takes in place of
  /// startend_row_indices. With an element predicate, the block tables and the element rule
  /// find each row's and key's sequence in cu_seqlens instead.
  bool varlen = false;

  /// The plan builds the packed batch's vectors (varlen without a predicate).
  bool builds_varlen_vectors() const { return varlen && !element_predicate; }

  bool operator==(const MaskLowering&) const = default;
};

/// Kernel families. sm80: FA2 structure with mma.sync (runs on sm_80..sm_90a); sm90a: warpgroup
/// MMAs (wgmma) and the Hopper copy engines, compiled for sm_90a only.
enum class KernelFamily { sm80, sm90a };
std::string_view name_of(KernelFamily family);

/// What a kernel computes inside the plan.
enum class KernelRole {
  varlen_intervals,      ///< varlen: the FlashMask vectors of the packed batch from cu_seqlens
  flashmask_minmax,      ///< min/max of the interval vectors per key block
  predicate_blocks,      ///< block table of a predicate mask for one tile shape
  cta_order,             ///< the CTAs of an attention kernel sorted by their tiles, heaviest first
  forward,               ///< the forward pass
  backward_preprocess,   ///< D = rowsum(dO * O), LSE in log2 units, dQ accumulator zeroed
  backward_sinks,        ///< sinks: the sink logits' gradient from D and the LSE
  backward,              ///< dK, dV per key block; dQ too unless backward_dq runs
  backward_dq,           ///< deterministic mode: dQ per query block
  backward_convert_dq,   ///< dQ accumulator (fp32) to the input dtype
  backward_reduce_dkdv,  ///< GQA: dK, dV summed over the query heads of each KV head
  decode,                ///< kv_cache: attention of few query rows over a KV cache, keys split
  decode_combine,        ///< kv_cache: the key splits' partial outputs merged (split launches)
  kv_append,             ///< kv_cache: new keys and values written into the cache (appending)
  prefill,               ///< kv_cache: the forward over the cache, for calls with many new tokens
};
std::string_view name_of(KernelRole role);

/// The family chosen for one attention kernel of the spec (decided by select_target).
struct FamilyChoice {
  KernelRole role = KernelRole::forward;
  KernelFamily family = KernelFamily::sm80;

  bool operator==(const FamilyChoice&) const = default;
};

/// The hardware the kernels are generated for and the family of each attention kernel
/// (decided by select_target from the kernel registry).
struct TargetInfo {
  Arch arch = Arch::sm_80;
  int max_dynamic_smem_bytes = 0;  ///< opt-in limit per block
  /// forward; or backward, and backward_dq when deterministic on a backward row that does
  /// not order its dQ reductions (RowSupport::ordered_dq); or decode, and prefill over a KV
  /// cache where the forward's family takes the spec: the main kernel first.
  std::vector<FamilyChoice> families;

  KernelFamily family_of(KernelRole role) const;
  bool chooses(KernelRole role) const;
  bool operator==(const TargetInfo&) const = default;
};

/// The tile shape of one attention kernel (decided by select_tiles from its registry row).
struct KernelTiles {
  KernelRole role = KernelRole::forward;
  std::string row;  ///< the registry row it instantiates, e.g. "backward_grid.sm80"
  int block_m = 0;  ///< query rows per CTA (forward, dQ) or per iteration (backward main)
  int block_n = 0;  ///< keys per iteration (forward, dQ) or per CTA (backward main); also the
                    ///< key-block size of its min/max tables
  int warps = 0;
  int dim_warps = 1;            ///< backward key slabs: warps sharing keys, splitting the head dim
  int kv_stages = 0;            ///< forward: K/V shared-memory buffers of the copy pipeline
  bool q_in_registers = false;  ///< forward: Q fragments loaded once instead of every iteration
  int smem_bytes = 0;           ///< dynamic shared memory

  int threads() const { return warps * 32; }
  int rows_per_warp() const { return block_m / warps; }
  bool operator==(const KernelTiles&) const = default;
};

/// `tiles @forward {row=forward.sm80 block_m=128 ...}`, as the IR prints it.
std::string to_string(const KernelTiles& tiles);

/// The parameter block a kernel takes by value (templates/attnjit/common/params.cuh).
enum class ParamBlock {
  attention,  ///< FwdParams in a forward plan, BwdParams in a backward plan
  /// FwdParams and FwdTensorMaps (the TMA maps of q, k, v and o, encoded at launch for the
  /// kernel's tiles), both `const __grid_constant__`
  attention_tma,
  minmax,            ///< MinMaxParams
  predicate_blocks,  ///< PredicateBlocksParams
  cta_order,         ///< CtaOrderParams<the attention block of the plan>
};
std::string_view name_of(ParamBlock block);

/// A tensor an attention kernel copies by TMA: a map of FwdTensorMaps or BwdTensorMaps
/// (templates/attnjit/common/params.cuh), 4-D (D, S, H, B) over the activations [B, S, H, D]
/// and the fp32 buffers [B, H, S, D] alike (dq_accum; dk_sum and dv_sum: GQA's dK and dV sums
/// in dk_partial and dv_partial).
enum class MapTensor { q, k, v, o, d_o, dq_accum, d_k, d_v, dk_sum, dv_sum };
std::string_view name_of(MapTensor tensor);

/// The box one TMA copy of a tensor map moves, as the kernel's template lays it out in shared
/// memory: `rows` rows (sequence positions) x `cols` columns (of the head dim) of one (head,
/// batch), in a swizzle pattern of `swizzle_bytes` (128, 64, 32, or 0 for none).
struct TensorMapBox {
  MapTensor tensor = MapTensor::q;
  int rows = 0;
  int cols = 0;
  int swizzle_bytes = 0;
  /// The rows are a key block of a paged KV cache's pool: the launch encodes boxes of at most a
  /// page's rows (the kernel copies a block as several).
  bool page_rows = false;

  bool operator==(const TensorMapBox&) const = default;
};

/// `q=128x64/128B`: the tensor, rows x columns, the swizzle (`k=128x64/128B/page`: boxes of at
/// most a page's rows).
std::string to_string(const TensorMapBox& box);

/// A pointer field of a parameter block that the plan points at a scratch buffer.
enum class ParamField {
  minmax,          ///< Fwd/BwdParams::minmax: min/max tables or block table of the kernel's tiles
  minmax_dq,       ///< BwdParams::minmax_dq: the same for the dQ kernel's tiles
  predicate_bits,  ///< Fwd/BwdParams::predicate_bits
  predicate_bits_dq,  ///< BwdParams::predicate_bits_dq
  cta_order,          ///< Fwd/BwdParams::cta_order: the order of this kernel's CTAs
  work_counter,       ///< FwdParams::work_counter: the works a persistent kernel's CTAs drew
  row_dot,            ///< BwdParams::row_dot
  lse_log2,           ///< BwdParams::lse_log2
  dq_accum,           ///< BwdParams::dq_accum
  dq_turns,           ///< BwdParams::dq_turns
  dk_partial,         ///< BwdParams::dk_partial
  dv_partial,         ///< BwdParams::dv_partial
  table_out,          ///< MinMaxParams::minmax, PredicateBlocksParams::table
  bits_out,           ///< PredicateBlocksParams::bits
  bits_used,          ///< PredicateBlocksParams::bits_used
  order_table,        ///< CtaOrderParams::table: the table the ordered kernel reads
  order_cost,         ///< CtaOrderParams::cost
  order_out,          ///< CtaOrderParams::order
  /// varlen: the vectors varlen_intervals writes (AttentionParams::intervals and
  /// VarlenInputs::intervals, MinMaxParams::intervals, CtaOrderParams' attention.intervals)
  varlen_intervals,
  o_partial,    ///< FwdParams::kv_cache.o_partial: the key splits' fp32 outputs
  lse_partial,  ///< FwdParams::kv_cache.lse_partial: the key splits' LSEs
};
std::string_view name_of(ParamField field);

/// An int field of a parameter block that the plan computes from the launch extents.
enum class ParamScalar {
  num_key_blocks,  ///< MinMaxParams
  table_batch,     ///< PredicateBlocksParams
  table_heads,
  blocks_m,
  blocks_n,
  bits_capacity,
  grid_x,  ///< CtaOrderParams: the ordered kernel's grid
  grid_y,
  grid_z,
  max_cost,
  group_pairs,
  phase,
  num_splits,  ///< FwdParams::kv_cache.num_splits: the decode kernel's key splits
  /// BwdParams::head_group (the backward main kernel's, and its CTA order's attention block)
  head_group,
};
std::string_view name_of(ParamScalar scalar);

/// Device memory a launch needs besides the tensors: one region of the launch's workspace.
struct ScratchBuffer {
  std::string name;     ///< e.g. "dq_accum", "minmax_bn64"
  LaunchExpr bytes;     ///< its size for the launch's extents
  bool zeroed = false;  ///< set to zero (on the stream) before the first kernel runs

  bool operator==(const ScratchBuffer&) const = default;
};

struct BufferBinding {
  ParamField field = ParamField::minmax;
  int buffer = 0;  ///< index into KernelPlan::scratch

  bool operator==(const BufferBinding&) const = default;
};

struct ScalarBinding {
  ParamScalar field = ParamScalar::phase;
  LaunchExpr value;

  bool operator==(const ScalarBinding&) const = default;
};

/// One launch of a kernel: its grid, block and the scalars that differ between phases.
/// A grid with a zero dimension is not launched.
struct LaunchPhase {
  LaunchGrid grid;
  int threads = 0;
  std::vector<ScalarBinding> scalars;

  bool operator==(const LaunchPhase&) const = default;
};

/// One kernel to generate, compile and launch: everything the runtime needs to launch it.
struct KernelDesc {
  KernelRole role = KernelRole::forward;
  std::string row;              ///< its registry row
  std::string name;             ///< extern "C" entry point, deterministic from the spec
  std::string template_header;  ///< the templates/ header holding its mainloop
  KernelFamily family = KernelFamily::sm80;
  ParamBlock params = ParamBlock::attention;
  int threads = 0;  ///< __launch_bounds__: the largest block of its phases
  int dynamic_smem_bytes = 0;
  int block_m = 0;  ///< predicate_blocks, cta_order: the query-block size of its table
  int block_n = 0;  ///< flashmask_minmax, predicate_blocks, cta_order: the key-block size
  /// predicate_blocks: the element bits of partial tiles have a row per key (for the backward
  /// main kernel's S^T) instead of one per query
  bool key_rows = false;
  /// cta_order: the attention kernel whose CTAs it orders; predicate_blocks: the attention
  /// kernel that reads its table (block_m x block_n: that kernel's tiles)
  KernelRole orders = KernelRole::forward;
  /// ParamBlock::attention_tma: the TMA maps the launch encodes, one box each (the row's
  /// template checks them: the generated source asserts the same boxes)
  std::vector<TensorMapBox> tensor_maps;
  std::vector<LaunchPhase> phases;     ///< launched in this order
  std::vector<BufferBinding> buffers;  ///< pointer fields set to scratch buffers
  std::vector<ScalarBinding> scalars;  ///< int fields computed for every phase
  /// Launched as a programmatic dependent of the kernel before it (sm_90 targets): its grid
  /// starts while that kernel finishes, and waits for it before reading memory.
  bool dependent_launch = false;

  bool operator==(const KernelDesc&) const = default;
};

/// What a launch needs of a predicate mask: the runtime inputs it reads.
struct PredicateLaunch {
  int scalar_count = 0;              ///< slots $0 .. $(scalar_count - 1)
  std::vector<std::string> tensors;  ///< tensor names, in slot order

  bool operator==(const PredicateLaunch&) const = default;
};

/// The kernels of one spec in launch order, their scratch buffers and the predicate's inputs
/// (decided by plan_kernels): the launch contract the runtime follows.
struct KernelPlan {
  std::vector<ScratchBuffer> scratch;
  std::vector<KernelDesc> kernels;
  PredicateLaunch predicate;

  const KernelDesc* find(KernelRole role) const;
  bool operator==(const KernelPlan&) const = default;
};

/// The IR between passes: the spec and every decision made so far.
struct Lowering {
  AttentionSpec spec;
  std::optional<Predicate> predicate;  ///< mask=predicate: parsed once, by validate
  std::optional<MaskLowering> mask;
  std::optional<TargetInfo> target;
  std::vector<KernelTiles> tiles;  ///< one per attention kernel, in target->families order
  std::optional<KernelPlan> plan;

  /// The tiles of attention kernel `role` (select_tiles must have chosen them).
  const KernelTiles& tiles_of(KernelRole role) const;
};

/// The score modifiers' part of kernel names: "", "_softcap", "_alibi" or "_softcap_alibi".
std::string score_mod_tag(const AttentionSpec& spec);

/// Text form of the IR, one decision per line, e.g.
///   attention {dtype=bf16 head_dim_qk=128 ...}
///     mask_lowering {causal=index window=none vectors=[] minmax=false}
/// Only the decisions made so far are printed.
std::string to_string(const Lowering& lowering);

}  // namespace attnjit
