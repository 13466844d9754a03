// Each lowering pass on its own, and the pipeline's print-after-pass hook.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"
#include "compiler/passes/pipeline.hpp"

using namespace attnjit;

namespace {

Lowering ir_of(const char* text) {
  return Lowering{parse_spec(text)};
}

std::string validation_error(const char* text) {
  try {
    validate(ir_of(text));
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("validate rejects what attnjit cannot compile", "[pass]") {
  CHECK_NOTHROW(validate(ir_of("dtype=bf16 head_dim=128 mask=causal")));
  CHECK_THAT(validation_error("dtype=bf16 head_dim=100"),
             Catch::Contains("head_dim: got '100'; accepted: 32, 64, 96, 128, 192, 256"));
  CHECK_THAT(validation_error("dtype=bf16 head_dim_qk=128 head_dim_v=64"),
             Catch::Contains("head_dim_v: got '64'; accepted: equal to head_dim_qk (128)"));
  CHECK_THAT(validation_error("dtype=bf16 head_dim=128 mask=flashmask(causal=false,columns=3)"),
             Catch::Contains("flashmask columns: got '3'; accepted: 1, 2, 4"));
  CHECK_THAT(validation_error("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=4)"),
             Catch::Contains("4 columns need causal=false"));
  CHECK_THAT(validation_error("dtype=bf16 head_dim=128 mask=flashmask(causal=false,columns=1)"),
             Catch::Contains("1 column needs causal=true"));
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
  CHECK_THROWS_WITH(select_target(ir_of("dtype=bf16 head_dim=64")),
                    Catch::Contains("target: got 'auto'"));
  CHECK(
      select_target(ir_of("dtype=bf16 head_dim=64 target=sm_90")).target->max_dynamic_smem_bytes ==
      232448);
  CHECK(
      select_target(ir_of("dtype=bf16 head_dim=64 target=sm_80")).target->max_dynamic_smem_bytes ==
      166912);
  CHECK(
      select_target(ir_of("dtype=bf16 head_dim=64 target=sm_86")).target->max_dynamic_smem_bytes ==
      101376);
  CHECK(select_target(ir_of("dtype=bf16 head_dim=64 target=sm_90a")).target->family ==
        KernelFamily::sm80);
}

TEST_CASE("select_tiles fits every head dim into every target", "[pass]") {
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      for (const char* mask : {"none", "flashmask(causal=false,columns=4)"}) {
        const std::string text =
            "dtype=bf16 head_dim=" + std::to_string(d) + " mask=" + mask + " target=" + arch;
        INFO(text);
        const Lowering ir = lower(parse_spec(text));
        const TileConfig& t = *ir.tiles;
        CHECK(t.smem_bytes <= ir.target->max_dynamic_smem_bytes);
        CHECK(t.block_m % (16 * t.warps) == 0);
        CHECK((t.rows_per_warp() == 16 || t.rows_per_warp() == 32));
        CHECK(t.block_n % 16 == 0);
        CHECK(t.kv_stages >= 2);
      }
    }
  }
  // Two-slab warps at d128; the key block shrinks where the mask needs more registers
  // (index and vector masks 48, a runtime window 32).
  const Lowering plain = lower(parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_90"));
  CHECK(plain.tiles->block_m == 128);
  CHECK(plain.tiles->block_n == 48);
  CHECK(plain.tiles->warps == 4);
  CHECK(plain.tiles->rows_per_warp() == 32);
  CHECK(!plain.tiles->q_in_registers);
  const Lowering vectors = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) target=sm_90"));
  CHECK(vectors.tiles->block_n == 48);
  const Lowering window_d128 =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=sliding_window target=sm_90"));
  CHECK(window_d128.tiles->block_n == 32);
  const Lowering window =
      lower(parse_spec("dtype=bf16 head_dim=64 mask=sliding_window target=sm_90"));
  CHECK(window.tiles->block_n == 64);
  CHECK(lower(parse_spec("dtype=bf16 head_dim=64 mask=none target=sm_90")).tiles->block_n == 96);
}

TEST_CASE("select_tiles honours and checks an explicit shape", "[pass]") {
  const Lowering ir = lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90 tiles=128x32x4s"));
  CHECK(ir.tiles->block_m == 128);
  CHECK(ir.tiles->block_n == 32);
  CHECK(ir.tiles->warps == 4);
  CHECK(!ir.tiles->q_in_registers);
  CHECK(ir.tiles->smem_bytes == (128 * 128 + 2 * 32 * 256) * 2);
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
  CHECK(causal.plan->kernels[0].threads == causal.tiles->threads());
  CHECK(causal.plan->kernels[0].dynamic_smem_bytes == causal.tiles->smem_bytes);

  const Lowering fm = lower(parse_spec(
      "dtype=fp16 head_dim=64 mask=flashmask(causal=true,columns=2) return_lse=true target=sm_80"));
  REQUIRE(fm.plan->kernels.size() == 3);
  CHECK(fm.plan->kernels[0].role == KernelRole::flashmask_minmax);
  CHECK(fm.plan->kernels[0].name ==
        "attnjit_flashmask_minmax_c2_bn" + std::to_string(fm.tiles->block_n));
  // The forward's CTAs sorted by the tiles the vectors leave them.
  const KernelDesc& order = fm.plan->kernels[1];
  CHECK(order.role == KernelRole::cta_order);
  CHECK(order.orders == KernelRole::forward);
  CHECK(order.block_m == fm.tiles->block_m);
  CHECK(order.block_n == fm.tiles->block_n);
  CHECK(order.threads == 1024);
  CHECK(fm.plan->kernels[2].name == "attnjit_fwd_fp16_d64_flashmask_causal_c2_lse");
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
  const BackwardTiles& t = *atomic.backward_tiles;
  // d128: the warp-grid layout, 4 key warps x 2 head-dim halves of dK/dV.
  CHECK(t.layout == BackwardLayout::warp_grid);
  CHECK(atomic.plan->kernels[1].template_header == "attnjit/bwd_grid_sm80.cuh");
  CHECK(t.block_m == 64);
  CHECK(t.block_n == 128);
  CHECK(t.warps == 8);
  CHECK(t.dim_warps == 2);
  CHECK(t.dq_block_m == 0);
  // Its P^T and dS^T tiles: 2 x 128 x 64 x 2 bytes next to K, V and two (Q, dO, LSE, D) stages.
  CHECK(t.smem_bytes == 2 * 128 * 128 * 2 + 2 * (2 * 64 * 128 * 2 + 2 * 64 * 4) + 2 * 128 * 64 * 2);
  // Predicates, whose stored element bits follow the key-slab fragments, take key slabs.
  const Lowering predicate = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k) direction=backward target=sm_90"));
  CHECK(predicate.backward_tiles->layout == BackwardLayout::key_slabs);
  CHECK(predicate.backward_tiles->dim_warps == 1);
  CHECK(std::ranges::any_of(predicate.plan->kernels, [](const KernelDesc& k) {
    return k.template_header == "attnjit/bwd_sm80.cuh";
  }));
  CHECK(atomic.plan->kernels[1].dynamic_smem_bytes == t.smem_bytes);
  CHECK(!atomic.tiles.has_value());

