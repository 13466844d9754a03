// Generated sources: what each kernel's translation unit binds.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>

#include "compiler/codegen/emit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "compiler/registry/kernel_registry.hpp"
#include "runtime/jit/nvrtc.hpp"
#include "support/vocabulary_kernels.hpp"

using namespace attnjit;

namespace {

std::string main_source(const char* text, KernelRole role) {
  const Lowering ir = lower(parse_spec(text));
  return emit_kernel(ir, *ir.plan->find(role));
}

std::string forward_source(const char* text) {
  return main_source(text, KernelRole::forward);
}

// A generated source without its `// spec:` comment line.
std::string without_spec_line(std::string source) {
  const std::size_t begin = source.find("// spec:");
  if (begin != std::string::npos) source.erase(begin, source.find('\n', begin) - begin);
  return source;
}

}  // namespace

TEST_CASE("the forward TU binds constants and the mask policy", "[emit]") {
  const std::string src =
      forward_source("dtype=fp16 head_dim=96 mask=causal return_lse=true target=sm_80");
  CHECK_THAT(src, Catch::Contains("#include \"attnjit/sm80/forward.cuh\""));
  CHECK_THAT(src, Catch::Contains("typedef attnjit::fp16 Element;"));
  CHECK_THAT(src, Catch::Contains("static constexpr int kHeadDimQK = 96;"));
  CHECK_THAT(src, Catch::Contains("static constexpr bool kReturnLse = true;"));
  CHECK_THAT(
      src, Catch::Contains("attnjit::MaskPolicy</*kCausal=*/true, /*kWindow=*/false, /*kLts=*/-1"));
  CHECK_THAT(src,
             Catch::Contains("attnjit_fwd_fp16_d96_causal_lse(const attnjit::FwdParams params)"));
  CHECK_THAT(src,
             Catch::Contains("static_assert(attnjit::ForwardSm80<Config, Mask>::kSmemBytes =="));
}

TEST_CASE("FlashMask vectors map to the policy's columns", "[emit]") {
  CHECK_THAT(
      forward_source("dtype=bf16 head_dim=64 mask=flashmask(causal=false,columns=2) target=sm_90"),
      Catch::Contains("/*kLts=*/0, /*kLte=*/-1,") && Catch::Contains("/*kUts=*/-1, /*kUte=*/1>"));
  CHECK_THAT(
      forward_source("dtype=bf16 head_dim=64 mask=flashmask(causal=false,columns=4) target=sm_90"),
      Catch::Contains("/*kLts=*/0, /*kLte=*/1,") && Catch::Contains("/*kUts=*/2, /*kUte=*/3>"));
  CHECK_THAT(
      forward_source("dtype=bf16 head_dim=64 mask=flashmask(causal=true,columns=2) target=sm_90"),
      Catch::Contains("/*kCausal=*/true") && Catch::Contains("/*kLts=*/0, /*kLte=*/1,"));
}

TEST_CASE("the min/max TU instantiates the preprocessing kernel", "[emit]") {
  const Lowering ir = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) target=sm_90"));
  const KernelDesc& minmax = *ir.plan->find(KernelRole::flashmask_minmax);
  const std::string src = emit_kernel(ir, minmax);
  CHECK_THAT(src, Catch::Contains("#include \"attnjit/masks/flashmask_minmax.cuh\""));
  CHECK_THAT(src, Catch::Contains("attnjit::flashmask_minmax</*kColumns=*/1, /*kBlockN=*/" +
                                  std::to_string(ir.tiles_of(KernelRole::forward).block_n) +
                                  ">(params);"));
}

