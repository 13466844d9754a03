// Emitters: an attention kernel binds its registry row's Config constants, the mask policy
// and the score modifiers and calls the row's mainloop; the utility kernels instantiate
// their templates with the plan's constants.
#include "compiler/codegen/emit.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit_common.hpp"
#include "compiler/registry/kernel_registry.hpp"

namespace attnjit {
namespace {

using namespace codegen;

// `static constexpr ...` lines of the Config an attention template reads.
std::vector<std::string> config_lines(const KernelRow& row, const KernelTiles& tiles,
                                      const Lowering& ir) {
  const AttentionSpec& spec = ir.spec;
  std::vector<std::string> lines;
  const auto constant = [&](std::string_view type, std::string_view name, auto value) {
    lines.push_back(fmt::format("static constexpr {} {} = {};", type, name, value));
  };
  for (ConfigField field : row.config) {
    switch (field) {
      case ConfigField::head_dim:
        constant("int", "kHeadDim", spec.head_dim_qk);
        break;
      case ConfigField::head_dims_qk_v:
        constant("int", "kHeadDimQK", spec.head_dim_qk);
        constant("int", "kHeadDimV", spec.head_dim_v);
        break;
      case ConfigField::block_m:
        constant("int", "kBlockM", tiles.block_m);
        break;
      case ConfigField::block_n:
        constant("int", "kBlockN", tiles.block_n);
        break;
      case ConfigField::warps:
        constant("int", "kWarps", tiles.warps);
        break;
      case ConfigField::dim_warps:
        constant("int", "kDimWarps", tiles.dim_warps);
        break;
      case ConfigField::kv_stages:
        constant("int", "kStages", tiles.kv_stages);
        break;
      case ConfigField::q_in_registers:
        constant("bool", "kQInRegisters", tiles.q_in_registers);
        break;
      case ConfigField::return_lse:
        constant("bool", "kReturnLse", spec.return_lse);
        break;
      case ConfigField::atomic_dq:
        constant("bool", "kAtomicDq", !spec.deterministic);
        break;
      case ConfigField::ping_pong:
        // Up to head dim 128 a warpgroup's softmax is long enough to hide behind the other's
        // products (FA3's rule).
        constant("bool", "kPingPong", spec.head_dim_qk <= 128);
        break;
      case ConfigField::register_split: {
        // Each thread starts with 65536 registers over the threads of the CTAs an SM holds,
        // in multiples of 8 (168 of one CTA of 384 threads, 128 of one of 512 or of two of
        // 256); the producer warpgroup keeps what its row says and the consumer warpgroups
        // take the rest, in multiples of 8: together they must not exceed what they started
        // with, else setmaxnreg.inc waits forever.
        const int producer = row.producer_registers(tiles, ir.spec, *ir.mask);
        const int warpgroups = tiles.warps / 4;
        const int ctas = std::max(1, min_blocks_per_sm(row, tiles));
        const int start = std::min(65536 / (ctas * tiles.threads()) / 8 * 8, 255 / 8 * 8);
        constant("int", "kProducerRegisters", producer);
        constant("int", "kConsumerRegisters",
                 (warpgroups * start - producer) / (warpgroups - 1) / 8 * 8);
        break;
      }
      case ConfigField::persistent:
        constant("bool", "kPersistent", row.persistent(tiles, ir.spec, *ir.mask));
        break;
    }
  }
  return lines;
}

// The wgmma shapes (m64nNk16) an sm90a kernel instantiates, as wgmma.cuh's defines: N is a
// query or key block (S, S^T, dP^T) or half of one (a consumer's queries in the wide
// backward), the head dim (O, dK, dV, dQ) or half of it (a consumer's share of dK, dV or dQ
// when two split the head dim), or 64 (a consumer's 64 rows). The other shapes are left out of
// the compile (their operand lists are most of wgmma.cuh's parse time). A shape missing here
// fails the kernel's compile (WgmmaShape<N> is incomplete): the NVRTC sweeps compile every
// sm90a spec.
std::vector<std::string> wgmma_shape_defines(const KernelTiles& tiles, const AttentionSpec& spec) {
  std::vector<int> shapes{64,
                          tiles.block_m,
                          tiles.block_m / 2,
                          tiles.block_n,
                          tiles.block_n / 2,
                          spec.head_dim_qk,
                          spec.head_dim_qk / 2,
                          spec.head_dim_v,
                          spec.head_dim_v / 2};
  std::ranges::sort(shapes);
  const auto [first, last] = std::ranges::unique(shapes);
  shapes.erase(first, last);
  std::vector<std::string> defines{"ATTNJIT_WGMMA_SOME_SHAPES"};
  for (int n : shapes) {
    if (n % 16 == 0 && n >= 16 && n <= 256) defines.push_back(fmt::format("ATTNJIT_WGMMA_N{}", n));
  }
  return defines;
}

// The operand list "%first, ..., %(first + count - 1)" of an asm statement.
std::string operand_list(int first, int count) {
  std::string list;
  for (int i = 0; i < count; ++i) list += fmt::format("{}%{}", i > 0 ? ", " : "", first + i);
  return list;
}

// One asm statement for each of a product's forms (wgmma.cuh's WgmmaSteps<n, steps>): every
// k16 step of the product in one statement, so that NVVM handles the n / 2 accumulators once
// per product instead of once per step (NVRTC to PTX 243-248 ms against 281-311 for the d128
// causal forward; at d128 bf16 the same speed on the H100:
// docs/benchmarks/2026-11-27-compile-latency-forward-products.md). Operands: the accumulators
// %0 .. %(n/2 - 1), then SS: the steps' A descriptors, their B descriptors, the accumulate
// flag and the two transpose immediates; RS: the steps' A registers (four each), their B
// descriptors, the accumulate flag and B's transpose immediate. The first step adds to the
// accumulators when the flag is set, the others always.
void emit_wgmma_steps(SourceWriter& w, int n, int steps, DType dtype) {
  const int accs = n / 2;
  const bool bf16 = dtype == DType::bf16;
  const std::string type = bf16 ? "bf16" : "f16";
  const std::string shape = fmt::format("m64n{}k16.f32.{}.{}", n, type, type);
  const std::string regs = operand_list(0, accs);
  std::string outputs;
  for (int i = 0; i < accs; ++i) {
    outputs += fmt::format("{}\"+f\"(d[{}][{}])", i > 0 ? ", " : "", i / 4, i % 4);
  }
  // SS
  std::string ss = fmt::format("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n", accs + 2 * steps);
  for (int kk = 0; kk < steps; ++kk) {
    ss += fmt::format("wgmma.mma_async.sync.aligned.{} {{{}}}, %{}, %{}, {}, 1, 1, %{}, %{};\\n",
                      shape, regs, accs + kk, accs + steps + kk, kk == 0 ? "p" : "1",
                      accs + 2 * steps + 1, accs + 2 * steps + 2);
  }
  ss += "}\\n";
  std::string ss_inputs;
  for (int kk = 0; kk < steps; ++kk) ss_inputs += fmt::format("\"l\"(desc_a({})), ", kk);
  for (int kk = 0; kk < steps; ++kk) ss_inputs += fmt::format("\"l\"(desc_b({})), ", kk);
  ss_inputs += "\"r\"(accumulate), \"n\"(kTransA), \"n\"(kTransB)";
  // RS
  std::string rs = fmt::format("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n", accs + 5 * steps);
  for (int kk = 0; kk < steps; ++kk) {
    rs += fmt::format("wgmma.mma_async.sync.aligned.{} {{{}}}, {{{}}}, %{}, {}, 1, 1, %{};\\n",
                      shape, regs, operand_list(accs + 4 * kk, 4), accs + 4 * steps + kk,
                      kk == 0 ? "p" : "1", accs + 5 * steps + 1);
  }
  rs += "}\\n";
  std::string rs_inputs;
  for (int kk = 0; kk < steps; ++kk) {
    for (int j = 0; j < 4; ++j) rs_inputs += fmt::format("\"r\"(a[{}][{}]), ", kk, j);
  }
  for (int kk = 0; kk < steps; ++kk) rs_inputs += fmt::format("\"l\"(desc_b({})), ", kk);
  rs_inputs += "\"r\"(accumulate), \"n\"(kTransB)";

  // One member: its template line and signature, the element type's check and the statement.
  const auto member = [&](std::string_view head, std::string_view signature,
                          std::string_view continued, const std::string& statement,
                          const std::string& inputs) {
    w.line("{}", head);
    w.line("__device__ static __forceinline__ void {}", signature);
    w.line("                                          {}", continued);
    w.line("  static_assert({}is_bf16<Element>(), \"the spec's element type\");", bf16 ? "" : "!");
    w.line("  asm volatile(\"{}\"", statement);
    w.line("               : {}", outputs);
    w.line("               : {});", inputs);
    w.line("}}");
  };
  w.line("template <>");
  w.line("struct WgmmaSteps<{}, {}> {{", n, steps);
  w.indent();
  member("template <class Element, int kTransA, int kTransB, class DescA, class DescB>",
         fmt::format("ss(float (&d)[{}][4], DescA desc_a, DescB desc_b,", n / 8),
         "int accumulate) {", ss, ss_inputs);
  member("template <class Element, int kTransB, class DescB>",
         fmt::format("rs(float (&d)[{}][4], const u32 (&a)[{}][4],", n / 8, steps),
         "DescB desc_b, int accumulate) {", rs, rs_inputs);
  w.dedent();
  w.line("}};");
}

// The sm90a forward's products as one statement each: S = Q K^T (SS, n = block_n, head_dim_qk /
// 16 steps) and O += P V (RS, n = head_dim_v, block_n / 16 steps).
void emit_forward_products(SourceWriter& w, const KernelTiles& tiles, const AttentionSpec& spec) {
  std::vector<std::pair<int, int>> pairs{{tiles.block_n, spec.head_dim_qk / 16},
                                         {spec.head_dim_v, tiles.block_n / 16}};
  std::ranges::sort(pairs);
  pairs.erase(std::ranges::unique(pairs).begin(), pairs.end());
  w.line("namespace attnjit {{");
  w.blank();
  for (const auto& [n, steps] : pairs) {
    emit_wgmma_steps(w, n, steps, spec.dtype);
    w.blank();
  }
  w.line("}}  // namespace attnjit");
  w.blank();
}

// An attention kernel's translation unit: the header, `struct Config`, the mask policy, the
// score modifiers, a check that the template's shared memory is the planned
// kernel.dynamic_smem_bytes, and the entry calling the row's mainloop.
std::string emit_attention(const Lowering& ir, const KernelDesc& kernel) {
  const KernelRow& row = kernel_row(kernel.row);
  const KernelTiles& tiles = ir.tiles_of(kernel.role);
  SourceWriter w;
  emit_header(w, ir, kernel,
              kernel.family == KernelFamily::sm90a ? wgmma_shape_defines(tiles, ir.spec)
                                                   : std::vector<std::string>{});
  // Not with three consumers (d64's 192-row blocks, 160 registers each): there the products as
  // one statement spilled 8-16 bytes with soft-capping and ALiBi, and the kernels compile in
  // 0.4 s without it.
  if (kernel.family == KernelFamily::sm90a && kernel.role == KernelRole::forward &&
      tiles.block_m / 64 < 3) {
    emit_forward_products(w, tiles, ir.spec);
  }
  w.line("namespace {{");
  w.blank();
  w.line("struct Config {{");
  w.indent();
  w.line("typedef {} Element;", element_type(ir.spec.dtype));
  for (const std::string& line : config_lines(row, tiles, ir)) w.line("{}", line);
  w.dedent();
  w.line("}};");
  w.blank();
  emit_mask_policy(w, ir, kernel);
  w.blank();
  emit_score_mod(w, ir.spec);
  w.line("static_assert(attnjit::{}<Config, Mask>::kSmemBytes == {},", row.kernel_struct,
         kernel.dynamic_smem_bytes);
  w.line("              \"the plan and the template disagree on shared memory\");");
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  // With TMA maps both parameters are __grid_constant__: the copies take their addresses.
  const bool maps = kernel.params == ParamBlock::attention_tma;
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::{}<Config, Mask{}>({});", row.body, score_mod_argument(ir.spec),
                         maps ? "params, maps" : "params"),
             min_blocks_per_sm(row, tiles),
             maps ? fmt::format("const __grid_constant__ attnjit::{}TensorMaps maps",
                                ir.spec.direction == Direction::forward ? "Fwd" : "Bwd")
                  : "");
  return w.str();
}