  const Lowering det = lower(
      parse_spec("dtype=fp16 head_dim=128 mask=flashmask(causal=true,columns=1) direction=backward "
                 "deterministic=true target=sm_90"));
  CHECK(roles(det) == std::vector<R>{R::flashmask_minmax, R::flashmask_minmax, R::cta_order,
                                     R::cta_order, R::backward_preprocess, R::backward,
                                     R::backward_dq, R::backward_reduce_dkdv});
  CHECK(det.plan->kernels[0].block_n == det.backward_tiles->block_n);
  CHECK(det.plan->kernels[1].block_n == det.backward_tiles->dq_block_n);
  // One CTA order per attention kernel, with that kernel's tiles.
  CHECK(det.plan->kernels[2].orders == R::backward);
  CHECK(det.plan->kernels[2].block_m == det.backward_tiles->block_m);
  CHECK(det.plan->kernels[2].block_n == det.backward_tiles->block_n);
  CHECK(det.plan->kernels[3].orders == R::backward_dq);
  CHECK(det.plan->kernels[3].block_m == det.backward_tiles->dq_block_m);
  CHECK(det.plan->kernels[3].block_n == det.backward_tiles->dq_block_n);
  CHECK(det.plan->kernels[4].name == "attnjit_bwd_preprocess_fp16_d128");
  CHECK(det.plan->kernels[5].name == "attnjit_bwd_fp16_d128_flashmask_causal_c1_deterministic");
  CHECK(det.plan->kernels[6].name == "attnjit_bwd_dq_fp16_d128_flashmask_causal_c1");
  CHECK(det.backward_tiles->dq_block_m == 16 * det.backward_tiles->dq_warps);
  // Without the dQ product in the main kernel, key slabs.
  CHECK(det.backward_tiles->layout == BackwardLayout::key_slabs);
  CHECK(det.backward_tiles->dim_warps == 1);