TEST_CASE("an attention TU binds its registry row's template and Config", "[emit]") {
  for (const char* text :
       {"dtype=bf16 head_dim=128 mask=causal target=sm_90",
        "dtype=bf16 head_dim=64 mask=causal direction=backward target=sm_90a",
        "dtype=bf16 head_dim=192 mask=causal direction=backward target=sm_90a",
        "dtype=bf16 head_dim=64 mask=causal direction=backward target=sm_90",
        "dtype=bf16 head_dim=96 mask=causal direction=backward deterministic=true target=sm_80"}) {
    const Lowering ir = lower(parse_spec(text));
    for (const KernelTiles& tiles : ir.tiles) {
      INFO(text << " " << tiles.row);
      const KernelRow& row = kernel_row(tiles.row);
      const std::string src = emit_kernel(ir, *ir.plan->find(tiles.role));
      CHECK_THAT(src, Catch::Contains(fmt::format("#include \"{}\"", row.header)));
      CHECK_THAT(src, Catch::Contains(fmt::format("attnjit::{}<Config, Mask>::kSmemBytes == {}",
                                                  row.kernel_struct, tiles.smem_bytes)));
      // Rows that copy with TMA take the maps as a second parameter.
      const bool maps = row.params == ParamBlock::attention_tma;
      CHECK_THAT(src, Catch::Contains(fmt::format("attnjit::{}<Config, Mask>({});", row.body,
                                                  maps ? "params, maps" : "params")));
      CHECK_THAT(src,
                 Catch::Contains(fmt::format("static constexpr int kBlockN = {};", tiles.block_n)));
      if (std::ranges::count(row.config, ConfigField::warps) > 0) {
        CHECK_THAT(src,
                   Catch::Contains(fmt::format("static constexpr int kWarps = {};", tiles.warps)));
      }
    }
  }
}

TEST_CASE("sm90a kernels define only the wgmma shapes they use; sm80 kernels none", "[emit]") {
  const std::string forward =
      main_source("dtype=bf16 head_dim=128 mask=causal target=sm_90a", KernelRole::forward);
  const std::string defines = "#define ATTNJIT_WGMMA_SOME_SHAPES\n";
  CHECK_THAT(forward, Catch::Contains(defines + "#define ATTNJIT_WGMMA_N64\n#define "
                                                "ATTNJIT_WGMMA_N128\n#include "
                                                "\"attnjit/sm90a/forward.cuh\""));
  // The wide backward at d192: a consumer's 32 queries, 96 columns of the head dim.
  const std::string wide = main_source(
      "dtype=bf16 head_dim=192 mask=causal direction=backward target=sm_90a", KernelRole::backward);
  for (int n : {32, 64, 96, 192}) {
    CHECK_THAT(wide, Catch::Contains(fmt::format("#define ATTNJIT_WGMMA_N{}\n", n)));
  }
  CHECK_THAT(wide, !Catch::Contains("#define ATTNJIT_WGMMA_N128\n"));
  CHECK_THAT(main_source("dtype=bf16 head_dim=128 mask=causal target=sm_90", KernelRole::forward),
             !Catch::Contains("ATTNJIT_WGMMA"));
}

TEST_CASE("a TMA kernel's entry takes its row's tensor maps; other kernels their block only",
          "[emit]") {
  const std::string entry = "const __grid_constant__ attnjit::";
  CHECK_THAT(main_source("dtype=bf16 head_dim=128 mask=causal target=sm_90a", KernelRole::forward),
             Catch::Contains(entry + "FwdParams params, " + entry + "FwdTensorMaps maps)"));
  CHECK_THAT(main_source("dtype=bf16 head_dim=192 mask=none direction=backward target=sm_90a",
                         KernelRole::backward),
             Catch::Contains(entry + "BwdParams params, " + entry + "BwdTensorMaps maps)"));
  CHECK_THAT(main_source("dtype=bf16 head_dim=128 mask=causal target=sm_90", KernelRole::forward),
             !Catch::Contains("TensorMaps"));
}

TEST_CASE("a TMA kernel asserts its plan's boxes against its template's", "[emit][nvrtc]") {
  const Lowering ir =
      lower(parse_spec("dtype=bf16 head_dim=192 mask=causal direction=backward target=sm_90a"));
  const KernelDesc& kernel = *ir.plan->find(KernelRole::backward);
  std::string source = emit_kernel(ir, kernel);
  // Each planned box, e.g. the dQ accumulator's 16 fp32 columns (64-byte rows) at d192.
  for (const TensorMapBox& box : kernel.tensor_maps) {
    CHECK_THAT(source, Catch::Contains(fmt::format(
                           "TmaBox{{{}, {}, {}}},\n              \"the plan "
                           "and the template disagree on the {} box\"",
                           box.rows, box.cols, box.swizzle_bytes, name_of(box.tensor))));
  }
  const std::string planned = "kDqAccumBox == attnjit::TmaBox{64, 16, 64}";
  const std::size_t at = source.find(planned);
  REQUIRE(at != std::string::npos);
  // A plan that disagrees with the template fails the kernel's compile.
  source.replace(at, planned.size(), "kDqAccumBox == attnjit::TmaBox{64, 32, 128}");
  const std::vector<runtime::NvrtcHeader> headers = testing::template_headers();
  CHECK_THROWS_WITH(runtime::nvrtc_compile(source, kernel.name, headers, "sm_90a", {}, kernel.name),
                    Catch::Contains("the plan and the template disagree on the dq_accum box"));
}

