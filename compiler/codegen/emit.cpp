// Emitters for the forward kernel, the FlashMask min/max kernel, the predicate block table,
// the CTA order and the reference kernel,
// and the dispatch over every planned kernel role.
#include "compiler/codegen/emit.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit_backward.hpp"
#include "compiler/codegen/emit_common.hpp"

namespace attnjit {
namespace {

using namespace codegen;

// The sm90a forward (fwd_sm90a.cuh): its parameters are FwdParams and the TMA tensor maps,
// both __grid_constant__ (the copies take the maps' addresses). Its 384 threads start with
// 168 registers each (ptxas's cap for one CTA of 384 per SM); the producer warpgroup gives
// all but 24 away, or all but 40 / 48 where its block walk classifies from tables (FlashMask
// vectors, one / more per column; predicate block tables: below that ptxas spilled there),
// and the two consumer warpgroups take them: 240, 232 or 224 (the three must sum to 3 x 168,
// else setmaxnreg.inc waits forever for registers that no warpgroup gave back). The
// consumers take turns (ping-pong) up to head dim 128, where their softmax is long enough to
// hide behind the other's products (FA3's rule).
std::string emit_forward_sm90a(const Lowering& ir, const KernelDesc& kernel) {
  const AttentionSpec& spec = ir.spec;
  const TileConfig& tiles = *ir.tiles;
  const std::size_t vectors = ir.mask->vectors.size();
  const int producer_registers =
      ir.mask->element_predicate || vectors > 1 ? 48 : vectors == 1 ? 40 : 24;
  return emit_mainloop(
      ir, kernel,
      {fmt::format("static constexpr int kHeadDimQK = {};", spec.head_dim_qk),
       fmt::format("static constexpr int kHeadDimV = {};", spec.head_dim_v),
       fmt::format("static constexpr int kBlockM = {};", tiles.block_m),
       fmt::format("static constexpr int kBlockN = {};", tiles.block_n),
       fmt::format("static constexpr int kStages = {};", tiles.kv_stages),
       fmt::format("static constexpr bool kReturnLse = {};", spec.return_lse),
       fmt::format("static constexpr bool kPingPong = {};", spec.head_dim_qk <= 128),
       fmt::format("static constexpr int kProducerRegisters = {};", producer_registers),
       fmt::format("static constexpr int kConsumerRegisters = {};",
                   (3 * 168 - producer_registers) / 2 / 8 * 8)},
      "attnjit::ForwardSm90a<Config, Mask>", "__grid_constant__ attnjit::FwdParams",
      fmt::format("attnjit::forward_sm90a<Config, Mask{}>(params, maps);",
                  score_mod_argument(spec)),
      /*min_blocks_per_sm=*/1, "const __grid_constant__ attnjit::FwdTensorMaps maps");
}

std::string emit_forward(const Lowering& ir, const KernelDesc& kernel) {
  const AttentionSpec& spec = ir.spec;
  const TileConfig& tiles = *ir.tiles;
  if (tiles.warpgroup) return emit_forward_sm90a(ir, kernel);
  return emit_mainloop(
      ir, kernel,
      {fmt::format("static constexpr int kHeadDimQK = {};", spec.head_dim_qk),
       fmt::format("static constexpr int kHeadDimV = {};", spec.head_dim_v),
       fmt::format("static constexpr int kBlockM = {};", tiles.block_m),
       fmt::format("static constexpr int kBlockN = {};", tiles.block_n),
       fmt::format("static constexpr int kWarps = {};", tiles.warps),
       fmt::format("static constexpr int kStages = {};", tiles.kv_stages),
       fmt::format("static constexpr bool kQInRegisters = {};", tiles.q_in_registers),
       fmt::format("static constexpr bool kReturnLse = {};", spec.return_lse)},
      "attnjit::ForwardSm80<Config, Mask>", "attnjit::FwdParams",
      fmt::format("attnjit::forward_sm80<Config, Mask{}>(params);", score_mod_argument(spec)),
      /*min_blocks_per_sm=*/0);
}

std::string emit_minmax(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, "attnjit::MinMaxParams",
             fmt::format("attnjit::flashmask_minmax</*kColumns=*/{}, /*kBlockN=*/{}>(params);",
                         ir.mask->vectors.size(), kernel.block_n));
  return w.str();
}

std::string emit_predicate_blocks(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  emit_predicate_visible(w, ir.spec);
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  emit_entry(w, kernel, "attnjit::PredicateBlocksParams",
             fmt::format("attnjit::predicate_blocks<Visible, /*kBlockM=*/{}, /*kBlockN=*/{}, "
                         "/*kPerBatch=*/{}, /*kPerHead=*/{}, /*kKeyRows=*/{}>(params);",
                         kernel.block_m, kernel.block_n, ir.mask->table_per_batch,
                         ir.mask->table_per_head, kernel.key_rows));
  return w.str();
}

// The CTA order of the kernel `orders`, with that kernel's mask policy and tiles.
std::string emit_cta_order(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  emit_mask_policy(w, ir, kernel);
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  const bool forward = kernel.orders == KernelRole::forward;
  emit_entry(w, kernel,
             forward ? "attnjit::CtaOrderParams<attnjit::FwdParams>"
                     : "attnjit::CtaOrderParams<attnjit::BwdParams>",
             fmt::format("attnjit::cta_order<Mask, /*kBlockM=*/{}, /*kBlockN=*/{}, "
                         "/*kKeyBlocks=*/{}>(params);",
                         kernel.block_m, kernel.block_n, kernel.orders == KernelRole::backward));
  return w.str();
}

}  // namespace