  // Wide heads split their dK/dV accumulators over warps sharing the same keys.
  const Lowering wide =
      lower(parse_spec("dtype=bf16 head_dim=256 direction=backward target=sm_90"));
  CHECK(wide.backward_tiles->dim_warps == 2);
  CHECK(wide.backward_tiles->block_n == 16 * wide.backward_tiles->warps / 2);
  // Every head dim fits every target.
  for (const char* arch : {"sm_80", "sm_86", "sm_90"}) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      const std::string text = "dtype=bf16 head_dim=" + std::to_string(d) +
                               " mask=flashmask(causal=false,columns=4) direction=backward "
                               "deterministic=true target=" +
                               arch;
      INFO(text);
      const Lowering ir = lower(parse_spec(text));
      CHECK(ir.backward_tiles->smem_bytes <= ir.target->max_dynamic_smem_bytes);
      CHECK(ir.backward_tiles->dq_smem_bytes <= ir.target->max_dynamic_smem_bytes);
    }
  }
}

TEST_CASE("the warpgroup backward layout is chosen for sm_90a at head dims 64 and 128", "[pass]") {
  const auto lowered = [](const char* rest) {
    return lower(parse_spec(fmt::format("dtype=bf16 head_dim=128 direction=backward {}", rest)));
  };
  const Lowering ir = lowered("mask=causal target=sm_90a");
  const BackwardTiles& t = *ir.backward_tiles;
  CHECK(t.layout == BackwardLayout::warpgroup);
  CHECK(ir.plan->kernels[1].template_header == "attnjit/bwd_wgmma_sm90.cuh");
  // The one kernel on wgmma; the plan's other kernels stay in the target's family.
  for (const KernelDesc& kernel : ir.plan->kernels) {
    INFO(kernel.name);
    CHECK(kernel.family ==
          (kernel.role == KernelRole::backward ? KernelFamily::sm90a : KernelFamily::sm80));
  }
  CHECK(t.block_m == 64);
  CHECK(t.block_n == 128);
  CHECK(t.warps == 8);
  // Alignment slack, K and V, two stages (Q, dO, then LSE and D padded to 1 KB), dS^T.
  CHECK(t.smem_bytes == 1024 + 2 * 128 * 128 * 2 + 2 * (2 * 64 * 128 * 2 + 1024) + 128 * 64 * 2);
  CHECK(ir.plan->kernels[1].dynamic_smem_bytes == t.smem_bytes);
  // With score modifiers and FlashMask vectors too (no spills in the NVRTC sweep).
  for (const char* rest : {"mask=causal softcap=true alibi=true target=sm_90a",
                           "mask=flashmask(causal=false,columns=4) target=sm_90a"}) {
    INFO(rest);
    CHECK(lowered(rest).backward_tiles->layout == BackwardLayout::warpgroup);
  }
  // Plain sm_90 (no wgmma), the deterministic mode (no atomic dQ product), predicates
  // (element bits in the key-slab fragments) and head dims other than 64 and 128 keep the sm80
  // layouts.
  CHECK(lowered("mask=causal target=sm_90").backward_tiles->layout == BackwardLayout::warp_grid);
  CHECK(lowered("mask=causal deterministic=true target=sm_90a").backward_tiles->layout ==
        BackwardLayout::key_slabs);
  CHECK(lowered("mask=predicate(q>=k) target=sm_90a").backward_tiles->layout ==
        BackwardLayout::key_slabs);
  for (int d : {32, 64, 96, 128, 192, 256}) {
    INFO(d);
    const Lowering auto_tiles = lower(
        parse_spec(fmt::format("dtype=bf16 head_dim={} direction=backward target=sm_90a", d)));
    CHECK((auto_tiles.backward_tiles->layout == BackwardLayout::warpgroup) ==
          (d == 64 || d == 128));
  }
  // The w suffix asks for it explicitly, where it exists.
  CHECK(lowered("tiles=64x128x8w target=sm_90a").backward_tiles->layout ==
        BackwardLayout::warpgroup);
  CHECK_THROWS_WITH(lowered("tiles=64x128x8w target=sm_90"),
                    Catch::Contains("the w suffix with target=sm_90a"));
  CHECK_THROWS_WITH(lowered("tiles=64x64x4w target=sm_90a"),
                    Catch::Contains("64x128x8w (head_dim 64 or 128)"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=96 direction=backward tiles=64x128x8w "
                                     "target=sm_90a")),
                    Catch::Contains("64x128x8w (head_dim 64 or 128)"));
  CHECK(lower(parse_spec("dtype=bf16 head_dim=64 direction=backward tiles=64x128x8w "
                         "target=sm_90a"))
            .backward_tiles->layout == BackwardLayout::warpgroup);
  CHECK_THROWS_WITH(lowered("deterministic=true tiles=64x128x8w target=sm_90a"),
                    Catch::Contains("without the w suffix with deterministic=true"));
  CHECK_THROWS_WITH(lowered("mask=predicate(q>=k) tiles=64x128x8w target=sm_90a"),
                    Catch::Contains("without the w suffix for mask=predicate"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 tiles=128x64x4w target=sm_90a")),
                    Catch::Contains("128xBNx12w with BN a multiple of 16 up to 256"));
}

