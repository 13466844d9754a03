// The IR as the passes refine it: the user's AttentionSpec plus what each pass decided
// (mask lowering, target, tiles, kernel plan), with a text printer for --print-after-all.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attnjit/spec.hpp"

namespace attnjit {

/// Which FlashMask interval vector a column of startend_row_indices holds.
enum class IntervalVector { lts, lte, uts, ute };
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

  bool operator==(const MaskLowering&) const = default;
};

/// Kernel families. sm80: FA2 structure with mma.sync (runs on sm_80..sm_90a); sm90a: warpgroup
/// MMAs (wgmma), the backward main kernel of the warpgroup layout and the warp-specialized
/// forward (TMA, mbarrier rings).
enum class KernelFamily { sm80, sm90a };
std::string_view name_of(KernelFamily family);

/// The hardware the kernels are generated for (decided by select_target).
struct TargetInfo {
  Arch arch = Arch::sm_80;
  KernelFamily family = KernelFamily::sm80;
  int max_dynamic_smem_bytes = 0;  ///< opt-in limit per block

  bool operator==(const TargetInfo&) const = default;
};

/// Tile shape and pipeline of the forward kernel (decided by select_tiles).
struct TileConfig {
  int block_m = 0;              ///< query rows per CTA
  int block_n = 0;              ///< keys per iteration (also the min/max key-block size)
  int warps = 0;                ///< each warp owns block_m / warps query rows (16-row slabs)
  int kv_stages = 0;            ///< K/V shared-memory buffers in the cp.async pipeline
  bool q_in_registers = false;  ///< Q fragments loaded once instead of every iteration
  int smem_bytes = 0;           ///< dynamic shared memory of the forward kernel
  /// sm90a (fwd_sm90a.cuh): a TMA producer warpgroup and two wgmma consumer warpgroups of
  /// 64 rows (block_m = 128, warps = 12), kv_stages K and V stages; forced by `tiles=` with
  /// the w suffix on target sm_90a
  bool warpgroup = false;

  int threads() const { return warps * 32; }
  int rows_per_warp() const { return block_m / warps; }
  bool operator==(const TileConfig&) const = default;
};

/// How the backward main kernel spreads its products over its warps.
enum class BackwardLayout {
  key_slabs,  ///< bwd_sm80.cuh: every product by key slabs of 16 (x dim_warps), P^T in registers
  warp_grid,  ///< bwd_grid_sm80.cuh: a 2-D warp grid per product, P^T and dS^T in shared memory
  warpgroup,  ///< bwd_wgmma_sm90.cuh (sm_90a): 64 keys per warpgroup, wgmma products
};

std::string_view name_of(BackwardLayout layout);

/// Tile shapes of the backward kernels (decided by select_tiles for direction=backward).
struct BackwardTiles {
  BackwardLayout layout = BackwardLayout::key_slabs;
  int block_m = 0;    ///< main kernel: queries per iteration
  int block_n = 0;    ///< main kernel: keys per CTA (also its min/max key-block size)
  int warps = 0;      ///< main kernel warps: key warps (block_n / 16 slabs, or block_n / 32
                      ///< for the grid) x dim_warps
  int dim_warps = 0;  ///< warps sharing the same keys of dK/dV, each owning a share of the head dim
  int smem_bytes = 0;
  int dq_block_m = 0;  ///< deterministic dQ kernel: queries per CTA (16 per warp)
  int dq_block_n = 0;  ///< deterministic dQ kernel: keys per iteration
  int dq_warps = 0;
  int dq_smem_bytes = 0;

  bool operator==(const BackwardTiles&) const = default;
};

/// What a kernel computes inside the plan.
enum class KernelRole {
  flashmask_minmax,      ///< min/max of the interval vectors per key block
  predicate_blocks,      ///< block table of a predicate mask for one tile shape
  cta_order,             ///< the CTAs of an attention kernel sorted by their tiles, heaviest first
  forward,               ///< the forward pass
  backward_preprocess,   ///< D = rowsum(dO * O), LSE in log2 units, dQ accumulator zeroed
  backward,              ///< dK, dV (and dQ by atomics unless deterministic) per key block
  backward_dq,           ///< deterministic mode: dQ per query block
  backward_convert_dq,   ///< dQ accumulator (fp32) to the input dtype
  backward_reduce_dkdv,  ///< GQA: dK, dV summed over the query heads of each KV head
};
std::string_view name_of(KernelRole role);

/// One kernel to generate, compile and launch.
struct KernelDesc {
  KernelRole role = KernelRole::forward;
  std::string name;             ///< extern "C" entry point, deterministic from the spec
  std::string template_header;  ///< the templates/ header holding its mainloop
  /// Its instruction family: the target's, or sm90a for a kernel on wgmma (plan_kernels)
  KernelFamily family = KernelFamily::sm80;
  int threads = 0;
  int dynamic_smem_bytes = 0;
  int block_m = 0;  ///< predicate_blocks, cta_order: the query-block size of its table
  int block_n = 0;  ///< flashmask_minmax, predicate_blocks, cta_order: the key-block size
  /// predicate_blocks: the element bits of partial tiles have a row per key (for the backward
  /// main kernel's S^T) instead of one per query
  bool key_rows = false;
  /// cta_order: the attention kernel whose CTAs it orders (block_m x block_n: that kernel's tiles)
  KernelRole orders = KernelRole::forward;
  std::string grid;  ///< human-readable launch grid, e.g. "(ceil(Sq/128), H, B)"

  bool operator==(const KernelDesc&) const = default;
};

/// The kernels of one spec, in launch order (decided by plan_kernels).
struct KernelPlan {
  std::vector<KernelDesc> kernels;

  const KernelDesc* find(KernelRole role) const;
  bool operator==(const KernelPlan&) const = default;
};

/// The IR between passes: the spec and every decision made so far.
struct Lowering {
  AttentionSpec spec;
  std::optional<MaskLowering> mask;
  std::optional<TargetInfo> target;
  std::optional<TileConfig> tiles;              ///< forward
  std::optional<BackwardTiles> backward_tiles;  ///< backward
  std::optional<KernelPlan> plan;
};

/// The score modifiers' part of kernel names: "", "_softcap", "_alibi" or "_softcap_alibi".
std::string score_mod_tag(const AttentionSpec& spec);

/// Text form of the IR, one decision per line, e.g.
///   attention {dtype=bf16 head_dim_qk=128 ...}
///     mask_lowering {causal=index window=none vectors=[] minmax=false}
/// Only the decisions made so far are printed.
std::string to_string(const Lowering& lowering);

}  // namespace attnjit
