// Each lowering pass on its own, and the pipeline's print-after-pass hook.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"
#include "compiler/passes/pipeline.hpp"
#include "compiler/registry/kernel_registry.hpp"
#include "support/error_text.hpp"

using namespace attnjit;

namespace {

Lowering ir_of(const char* text) {
  return Lowering{parse_spec(text)};
}

std::string validation_error(const char* text) {
  return testing::error_text([&] { validate(ir_of(text)); });
}

}  // namespace

TEST_CASE("validate rejects what attnjit cannot compile", "[pass]") {
  CHECK_NOTHROW(validate(ir_of("dtype=bf16 head_dim=128 mask=causal")));
  const std::pair<const char*, const char*> refused[] = {
      {"dtype=bf16 head_dim=100", "head_dim: got '100'; accepted: 32, 64, 96, 128, 192, 256"},
      {"dtype=bf16 head_dim_qk=96 head_dim_v=64",
       "(head_dim_qk, head_dim_v): got '(96, 64)'; accepted: equal head dims, or one of (64, "
       "128), (128, 64), (192, 128), (256, 128)"},
      {"dtype=bf16 head_dim=128 mask=flashmask(causal=false,columns=3)",
       "flashmask columns: got '3'; accepted: 1, 2, 4"},
      {"dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=4)",
       "4 columns need causal=false"},
      {"dtype=bf16 head_dim=128 mask=flashmask(causal=false,columns=1)",
       "1 column needs causal=true"},
  };
  for (const auto& [text, expected] : refused) {
    CHECK_THAT(validation_error(text), Catch::Contains(expected));
  }
  Lowering bad = ir_of("dtype=bf16 head_dim=128 mask=causal");
  bad.spec.mask.columns = 2;
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("do not apply to mask=causal"));
}

TEST_CASE("validate accepts the score modifiers for both directions and every mask", "[pass]") {
  for (const char* mask : {"none", "causal", "sliding_window", "flashmask(causal=true,columns=1)",
                           "flashmask(causal=true,columns=2)", "flashmask(causal=false,columns=2)",
                           "flashmask(causal=false,columns=4)"}) {
    for (const char* direction : {"forward", "backward"}) {
      for (const char* modifiers : {"softcap=true", "alibi=true", "softcap=true alibi=true"}) {
        const std::string text = fmt::format("dtype=fp16 head_dim=64 mask={} direction={} {}", mask,
                                             direction, modifiers);
        INFO(text);
        CHECK(validation_error(text.c_str()) == "no error");
      }
    }
  }
}

TEST_CASE("canonicalize fills head_dim_v", "[pass]") {
  AttentionSpec spec = parse_spec("dtype=bf16 head_dim=64");
  spec.head_dim_v = 0;
  CHECK(canonicalize(Lowering{spec}).spec.head_dim_v == 64);
  CHECK(canonical_spec(spec) == parse_spec("dtype=bf16 head_dim=64"));
}

TEST_CASE("lower_mask maps each mask to index arithmetic or vectors", "[pass]") {
  using V = IntervalVector;
  auto lowered = [](const char* mask) {
    return *lower_mask(ir_of((std::string("dtype=bf16 head_dim=64 mask=") + mask).c_str())).mask;
  };
  CHECK(lowered("none") == MaskLowering{});
  CHECK(lowered("causal").causal_by_index);
  CHECK(lowered("sliding_window").window_by_index);
  const MaskLowering c1 = lowered("flashmask(causal=true,columns=1)");
  CHECK(c1.causal_by_index);
  CHECK(c1.vectors == std::vector<V>{V::lts});
  CHECK(c1.needs_minmax);
  CHECK(lowered("flashmask(causal=true,columns=2)").vectors == std::vector<V>{V::lts, V::lte});
  const MaskLowering c2 = lowered("flashmask(causal=false,columns=2)");
  CHECK(!c2.causal_by_index);
  CHECK(c2.vectors == std::vector<V>{V::lts, V::ute});
  CHECK(lowered("flashmask(causal=false,columns=4)").vectors ==
        std::vector<V>{V::lts, V::lte, V::uts, V::ute});
}

TEST_CASE("select_target needs a resolved arch and knows its shared memory", "[pass]") {
  const auto target = [](const char* text) {
    return *select_target(lower_mask(validate(ir_of(text)))).target;
  };
  CHECK_THROWS_WITH(target("dtype=bf16 head_dim=64"), Catch::Contains("target: got 'auto'"));
  CHECK(target("dtype=bf16 head_dim=64 target=sm_90").max_dynamic_smem_bytes == 232448);
  CHECK(target("dtype=bf16 head_dim=64 target=sm_80").max_dynamic_smem_bytes == 166912);
  CHECK(target("dtype=bf16 head_dim=64 target=sm_86").max_dynamic_smem_bytes == 101376);
}

TEST_CASE("select_target picks one family per attention kernel, in launch order", "[pass]") {
  const auto families = [](const char* text) {
    return select_target(lower_mask(validate(ir_of(text)))).target->families;
  };
  using R = KernelRole;
  using F = KernelFamily;
  const std::pair<const char*, std::vector<FamilyChoice>> expected[] = {
      {"dtype=bf16 head_dim=64 target=sm_90a", {{R::forward, F::sm90a}}},
      {"dtype=bf16 head_dim=32 target=sm_90a", {{R::forward, F::sm80}}},
      {"dtype=bf16 head_dim=64 direction=backward target=sm_90a", {{R::backward, F::sm90a}}},
      {"dtype=bf16 head_dim=64 direction=backward target=sm_90", {{R::backward, F::sm80}}},
      // The deterministic mode: the TMA backward orders its own dQ reductions (no dQ kernel);
      // where it does not apply, the sm80 main and dQ kernels.
      {"dtype=bf16 head_dim=64 direction=backward deterministic=true target=sm_90a",
       {{R::backward, F::sm90a}}},
      {"dtype=bf16 head_dim=96 direction=backward deterministic=true target=sm_90a",
       {{R::backward, F::sm90a}}},
      {"dtype=bf16 head_dim=192 direction=backward deterministic=true target=sm_90a",
       {{R::backward, F::sm90a}}},
      {"dtype=bf16 head_dim=32 direction=backward deterministic=true target=sm_90a",
       {{R::backward, F::sm80}, {R::backward_dq, F::sm80}}},
      {"dtype=bf16 head_dim=64 direction=backward deterministic=true target=sm_90",
       {{R::backward, F::sm80}, {R::backward_dq, F::sm80}}},
  };
  for (const auto& [text, choices] : expected) {
    INFO(text);
    CHECK(families(text) == choices);
  }
  CHECK(families("dtype=bf16 head_dim=64 direction=backward deterministic=true tiles=64x128x8 "
                 "target=sm_90a") ==
        std::vector<FamilyChoice>{{R::backward, F::sm80}, {R::backward_dq, F::sm80}});
  // `tiles=` forces the family of the row its layout names.
  CHECK(families("dtype=bf16 head_dim=64 direction=backward tiles=64x128x8:grid target=sm_90a") ==
        std::vector<FamilyChoice>{{R::backward, F::sm80}});
}

