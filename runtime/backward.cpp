// Kernel::backward: checks the tensors against the spec, takes the scratch buffers, fills
// BwdParams and launches the plan: FlashMask min/max tables or predicate block tables, the CTA
// orders, preprocess, main kernel, deterministic dQ kernel or dQ conversion, and the GQA
// reduction of dK/dV.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "attnjit/params.cuh"
#include "runtime/cta_order_launch.hpp"
#include "runtime/driver.hpp"
#include "runtime/interval_check.hpp"
#include "runtime/kernel_set.hpp"
#include "runtime/launch_support.hpp"
#include "runtime/predicate_launch.hpp"

namespace attnjit::jit {
namespace {

using detail::ceil_div;
using detail::paired_head_grid;
using detail::Shapes;
using detail::StreamScratch;

BwdParams make_params(const AttentionSpec& spec, const BackwardArgs& a, const Shapes& s) {
  BwdParams p{};
  detail::fill_common_params(p, spec, a, s);
  p.d_o = a.d_o.data;
  p.d_q = a.d_q.data;
  p.d_k = a.d_k.data;
  p.d_v = a.d_v.data;
  detail::set_strides(a.d_o, p.do_batch_stride, p.do_row_stride, p.do_head_stride);
  detail::set_strides(a.d_q, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
  detail::set_strides(a.d_k, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
  detail::set_strides(a.d_v, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
  return p;
}

void launch(const detail::LoadedKernel& kernel, const std::array<unsigned, 3>& grid, void* params,
            CUstream stream) {
  runtime::LaunchConfig config;
  std::copy(grid.begin(), grid.end(), config.grid);
  config.block[0] = static_cast<unsigned>(kernel.threads);
  config.dynamic_smem_bytes = static_cast<unsigned>(kernel.dynamic_smem_bytes);
  void* args[] = {params};
  runtime::launch(kernel.function, config, stream, args);
}

}  // namespace

void Kernel::backward(const BackwardArgs& args, Stream stream_handle) const {
  const detail::KernelSet& set = *set_;
  if (set.spec.direction != Direction::backward || !set.ir) {
    throw Error(
        "backward: this kernel was compiled for direction=forward; accepted: a kernel compiled "
        "with direction=backward (e.g. `dtype=bf16 head_dim=128 mask=causal direction=backward`)");
  }
  const Shapes s = detail::check_args(set.spec, args, /*lse_required=*/true);
  detail::check_same_layout("d_o", args.d_o, "o", args.o);
  detail::check_same_layout("d_q", args.d_q, "q", args.q);
  detail::check_same_layout("d_k", args.d_k, "k", args.k);
  detail::check_same_layout("d_v", args.d_v, "v", args.v);
  BwdParams params = make_params(set.spec, args, s);
  params.predicate = detail::predicate_inputs(set.spec, args.predicate, s.batch);
  if (s.batch == 0 || s.heads == 0 || (s.seqlen_q == 0 && s.seqlen_k == 0)) return;

  const CUstream stream = static_cast<CUstream>(stream_handle);
  detail::validate_intervals_on_request(args.validate_mask, set.spec.mask,
                                        args.startend_row_indices, s.seqlen_q, stream);
  const std::vector<detail::LoadedKernel>& kernels = set.kernels_in_current_context();
  const KernelPlan& plan = *set.ir->plan;
  const BackwardTiles& tiles = *set.ir->backward_tiles;
  const int d = set.spec.head_dim_qk;
  const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.heads * s.seqlen_q;
  const bool gqa = s.heads != s.kv_heads;

  StreamScratch row_stats(static_cast<std::size_t>(rows) * 2 * sizeof(float), stream);
  params.row_dot = row_stats.as<float>();
  params.lse_log2 = row_stats.as<float>() + rows;
  std::optional<StreamScratch> dq_accum, dkdv_partial;
  if (!set.spec.deterministic) {
    dq_accum.emplace(static_cast<std::size_t>(rows) * d * sizeof(float), stream);
    params.dq_accum = dq_accum->as<float>();
  }
  if (gqa) {
    const std::size_t partial = static_cast<std::size_t>(s.batch) * s.heads * s.seqlen_k * d;
    dkdv_partial.emplace(2 * partial * sizeof(float), stream);
    params.dk_partial = dkdv_partial->as<float>();
    params.dv_partial = dkdv_partial->as<float>() + partial;
  }

  std::vector<std::unique_ptr<StreamScratch>> minmax_tables;
  const auto main_grid = paired_head_grid(ceil_div(s.seqlen_k, tiles.block_n), s.heads, s.batch);
  const auto dq_grid =  // dq_block_m is 0 unless deterministic
      paired_head_grid(tiles.dq_block_m > 0 ? ceil_div(s.seqlen_q, tiles.dq_block_m) : 0, s.heads,
                       s.batch);
  const int* main_order = nullptr;  // the CTA orders, when planned
  const int* dq_order = nullptr;
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const KernelDesc& desc = plan.kernels[i];
    const detail::LoadedKernel& kernel = kernels[i];
    switch (desc.role) {
      case KernelRole::flashmask_minmax: {
        const int key_blocks = static_cast<int>(ceil_div(s.seqlen_k, desc.block_n));
        const std::int64_t warps = static_cast<std::int64_t>(s.batch) * s.mask_heads * key_blocks;
        if (warps == 0) break;
        minmax_tables.push_back(std::make_unique<StreamScratch>(
            static_cast<std::size_t>(warps) * 2 * set.spec.mask.columns * sizeof(int), stream));
        MinMaxParams mm{};
        mm.intervals = params.intervals;
        mm.minmax = minmax_tables.back()->as<int>();
        mm.batch = s.batch;
        mm.mask_heads = s.mask_heads;
        mm.seqlen_k = s.seqlen_k;
        mm.num_key_blocks = key_blocks;
        if (desc.block_n == tiles.block_n) params.minmax = mm.minmax;
        if (desc.block_n == tiles.dq_block_n) params.minmax_dq = mm.minmax;
        launch(kernel, {ceil_div(warps, kernel.threads / 32), 1, 1}, &mm, stream);
        break;
      }
      case KernelRole::predicate_blocks: {
        const detail::BlockTable table = detail::build_block_table(
            kernel, desc, *set.ir->mask, params.predicate, s, stream, minmax_tables);
        // The main kernel's table has key rows (S^T), the dQ kernel's query rows.
        if (desc.key_rows) {
          params.minmax = table.table;
          params.predicate_bits = table.bits;
        } else {
          params.minmax_dq = table.table;
          params.predicate_bits_dq = table.bits;
        }
        break;
      }
      case KernelRole::cta_order:
        if (desc.orders == KernelRole::backward) {
          if (s.seqlen_k > 0) {
            main_order = detail::order_ctas(kernel, desc, params, params.minmax, main_grid, stream,
                                            minmax_tables);
          }
        } else if (s.seqlen_q > 0) {
          dq_order = detail::order_ctas(kernel, desc, params, params.minmax_dq, dq_grid, stream,
                                        minmax_tables);
        }
        break;
      case KernelRole::backward_preprocess:
      case KernelRole::backward_convert_dq:
        if (s.seqlen_q > 0) {
          launch(kernel,
                 {ceil_div(s.seqlen_q, kernel.threads / 32), unsigned(s.heads), unsigned(s.batch)},
                 &params, stream);
        }
        break;
      case KernelRole::backward:
        if (s.seqlen_k > 0) {
          params.cta_order = main_order;
          launch(kernel, main_grid, &params, stream);
        }
        break;
      case KernelRole::backward_dq:
        if (s.seqlen_q > 0) {
          params.cta_order = dq_order;
          launch(kernel, dq_grid, &params, stream);
        }
        break;
      case KernelRole::backward_reduce_dkdv:
        if (gqa && s.seqlen_k > 0) {
          launch(
              kernel,
              {ceil_div(s.seqlen_k, kernel.threads / 32), unsigned(s.kv_heads), unsigned(s.batch)},
              &params, stream);
        }
        break;
      case KernelRole::forward:
        throw InternalError("backward plan holds a forward kernel");
    }
  }
}

}  // namespace attnjit::jit
