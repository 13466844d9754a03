// NVRTC compiles every supported (direction x dtype x head dim x mask kind) spec for sm_80
// and sm_90, the sm_90a backward kernels (wgmma), and a sample of the score-modifier specs,
// with no spills and no stack, packed batches (varlen=true) and sinks on both families, and
// unequal head dims (both families on sm_90a); the reference kernels compile too.
// Needs no GPU. A kernel whose source several specs share is compiled once, and every core
// compiles.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

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
      spec.target = Arch::sm_90;
      add_directions(spec, specs);
      // sm_90a: the TMA backward (the two backward specs just added) at head dims 64 and 128.
      if (d <= 128) {
        const std::vector<AttentionSpec> backward(specs.end() - 2, specs.end());
        for (AttentionSpec sm90a : backward) {
          sm90a.target = Arch::sm_90a;
          specs.push_back(sm90a);
        }
      }
    }
  }
  return specs;
}

// Packed batches (varlen=true, and shared for causal): both families (sm_80, and sm_90a's
// warpgroup forward and TMA backward), forward with LSE and backward in both modes, every mask a
// packed batch takes (FlashMask: every arity forward, and backward those whose intervals have
// both ends, which add the VISIBLE vectors; a predicate), two head dims and both dtypes: a few
// specs, as each adds its own attention kernels.
std::vector<AttentionSpec> varlen_specs() {
  std::vector<AttentionSpec> specs;
  const auto add = [&](Arch arch, DType dtype, int d, MaskSpec mask, bool backward,
                       VarlenMode mode = VarlenMode::separate) {
    AttentionSpec spec;
    spec.dtype = dtype;
    spec.head_dim_qk = spec.head_dim_v = d;
    spec.mask = mask;
    spec.target = arch;
    spec.varlen = mode;
    if (!backward) {
      spec.return_lse = true;
      specs.push_back(spec);
      return;
    }
    spec.direction = Direction::backward;
    for (bool deterministic : {false, true}) {
      spec.deterministic = deterministic;
      specs.push_back(spec);
    }
  };
  const MaskSpec causal{MaskKind::causal, false, 0};
  const MaskSpec window{MaskKind::sliding_window, false, 0};
  for (const auto& [arch, d] : {std::pair{Arch::sm_80, 64}, std::pair{Arch::sm_90a, 128}}) {
    for (MaskSpec mask : {MaskSpec{MaskKind::none, false, 0}, causal, window}) {
      add(arch, DType::bf16, d, mask, false);
    }
    add(arch, DType::bf16, d, causal, true);
    add(arch, DType::fp16, d == 64 ? 128 : 64, window, false);
    add(arch, DType::fp16, d == 64 ? 128 : 64, window, true);
    // Shared boundaries: causal by index with LTS alone.
    add(arch, DType::bf16, d, causal, false, VarlenMode::shared);
    add(arch, DType::bf16, d, causal, true, VarlenMode::shared);
    for (const auto& [is_causal, columns] :
         {std::pair{true, 1}, std::pair{true, 2}, std::pair{false, 2}, std::pair{false, 4}}) {
      const MaskSpec flashmask{MaskKind::flashmask, is_causal, columns};
      add(arch, DType::bf16, d, flashmask, false);
      if (columns == 2 && is_causal)
        add(arch, DType::bf16, d, flashmask, false, VarlenMode::shared);
      if (is_causal == (columns == 2)) add(arch, DType::fp16, d == 64 ? 128 : 64, flashmask, true);
    }
    // Predicates on each sequence's local positions and index, with a tensor.
    const MaskSpec predicate =
        parse_spec("dtype=bf16 head_dim=64 mask=predicate(doc[q]==doc[k]&&(q/64+k/64+b)%2==0)")
            .mask;
    add(arch, DType::bf16, d, predicate, false);
    add(arch, DType::bf16, d, predicate, true, VarlenMode::shared);
  }
  return specs;
}