TEST_CASE("select_tiles fits every head dim into every target", "[pass]") {
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      for (const char* mask : {"none", "flashmask(causal=false,columns=4)"}) {
        const std::string text =
            "dtype=bf16 head_dim=" + std::to_string(d) + " mask=" + mask + " target=" + arch;
        INFO(text);
        const Lowering ir = lower(parse_spec(text));
        const KernelTiles& t = ir.tiles_of(KernelRole::forward);
        CHECK(t.smem_bytes <= ir.target->max_dynamic_smem_bytes);
        CHECK(t.block_m % (16 * t.warps) == 0);
        CHECK((t.rows_per_warp() == 16 || t.rows_per_warp() == 32));
        CHECK(t.block_n % 16 == 0);
        CHECK(t.kv_stages >= 2);
      }
    }
  }
  // Costlier masks never get a longer key block (more registers per key): index mask >=
  // FlashMask vectors >= runtime window at every head dim.
  for (int d : {32, 64, 96, 128, 192, 256}) {
    INFO(d);
    const auto block_n = [d](const char* mask) {
      return lower(parse_spec(fmt::format("dtype=bf16 head_dim={} mask={} target=sm_90", d, mask)))
          .tiles_of(KernelRole::forward)
          .block_n;
    };
    CHECK(block_n("causal") >= block_n("flashmask(causal=true,columns=1)"));
    CHECK(block_n("flashmask(causal=true,columns=1)") >= block_n("sliding_window"));
  }
}

TEST_CASE("select_tiles honours and checks an explicit shape", "[pass]") {
  const Lowering ir =
      lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90 tiles=128x32x4:q_shared"));
  const KernelTiles& t = ir.tiles_of(KernelRole::forward);
  CHECK(t.row == "forward.sm80");
  CHECK(t.block_m == 128);
  CHECK(t.block_n == 32);
  CHECK(t.warps == 4);
  CHECK(!t.q_in_registers);
  // Q, then two stages of K and V.
  CHECK(t.smem_bytes == (128 * 128 + 2 * 32 * 256) * 2);
  CHECK(lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90 tiles=128x64x8"))
            .tiles_of(KernelRole::forward)
            .q_in_registers);
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90 tiles=128x64x3")),
                    Catch::Contains("tiles warps"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90 tiles=256x64x4")),
                    Catch::Contains("16 or 32 rows per warp"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90 tiles=128x40x8")),
                    Catch::Contains("a multiple of 16 from 16 to 128"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=256 target=sm_86 tiles=128x128x8")),
                    Catch::Contains("fits sm_86's 101376 bytes"));
}

TEST_CASE("plan_kernels lists the min/max kernel and the CTA order first, for FlashMask only",
          "[pass]") {
  const Lowering causal = lower(parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_90"));
  REQUIRE(causal.plan->kernels.size() == 1);
  CHECK(causal.plan->kernels[0].name == "attnjit_fwd_bf16_d128_causal");
  const KernelTiles& tiles = causal.tiles_of(KernelRole::forward);
  CHECK(causal.plan->kernels[0].threads == tiles.threads());
  CHECK(causal.plan->kernels[0].dynamic_smem_bytes == tiles.smem_bytes);
  CHECK(causal.plan->kernels[0].row == tiles.row);
  CHECK(causal.plan->scratch.empty());

  const Lowering fm = lower(parse_spec(
      "dtype=fp16 head_dim=64 mask=flashmask(causal=true,columns=2) return_lse=true target=sm_80"));
  REQUIRE(fm.plan->kernels.size() == 3);
  CHECK(fm.plan->kernels[0].role == KernelRole::flashmask_minmax);
  const KernelTiles& fm_tiles = fm.tiles_of(KernelRole::forward);
  CHECK(fm.plan->kernels[0].name ==
        "attnjit_flashmask_minmax_c2_bn" + std::to_string(fm_tiles.block_n));
  // The forward's CTAs sorted by the tiles the vectors leave them.
  const KernelDesc& order = fm.plan->kernels[1];
  CHECK(order.role == KernelRole::cta_order);
  CHECK(order.orders == KernelRole::forward);
  CHECK(order.block_m == fm_tiles.block_m);
  CHECK(order.block_n == fm_tiles.block_n);
  CHECK(order.threads == 1024);
  CHECK(fm.plan->kernels[2].name == "attnjit_fwd_fp16_d64_flashmask_causal_c2_lse");
  // The buffers link the kernels: the min/max kernel writes the table the CTA order and the
  // forward read, the CTA order writes the order the forward reads.
  const auto buffer = [&](const KernelDesc& k, ParamField field) {
    for (const BufferBinding& b : k.buffers) {
      if (b.field == field) return fm.plan->scratch[b.buffer].name;
    }
    return std::string("none");
  };
  const KernelDesc& forward = fm.plan->kernels[2];
  CHECK(buffer(fm.plan->kernels[0], ParamField::table_out) == buffer(forward, ParamField::minmax));
  CHECK(buffer(order, ParamField::order_table) == buffer(forward, ParamField::minmax));
  CHECK(buffer(order, ParamField::order_out) == buffer(forward, ParamField::cta_order));
  CHECK(buffer(forward, ParamField::minmax) != "none");
}

TEST_CASE("the pipeline runs the six passes in order and reports each", "[pass]") {
  std::vector<std::string> passes;
  PipelineOptions options;
  options.after_pass = [&](std::string_view pass, const Lowering& ir, double ms) {
    passes.emplace_back(pass);
    CHECK(ms >= 0);
    CHECK_THAT(to_string(ir), Catch::StartsWith("attention {dtype=bf16"));
  };
  const Lowering ir = lower(parse_spec("dtype=bf16 head_dim=64 mask=causal target=sm_90"), options);
  CHECK(passes == std::vector<std::string>{"validate", "canonicalize", "lower_mask",
                                           "select_target", "select_tiles", "plan_kernels"});
  const std::string text = to_string(ir);
  CHECK_THAT(text,
             Catch::Contains("mask_lowering {causal=index window=none vectors=[] minmax=false}"));
  CHECK_THAT(text, Catch::Contains("kernel @attnjit_fwd_bf16_d64_causal"));
}

TEST_CASE("canonicalize drops what a direction ignores", "[pass]") {
  const AttentionSpec backward =
      canonical_spec(parse_spec("dtype=bf16 head_dim=64 direction=backward return_lse=true"));
  CHECK(!backward.return_lse);
  const AttentionSpec forward =
      canonical_spec(parse_spec("dtype=bf16 head_dim=64 deterministic=true"));
  CHECK(!forward.deterministic);
}

TEST_CASE("the backward plan", "[pass]") {
  auto roles = [](const Lowering& ir) {
    std::vector<KernelRole> out;
    for (const KernelDesc& k : ir.plan->kernels) out.push_back(k.role);
    return out;
  };
  using R = KernelRole;
  const Lowering atomic =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=causal direction=backward target=sm_90"));
  CHECK(roles(atomic) == std::vector<R>{R::backward_preprocess, R::backward, R::backward_convert_dq,
                                        R::backward_reduce_dkdv});
  CHECK(atomic.plan->kernels[0].name == "attnjit_bwd_preprocess_bf16_d128_zero_dq");
  CHECK(atomic.plan->kernels[1].name == "attnjit_bwd_bf16_d128_causal");
  const KernelTiles& t = atomic.tiles_of(R::backward);
  // d128 on sm_90: the warp-grid layout, its template from its registry row.
  CHECK(t.row == "backward_grid.sm80");
  CHECK(atomic.plan->kernels[1].template_header == "attnjit/sm80/backward_grid.cuh");
  CHECK(atomic.plan->kernels[1].dynamic_smem_bytes == t.smem_bytes);
  CHECK(atomic.tiles.size() == 1);
  // Its P^T and dS^T tiles next to K, V and two (Q, dO, LSE, D) stages.
  CHECK(t.smem_bytes == 2 * t.block_n * 128 * 2 +
                            2 * (2 * t.block_m * 128 * 2 + 2 * t.block_m * 4) +
                            2 * t.block_n * t.block_m * 2);
  // Predicates, whose stored element bits follow the key-slab fragments, take key slabs.
  const Lowering predicate = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k) direction=backward target=sm_90"));
  CHECK(predicate.tiles_of(R::backward).row == "backward_slabs.sm80");
  CHECK(std::ranges::any_of(predicate.plan->kernels, [](const KernelDesc& k) {
    return k.template_header == "attnjit/sm80/backward_slabs.cuh";
  }));

  const Lowering det = lower(
      parse_spec("dtype=fp16 head_dim=128 mask=flashmask(causal=true,columns=1) direction=backward "
                 "deterministic=true target=sm_90"));
  CHECK(roles(det) == std::vector<R>{R::flashmask_minmax, R::flashmask_minmax, R::cta_order,
                                     R::cta_order, R::backward_preprocess, R::backward,
                                     R::backward_dq, R::backward_reduce_dkdv});
  const KernelTiles& main = det.tiles_of(R::backward);
  const KernelTiles& dq = det.tiles_of(R::backward_dq);
  CHECK(det.plan->kernels[0].block_n == main.block_n);
  CHECK(det.plan->kernels[1].block_n == dq.block_n);
  // One CTA order per attention kernel, with that kernel's tiles.
  CHECK(det.plan->kernels[2].orders == R::backward);
  CHECK(det.plan->kernels[2].block_m == main.block_m);
  CHECK(det.plan->kernels[2].block_n == main.block_n);
  CHECK(det.plan->kernels[3].orders == R::backward_dq);
  CHECK(det.plan->kernels[3].block_m == dq.block_m);
  CHECK(det.plan->kernels[3].block_n == dq.block_n);
  CHECK(det.plan->kernels[4].name == "attnjit_bwd_preprocess_fp16_d128");
  CHECK(det.plan->kernels[5].name == "attnjit_bwd_fp16_d128_flashmask_causal_c1_deterministic");
  CHECK(det.plan->kernels[6].name == "attnjit_bwd_dq_fp16_d128_flashmask_causal_c1");
  CHECK(dq.block_m == 16 * dq.warps);
  CHECK(dq.row == "backward_dq.sm80");
  // Without the dQ product in the main kernel, key slabs.
  CHECK(main.row == "backward_slabs.sm80");
  // The deterministic mode has no dQ accumulator; both attention kernels read the row
  // statistics the preprocess writes.
  CHECK(std::ranges::none_of(det.plan->scratch,
                             [](const ScratchBuffer& b) { return b.name == "dq_accum"; }));

  // Wide heads split their dK/dV accumulators over warps sharing the same keys.
  const KernelTiles wide =
      lower(parse_spec("dtype=bf16 head_dim=256 direction=backward target=sm_90"))
          .tiles_of(R::backward);
  CHECK(wide.dim_warps == 2);
  CHECK(wide.block_n == 16 * wide.warps / 2);
  // Every head dim fits every target.
  for (const char* arch : {"sm_80", "sm_86", "sm_90"}) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      const std::string text = "dtype=bf16 head_dim=" + std::to_string(d) +
                               " mask=flashmask(causal=false,columns=4) direction=backward "
                               "deterministic=true target=" +
                               arch;
      INFO(text);
      const Lowering ir = lower(parse_spec(text));
      for (const KernelTiles& tiles : ir.tiles) {
        CHECK(tiles.smem_bytes <= ir.target->max_dynamic_smem_bytes);
      }
    }
  }
}