std::string emit_kernel(const Lowering& ir, const KernelDesc& kernel) {
  internal_check(ir.mask && ir.target && (ir.tiles || ir.backward_tiles) && ir.plan,
                 "emit_kernel needs a planned IR");
  switch (kernel.role) {
    case KernelRole::forward:
      return emit_forward(ir, kernel);
    case KernelRole::flashmask_minmax:
      return emit_minmax(ir, kernel);
    case KernelRole::predicate_blocks:
      return emit_predicate_blocks(ir, kernel);
    case KernelRole::cta_order:
      return emit_cta_order(ir, kernel);
    case KernelRole::backward_preprocess:
    case KernelRole::backward:
    case KernelRole::backward_dq:
    case KernelRole::backward_convert_dq:
    case KernelRole::backward_reduce_dkdv:
      return codegen::emit_backward_kernel(ir, kernel);
  }
  throw InternalError("emit_kernel: unknown role");
}

ReferenceKernel emit_reference_kernel(const AttentionSpec& spec) {
  int mask_kind = 0;
  switch (spec.mask.kind) {
    case MaskKind::none:
      mask_kind = 0;
      break;
    case MaskKind::causal:
      mask_kind = 1;
      break;
    case MaskKind::sliding_window:
      mask_kind = 2;
      break;
    case MaskKind::flashmask:
      mask_kind = 3;
      break;
    case MaskKind::predicate:
      mask_kind = 4;
      break;
  }
  ReferenceKernel out;
  out.name = fmt::format(
      "attnjit_reference_{}_d{}_{}{}", name_of(spec.dtype), spec.head_dim_qk,
      mask_kind == 3
          ? fmt::format("flashmask{}_c{}", spec.mask.causal ? "_causal" : "", spec.mask.columns)
          : std::string(name_of(spec.mask.kind)),
      score_mod_tag(spec));
  out.threads = 128;
  SourceWriter w;
  w.line("// attnjit reference kernel (fp32, unfused) for: {}", to_string(spec));
  w.line("#include \"attnjit/reference.cuh\"");
  w.blank();
  if (mask_kind == 4) {
    emit_predicate_visible(w, spec);
    w.blank();
  }
  KernelDesc entry;
  entry.name = out.name;
  entry.threads = out.threads;
  emit_entry(
      w, entry, "attnjit::FwdParams",
      fmt::format("attnjit::reference_attention<{}, /*kHeadDim=*/{}, /*kMask=*/{}, "
                  "/*kFlashCausal=*/{}, /*kColumns=*/{}, /*kLse=*/true, /*kSoftcap=*/{}, "
                  "/*kAlibi=*/{}{}>(params);",
                  element_type(spec.dtype), spec.head_dim_qk, mask_kind, spec.mask.causal,
                  spec.mask.columns, spec.softcap, spec.alibi, mask_kind == 4 ? ", Visible" : ""));
  out.source = w.str();
  return out;
}

}  // namespace attnjit
