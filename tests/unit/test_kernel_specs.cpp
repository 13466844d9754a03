// NVRTC compiles every supported (direction x dtype x head dim x mask kind) spec for sm_80
// and sm_90, the sm_90a backward kernels (wgmma), and a sample of the score-modifier specs,
// with no spills and no stack; the reference kernels compile too. Needs no GPU.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <future>
#include <string_view>
#include <thread>
#include <utility>

#include "attnjit/jit.hpp"
#include "compiler/codegen/emit.hpp"
#include "compiler/passes/pipeline.hpp"
#include "compiler/registry/kernel_registry.hpp"
#include "embedded.hpp"
#include "runtime/jit/nvrtc.hpp"
#include "support/sm90a_tiles.hpp"

using namespace attnjit;

namespace {

// Forward with LSE, and backward in both modes.
void add_directions(AttentionSpec spec, std::vector<AttentionSpec>& specs) {
  spec.return_lse = true;  // the heavier variant: LSE stores included
  specs.push_back(spec);
  spec.return_lse = false;
  spec.direction = Direction::backward;
  for (bool deterministic : {false, true}) {
    spec.deterministic = deterministic;
    specs.push_back(spec);
  }
}

std::vector<AttentionSpec> every_supported_spec() {
  const MaskSpec masks[] = {{MaskKind::none, false, 0},           {MaskKind::causal, false, 0},
                            {MaskKind::sliding_window, false, 0}, {MaskKind::flashmask, true, 1},
                            {MaskKind::flashmask, true, 2},       {MaskKind::flashmask, false, 2},
                            {MaskKind::flashmask, false, 4}};
  std::vector<AttentionSpec> specs;
  for (Arch arch : {Arch::sm_80, Arch::sm_90}) {
    for (DType dtype : {DType::bf16, DType::fp16}) {
      for (int d : {32, 64, 96, 128, 192, 256}) {
        for (const MaskSpec& mask : masks) {
          AttentionSpec spec;
          spec.dtype = dtype;
          spec.head_dim_qk = spec.head_dim_v = d;
          spec.mask = mask;
          spec.target = arch;
          add_directions(spec, specs);
        }
      }
    }
  }
  // Score modifiers: a sample (every combination x bf16 x head dims 64/128/256 x three masks,
  // sm_90; the heaviest combination for sm_80 too). The modifiers add registers, not smem.
  const MaskSpec modifier_masks[] = {{MaskKind::causal, false, 0},
                                     {MaskKind::sliding_window, false, 0},
                                     {MaskKind::flashmask, false, 4}};
  const std::pair<bool, bool> modifiers[] = {{true, false}, {false, true}, {true, true}};
  for (const auto& [softcap, alibi] : modifiers) {
    for (Arch arch : {Arch::sm_80, Arch::sm_90}) {
      if (arch == Arch::sm_80 && !(softcap && alibi)) continue;
      for (int d : {64, 128, 256}) {
        for (const MaskSpec& mask : modifier_masks) {
          AttentionSpec spec;
          spec.dtype = DType::bf16;
          spec.head_dim_qk = spec.head_dim_v = d;
          spec.mask = mask;
          spec.softcap = softcap;
          spec.alibi = alibi;
          spec.target = arch;
          add_directions(spec, specs);
        }
      }
    }
  }
  // sm_90a differs from sm_90 where the backward takes the TMA backward (head dims 64, 96 and
  // 128, both modes: the deterministic one adds the writer warps): every mask and dtype, without
  // and with both modifiers, and each modifier combination on the modifier masks.
  const auto add_sm90a_backward = [&](DType dtype, int d, const MaskSpec& mask, bool softcap,
                                      bool alibi) {
    AttentionSpec spec;
    spec.dtype = dtype;
    spec.head_dim_qk = spec.head_dim_v = d;
    spec.mask = mask;
    spec.softcap = softcap;
    spec.alibi = alibi;
    spec.direction = Direction::backward;
    spec.target = Arch::sm_90a;
    for (bool deterministic : {false, true}) {
      spec.deterministic = deterministic;
      specs.push_back(spec);
    }
  };
  for (int d : {64, 96, 128}) {
    for (DType dtype : {DType::bf16, DType::fp16}) {
      for (const MaskSpec& mask : masks) {
        add_sm90a_backward(dtype, d, mask, false, false);
        add_sm90a_backward(dtype, d, mask, true, true);
      }
    }
    for (const auto& [softcap, alibi] : modifiers) {
      for (const MaskSpec& mask : modifier_masks) {
        add_sm90a_backward(DType::bf16, d, mask, softcap, alibi);
      }
    }
  }
  return specs;
}

// Predicate masks (lifted): with and without tensors, using b / h or not; forward with LSE
// and backward in both modes, head dims 64 / 128 / 256, the dtypes alternating; the backward
// also for sm_90a at 64 and 128 (the TMA backward).
std::vector<AttentionSpec> predicate_specs() {
  const char* predicates[] = {"q>=k&&doc[q]==doc[k]", "(q/$0+k/$1)%$2==$3&&(q+k)%$4!=$5",
                              "(k+h)%$0!=$1&&abs(q-k)<$2*(h+$3)",
                              "seg[q]==seg[k]&&seg[q]>=$0||k==b"};
  std::vector<AttentionSpec> specs;
  int rotation = 0;
  for (const char* predicate : predicates) {
    for (int d : {64, 128, 256}) {
      AttentionSpec spec;
      spec.dtype = rotation++ % 2 == 0 ? DType::bf16 : DType::fp16;
      spec.head_dim_qk = spec.head_dim_v = d;
      spec.mask.kind = MaskKind::predicate;
      spec.mask.predicate = predicate;
      spec.return_lse = true;
      spec.target = Arch::sm_90;
      specs.push_back(spec);
      spec.return_lse = false;
      spec.direction = Direction::backward;
      for (bool deterministic : {false, true}) {
        spec.deterministic = deterministic;
        specs.push_back(spec);
        // sm_90a: the TMA backward at head dims 64 and 128.
        if (d <= 128) {
          AttentionSpec sm90a = spec;
          sm90a.target = Arch::sm_90a;
          specs.push_back(sm90a);
        }
      }
    }
  }
  return specs;
}

// Compiles every spec (no disk cache, one job per hardware thread) and checks each kernel's
// resources: registers, no spills, no stack.
void check_compiles_without_spills(const std::vector<AttentionSpec>& specs) {
  std::vector<jit::CompileInfo> infos(specs.size());
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::future<void>> running;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (running.size() >= workers) {
      running.front().get();
      running.erase(running.begin());
    }
    running.push_back(std::async(std::launch::async, [&, i] {
      jit::CompileOptions options;
      options.no_disk_cache = true;
      infos[i] = jit::compile(specs[i], options).info();
    }));
  }
  for (auto& job : running) job.get();

  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(to_string(specs[i]));
    const jit::CompileInfo& info = infos[i];
    const bool tables =
        specs[i].mask.kind == MaskKind::flashmask || specs[i].mask.kind == MaskKind::predicate;
    if (specs[i].direction == Direction::forward) {
      // min/max or block table and the CTA order, then the forward kernel.
      CHECK(info.kernels.size() == (tables ? 3u : 1u));
    } else {
      // min/max or block table(s) and CTA order(s) (none for a backward that orders its dQ
      // reductions), preprocess, main, dQ (deterministic) or dQ conversion, GQA reduction.
      const bool ordered = orders_dq_reductions(lower(specs[i]));
      CHECK(info.kernels.size() >= (tables ? (ordered ? 5u : 6u) : 4u));
    }
    for (const jit::KernelReport& kernel : info.kernels) {
      INFO(kernel.name << ": " << kernel.registers << " registers, " << kernel.spill_bytes
                       << " spill bytes, " << kernel.stack_bytes << " stack bytes");
      CHECK(kernel.registers > 0);
      CHECK(kernel.registers <= 255);
      CHECK(kernel.spill_bytes == 0);
      CHECK(kernel.stack_bytes == 0);
    }
  }
}

}  // namespace