TEST_CASE("the sm90a backward: chosen on sm_90a at d64 to d256, forced by a warpgroups shape",
          "[pass]") {
  const auto lowered = [](int d, const char* rest) {
    return lower(parse_spec(fmt::format("dtype=bf16 head_dim={} direction=backward {}", d, rest)));
  };
  for (int d : {64, 128}) {
    INFO(d);
    const Lowering ir = lowered(d, "mask=causal tiles=64x128x12:warpgroups target=sm_90a");
    const KernelTiles& t = ir.tiles_of(KernelRole::backward);
    CHECK(t.row == "backward.sm90a");
    CHECK(t.threads() == 384);
    CHECK(t.kv_stages == 2);
    // Alignment slack, K and V, two stages (Q, dO, then LSE, D and the block index padded to
    // 1 KB), two dS^T buffers, the fp32 dQ buffers of 64 rows (one at d128, where the
    // consumers split dQ by columns, one per consumer at d64), the K/V barrier and the ring's
    // barriers.
    CHECK(t.smem_bytes == 1024 + 2 * 128 * d * 2 + 2 * (2 * 64 * d * 2 + 1024) + 2 * 128 * 64 * 2 +
                              (d == 128 ? 1 : 2) * 64 * d * 4 + 8 + 32);
    const KernelDesc& main = *ir.plan->find(KernelRole::backward);
    CHECK(main.template_header == "attnjit/sm90a/backward.cuh");
    CHECK(main.family == KernelFamily::sm90a);
    CHECK(main.params == ParamBlock::attention_tma);
    CHECK(main.dynamic_smem_bytes == t.smem_bytes);
    CHECK_THAT(to_string(ir),
               Catch::Contains("row=backward.sm90a") && Catch::Contains("params=attention_tma"));
    // The grid and buffers of the key-slab layout of 128 keys (one CTA per 128 keys of a head
    // pair), but for GQA: the grid counts groups of Hg query heads (each CTA walks the heads of
    // its KV head where the launch groups them), and dK and dV of ungrouped heads go to zeroed
    // sums per K/V head instead of per-query-head partials.
    const Lowering slabs = lowered(d, "mask=causal tiles=64x128x8 target=sm_90a");
    const KernelDesc& slab_main = *slabs.plan->find(KernelRole::backward);
    CHECK(slab_main.row == "backward_slabs.sm80");
    CHECK(main.phases.front().grid.to_string() == "(2*ceil(Sk/128), ceil(floor(H/Hg)/2), B)");
    CHECK(slab_main.phases.front().grid.to_string() == "(2*ceil(Sk/128), ceil(H/2), B)");
    REQUIRE(main.scalars.size() == 1);
    CHECK(main.scalars.front().field == ParamScalar::head_group);
    REQUIRE(ir.plan->scratch.size() == slabs.plan->scratch.size());
    for (std::size_t i = 0; i < ir.plan->scratch.size(); ++i) {
      const ScratchBuffer& tma = ir.plan->scratch[i];
      const ScratchBuffer& slab = slabs.plan->scratch[i];
      INFO(tma.name);
      CHECK(tma.name == slab.name);
      if (tma.name == "dk_partial" || tma.name == "dv_partial") {
        CHECK(tma.zeroed);
        CHECK_FALSE(slab.zeroed);
        // None where the launch groups the heads of a KV head in one CTA (Hg > 1).
        CHECK(tma.bytes.to_string() == fmt::format("gqa*floor(1/Hg)*B*Hkv*Sk*{}*4", d));
        CHECK(slab.bytes.to_string() == fmt::format("gqa*B*H*Sk*{}*4", d));
      } else {
        CHECK(tma == slab);
      }
    }
    // The automatic choice on sm_90a, for every mask it takes, with the score modifiers too
    // (no spills in the NVRTC sweep).
    for (const char* rest :
         {"mask=none", "mask=causal", "mask=sliding_window",
          "mask=flashmask(causal=true,columns=1)", "mask=flashmask(causal=false,columns=4)",
          "mask=causal softcap=true alibi=true"}) {
      INFO(rest);
      const KernelTiles automatic =
          lowered(d, fmt::format("{} target=sm_90a", rest).c_str()).tiles_of(KernelRole::backward);
      CHECK(automatic.row == "backward.sm90a");
      // 80-row query blocks at d128 without a mask (and without soft-capping).
      CHECK(automatic.block_m == (d == 128 && std::string_view(rest) == "mask=none" ? 80 : 64));
      CHECK(automatic.warps == 12);
    }
  }
  // The 80-row layout: alignment slack left out (its dynamic shared memory starts 1024-byte
  // aligned), K and V, two stages of Q and dO, two [query][key] dS tiles, one fp32 dQ buffer
  // of 80 rows, the stages' LSE, D and block index (16-byte aligned), the K/V barrier and the
  // ring's barriers; the producer warpgroup keeps 24 registers (the consumers take 240). Both
  // modes and ALiBi take it; soft-capping and every mask keep 64 rows, and
  // `tiles=80x128x12:warpgroups` is refused for them.
  for (const char* rest : {"mask=none", "mask=none deterministic=true", "mask=none alibi=true",
                           "mask=none tiles=80x128x12:warpgroups"}) {
    INFO(rest);
    const Lowering ir = lowered(128, fmt::format("{} target=sm_90a", rest).c_str());
    const KernelTiles& t = ir.tiles_of(KernelRole::backward);
    CHECK(t.row == "backward.sm90a");
    CHECK(t.block_m == 80);
    CHECK(t.block_n == 128);
    CHECK(t.smem_bytes == 2 * 128 * 128 * 2 + 2 * 2 * 80 * 128 * 2 + 2 * 80 * 128 * 2 +
                              80 * 128 * 4 + 2 * 656 + 8 + 32);
    CHECK(ir.plan->find(KernelRole::backward)->phases.front().grid.to_string().find("Sk/128") !=
          std::string::npos);
  }
  CHECK(
      lowered(128, "mask=none softcap=true target=sm_90a").tiles_of(KernelRole::backward).block_m ==
      64);
  CHECK(lowered(128, "mask=none tiles=64x128x12:warpgroups target=sm_90a")
            .tiles_of(KernelRole::backward)
            .block_m == 64);
  for (const char* rest : {"mask=causal", "mask=none softcap=true", "mask=sliding_window",
                           "mask=flashmask(causal=true,columns=1)", "mask=predicate(q>=k)"}) {
    INFO(rest);
    CHECK_THROWS_WITH(
        lowered(128, fmt::format("{} tiles=80x128x12:warpgroups target=sm_90a", rest).c_str()),
        "tiles: got '80x128x12:warpgroups'; accepted: 64x128x12:warpgroups for the sm90a backward, "
        "or "
        "80x128x12:warpgroups at head_dim=128 with mask=none and no softcap");
  }
  CHECK_THROWS_WITH(lowered(64, "tiles=80x128x12:warpgroups target=sm_90a"),
                    Catch::Contains("80x128x12:warpgroups at head_dim=128 with mask=none"));
  // Plain sm_90 (no wgmma) and head dims other than 64, 96 and 128 keep the sm80 layouts; the
  // deterministic mode and predicates (their key-row element bits) take it.
  const auto row = [&](const char* rest) {
    return lowered(128, rest).tiles_of(KernelRole::backward).row;
  };
  CHECK(row("mask=causal target=sm_90") == "backward_grid.sm80");
  CHECK(row("mask=causal deterministic=true target=sm_90a") == "backward.sm90a");
  CHECK(row("mask=predicate(q>=k) target=sm_90a") == "backward.sm90a");
  CHECK(row("mask=predicate(q>=k) deterministic=true target=sm_90a") == "backward.sm90a");
  for (int d : {32, 64, 96, 128, 192, 256}) {
    INFO(d);
    CHECK((lowered(d, "target=sm_90a").tiles_of(KernelRole::backward).row == "backward.sm90a") ==
          (d != 32));
  }
  // Head dim 256: the consumers split the head dim (sm90a/backward.cuh), 64 keys per CTA; alignment
  // slack, K and V, two stages, one P^T and one dS^T tile (dQ goes through the stages), the
  // FlashMask values, the K/V barrier and the ring's barriers; predicates too.
  for (const char* rest :
       {"mask=causal target=sm_90a", "mask=causal tiles=64x64x12:warpgroups target=sm_90a",
        "mask=none deterministic=true target=sm_90a"}) {
    INFO(rest);
    const Lowering ir = lowered(256, rest);
    const KernelTiles& t = ir.tiles_of(KernelRole::backward);
    CHECK(t.row == "backward.sm90a");
    CHECK(t.block_m == 64);
    CHECK(t.block_n == 64);
    CHECK(t.threads() == 384);
    CHECK(t.smem_bytes ==
          1024 + 2 * 64 * 256 * 2 + 2 * (2 * 64 * 256 * 2 + 1024) + 2 * 64 * 64 * 2 + 8 + 32);
    CHECK(ir.plan->find(KernelRole::backward)->phases.front().grid.to_string().find("Sk/64") !=
          std::string::npos);
  }
  // Head dim 192: the same layout with 32-column panels (halves of three panels), and three
  // stages (a stage holds the consumers' dQ until the writers' reductions have read it).
  {
    const KernelTiles t = lowered(192, "mask=causal target=sm_90a").tiles_of(KernelRole::backward);
    CHECK(t.row == "backward.sm90a");
    CHECK(t.block_n == 64);
    CHECK(t.kv_stages == 3);
    CHECK(t.smem_bytes ==
          1024 + 2 * 64 * 192 * 2 + 3 * (2 * 64 * 192 * 2 + 1024) + 2 * 64 * 64 * 2 + 8 + 48);
  }
  CHECK(lowered(256, "mask=flashmask(causal=false,columns=4) target=sm_90a")
            .tiles_of(KernelRole::backward)
            .smem_bytes == 1024 + 2 * 64 * 256 * 2 + 2 * (2 * 64 * 256 * 2 + 1024) +
                               2 * 64 * 64 * 2 + 64 * 16 + 8 + 32);
  for (const char* rest :
       {"mask=predicate(q>=k) target=sm_90a",
        "mask=predicate(q>=k) deterministic=true tiles=64x64x12:warpgroups target=sm_90a"}) {
    INFO(rest);
    const KernelTiles t = lowered(256, rest).tiles_of(KernelRole::backward);
    CHECK(t.row == "backward.sm90a");
    CHECK(t.block_n == 64);
  }
  CHECK_THROWS_WITH(
      lowered(256, "tiles=64x128x12:warpgroups target=sm_90a"),
      "tiles: got '64x128x12:warpgroups'; accepted: 64x64x12:warpgroups for the sm90a backward at "
      "head_dim=256");
  // FlashMask values of the key block ride after the dQ buffers.
  CHECK(
      lowered(64, "mask=flashmask(causal=false,columns=4) tiles=64x128x12:warpgroups target=sm_90a")
          .tiles_of(KernelRole::backward)
          .smem_bytes == 1024 + 2 * 128 * 64 * 2 + 2 * (2 * 64 * 64 * 2 + 1024) + 2 * 128 * 64 * 2 +
                             2 * 64 * 64 * 4 + 128 * 16 + 8 + 32);
  CHECK(lowered(128, "mask=causal softcap=true alibi=true tiles=64x128x12:warpgroups target=sm_90a")
            .tiles_of(KernelRole::backward)
            .row == "backward.sm90a");
  CHECK_THROWS_WITH(lowered(128, "tiles=64x128x12:warpgroups target=sm_90"),
                    Catch::Contains("BMxBNxW:warpgroups with target=sm_90a"));
  CHECK_THROWS_WITH(lowered(128, "tiles=64x128x8:warpgroups target=sm_90a"),
                    Catch::Contains("64x128x12:warpgroups for the sm90a backward"));
  CHECK_THROWS_WITH(
      lowered(192, "tiles=64x128x12:warpgroups target=sm_90a"),
      "tiles: got '64x128x12:warpgroups'; accepted: 64x64x12:warpgroups for the sm90a backward at "
      "head_dim=192");
  CHECK_THROWS_WITH(lowered(32, "tiles=64x128x12:warpgroups target=sm_90a"),
                    "tiles: got '64x128x12:warpgroups with head_dim=32'; accepted: "
                    "BMxBNxW:warpgroups with head_dim 64, 96, 128, 192 or 256");
  // The Q placements are forward layouts only.
  CHECK_THROWS_WITH(lowered(128, "tiles=64x128x8:q_shared target=sm_90a"),
                    "tiles: got '64x128x8:q_shared with direction=backward'; accepted: "
                    "BMxBNxW[:LAYOUT], LAYOUT one of slabs, grid, warpgroups");
  CHECK(lowered(128, "mask=predicate(q>=k) tiles=64x128x12:warpgroups target=sm_90a")
            .tiles_of(KernelRole::backward)
            .row == "backward.sm90a");
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 tiles=64x128x12:slabs target=sm_90a")),
      "tiles: got '64x128x12:slabs with direction=forward'; accepted: "
      "BMxBNxW[:LAYOUT], LAYOUT one of q_registers, q_shared, warpgroups");
}

