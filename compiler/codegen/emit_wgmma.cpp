// The sm90a family's codegen hooks: wgmma.cuh's shape defines and the forward's products.
#include "compiler/codegen/emit_wgmma.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/codegen/writer.hpp"

namespace attnjit::codegen {
namespace {

// The operand list "%first, ..., %(first + count - 1)" of an asm statement.
std::string operand_list(int first, int count) {
  std::string list;
  for (int i = 0; i < count; ++i) list += fmt::format("{}%{}", i > 0 ? ", " : "", first + i);
  return list;
}

// One asm statement for each of a product's forms (wgmma.cuh's WgmmaSteps<n, steps>): every
// k16 step of the product in one statement, so that NVVM handles the n / 2 accumulators once
// per product instead of once per step (a shorter compile, the same speed). Operands: the
// accumulators %0 .. %(n/2 - 1), then SS: the steps' A descriptors, their B descriptors, the
// accumulate flag and the two transpose immediates; RS: the steps' A registers (four each),
// their B descriptors, the accumulate flag and B's transpose immediate. The first step adds to
// the accumulators when the flag is set, the others always.
void emit_wgmma_steps(SourceWriter& w, int n, int steps, DType dtype) {
  const int accs = n / 2;
  const bool bf16 = dtype == DType::bf16;
  // e4m3: k32 steps, both operands K-major (no transpose immediates).
  const bool fp8 = dtype == DType::e4m3;
  const std::string type = fp8 ? "e4m3" : bf16 ? "bf16" : "f16";
  const std::string shape = fmt::format("m64n{}k{}.f32.{}.{}", n, fp8 ? 32 : 16, type, type);
  const std::string regs = operand_list(0, accs);
  std::string outputs;
  for (int i = 0; i < accs; ++i) {
    outputs += fmt::format("{}\"+f\"(d[{}][{}])", i > 0 ? ", " : "", i / 4, i % 4);
  }
  // SS
  std::string ss = fmt::format("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n", accs + 2 * steps);
  for (int kk = 0; kk < steps; ++kk) {
    const std::string transposes =
        fp8 ? "" : fmt::format(", %{}, %{}", accs + 2 * steps + 1, accs + 2 * steps + 2);
    ss += fmt::format("wgmma.mma_async.sync.aligned.{} {{{}}}, %{}, %{}, {}, 1, 1{};\\n", shape,
                      regs, accs + kk, accs + steps + kk, kk == 0 ? "p" : "1", transposes);
  }
  ss += "}\\n";
  std::string ss_inputs;
  for (int kk = 0; kk < steps; ++kk) ss_inputs += fmt::format("\"l\"(desc_a({})), ", kk);
  for (int kk = 0; kk < steps; ++kk) ss_inputs += fmt::format("\"l\"(desc_b({})), ", kk);
  ss_inputs += fp8 ? "\"r\"(accumulate)" : "\"r\"(accumulate), \"n\"(kTransA), \"n\"(kTransB)";
  // RS
  std::string rs = fmt::format("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n", accs + 5 * steps);
  for (int kk = 0; kk < steps; ++kk) {
    const std::string transpose = fp8 ? "" : fmt::format(", %{}", accs + 5 * steps + 1);
    rs += fmt::format("wgmma.mma_async.sync.aligned.{} {{{}}}, {{{}}}, %{}, {}, 1, 1{};\\n", shape,
                      regs, operand_list(accs + 4 * kk, 4), accs + 4 * steps + kk,
                      kk == 0 ? "p" : "1", transpose);
  }
  rs += "}\\n";
  std::string rs_inputs;
  for (int kk = 0; kk < steps; ++kk) {
    for (int j = 0; j < 4; ++j) rs_inputs += fmt::format("\"r\"(a[{}][{}]), ", kk, j);
  }
  for (int kk = 0; kk < steps; ++kk) rs_inputs += fmt::format("\"l\"(desc_b({})), ", kk);
  rs_inputs += fp8 ? "\"r\"(accumulate)" : "\"r\"(accumulate), \"n\"(kTransB)";

  // One member: its template line and signature, the element type's check and the statement.
  const auto member = [&](std::string_view head, std::string_view signature,
                          std::string_view continued, const std::string& statement,
                          const std::string& inputs) {
    w.line("{}", head);
    w.line("__device__ static __forceinline__ void {}", signature);
    w.line("                                          {}", continued);
    w.line("  static_assert({}, \"the spec's element type\");", fp8    ? "is_e4m3<Element>()"
                                                                : bf16 ? "is_bf16<Element>()"
                                                                       : "!is_bf16<Element>()");
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

}  // namespace

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

// The sm90a forward's products as one statement each: S = Q K^T (SS, n = block_n, head_dim_qk /
// 16 steps) and O += P V (RS, n = head_dim_v, block_n / 16 steps).
std::string wgmma_forward_products(const KernelTiles& tiles, const AttentionSpec& spec) {
  SourceWriter w;
  // e4m3 takes k32 steps.
  const int k = spec.dtype == DType::e4m3 ? 32 : 16;
  std::vector<std::pair<int, int>> pairs{{tiles.block_n, spec.head_dim_qk / k},
                                         {spec.head_dim_v, tiles.block_n / k}};
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
  return w.str();
}

}  // namespace attnjit::codegen