// Sinks (sinks=true): the forward's rows finish with the sink, the backward adds the sink
// gradient's kernel. The forward on both families (sm_80, sm_90 and sm_90a's warpgroup forward)
// with LSE, head dims 64, 128 and 256, a causal and a FlashMask mask, without and with both score
// modifiers; the backward (whose attention kernels are those without sinks) at d128 in both
// modes on both families.
std::vector<AttentionSpec> sinks_specs() {
  std::vector<AttentionSpec> specs;
  const MaskSpec masks[] = {{MaskKind::causal, false, 0}, {MaskKind::flashmask, false, 4}};
  int rotation = 0;
  for (Arch arch : {Arch::sm_80, Arch::sm_90, Arch::sm_90a}) {
    for (const MaskSpec& mask : masks) {
      for (int d : {64, 128, 256}) {
        for (bool modifiers : {false, true}) {
          AttentionSpec spec;
          spec.dtype = rotation++ % 2 == 0 ? DType::bf16 : DType::fp16;
          spec.head_dim_qk = spec.head_dim_v = d;
          spec.mask = mask;
          spec.softcap = spec.alibi = modifiers;
          spec.sinks = true;
          spec.return_lse = true;
          spec.target = arch;
          specs.push_back(spec);
        }
      }
      AttentionSpec backward;
      backward.head_dim_qk = backward.head_dim_v = 128;
      backward.mask = mask;
      backward.sinks = true;
      backward.direction = Direction::backward;
      backward.target = arch;
      for (bool deterministic : {false, true}) {
        backward.deterministic = deterministic;
        specs.push_back(backward);
      }
    }
  }
  return specs;
}

/// One NVRTC program of a sweep: a kernel's generated source for an architecture.
struct Program {
  std::string source;
  std::string name;  ///< the entry, whose ptxas report is read
  std::string arch;
};

/// What a check reads of a compiled program.
struct Compiled {
  runtime::PtxasReport report;
  std::string log;
};

/// The program's code: its source without the comment lines, which name the spec it was
/// generated for (programs of several specs then compare equal where only those differ).
std::string code_of(const Program& p) {
  std::string code = p.arch + '\n' + p.name + '\n';
  std::size_t begin = 0;
  while (begin < p.source.size()) {
    std::size_t end = p.source.find('\n', begin);
    if (end == std::string::npos) end = p.source.size();
    const std::string_view line(p.source.data() + begin, end - begin);
    const std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line.substr(first, 2) != "//") {
      code.append(line);
      code += '\n';
    }
    begin = end + 1;
  }
  return code;
}

/// Every program compiled in this process, by its code: the test cases of this file share
/// kernels too (the TMA backward's forced tiles are the sm_90a sweep's automatic ones), so
/// ctest runs them in one process (tests/CMakeLists.txt).
std::map<std::string, std::shared_ptr<const Compiled>>& compiled_programs() {
  static std::map<std::string, std::shared_ptr<const Compiled>> programs;
  return programs;
}

/// Compiles each distinct program once (the sweeps' specs share the mask tables, CTA orders and
/// memory passes), the longest sources first, one per core at a time, with the options
/// jit::compile gives NVRTC; the result of each program in order. An NVRTC error is rethrown
/// once every compile has ended. Called by one thread at a time.
std::vector<std::shared_ptr<const Compiled>> compile_distinct(
    const std::vector<Program>& programs) {
  std::map<std::string, std::shared_ptr<const Compiled>>& compiled = compiled_programs();
  std::vector<std::string> codes;
  std::map<std::string, const Program*> missing;
  for (const Program& program : programs) {
    codes.push_back(code_of(program));
    if (!compiled.contains(codes.back())) missing.try_emplace(codes.back(), &program);
  }
  std::vector<std::pair<std::string, const Program*>> order(missing.begin(), missing.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->source.size() > b.second->source.size();
  });

  std::vector<runtime::NvrtcHeader> headers;
  for (const auto& file : templates::all()) headers.push_back({file.name, file.source});
  const std::vector<std::string> options{"-default-device"};
  std::vector<std::shared_ptr<const Compiled>> outputs(order.size());
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t k = next++; k < order.size(); k = next++) {
      const Program& p = *order[k].second;
      runtime::NvrtcOutput output =
          runtime::nvrtc_compile(p.source, p.name + ".cu", headers, p.arch, options, p.name);
      outputs[k] = std::make_shared<const Compiled>(Compiled{output.report, std::move(output.log)});
    }
  };
  std::vector<std::future<void>> workers;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned w = 0; w < cores; ++w) workers.push_back(std::async(std::launch::async, work));
  for (std::future<void>& worker : workers) worker.wait();
  for (std::future<void>& worker : workers) worker.get();

  for (std::size_t k = 0; k < order.size(); ++k) compiled.emplace(order[k].first, outputs[k]);
  std::vector<std::shared_ptr<const Compiled>> out;
  for (const std::string& code : codes) out.push_back(compiled.at(code));
  return out;
}