std::string emit_minmax(const Lowering& ir, const KernelDesc& kernel) {
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::flashmask_minmax</*kColumns=*/{}, /*kBlockN=*/{}>(params);",
                         ir.mask->vectors.size(), kernel.block_n));
  return w.str();
}

std::string emit_predicate_blocks(const Lowering& ir, const KernelDesc& kernel) {
  internal_check(ir.predicate.has_value(), "a predicate mask was parsed by validate");
  SourceWriter w;
  emit_header(w, ir, kernel);
  w.line("namespace {{");
  w.blank();
  emit_predicate_visible(w, ir.spec.mask, *ir.predicate);
  w.blank();
  w.line("}}  // namespace");
  w.blank();
  emit_entry(w, kernel, params_type(ir, kernel),
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
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::cta_order<Mask, /*kBlockM=*/{}, /*kBlockN=*/{}, "
                         "/*kKeyBlocks=*/{}>(params);",
                         kernel.block_m, kernel.block_n, kernel.orders == KernelRole::backward));
  return w.str();
}

// The backward's per-row kernels (row_kernels.cuh): element type and head dim, for the
// preprocess whether it zeroes the dQ accumulator (dq_accumulated), for the GQA reduction
// whether the main kernel summed dK and dV per K/V head (dkdv_summed).
std::string emit_rows(const Lowering& ir, const KernelDesc& kernel) {
  const KernelRow& row = kernel_row(kernel.row);
  std::string arguments = fmt::format("{}, {}", element_type(ir.spec.dtype), ir.spec.head_dim_qk);
  if (kernel.role == KernelRole::backward_preprocess) {
    arguments += fmt::format(", /*kZeroDqAccum=*/{}", dq_accumulated(ir));
  }
  if (kernel.role == KernelRole::backward_reduce_dkdv && dkdv_summed(ir)) {
    arguments += ", /*kSummed=*/true";
  }
  SourceWriter w;
  emit_header(w, ir, kernel);
  emit_entry(w, kernel, params_type(ir, kernel),
             fmt::format("attnjit::{}<{}>(params);", row.body, arguments));
  return w.str();
}

}  // namespace