TEST_CASE(
    "every supported spec, forward and backward, compiles for sm_80 and sm_90(a) without "
    "spills",
    "[nvrtc][specs]") {
  check_compiles_without_spills(every_supported_spec());
}

TEST_CASE("predicate specs, forward and backward, compile for sm_90 and sm_90a without spills",
          "[nvrtc][specs][predicate]") {
  check_compiles_without_spills(predicate_specs());
}

TEST_CASE("reference kernels compile for every mask kind", "[nvrtc][specs]") {
  for (const char* mask : {"none", "causal", "sliding_window", "flashmask(causal=true,columns=1)",
                           "flashmask(causal=true,columns=2)", "flashmask(causal=false,columns=2)",
                           "flashmask(causal=false,columns=4)", "predicate(q>=k&&doc[q]!=$0)"}) {
    const std::string text = std::string("dtype=fp16 head_dim=64 target=sm_80 mask=") + mask;
    INFO(text);
    const jit::Kernel kernel = jit::compile_reference(parse_spec(text));
    REQUIRE(kernel.info().kernels.size() == 1);
    CHECK(kernel.info().kernels[0].spill_bytes == 0);
    CHECK_THAT(kernel.ptx()[0], Catch::Contains(".entry attnjit_reference_fp16_d64"));
  }
}