TEST_CASE("the sm90a TMA backward's deterministic mode orders its dQ reductions", "[pass]") {
  const auto lowered = [](int d, const char* mask, bool deterministic) {
    return lower(
        parse_spec(fmt::format("dtype=fp16 head_dim={} mask={} direction=backward "
                               "deterministic={} target=sm_90a",
                               d, mask, deterministic)));
  };
  const auto roles = [](const Lowering& ir) {
    std::vector<KernelRole> out;
    for (const KernelDesc& k : ir.plan->kernels) out.push_back(k.role);
    return out;
  };
  const auto scratch = [](const Lowering& ir, const char* name) -> const ScratchBuffer* {
    for (const ScratchBuffer& b : ir.plan->scratch) {
      if (b.name == name) return &b;
    }
    return nullptr;
  };
  using R = KernelRole;
  for (int d : {64, 128}) {
    INFO(d);
    for (const char* mask : {"causal", "flashmask(causal=true,columns=1)"}) {
      INFO(mask);
      const bool flashmask = std::string_view(mask) != "causal";
      const Lowering atomic = lowered(d, mask, false);
      const Lowering ordered = lowered(d, mask, true);
      CHECK_FALSE(orders_dq_reductions(atomic));
      CHECK(orders_dq_reductions(ordered));
      CHECK(dq_accumulated(ordered));
      // The same kernels as the atomic mode, but for the backward's CTA order under FlashMask:
      // the turns need key blocks to start in order.
      std::vector<R> expected = roles(atomic);
      if (flashmask) {
        CHECK(runs_in_cta_order(atomic, R::backward));
        CHECK_FALSE(runs_in_cta_order(ordered, R::backward));
        std::erase(expected, R::cta_order);
      }
      CHECK(roles(ordered) == expected);
      CHECK(ordered.plan->find(R::backward_dq) == nullptr);
      CHECK(ordered.plan->find(R::backward_convert_dq) != nullptr);
      CHECK(ordered.plan->find(R::backward)->name.ends_with("_deterministic"));
      // The preprocess zeroes the accumulator; the turn counters are zeroed before the launch:
      // per (batch, head, query block), one per consumer at d128 (they split dQ's columns).
      CHECK(ordered.plan->find(R::backward_preprocess)->name.ends_with("_zero_dq"));
      REQUIRE(scratch(ordered, "dq_accum") != nullptr);
      CHECK(scratch(atomic, "dq_turns") == nullptr);
      const ScratchBuffer* turns = scratch(ordered, "dq_turns");
      REQUIRE(turns != nullptr);
      CHECK(turns->zeroed);
      LaunchExtents extents;
      extents[Extent::batch] = 3;
      extents[Extent::heads] = 5;
      extents[Extent::seqlen_q] = 1000;
      extents[Extent::seqlen_k] = 700;
      CHECK(turns->bytes.evaluate(extents) == 3 * 5 * 16 * (d == 128 ? 2 : 1) * 4);
      CHECK(scratch(ordered, "cta_order_backward") == nullptr);
      CHECK((scratch(atomic, "cta_order_backward") != nullptr) == flashmask);
    }
  }
}