std::string emit_kernel(const Lowering& ir, const KernelDesc& kernel) {
  internal_check(ir.mask && ir.target && !ir.tiles.empty() && ir.plan,
                 "emit_kernel needs a planned IR");
  switch (kernel.role) {
    case KernelRole::forward:
    case KernelRole::backward:
    case KernelRole::backward_dq:
      return emit_attention(ir, kernel);
    case KernelRole::flashmask_minmax:
      return emit_minmax(ir, kernel);
    case KernelRole::predicate_blocks:
      return emit_predicate_blocks(ir, kernel);
    case KernelRole::cta_order:
      return emit_cta_order(ir, kernel);
    case KernelRole::backward_preprocess:
    case KernelRole::backward_convert_dq:
    case KernelRole::backward_reduce_dkdv:
      return emit_rows(ir, kernel);
  }
  throw InternalError("emit_kernel: unknown role");
}

ReferenceKernel emit_reference_kernel(const AttentionSpec& spec) {
  const MaskKindInfo& mask = info_of(spec.mask.kind);
  ReferenceKernel out;
  out.name = fmt::format(
      "attnjit_reference_{}_d{}_{}{}", name_of(spec.dtype), spec.head_dim_qk,
      mask.interval_vectors
          ? fmt::format("flashmask{}_c{}", spec.mask.causal ? "_causal" : "", spec.mask.columns)
          : std::string(mask.name),
      score_mod_tag(spec));
  out.threads = 128;
  SourceWriter w;
  w.line("// attnjit reference kernel (fp32, unfused) for: {}", to_string(spec));
  w.line("#include \"attnjit/common/reference.cuh\"");
  w.blank();
  if (mask.predicate) {
    const Predicate predicate = parse_predicate(
        spec.mask.predicate, PredicateParseOptions{.allow_reserved_tensor_names = true});
    const PredicateInfo used = info(predicate);
    out.predicate = {used.scalar_count, used.tensors};
    emit_predicate_visible(w, spec.mask, predicate);
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
                  element_type(spec.dtype), spec.head_dim_qk, mask.reference_mask, spec.mask.causal,
                  spec.mask.columns, spec.softcap, spec.alibi, mask.predicate ? ", Visible" : ""));
  out.source = w.str();
  return out;
}

}  // namespace attnjit