TEST_CASE("reference kernels compile with the score modifiers", "[nvrtc][specs]") {
  for (const char* modifiers : {"softcap=true", "alibi=true", "softcap=true alibi=true"}) {
    const std::string text =
        std::string("dtype=bf16 head_dim=128 target=sm_90 mask=causal ") + modifiers;
    INFO(text);
    const jit::Kernel kernel = jit::compile_reference(parse_spec(text));
    REQUIRE(kernel.info().kernels.size() == 1);
    CHECK(kernel.info().kernels[0].spill_bytes == 0);
    CHECK_THAT(kernel.ptx()[0], Catch::Contains(".entry attnjit_reference_bf16_d128_causal_"));
  }
}

namespace {

/// Compiles the `role` kernel of each spec for sm_90a (as many at once as there are cores):
/// it must come from `row`, with no spills and no stack, setmaxnreg honoured (no C7508) and no
/// wgmma serialized (any "serialized" or "injected" info of ptxas, C7510-C7521).
void check_warp_specialized(const std::vector<std::string>& specs, KernelRole role,
                            std::string_view row) {
  std::vector<runtime::NvrtcHeader> headers;
  for (const auto& file : templates::all()) headers.push_back({file.name, file.source});
  const std::size_t workers = std::max(1u, std::thread::hardware_concurrency());
  for (std::size_t first = 0; first < specs.size(); first += workers) {
    std::vector<std::future<runtime::NvrtcOutput>> outputs;
    for (std::size_t i = first; i < std::min(specs.size(), first + workers); ++i) {
      const Lowering ir = lower(parse_spec(specs[i]));
      const KernelDesc& kernel = *ir.plan->find(role);
      REQUIRE(kernel.row == row);
      outputs.push_back(std::async(
          std::launch::async, [&headers, source = emit_kernel(ir, kernel), name = kernel.name] {
            const std::vector<std::string> options{"-default-device"};
            return runtime::nvrtc_compile(source, name + ".cu", headers, "sm_90a", options, name);
          }));
    }
    for (std::size_t j = 0; j < outputs.size(); ++j) {
      INFO(specs[first + j]);
      const runtime::NvrtcOutput output = outputs[j].get();
      INFO(output.log);
      CHECK(output.report.registers > 0);
      CHECK(output.report.spill_bytes() == 0);
      CHECK(output.report.stack_bytes == 0);
      CHECK(output.report.wgmma_serializations == 0);
      CHECK(output.log.find("C7508") == std::string::npos);
    }
  }
}

}  // namespace