/// The specs of `specs` for `arch`.
// Every pair of unequal head dims: every mask kind (a predicate included) on sm_80 and on
// sm_90a (its forward on the sm90a family), forward with LSE and backward in both modes, the
// dtypes alternating; and both score modifiers on two masks.
std::vector<AttentionSpec> unequal_head_dim_specs() {
  const MaskSpec masks[] = {{MaskKind::none, false, 0},
                            {MaskKind::causal, false, 0},
                            {MaskKind::sliding_window, false, 0},
                            {MaskKind::flashmask, true, 1},
                            {MaskKind::flashmask, true, 2},
                            {MaskKind::flashmask, false, 2},
                            {MaskKind::flashmask, false, 4},
                            {MaskKind::predicate, false, 0, "q>=k&&doc[q]==doc[k]"}};
  std::vector<AttentionSpec> specs;
  int rotation = 0;
  for (const auto& [d_qk, d_v] :
       {std::pair{192, 128}, std::pair{128, 64}, std::pair{64, 128}, std::pair{256, 128}}) {
    for (Arch arch : {Arch::sm_80, Arch::sm_90a}) {
      for (const MaskSpec& mask : masks) {
        AttentionSpec spec;
        spec.dtype = rotation++ % 2 == 0 ? DType::bf16 : DType::fp16;
        spec.head_dim_qk = d_qk;
        spec.head_dim_v = d_v;
        spec.mask = mask;
        spec.target = arch;
        add_directions(spec, specs);
        if (mask.kind == MaskKind::causal ||
            (mask.kind == MaskKind::flashmask && mask.columns == 4)) {
          spec.direction = Direction::forward;
          spec.deterministic = false;
          spec.softcap = spec.alibi = true;
          add_directions(spec, specs);
        }
      }
    }
  }
  return specs;
}

std::vector<AttentionSpec> for_target(const std::vector<AttentionSpec>& specs, Arch arch) {
  std::vector<AttentionSpec> out;
  for (const AttentionSpec& spec : specs) {
    if (spec.target == arch) out.push_back(spec);
  }
  return out;
}

// Compiles every kernel of every spec's plan (compile_distinct) and checks each plan's kernel
// count and each kernel's resources: registers, no spills, no stack.
void check_compiles_without_spills(const std::vector<AttentionSpec>& specs) {
  std::vector<Lowering> plans;
  std::vector<Program> programs;
  for (const AttentionSpec& spec : specs) {
    plans.push_back(lower(spec));
    for (const KernelDesc& kernel : plans.back().plan->kernels) {
      programs.push_back(
          {emit_kernel(plans.back(), kernel), kernel.name, std::string(name_of(spec.target))});
    }
  }
  const std::vector<std::shared_ptr<const Compiled>> compiled = compile_distinct(programs);

  std::size_t program = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(to_string(specs[i]));
    const std::vector<KernelDesc>& kernels = plans[i].plan->kernels;
    const bool tables = specs[i].mask.kind == MaskKind::flashmask ||
                        specs[i].mask.kind == MaskKind::predicate ||
                        specs[i].varlen != VarlenMode::off;
    if (specs[i].direction == Direction::forward) {
      // varlen_intervals (a packed batch without a predicate), min/max or block table and the
      // CTA order, then the forward kernel.
      const bool varlen_vectors = plans[i].mask->builds_varlen_vectors();
      CHECK(kernels.size() == (tables ? 3u : 1u) + (varlen_vectors ? 1u : 0u));
    } else {
      // min/max or block table(s) and CTA order(s) (none for a backward that orders its dQ
      // reductions), preprocess, main, dQ (deterministic) or dQ conversion, GQA reduction.
      const bool ordered = orders_dq_reductions(plans[i]);
      CHECK(kernels.size() >= (tables ? (ordered ? 5u : 6u) : 4u));
    }
    for (const KernelDesc& kernel : kernels) {
      const runtime::PtxasReport& report = compiled[program++]->report;
      INFO(kernel.name << ": " << report.registers << " registers, " << report.spill_bytes()
                       << " spill bytes, " << report.stack_bytes << " stack bytes");
      CHECK(report.registers > 0);
      CHECK(report.registers <= 255);
      CHECK(report.spill_bytes() == 0);
      CHECK(report.stack_bytes == 0);
    }
  }
}

}  // namespace