TEST_CASE("the sm90a forward: chosen on sm_90a, forced by a warpgroups shape", "[pass]") {
  const auto forward_tiles = [](const char* text) {
    return lower(parse_spec(text)).tiles_of(KernelRole::forward);
  };
  const Lowering ir = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=causal tiles=128x128x12:warpgroups target=sm_90a"));
  const KernelTiles& t = ir.tiles_of(KernelRole::forward);
  CHECK(t.row == "forward.sm90a");
  CHECK(t.threads() == 384);
  CHECK(t.kv_stages == 2);
  // Alignment slack, Q, two K and V stages, the barriers (Q full and empty, the rings').
  CHECK(t.smem_bytes == 1024 + 32768 + 2 * 65536 + 16 + 64);
  const KernelDesc& forward = *ir.plan->find(KernelRole::forward);
  CHECK(forward.template_header == "attnjit/sm90a/forward.cuh");
  CHECK(forward.family == KernelFamily::sm90a);
  CHECK(forward.params == ParamBlock::attention_tma);
  CHECK(forward.name == "attnjit_fwd_bf16_d128_causal");
  CHECK_THAT(to_string(ir),
             Catch::Contains("row=forward.sm90a") && Catch::Contains("params=attention_tma"));
  // FlashMask vectors and the block's slot (16 bytes) ride with the K stages; an O tile of its
  // own (persistent under masks with a CTA order).
  CHECK(forward_tiles("dtype=fp16 head_dim=64 mask=flashmask(causal=false,columns=4) "
                      "tiles=128x176x12:warpgroups target=sm_90a")
            .smem_bytes == 1024 + 16384 + 2 * (2 * 176 * 64 * 2 + 176 * 16 + 16) + 16384 + 16 + 64);
  // Not persistent: O goes out through the Q tile (d256, and masks without tables).
  CHECK(forward_tiles("dtype=bf16 head_dim=256 mask=none tiles=128x80x12:warpgroups target=sm_90a")
            .smem_bytes == 1024 + 65536 + 2 * (2 * 80 * 256 * 2) + 16 + 64);
  // The automatic choice on sm_90a from head dim 64 up; d32 and other targets keep sm80.
  for (int d : {32, 64, 96, 128, 192, 256}) {
    INFO(d);
    CHECK((forward_tiles(fmt::format("dtype=bf16 head_dim={} target=sm_90a", d).c_str()).row ==
           "forward.sm90a") == (d != 32));
    CHECK(forward_tiles(fmt::format("dtype=bf16 head_dim={} target=sm_90", d).c_str()).row ==
          "forward.sm80");
  }
  // The consumer warpgroups per head dim and mask: three (192 rows, 512 threads) at d64 for the
  // masks by index without a window and FlashMask with two vectors (no score modifiers); one (64
  // rows, 256 threads, two CTAs per SM) at d64 for sliding windows by index, and where forced; two
  // (128 rows, 384 threads) elsewhere.
  struct Consumers {
    const char* spec;
    int block_m, threads, ctas_per_sm;
  };
  for (const Consumers& e : {
           Consumers{"head_dim=64 mask=none", 192, 512, 1},
           Consumers{"head_dim=64 mask=causal", 192, 512, 1},
           Consumers{"head_dim=64 mask=sliding_window", 64, 256, 2},
           Consumers{"head_dim=64 mask=flashmask(causal=true,columns=1)", 128, 384, 1},
           Consumers{"head_dim=64 mask=flashmask(causal=false,columns=2)", 192, 512, 1},
           Consumers{"head_dim=64 mask=flashmask(causal=true,columns=2)", 192, 512, 1},
           Consumers{"head_dim=64 mask=flashmask(causal=true,columns=2) softcap=true", 128, 384, 1},
           Consumers{"head_dim=64 mask=flashmask(causal=false,columns=4) softcap=true alibi=true",
                     128, 384, 1},
           Consumers{"head_dim=64 mask=flashmask(causal=true,columns=1) tiles=64x128x8:warpgroups",
                     64, 256, 2},
           Consumers{"head_dim=128 mask=sliding_window tiles=64x128x8:warpgroups", 64, 256, 2},
           Consumers{"head_dim=64 mask=predicate(k<=q)", 128, 384, 1},
           Consumers{"head_dim=96", 128, 384, 1},
           Consumers{"head_dim=128 mask=causal", 128, 384, 1},
           Consumers{"head_dim=128 mask=flashmask(causal=true,columns=1)", 128, 384, 1},
           Consumers{"head_dim=128 mask=sliding_window", 128, 384, 1},
       }) {
    INFO(e.spec);
    const KernelTiles t = forward_tiles(fmt::format("dtype=bf16 {} target=sm_90a", e.spec).c_str());
    CHECK(t.block_m == e.block_m);
    CHECK(t.block_n == 128);
    CHECK(t.threads() == e.threads);
    CHECK(min_blocks_per_sm(kernel_row(t.row), t) == e.ctas_per_sm);
  }
  // d128: 128-key blocks under every mask and modifier (the persistent producer keeps 24
  // registers; the NVRTC sweep checks the spills).
  for (const char* rest :
       {"mask=flashmask(causal=false,columns=2)",
        "mask=flashmask(causal=false,columns=4) softcap=true",
        "mask=flashmask(causal=true,columns=1) softcap=true alibi=true",
        "mask=flashmask(causal=true,columns=2)",
        "mask=flashmask(causal=false,columns=4) softcap=true alibi=true", "mask=predicate(k<=q)"}) {
    INFO(rest);
    CHECK(forward_tiles(fmt::format("dtype=bf16 head_dim=128 {} target=sm_90a", rest).c_str())
              .block_n == 128);
  }
  // Three consumers narrow the key block to 112 under score modifiers.
  for (const char* mask : {"none", "causal"}) {
    INFO(mask);
    CHECK(forward_tiles(
              fmt::format("dtype=fp16 head_dim=64 mask={} softcap=true target=sm_90a", mask)
                  .c_str()) == forward_tiles(fmt::format("dtype=fp16 head_dim=64 mask={} "
                                                         "softcap=true tiles=192x112x16:warpgroups "
                                                         "target=sm_90a",
                                                         mask)
                                                 .c_str()));
  }
  CHECK(forward_tiles("dtype=bf16 head_dim=128 tiles=64x64x8:warpgroups target=sm_90a").block_m ==
        64);
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=256 tiles=64x64x8:warpgroups target=sm_90a")),
      "tiles: got '64x64x8:warpgroups'; accepted: 128xBNx12:warpgroups with BN a multiple of 16 up "
      "to "
      "256 for the warpgroup forward");
  CHECK(forward_tiles("dtype=bf16 head_dim=96 tiles=192x96x16:warpgroups target=sm_90a").block_m ==
        192);
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=64 tiles=192x144x16:warpgroups target=sm_90a")),
      Catch::Contains(
          ", 192xBNx16:warpgroups or 64xBNx8:warpgroups with BN a multiple of 16 up to 128"));
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=64 tiles=64x100x8:warpgroups target=sm_90a")),
      "tiles: got '64x100x8:warpgroups'; accepted: 128xBNx12:warpgroups with BN a multiple of 16 "
      "up to "
      "256, 192xBNx16:warpgroups or 64xBNx8:warpgroups with BN a multiple of 16 up to 128 for the "
      "warpgroup forward");
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 tiles=192x128x16:warpgroups target=sm_90a")),
      "tiles: got '192x128x16:warpgroups'; accepted: 128xBNx12:warpgroups with BN a multiple of 16 "
      "up "
      "to 256, 64xBNx8:warpgroups with BN a multiple of 16 up to 128 for the warpgroup "
      "forward");
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=64 tiles=64x144x8:warpgroups target=sm_90a")),
      Catch::Contains("64xBNx8:warpgroups with BN a multiple of 16 up to 128"));
  // Its key block narrows with the tables the walk reads and with the score modifiers.
  CHECK(forward_tiles("dtype=bf16 head_dim=256 target=sm_90a").block_n >
        forward_tiles("dtype=bf16 head_dim=256 mask=flashmask(causal=true,columns=1) "
                      "target=sm_90a")
            .block_n);
  CHECK(forward_tiles("dtype=bf16 head_dim=192 target=sm_90a").block_n >
        forward_tiles("dtype=bf16 head_dim=192 softcap=true target=sm_90a").block_n);
  // The Q placement layouts still force the sm80 forward there.
  CHECK(forward_tiles("dtype=bf16 head_dim=128 tiles=128x64x8:q_registers target=sm_90a").row ==
        "forward.sm80");
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 tiles=128x128x12:warpgroups target=sm_90")),
      Catch::Contains("BMxBNxW:warpgroups with target=sm_90a"));
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=32 tiles=128x128x12:warpgroups target=sm_90a")),
      "tiles: got '128x128x12:warpgroups with head_dim=32'; accepted: "
      "BMxBNxW:warpgroups with head_dim 64, 96, 128, 192 or 256");
  CHECK(forward_tiles("dtype=bf16 head_dim=96 tiles=128x128x12:warpgroups target=sm_90a").row ==
        "forward.sm90a");
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 tiles=128x120x12:warpgroups target=sm_90a")),
      Catch::Contains("a multiple of 16 up to 256"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k) "
                                     "tiles=128x144x12:warpgroups target=sm_90a")),
                    Catch::Contains("a multiple of 16 up to 128"));
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=256 tiles=128x256x12:warpgroups target=sm_90a")),
      Catch::Contains("fits sm_90a's 232448 bytes"));
}