TEST_CASE("an explicit w shape gives the forward the sm90a warpgroup kernel", "[pass]") {
  const Lowering ir =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=causal tiles=128x128x12w target=sm_90a"));
  REQUIRE(ir.tiles);
  CHECK(ir.tiles->warpgroup);
  CHECK(ir.tiles->threads() == 384);
  CHECK(ir.tiles->kv_stages == 2);
  // Alignment slack, Q, two K and V stages, the barriers.
  CHECK(ir.tiles->smem_bytes == 1024 + 32768 + 2 * 65536 + 8 + 64);
  const KernelDesc& forward = *ir.plan->find(KernelRole::forward);
  CHECK(forward.template_header == "attnjit/fwd_sm90a.cuh");
  CHECK(forward.family == KernelFamily::sm90a);
  CHECK(forward.name == "attnjit_fwd_bf16_d128_causal_sm90a");
  CHECK_THAT(to_string(ir), Catch::Contains("layout=warpgroup"));
  // FlashMask vectors ride with the K stages.
  CHECK(lower(parse_spec("dtype=fp16 head_dim=64 mask=flashmask(causal=false,columns=4) "
                         "tiles=128x176x12w target=sm_90a"))
            .tiles->smem_bytes == 1024 + 16384 + 2 * (2 * 176 * 64 * 2 + 176 * 16) + 8 + 64);
  // The automatic choice stays on the sm80 kernel.
  CHECK_FALSE(lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90a")).tiles->warpgroup);
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 tiles=128x128x12w target=sm_90")),
                    Catch::Contains("the w suffix with target=sm_90a"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=32 tiles=128x128x12w target=sm_90a")),
                    Catch::Contains("head_dim 64, 96, 128, 192 or 256"));
  CHECK(
      lower(parse_spec("dtype=bf16 head_dim=96 tiles=128x128x12w target=sm_90a")).tiles->warpgroup);
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 tiles=128x120x12w target=sm_90a")),
                    Catch::Contains("a multiple of 16 up to 256"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k) "
                                     "tiles=128x144x12w target=sm_90a")),
                    Catch::Contains("a multiple of 16 up to 128"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=256 tiles=128x256x12w target=sm_90a")),
                    Catch::Contains("fits sm_90a's 232448 bytes"));
}