TEST_CASE("the sm90a forward's products are one asm statement each; other kernels keep steps",
          "[emit]") {
  // d128: S = Q K^T and O += P V are both 128 columns over 8 k16 steps: one specialization.
  const std::string d128 =
      main_source("dtype=bf16 head_dim=128 mask=causal target=sm_90a", KernelRole::forward);
  // SS: the accumulators %0 .. %63, the A descriptors %64 .., the B descriptors %72 .., the
  // flag %80; RS: four A registers per step from %64, B's descriptors from %96, the flag %104.
  for (const char* part :
       {"struct WgmmaSteps<128, 8> {", "m64n128k16.f32.bf16.bf16 {%0, %1,",
        "%63}, %64, %72, p, 1, 1, %81, %82;", "%63}, %71, %79, 1, 1, 1, %81, %82;",
        "%63}, {%64, %65, %66, %67}, %96, p, 1, 1, %105;",
        "%63}, {%92, %93, %94, %95}, %103, 1, 1, 1, %105;"}) {
    CHECK_THAT(d128, Catch::Contains(part));
  }
  // d256 fp16: S over 80-key blocks in 16 steps, O over 256 columns in 5.
  const std::string d256 =
      main_source("dtype=fp16 head_dim=256 mask=causal target=sm_90a", KernelRole::forward);
  for (const char* part : {"struct WgmmaSteps<80, 16> {", "struct WgmmaSteps<256, 5> {",
                           "m64n256k16.f32.f16.f16", "static_assert(!is_bf16<Element>()"}) {
    CHECK_THAT(d256, Catch::Contains(part));
  }
  CHECK_THAT(main_source("dtype=bf16 head_dim=128 mask=causal direction=backward target=sm_90a",
                         KernelRole::backward),
             !Catch::Contains("WgmmaSteps"));
  // d64's three consumers keep the steps (the statements spilled there).
  CHECK_THAT(main_source("dtype=bf16 head_dim=64 mask=causal target=sm_90a", KernelRole::forward),
             !Catch::Contains("WgmmaSteps"));
  CHECK_THAT(main_source("dtype=bf16 head_dim=128 mask=causal target=sm_90", KernelRole::forward),
             !Catch::Contains("WgmmaSteps"));
}

TEST_CASE("the reference kernel evaluates the same mask", "[emit]") {
  const ReferenceKernel ref = emit_reference_kernel(
      parse_spec("dtype=bf16 head_dim=64 mask=flashmask(causal=true,columns=2)"));
  CHECK(ref.name == "attnjit_reference_bf16_d64_flashmask_causal_c2");
  CHECK_THAT(ref.source, Catch::Contains("/*kMask=*/3, /*kFlashCausal=*/true,"));
  CHECK_THAT(ref.source, Catch::Contains("/*kColumns=*/2"));
}

TEST_CASE("score modifiers bind a ScoreMod hook; plain kernels take none", "[emit]") {
  const std::string both =
      forward_source("dtype=bf16 head_dim=128 mask=causal softcap=true alibi=true target=sm_90");
  CHECK_THAT(both, Catch::Contains("typedef attnjit::ScoreMod</*kSoftcap=*/true, "
                                   "/*kAlibi=*/true> Score;"));
  CHECK_THAT(both, Catch::Contains("attnjit::forward_sm80<Config, Mask, Score>(params);"));
  CHECK_THAT(both, Catch::Contains("attnjit_fwd_bf16_d128_causal_softcap_alibi("));
  const std::string alibi =
      forward_source("dtype=bf16 head_dim=64 mask=none alibi=true target=sm_90");
  CHECK_THAT(alibi, Catch::Contains("/*kSoftcap=*/false, /*kAlibi=*/true> Score;"));
  CHECK_THAT(alibi, Catch::Contains("attnjit_fwd_bf16_d64_none_alibi("));
  const std::string plain = forward_source("dtype=bf16 head_dim=128 mask=causal target=sm_90");
  CHECK_THAT(plain, !Catch::Contains("ScoreMod") && !Catch::Contains("Score"));
  CHECK_THAT(plain, Catch::Contains("attnjit::forward_sm80<Config, Mask>(params);"));

  const Lowering ir = lower(parse_spec(
      "dtype=fp16 head_dim=64 mask=causal softcap=true direction=backward deterministic=true "
      "target=sm_90"));
  for (KernelRole role : {KernelRole::backward, KernelRole::backward_dq}) {
    const KernelDesc& kernel = *ir.plan->find(role);
    INFO(kernel.name);
    CHECK_THAT(kernel.name, Catch::Contains("_causal_softcap"));
    const std::string src = emit_kernel(ir, kernel);
    CHECK_THAT(src, Catch::Contains("/*kSoftcap=*/true, /*kAlibi=*/false> Score;"));
    CHECK_THAT(src, Catch::Contains("<Config, Mask, Score>(params);"));
  }
  // The kernels that do not see scores are the same for every modifier.
  const KernelDesc& preprocess = *ir.plan->find(KernelRole::backward_preprocess);
  CHECK_THAT(emit_kernel(ir, preprocess), !Catch::Contains("Score"));

  const ReferenceKernel ref =
      emit_reference_kernel(parse_spec("dtype=bf16 head_dim=64 mask=causal alibi=true"));
  CHECK(ref.name == "attnjit_reference_bf16_d64_causal_alibi");
  CHECK_THAT(ref.source, Catch::Contains("/*kSoftcap=*/false, /*kAlibi=*/true>(params);"));
}