TEST_CASE("forward specs with score modifiers take a shape with room for them", "[pass]") {
  const auto tiles = [](int d, const char* rest) {
    return lower(parse_spec(fmt::format("dtype=bf16 head_dim={} target=sm_80 {}", d, rest)))
        .tiles_of(KernelRole::forward);
  };
  // d128, index mask: 128 x 48 without modifiers, 128 x 32 (the window's shape) with them.
  CHECK(tiles(128, "mask=causal").block_n == 48);
  for (const char* modifiers : {"softcap=true", "alibi=true", "softcap=true alibi=true"}) {
    INFO(modifiers);
    CHECK(tiles(128, fmt::format("mask=causal {}", modifiers).c_str()) ==
          tiles(128, "mask=sliding_window"));
    // Elsewhere the shape stays.
    for (int d : {32, 64, 96, 192, 256}) {
      INFO(d);
      CHECK(tiles(d, fmt::format("mask=causal {}", modifiers).c_str()) == tiles(d, "mask=causal"));
    }
  }
}

TEST_CASE("backward specs with score modifiers take a shape with room for them", "[pass]") {
  const auto tiles = [](int d, const char* modifiers) {
    return lower(parse_spec(fmt::format("dtype=bf16 head_dim={} mask=causal direction=backward "
                                        "target=sm_90 {}",
                                        d, modifiers)))
        .tiles_of(KernelRole::backward);
  };
  // The warp grid (d64, d128) keeps soft-capping; ALiBi does not fit it, so those head dims
  // take key slabs (with room for ALiBi) instead.
  for (int d : {64, 128}) {
    INFO(d);
    CHECK(tiles(d, "").row == "backward_grid.sm80");
    CHECK(tiles(d, "softcap=true") == tiles(d, ""));
    for (const char* modifiers : {"alibi=true", "softcap=true alibi=true"}) {
      INFO(modifiers);
      CHECK(tiles(d, modifiers).row == "backward_slabs.sm80");
    }
  }
  for (const char* modifiers : {"softcap=true", "alibi=true", "softcap=true alibi=true"}) {
    INFO(modifiers);
    // From d96 up, the shapes without modifiers have no room for them: another shape, with
    // fewer dK/dV columns or queries per warp.
    for (int d : {96, 192, 256}) {
      INFO(d);
      const KernelTiles with = tiles(d, modifiers);
      const KernelTiles without = tiles(d, "");
      CHECK(with != without);
      CHECK((with.dim_warps > without.dim_warps || with.block_m < without.block_m));
    }
    // d32: the first shape has room.
    CHECK(tiles(32, modifiers) == tiles(32, ""));
  }
  // An explicit shape is taken as given.
  CHECK(tiles(128, "softcap=true tiles=64x128x8").block_n == 128);
}