TEST_CASE("forward specs with score modifiers take a shape with room for them", "[pass]") {
  const auto tiles = [](int d, const char* rest) {
    return *lower(parse_spec(fmt::format("dtype=bf16 head_dim={} target=sm_80 {}", d, rest))).tiles;
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
    return *lower(parse_spec(fmt::format("dtype=bf16 head_dim={} mask=causal direction=backward "
                                         "target=sm_90 {}",
                                         d, modifiers)))
                .backward_tiles;
  };
  // The warp grid (d64, d128) keeps soft-capping; with ALiBi, d128 takes 64 x 64 key slabs
  // with the head dim split in two and d64 64 x 128 one-slab warps.
  for (int d : {64, 128}) {
    INFO(d);
    CHECK(tiles(d, "").layout == BackwardLayout::warp_grid);
    CHECK(tiles(d, "softcap=true") == tiles(d, ""));
    for (const char* modifiers : {"alibi=true", "softcap=true alibi=true"}) {
      INFO(modifiers);
      const BackwardTiles slabs = tiles(d, modifiers);
      CHECK(slabs.layout == BackwardLayout::key_slabs);
      CHECK(slabs.block_m == 64);
      CHECK(slabs.block_n == (d == 128 ? 64 : 128));
      CHECK(slabs.dim_warps == (d == 128 ? 2 : 1));
    }
  }
  for (const char* modifiers : {"softcap=true", "alibi=true", "softcap=true alibi=true"}) {
    INFO(modifiers);
    // d96 splits its head dim; d192, d256: 32 queries per iteration, not 64.
    CHECK(tiles(96, modifiers).dim_warps == 2);
    CHECK(tiles(96, "").dim_warps == 1);
    for (int d : {192, 256}) {
      INFO(d);
      CHECK(tiles(d, modifiers).block_m == 32);
      CHECK(tiles(d, "").block_m == 64);
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
  CHECK(ir.backward_tiles->block_m == 32);
  CHECK(ir.backward_tiles->dim_warps == 1);
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=48x128x8 target=sm_90")),
      Catch::Contains("block_m a multiple of 32"));
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x48x8 target=sm_90")),
      Catch::Contains("key slabs (block_n/16) divide the warps"));
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x128x8q target=sm_90")),
      Catch::Contains("with an optional g or w suffix for the backward"));
  // The g suffix picks the warp-grid layout, whose grids must divide the warps.
  const Lowering grid =
      lower(parse_spec("dtype=bf16 head_dim=64 direction=backward tiles=64x64x4g target=sm_90"));
  CHECK(grid.backward_tiles->layout == BackwardLayout::warp_grid);
  CHECK(grid.backward_tiles->block_n == 64);
  CHECK(grid.backward_tiles->dim_warps == 2);
  // Also in deterministic mode, whose automatic choice is key slabs.
  CHECK(lower(parse_spec("dtype=bf16 head_dim=128 direction=backward deterministic=true "
                         "tiles=64x128x8g target=sm_90"))
            .backward_tiles->layout == BackwardLayout::warp_grid);
  CHECK(lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x128x8 "
                         "target=sm_90"))
            .backward_tiles->layout == BackwardLayout::key_slabs);
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x48x8g target=sm_90")),
      Catch::Contains("block_n and block_m multiples of 32"));
  CHECK_THROWS_WITH(
      lower(parse_spec("dtype=bf16 head_dim=128 direction=backward tiles=64x32x8g target=sm_90")),
      Catch::Contains("the other warps splitting the queries and the head dim"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k) "
                                     "direction=backward tiles=64x128x8g target=sm_90")),
                    Catch::Contains("without the g suffix for mask=predicate"));
  CHECK_THROWS_WITH(lower(parse_spec("dtype=bf16 head_dim=128 tiles=128x64x4g target=sm_90")),
                    Catch::Contains("q, s or w suffix for the forward"));
  for (const char* tiles : {"32x1024x32g", "64x512x32"}) {
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
  CHECK(validation_error("dtype=bf16 head_dim=64 mask=predicate(q-k<256&&k<4)") ==
        "mask=predicate(q-k<256&&k<4): got 'q-k<256&&k<4'; accepted: the lifted structure, "
        "literals replaced by runtime scalars $0, $1, ... (here q-k<$0&&k<$1)");
  AttentionSpec stray = parse_spec("dtype=bf16 head_dim=64 mask=causal");
  stray.mask.predicate = "q>=k";
  CHECK_THROWS_WITH(validate(Lowering{stray}),
                    "mask: a predicate expression ('q>=k') applies to mask=predicate only; "
                    "accepted: no expression for mask=causal");
  AttentionSpec flagged = parse_spec("dtype=bf16 head_dim=64 mask=predicate(q>=k)");
  flagged.mask.causal = true;
  CHECK_THROWS_AS(validate(Lowering{flagged}), Error);

  const Lowering canonical =
      canonicalize(ir_of("dtype=bf16 head_dim=64 mask=predicate(((q>=k))&&(k<$0))"));
  CHECK(canonical.spec.mask.predicate == "q>=k&&k<$0");
  const MaskLowering lowered = *lower_mask(canonical).mask;
  CHECK(lowered.element_predicate);
  CHECK_FALSE(lowered.table_per_batch);
  CHECK_FALSE(lowered.table_per_head);
  CHECK_FALSE(lowered.needs_minmax);
  // A tensor may differ per batch row; b and h give the table rows of their own.
  CHECK(lower_mask(canonicalize(ir_of("dtype=bf16 head_dim=64 mask=predicate(d[q]==d[k])")))
            .mask->table_per_batch);
  const MaskLowering by_head =
      *lower_mask(canonicalize(ir_of("dtype=bf16 head_dim=64 mask=predicate(k%(h+$0)==$1)"))).mask;
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
  CHECK(blocks.block_m == forward.tiles->block_m);
  CHECK(blocks.block_n == forward.tiles->block_n);
  CHECK(forward.plan->kernels[1].role == KernelRole::cta_order);
  CHECK(forward.plan->kernels[2].role == KernelRole::forward);

  const Lowering det = lower(parse_spec(
      "dtype=bf16 head_dim=128 mask=predicate(q>=k) direction=backward deterministic=true "
      "target=sm_90"));
  const BackwardTiles& t = *det.backward_tiles;
  std::vector<std::pair<int, int>> shapes;
  for (const KernelDesc& k : det.plan->kernels) {
    if (k.role == KernelRole::predicate_blocks) shapes.emplace_back(k.block_m, k.block_n);
  }
  std::vector<std::pair<int, int>> expected{{t.block_m, t.block_n}};
  if (t.dq_block_m != t.block_m || t.dq_block_n != t.block_n) {
    expected.emplace_back(t.dq_block_m, t.dq_block_n);
  }
  CHECK(shapes == expected);
  CHECK(det.plan->kernels[0].role == KernelRole::predicate_blocks);
}