TEST_CASE("sinks bind kSinks in the forward and add the backward's sink gradient", "[emit]") {
  for (const char* target : {"sm_90", "sm_90a"}) {
    INFO(target);
    const std::string forward = forward_source(
        fmt::format("dtype=bf16 head_dim=128 mask=causal sinks=true target={}", target).c_str());
    CHECK_THAT(forward, Catch::Contains("typedef attnjit::ScoreMod</*kSoftcap=*/false, "
                                        "/*kAlibi=*/false, /*kSinks=*/true> Score;"));
    CHECK_THAT(forward, Catch::Contains("<Config, Mask, Score>("));
    CHECK_THAT(forward, Catch::Contains("attnjit_fwd_bf16_d128_causal_sinks("));
  }
  CHECK_THAT(forward_source("dtype=bf16 head_dim=64 alibi=true sinks=true target=sm_90"),
             Catch::Contains("/*kSoftcap=*/false, /*kAlibi=*/true, /*kSinks=*/true> Score;"));

  // The backward's attention kernels read an LSE that has the sink: they are those without it;
  // one block per head sums the sink's gradient after the preprocess.
  for (const char* mode : {"false", "true"}) {
    INFO(mode);
    const std::string base = fmt::format(
        "dtype=fp16 head_dim=64 mask=causal direction=backward deterministic={} target=sm_90",
        mode);
    const Lowering plain = lower(parse_spec(base));
    const Lowering ir = lower(parse_spec(base + " sinks=true"));
    REQUIRE(ir.plan->kernels.size() == plain.plan->kernels.size() + 1);
    CHECK(ir.plan->kernels[0].role == KernelRole::backward_preprocess);
    const KernelDesc& sinks = ir.plan->kernels[1];
    CHECK(sinks.role == KernelRole::backward_sinks);
    CHECK(sinks.name == "attnjit_bwd_sinks");
    REQUIRE(sinks.phases.size() == 1);
    CHECK(sinks.phases[0].grid.to_string() == "(H, 1, 1)");
    CHECK(sinks.phases[0].threads == 256);
    const std::string src = emit_kernel(ir, sinks);
    CHECK_THAT(src, Catch::Contains("attnjit::backward_sinks</*kThreads=*/256>(params);"));
    for (std::size_t i = 0; i < plain.plan->kernels.size(); ++i) {
      const KernelDesc& kernel = plain.plan->kernels[i];
      const KernelDesc& same = ir.plan->kernels[i == 0 ? 0 : i + 1];
      INFO(kernel.name);
      CHECK(same.name == kernel.name);
      CHECK(without_spec_line(emit_kernel(ir, same)) ==
            without_spec_line(emit_kernel(plain, kernel)));
    }
  }

  const ReferenceKernel ref =
      emit_reference_kernel(parse_spec("dtype=bf16 head_dim=64 mask=causal sinks=true"));
  CHECK(ref.name == "attnjit_reference_bf16_d64_causal_sinks");
  CHECK_THAT(ref.source, Catch::Contains("/*kLse=*/true, /*kSinks=*/true, /*kSoftcap=*/false"));
}