TEST_CASE("explicit backward tiles are checked", "[pass]") {
  const Lowering ir =
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=32x128x8 target=sm_90"));
  CHECK(ir.tiles_of(KernelRole::backward).block_m == 32);
  CHECK(ir.tiles_of(KernelRole::backward).dim_warps == 1);
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=48x128x8 target=sm_90")),
      Catch::Contains("block_m a multiple of 32"));
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x48x8 target=sm_90")),
      Catch::Contains("key slabs (block_n/16) divide the warps"));
  CHECK_THROWS_WITH(
      lower(parse_spec(
          "dtype=bf16 head_dim=128 direction=backward tiles=64x128x8:q_registers target=sm_90")),
      Catch::Contains("with direction=backward'; accepted: BMxBNxW[:LAYOUT], LAYOUT one of "
                      "slabs, grid, warpgroups"));
  // The grid layout is the 2-D warp grid, whose grids must divide the warps.
  const Lowering grid = lower(
      parse_spec("dtype=bf16 head_dim=64 direction=backward tiles=64x64x4:grid target=sm_90"));
  const KernelTiles& grid_tiles = grid.tiles_of(KernelRole::backward);
  CHECK(grid_tiles.row == "backward_grid.sm80");
  CHECK(grid_tiles.block_n == 64);
  CHECK(grid_tiles.dim_warps == 2);
  // Also in deterministic mode, whose automatic choice is key slabs.
  CHECK(lower(parse_spec("dtype=bf16 head_dim=128 direction=backward deterministic=true "
                         "tiles=64x128x8:grid target=sm_90"))
            .tiles_of(KernelRole::backward)
            .row == "backward_grid.sm80");
  // A bare backward shape is the key-slab layout, which the canonical spec names.
  const Lowering bare =
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x128x8 target=sm_90"));
  CHECK(bare.tiles_of(KernelRole::backward).row == "backward_slabs.sm80");
  CHECK(to_string(bare.spec.tiles) == "64x128x8:slabs");
  CHECK(lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x128x8:slabs "
                         "target=sm_90"))
            .spec == bare.spec);
  CHECK_THROWS_WITH(
      lower(
          parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x48x8:grid target=sm_90")),
      Catch::Contains("block_n and block_m multiples of 32"));
  CHECK_THROWS_WITH(
      lower(
          parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x32x8:grid target=sm_90")),
      Catch::Contains("the other warps splitting the queries and the head dim"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k) "
                                     "direction=backward tiles=64x128x8:grid target=sm_90")),
                    Catch::Contains("BMxBNxW with a layout other than grid for mask=predicate"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 tiles=128x64x4:grid target=sm_90")),
                    "tiles: got '128x64x4:grid with direction=forward'; accepted: "
                    "BMxBNxW[:LAYOUT], LAYOUT one of q_registers, q_shared, warpgroups");
  for (const char* tiles : {"32x1024x32:grid", "64x512x32"}) {
    INFO(tiles);
    CHECK_THROWS_WITH(
        lower(parse_spec(
            fmt::format("dtype=bf16 head_dim=32 direction=backward tiles={} target=sm_90", tiles))),
        Catch::Contains("at most 16 warps"));
  }
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=256 direction=backward tiles=64x128x8 target=sm_80")),
      Catch::Contains("fits sm_80's 166912 bytes"));
}