// The sweep by target (each a ctest entry of its own; sources repeat within a target only).
TEST_CASE("every supported spec, forward and backward, compiles for sm_80 without spills",
          "[nvrtc][specs]") {
  check_compiles_without_spills(for_target(every_supported_spec(), Arch::sm_80));
}

TEST_CASE("every supported spec, forward and backward, compiles for sm_90 without spills",
          "[nvrtc][specs]") {
  check_compiles_without_spills(for_target(every_supported_spec(), Arch::sm_90));
}

TEST_CASE("every supported sm_90a backward spec compiles without spills", "[nvrtc][specs]") {
  const std::vector<AttentionSpec> specs = for_target(every_supported_spec(), Arch::sm_90a);
  REQUIRE(!specs.empty());
  check_compiles_without_spills(specs);
}

TEST_CASE("predicate specs, forward and backward, compile for sm_90 and sm_90a without spills",
          "[nvrtc][specs][predicate]") {
  check_compiles_without_spills(predicate_specs());
}

TEST_CASE("varlen specs, forward and backward, compile for sm_80 and sm_90a without spills",
          "[nvrtc][specs][varlen]") {
  const std::vector<AttentionSpec> specs = varlen_specs();
  for (const AttentionSpec& spec : specs) {
    if (spec.target != Arch::sm_90a) continue;
    INFO(to_string(spec));
    const Lowering ir = lower(spec);
    const KernelRole role =
        spec.direction == Direction::forward ? KernelRole::forward : KernelRole::backward;
    CHECK(ir.plan->find(role)->row ==
          (spec.direction == Direction::forward ? "forward.sm90a" : "backward.sm90a"));
  }
  check_compiles_without_spills(specs);
}

