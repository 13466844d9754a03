// Internal to compiler/registry: the functions that make the registry's rows, and the launch
// pieces several rows share (grids over paired heads, the mask tables, CTA orders and the
// backward's buffers, named so that the kernels that share a buffer name it alike).
#pragma once

#include <array>
#include <string>

#include "compiler/registry/kernel_registry.hpp"

namespace attnjit::registry {

// Attention rows (rows_sm80.cpp, rows_forward_sm90a.cpp, rows_backward_sm90a.cpp).
KernelRow forward_sm90a();
KernelRow prefill_sm90a();  // the forward over a KV cache (rows_forward_sm90a.cpp)
KernelRow forward_sm80();
KernelRow backward_sm90a();
KernelRow backward_grid_sm80();
KernelRow backward_slabs_sm80();
KernelRow backward_dq_sm80();
KernelRow decode();  // rows_decode.cpp, with its utility row decode_combine()
KernelRow decode_combine();
KernelRow kv_append();

// Utility rows (rows_utility.cpp).
KernelRow varlen_intervals();
KernelRow flashmask_minmax();
KernelRow predicate_blocks();
KernelRow cta_order();
KernelRow backward_preprocess();
KernelRow backward_sinks();
KernelRow backward_convert_dq();
KernelRow backward_reduce_dkdv();

/// Every target: the rows of mma.sync and cp.async code (the sm80 family, utility rows).
inline constexpr std::array<Arch, 5> kAllArchs{Arch::sm_80, Arch::sm_86, Arch::sm_89,
                                               Arch::sm_90, Arch::sm_90a};

/// A utility row: its device function is named like the row, and it runs on every target.
KernelRow utility(std::string_view id, KernelRole role, std::string_view header, ParamBlock params,
                  int threads, decltype(KernelRow::launch) launch,
                  decltype(KernelRow::buffers) buffers);

/// The forward's launch: paired heads over ceil(Sq / block_m) query blocks.
RowLaunch query_block_launch(const KernelDesc& kernel, const Lowering& ir);

/// The forward's buffers: its mask tables and CTA order.
std::vector<BufferNeed> forward_buffers(const KernelDesc& kernel, const Lowering& ir);

/// The backward main kernel's launch: paired heads over ceil(Sk / block_n) key blocks.
RowLaunch key_block_launch(const KernelDesc& kernel, const Lowering& ir);

/// The backward main kernel's buffers: its mask tables and CTA order, the row statistics, the
/// dQ accumulator (atomic mode) and the GQA partial dK/dV.
std::vector<BufferNeed> backward_buffers(const KernelDesc& kernel, const Lowering& ir);

/// (2 * blocks, ceil(heads / 2), B): heads (the query heads, or groups of them) taken in pairs
/// (templates/attnjit/common/schedule.cuh).
LaunchGrid paired_heads(const LaunchExpr& blocks, const LaunchExpr& heads = Extent::heads);

/// The works of the attention kernel with tiles `tiles`: its row's first phase's grid, or a
/// persistent kernel's works (RowLaunch::works).
LaunchGrid attention_grid(const KernelTiles& tiles, const Lowering& ir);

/// The min/max tables of the interval vectors per key block of `block_n` keys.
ScratchBuffer minmax_table(int block_n, const Lowering& ir);

/// `count` (a utility kernel's work or its buffer's size) for what only attention kernel
/// `reader` reads: over a KV cache the launch runs the prefill kernel or the decode kernel, so
/// none where it runs the other; unchanged for every other reader.
LaunchExpr only_where_run(const LaunchExpr& count, KernelRole reader, const Lowering& ir);
/// The tiles of the predicate's block table that attention kernel `reader` reads, of its
/// `block_m` x `block_n` tiles: one per tile of each (batch row, head row); over a KV cache none
/// where the launch runs the other kernel.
LaunchExpr predicate_tiles(KernelRole reader, int block_m, int block_n, const Lowering& ir);
/// That block table, the element bits of its partial tiles (a row per key for the backward
/// main kernel's S^T) and the counter of bit slots taken.
ScratchBuffer predicate_table(KernelRole reader, int block_m, int block_n, const Lowering& ir);
ScratchBuffer predicate_bits(KernelRole reader, int block_m, int block_n, const Lowering& ir);
ScratchBuffer predicate_bits_used(KernelRole reader, int block_m, int block_n);
/// Bit slots of that table: one per tile, at most what the budget holds and 2^29 - 1; none for
/// the decode kernel.
LaunchExpr predicate_bits_capacity(KernelRole reader, int block_m, int block_n, const Lowering& ir);

/// The costs and the order of the CTAs of attention kernel `orders`.
ScratchBuffer cta_costs(KernelRole orders, const Lowering& ir);
ScratchBuffer cta_order_buffer(KernelRole orders, const Lowering& ir);

/// The mask buffers an attention kernel reads: its min/max tables or block table and element
/// bits, bound to `table` and `bits`, and its CTA order.
std::vector<BufferNeed> attention_mask_buffers(const KernelDesc& kernel, const Lowering& ir,
                                               ParamField table, ParamField bits);

/// The backward's per-call buffers: row statistics, the dQ accumulator, GQA partial dK/dV.
BufferNeed row_dot(const Lowering& ir);
BufferNeed lse_log2(const Lowering& ir);
BufferNeed dq_accum(const Lowering& ir);
BufferNeed dk_partial(const Lowering& ir);
BufferNeed dv_partial(const Lowering& ir);

/// A kernel of one phase, `grid` with the kernel's own block.
RowLaunch single_phase(const KernelDesc& kernel, LaunchGrid grid);

}  // namespace attnjit::registry