TEST_CASE("a predicate mask is parsed, canonicalized and lowered to a block table", "[pass]") {
  CHECK_NOTHROW(validate(ir_of("dtype=bf16 head_dim=64 mask=predicate(q>=k&&_d[q]==_d[k])")));
  CHECK_THAT(validation_error("dtype=bf16 head_dim=64 mask=predicate(q>=)"),
             Catch::StartsWith("mask=predicate(q>=): mask expression, line 1 column 4: expected "
                               "an operand"));
  // parse_spec lifts literals; a MaskSpec built in code must hold the lifted text.
  AttentionSpec literal = parse_spec("dtype=bf16 head_dim=64 mask=predicate(q>=k)");
  literal.mask.predicate = "q-k<256&&k<4";
  CHECK_THROWS_WITH(validate(Lowering{literal}),
                    "mask=predicate(q-k<256&&k<4): got 'q-k<256&&k<4'; accepted: the lifted "
                    "structure, literals replaced by runtime scalars $0, $1, ... (here "
                    "q-k<$0&&k<$1)");
  // The literals' values are launch arguments: canonicalize drops them.
  const Lowering lifted =
      canonicalize(validate(ir_of("dtype=bf16 head_dim=64 mask=predicate(q>=k&&(q-k)<256)")));
  CHECK(lifted.spec.mask.predicate == "q>=k&&q-k<$0");
  CHECK(lifted.spec.mask.scalars.empty());
  const Lowering far =
      canonicalize(validate(ir_of("dtype=bf16 head_dim=64 mask=predicate(q>=k&&q-k<512)")));
  CHECK(lifted.spec == far.spec);
  AttentionSpec stray = parse_spec("dtype=bf16 head_dim=64 mask=causal");
  stray.mask.predicate = "q>=k";
  CHECK_THROWS_WITH(validate(Lowering{stray}),
                    "mask: a predicate expression ('q>=k') applies to mask=predicate only; "
                    "accepted: no expression for mask=causal");
  AttentionSpec flagged = parse_spec("dtype=bf16 head_dim=64 mask=predicate(q>=k)");
  flagged.mask.causal = true;
  CHECK_THROWS_AS(validate(Lowering{flagged}), Error);

  const Lowering canonical =
      canonicalize(validate(ir_of("dtype=bf16 head_dim=64 mask=predicate(((q>=k))&&(k<$0))")));
  CHECK(canonical.spec.mask.predicate == "q>=k&&k<$0");
  const MaskLowering lowered = *lower_mask(canonical).mask;
  CHECK(lowered.element_predicate);
  CHECK_FALSE(lowered.table_per_batch);
  CHECK_FALSE(lowered.table_per_head);
  CHECK_FALSE(lowered.needs_minmax);
  // A tensor may differ per batch row; b and h give the table rows of their own.
  CHECK(
      lower_mask(canonicalize(validate(ir_of("dtype=bf16 head_dim=64 mask=predicate(d[q]==d[k])"))))
          .mask->table_per_batch);
  const MaskLowering by_head =
      *lower_mask(
           canonicalize(validate(ir_of("dtype=bf16 head_dim=64 mask=predicate(k%(h+$0)==$1)"))))
           .mask;
  CHECK(by_head.table_per_head);
  CHECK_FALSE(by_head.table_per_batch);

  // Too many tensors or scalars for the kernel parameters.
  CHECK_THAT(validation_error("dtype=bf16 head_dim=64 mask=predicate(a[q]+b1[q]+c[q]+d[q]+e[q]+"
                              "f[q]+g[q]+i[q]+j[k]>$0)"),
             Catch::Contains("got '9 tensors'; accepted: at most 8 tensors"));
  CHECK_THAT(validation_error("dtype=bf16 head_dim=64 mask=predicate(q<$16)"),
             Catch::Contains("got '17 scalar slots'; accepted: at most 16 scalars ($0 .. $15)"));
}

TEST_CASE("plan_kernels puts one block classification per tile shape first", "[pass]") {
  const Lowering forward =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k&&d[q]==d[k]) target=sm_90"));
  REQUIRE(forward.plan->kernels.size() == 3);
  const KernelDesc& blocks = forward.plan->kernels[0];
  CHECK(blocks.role == KernelRole::predicate_blocks);
  CHECK(blocks.block_m == forward.tiles_of(KernelRole::forward).block_m);
  CHECK(blocks.block_n == forward.tiles_of(KernelRole::forward).block_n);
  CHECK(forward.plan->kernels[1].role == KernelRole::cta_order);
  CHECK(forward.plan->kernels[2].role == KernelRole::forward);

  const Lowering det = lower(parse_spec(
      "dtype=bf16 head_dim=128 mask=predicate(q>=k) direction=backward deterministic=true "
      "target=sm_90"));
  const KernelTiles& main = det.tiles_of(KernelRole::backward);
  const KernelTiles& dq = det.tiles_of(KernelRole::backward_dq);
  std::vector<std::tuple<int, int, bool>> shapes;
  for (const KernelDesc& k : det.plan->kernels) {
    if (k.role == KernelRole::predicate_blocks)
      shapes.emplace_back(k.block_m, k.block_n, k.key_rows);
  }
  // The main kernel masks S^T (bits by key rows), the dQ kernel S.
  CHECK(shapes == std::vector<std::tuple<int, int, bool>>{{main.block_m, main.block_n, true},
                                                          {dq.block_m, dq.block_n, false}});
  CHECK(det.plan->kernels[0].role == KernelRole::predicate_blocks);
}