TEST_CASE("unequal head dims, forward and backward, compile for sm_80 and sm_90a without spills",
          "[nvrtc][specs][head_dims]") {
  const std::vector<AttentionSpec> specs = unequal_head_dim_specs();
  for (const AttentionSpec& spec : specs) {
    INFO(to_string(spec));
    const Lowering ir = lower(spec);
    const bool sm90a = spec.target == Arch::sm_90a;
    for (const KernelTiles& tiles : ir.tiles) {
      CHECK(kernel_row(tiles.row).family == (sm90a ? KernelFamily::sm90a : KernelFamily::sm80));
    }
  }
  check_compiles_without_spills(specs);
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

TEST_CASE("reference kernels compile with the score modifiers and sinks", "[nvrtc][specs]") {
  for (const char* modifiers : {"softcap=true", "alibi=true", "softcap=true alibi=true",
                                "sinks=true", "softcap=true alibi=true sinks=true"}) {
    const std::string text =
        std::string("dtype=bf16 head_dim=128 target=sm_90 mask=causal ") + modifiers;
    INFO(text);
    const jit::Kernel kernel = jit::compile_reference(parse_spec(text));
    REQUIRE(kernel.info().kernels.size() == 1);
    CHECK(kernel.info().kernels[0].spill_bytes == 0);
    CHECK_THAT(kernel.ptx()[0], Catch::Contains(".entry attnjit_reference_bf16_d128_causal_"));
  }
}

TEST_CASE("reference kernels compile with unequal head dims", "[nvrtc][specs][head_dims]") {
  const jit::Kernel kernel = jit::compile_reference(
      parse_spec("dtype=bf16 head_dim_qk=192 head_dim_v=128 target=sm_90a mask=causal"));
  REQUIRE(kernel.info().kernels.size() == 1);
  CHECK(kernel.info().kernels[0].spill_bytes == 0);
  CHECK_THAT(kernel.ptx()[0], Catch::Contains(".entry attnjit_reference_bf16_d192v128_causal"));
}

namespace {

/// Compiles the `role` kernel of each spec for sm_90a (compile_distinct): it must come from
/// `row`, with no spills and no stack, setmaxnreg honoured (no C7508) and no wgmma serialized
/// (any "serialized" or "injected" info of ptxas, C7510-C7521).
void check_warp_specialized(const std::vector<std::string>& specs, KernelRole role,
                            std::string_view row) {
  std::vector<Program> programs;
  for (const std::string& spec : specs) {
    INFO(spec);
    const Lowering ir = lower(parse_spec(spec));
    const KernelDesc& kernel = *ir.plan->find(role);
    REQUIRE(kernel.row == row);
    programs.push_back({emit_kernel(ir, kernel), kernel.name, "sm_90a"});
  }
  const std::vector<std::shared_ptr<const Compiled>> compiled = compile_distinct(programs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(specs[i]);
    const Compiled& output = *compiled[i];
    INFO(output.log);
    CHECK(output.report.registers > 0);
    CHECK(output.report.spill_bytes() == 0);
    CHECK(output.report.stack_bytes == 0);
    CHECK(output.report.wgmma_serializations == 0);
    CHECK(output.log.find("C7508") == std::string::npos);
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

TEST_CASE("sm_90a e4m3 forward kernels compile without spills or serialized wgmma",
          "[nvrtc][specs][sm90a][fp8]") {
  // The e4m3 forward (its V^T transposer in the producer warpgroup, P packed to e4m3): head
  // dims 64, 128 and 256, the masks of this version (FlashMask's fed walk: the transposer reads
  // the V stages' slots), with and without the score modifiers and sinks, padded and packed.
  std::vector<std::string> specs;
  for (int d : {64, 128, 256}) {
    for (const char* mask :
         {"none", "causal", "sliding_window", "flashmask(causal=true,columns=1)",
          "flashmask(causal=true,columns=2)", "flashmask(causal=false,columns=2)",
          "flashmask(causal=false,columns=4)"}) {
      for (const char* extras : {"", " softcap=true alibi=true sinks=true"}) {
        specs.push_back(
            fmt::format("dtype=e4m3 head_dim={} mask={}{} return_lse=true "
                        "target=sm_90a",
                        d, mask, extras));
      }
    }
    // Packed batches (their masks as FlashMask vectors; the rows' descales per sequence):
    // both boundary modes, a mask by index and one with four vectors.
    for (const char* mask : {"causal", "flashmask(causal=false,columns=4)"}) {
      specs.push_back(fmt::format(
          "dtype=e4m3 head_dim={} mask={} varlen=true return_lse=true target=sm_90a", d, mask));
      specs.push_back(
          fmt::format("dtype=e4m3 head_dim={} mask={} varlen=shared softcap=true alibi=true "
                      "sinks=true return_lse=true target=sm_90a",
                      d, mask));
    }
  }
  check_warp_specialized(specs, KernelRole::forward, "forward.sm90a");
}

TEST_CASE(
    "sm_90a packed FlashMask forwards with visible vectors compile without spills or "
    "serialized wgmma",
    "[nvrtc][specs][sm90a][varlen]") {
  // The FlashMask families whose packed form adds VISIBLE_BEGIN / VISIBLE_END vectors (both
  // ends of an interval: causal C=2, non-causal C=4), whose partial blocks take the element
  // rule: both dtypes, head dims 64 to 256, both boundary modes, with soft-capping (ALiBi
  // takes shared boundaries).
  std::vector<std::string> specs;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (int d : {64, 96, 128, 192, 256}) {
      for (const char* mask :
           {"flashmask(causal=true,columns=2)", "flashmask(causal=false,columns=4)"}) {
        for (const char* varlen : {"true", "shared"}) {
          for (const char* modifiers : {"", " softcap=true", " softcap=true alibi=true"}) {
            if (std::string_view(varlen) == "true" &&
                std::string_view(modifiers).find("alibi") != std::string_view::npos) {
              continue;
            }
            specs.push_back(fmt::format("dtype={} head_dim={} mask={} varlen={}{} target=sm_90a",
                                        dtype, d, mask, varlen, modifiers));
          }
        }
      }
    }
  }
  check_warp_specialized(specs, KernelRole::forward, "forward.sm90a");
}

TEST_CASE(
    "sm_90a warpgroup forward kernels of unequal head dims compile without spills or "
    "serialized wgmma",
    "[nvrtc][specs][sm90a][head_dims]") {
  // Every pair, every mask, both dtypes, with and without both score modifiers, on the
  // automatic tiles of the sm90a forward (O in the Q tile, or a tile of its own at (64, 128)).
  std::vector<std::string> specs;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (const char* dims : {"head_dim_qk=192 head_dim_v=128", "head_dim_qk=128 head_dim_v=64",
                             "head_dim_qk=64 head_dim_v=128", "head_dim_qk=256 head_dim_v=128"}) {
      for (const char* mask :
           {"none", "causal", "sliding_window", "flashmask(causal=true,columns=1)",
            "flashmask(causal=true,columns=2)", "flashmask(causal=false,columns=2)",
            "flashmask(causal=false,columns=4)", "predicate(q>=k&&doc[q]==doc[k])"}) {
        for (const char* modifiers : {"", " softcap=true alibi=true"}) {
          specs.push_back(fmt::format("dtype={} {} mask={}{} return_lse=true target=sm_90a", dtype,
                                      dims, mask, modifiers));
        }
      }
    }
  }
  // (192, 128) persistent on 112-key blocks (tiles=128x112x12:warpgroups) under the masks with
  // tables.
  for (const char* mask : {"flashmask(causal=true,columns=1)", "flashmask(causal=false,columns=4)",
                           "predicate(q>=k&&doc[q]==doc[k])"}) {
    for (const char* modifiers : {"", " softcap=true alibi=true"}) {
      specs.push_back(
          fmt::format("dtype=fp16 head_dim_qk=192 head_dim_v=128 mask={}{} return_lse=true "
                      "target=sm_90a tiles=128x112x12:warpgroups",
                      mask, modifiers));
    }
  }
  // One consumer (tiles=64x64x8:warpgroups) where both dims are at most 128.
  for (const char* dims : {"head_dim_qk=128 head_dim_v=64", "head_dim_qk=64 head_dim_v=128"}) {
    for (const char* mask : {"causal", "sliding_window", "flashmask(causal=false,columns=4)"}) {
      specs.push_back(fmt::format(
          "dtype=bf16 {} mask={} return_lse=true target=sm_90a tiles=64x64x8:warpgroups", dims,
          mask));
    }
  }
  check_warp_specialized(specs, KernelRole::forward, "forward.sm90a");
}

TEST_CASE("sm_90a TMA backward kernels compile without spills or serialized wgmma",
          "[nvrtc][specs][sm90a]") {
  // backward.sm90a, forced by tiles=64x128x12:warpgroups: every mask it takes (predicates with and
  // without scalars and head indices), both dtypes, head dims 64, 96 and 128, without and with
  // each score-modifier combination; its 80-row layout (tiles=80x128x12:warpgroups: d128 without a
  // mask or soft-capping) with and without ALiBi, both modes; at head dims 192 and 256 by
  // tiles=64x64x12:warpgroups (both modes); setmaxnreg honoured (no C7508), no wgmma serialized.
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
          specs.push_back(
              fmt::format("dtype={} head_dim={} mask={}{} direction=backward "
                          "tiles=64x128x12:warpgroups target=sm_90a",
                          dtype, d, mask, modifiers));
        }
      }
    }
    for (const char* modifiers :
         {"", " alibi=true", " deterministic=true", " deterministic=true alibi=true"}) {
      specs.push_back(
          fmt::format("dtype={} head_dim=128 mask=none{} direction=backward "
                      "tiles=80x128x12:warpgroups target=sm_90a",
                      dtype, modifiers));
    }
    // Head dims 192 and 256 (the wide layout, tiles=64x64x12:warpgroups): every mask, each
    // score-modifier combination, and the deterministic mode without and with both.
    for (int d : {192, 256}) {
      for (const char* mask : kTmaBackwardMasks) {
        for (const char* modifiers :
             {"", " softcap=true", " alibi=true", " softcap=true alibi=true", " deterministic=true",
              " deterministic=true softcap=true alibi=true"}) {
          specs.push_back(
              fmt::format("dtype={} head_dim={} mask={}{} direction=backward "
                          "tiles=64x64x12:warpgroups target=sm_90a",
                          dtype, d, mask, modifiers));
        }
      }
    }
  }
  check_warp_specialized(specs, KernelRole::backward, "backward.sm90a");
}