TEST_CASE("sm_90a warpgroup forward kernels compile without spills or serialized wgmma",
          "[nvrtc][specs][sm90a]") {
  // Every mask, both dtypes, head dims 64 to 256, with and without both score modifiers;
  // setmaxnreg must be honoured (no C7508), no wgmma serialized (C7510-C7521).
  std::vector<std::string> specs;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (int d : {64, 96, 128, 192, 256}) {
      for (const char* mask :
           {"none", "causal", "sliding_window", "flashmask(causal=true,columns=1)",
            "flashmask(causal=true,columns=2)", "flashmask(causal=false,columns=2)",
            "flashmask(causal=false,columns=4)", "predicate(q>=k&&doc[q]==doc[k])"}) {
        for (const char* modifiers : {"", " softcap=true alibi=true"}) {
          const AttentionSpec spec = testing::sm90a_forward_spec(parse_spec(fmt::format(
              "dtype={} head_dim={} mask={}{} return_lse=true", dtype, d, mask, modifiers)));
          specs.push_back(to_string(spec));
        }
      }
    }
  }
  check_warp_specialized(specs, KernelRole::forward, "forward.sm90a");
}

TEST_CASE("sm_90a TMA backward kernels compile without spills or serialized wgmma",
          "[nvrtc][specs][sm90a]") {
  // backward.sm90a, forced by tiles=64x128x12t: every mask it takes (predicates with and
  // without scalars and head indices), both dtypes, head dims 64, 96 and 128, without and with
  // each score-modifier combination; its 80-row layout (tiles=80x128x12t: d128 without a mask
  // or soft-capping) with and without ALiBi, both modes; at head dims 192 and 256 by
  // tiles=64x64x12t (both modes); setmaxnreg honoured (no C7508), no wgmma serialized.
  constexpr const char* kTmaBackwardMasks[] = {"none",
                                               "causal",
                                               "sliding_window",
                                               "flashmask(causal=true,columns=1)",
                                               "flashmask(causal=true,columns=2)",
                                               "flashmask(causal=false,columns=2)",
                                               "flashmask(causal=false,columns=4)",
                                               "predicate(q>=k&&doc[q]==doc[k])",
                                               "predicate((k+h)%$0!=$1&&abs(q-k)<$2*(h+$3))"};
  std::vector<std::string> specs;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (int d : {64, 96, 128}) {
      for (const char* mask : kTmaBackwardMasks) {
        for (const char* modifiers :
             {"", " softcap=true", " alibi=true", " softcap=true alibi=true"}) {
          specs.push_back(fmt::format(
              "dtype={} head_dim={} mask={}{} direction=backward tiles=64x128x12t target=sm_90a",
              dtype, d, mask, modifiers));
        }
      }
    }
    for (const char* modifiers :
         {"", " alibi=true", " deterministic=true", " deterministic=true alibi=true"}) {
      specs.push_back(fmt::format(
          "dtype={} head_dim=128 mask=none{} direction=backward tiles=80x128x12t target=sm_90a",
          dtype, modifiers));
    }
    // Head dims 192 and 256 (the wide layout, tiles=64x64x12t): every mask, each
    // score-modifier combination, and the deterministic mode without and with both.
    for (int d : {192, 256}) {
      for (const char* mask : kTmaBackwardMasks) {
        for (const char* modifiers :
             {"", " softcap=true", " alibi=true", " softcap=true alibi=true",
              " deterministic=true", " deterministic=true softcap=true alibi=true"}) {
          specs.push_back(fmt::format(
              "dtype={} head_dim={} mask={}{} direction=backward tiles=64x64x12t target=sm_90a",
              dtype, d, mask, modifiers));
        }
      }
    }
  }
  check_warp_specialized(specs, KernelRole::backward, "backward.sm90a");
}