TEST_CASE(
    "sm_90a TMA backward kernels of unequal head dims compile without spills or serialized wgmma",
    "[nvrtc][specs][sm90a][head_dims]") {
  // backward.sm90a at every pair on its automatic tiles ((128, 64) and (64, 128): the consumers
  // split the keys; (192, 128) and (256, 128): the wide layout): every mask, without and with
  // both score modifiers, both modes, the dtypes alternating; setmaxnreg honoured (no C7508), no
  // wgmma serialized.
  constexpr const char* kMasks[] = {"none",
                                    "causal",
                                    "sliding_window",
                                    "flashmask(causal=true,columns=1)",
                                    "flashmask(causal=true,columns=2)",
                                    "flashmask(causal=false,columns=2)",
                                    "flashmask(causal=false,columns=4)",
                                    "predicate(q>=k&&doc[q]==doc[k])",
                                    "predicate((k+h)%$0!=$1&&abs(q-k)<$2*(h+$3))"};
  std::vector<std::string> specs;
  int rotation = 0;
  for (const char* dims : {"head_dim_qk=192 head_dim_v=128", "head_dim_qk=128 head_dim_v=64",
                           "head_dim_qk=64 head_dim_v=128", "head_dim_qk=256 head_dim_v=128"}) {
    for (const char* mask : kMasks) {
      for (const char* modifiers : {"", " softcap=true alibi=true", " deterministic=true",
                                    " deterministic=true softcap=true alibi=true"}) {
        specs.push_back(fmt::format("dtype={} {} mask={}{} direction=backward target=sm_90a",
                                    rotation++ % 2 == 0 ? "bf16" : "fp16", dims, mask, modifiers));
      }
    }
  }
  check_warp_specialized(specs, KernelRole::backward, "backward.sm90a");
}

TEST_CASE("sinks specs, forward and backward, compile for sm_80, sm_90 and sm_90a without spills",
          "[nvrtc][specs][sinks]") {
  const std::vector<AttentionSpec> specs = sinks_specs();
  for (const AttentionSpec& spec : specs) {
    INFO(to_string(spec));
    const Lowering ir = lower(spec);
    if (spec.direction == Direction::forward) {
      CHECK(ir.plan->find(KernelRole::forward)->row ==
            (spec.target == Arch::sm_90a ? "forward.sm90a" : "forward.sm80"));
      CHECK_THAT(ir.plan->find(KernelRole::forward)->name, Catch::Contains("_sinks"));
    } else {
      CHECK(ir.plan->find(KernelRole::backward_sinks) != nullptr);
    }
  }
  check_compiles_without_spills(specs);
  // The sm90a forward with sinks keeps its register split and its wgmma unserialized.
  std::vector<std::string> warpgroups;
  for (const AttentionSpec& spec : specs) {
    if (spec.target == Arch::sm_90a && spec.direction == Direction::forward) {
      warpgroups.push_back(to_string(spec));
    }
  }
  check_warp_specialized(warpgroups, KernelRole::forward, "forward.sm90a");
}
