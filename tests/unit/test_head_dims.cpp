// Unequal head dims (head_dim_qk != head_dim_v, e.g. MLA's 192 / 128): which pairs validate
// takes, the family chosen for them (the sm90a forward and backward on sm_90a, else the sm80
// family), kernel names, shared memory and scratch buffers by the right dim, and what the generated
// sources bind.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <utility>

#include "attnjit/error.hpp"
#include "compiler/codegen/emit.hpp"
#include "compiler/passes/passes.hpp"
#include "compiler/passes/pipeline.hpp"
#include "compiler/registry/kernel_registry.hpp"
#include "runtime/launch/plan_launch.hpp"
#include "runtime/launch/tma.hpp"
#include "support/error_text.hpp"

using namespace attnjit;

namespace {

constexpr const char* kPairs[] = {"head_dim_qk=64 head_dim_v=128", "head_dim_qk=128 head_dim_v=64",
                                  "head_dim_qk=192 head_dim_v=128",
                                  "head_dim_qk=256 head_dim_v=128"};

Lowering lowered(const std::string& text) {
  return lower(parse_spec(text));
}

std::string source_of(const Lowering& ir, KernelRole role) {
  return emit_kernel(ir, *ir.plan->find(role));
}

std::int64_t buffer_bytes(const Lowering& ir, const std::string& name,
                          const LaunchExtents& extents) {
  const auto found = std::ranges::find_if(ir.plan->scratch,
                                          [&](const ScratchBuffer& b) { return b.name == name; });
  REQUIRE(found != ir.plan->scratch.end());
  return found->bytes.evaluate(extents);
}

}  // namespace

TEST_CASE("validate takes the listed pairs of unequal head dims and names the others", "[pass]") {
  for (const char* dims : kPairs) {
    const std::string text = fmt::format("dtype=bf16 {} mask=causal", dims);
    INFO(text);
    CHECK(testing::error_text([&] { validate(Lowering{parse_spec(text)}); }) == "no error");
  }
  for (const char* dims : {"head_dim_qk=128 head_dim_v=192", "head_dim_qk=64 head_dim_v=32",
                           "head_dim_qk=128 head_dim_v=256"}) {
    const std::string text = fmt::format("dtype=bf16 {}", dims);
    INFO(text);
    CHECK_THAT(testing::error_text([&] { validate(Lowering{parse_spec(text)}); }),
               Catch::StartsWith("(head_dim_qk, head_dim_v): got '(") &&
                   Catch::EndsWith("accepted: equal head dims, or one of (64, 128), (128, 64), "
                                   "(192, 128), (256, 128)"));
  }
  // A dim outside the head dims is named as such first.
  CHECK_THAT(testing::error_text([] {
               validate(Lowering{parse_spec("dtype=bf16 head_dim_qk=192 head_dim_v=100")});
             }),
             Catch::StartsWith("head_dim_v: got '100'"));
}

TEST_CASE(
    "unequal head dims take the sm90a forward and backward on sm_90a, the sm80 family elsewhere",
    "[pass]") {
  for (const char* dims : kPairs) {
    for (const char* target : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"}) {
      for (const char* mode :
           {"direction=forward", "direction=backward", "direction=backward deterministic=true"}) {
        for (const char* mask :
             {"causal", "flashmask(causal=false,columns=4)", "predicate(q>=k)"}) {
          const std::string text =
              fmt::format("dtype=bf16 {} mask={} {} target={}", dims, mask, mode, target);
          INFO(text);
          const Lowering ir = lowered(text);
          const bool sm90a = std::string_view(target) == "sm_90a";
          for (const FamilyChoice& choice : ir.target->families) {
            CHECK(choice.family == (sm90a ? KernelFamily::sm90a : KernelFamily::sm80));
          }
          for (const KernelTiles& tiles : ir.tiles) {
            CHECK(tiles.smem_bytes <= ir.target->max_dynamic_smem_bytes);
          }
        }
      }
    }
  }
  // The sm90a backward takes (192, 128) and (256, 128) on its wide layout only, (128, 64) and
  // (64, 128) on d128's 64-row shape (no 80-row blocks): forcing another shape says so.
  CHECK_THAT(testing::error_text([] {
               lowered(
                   "dtype=bf16 head_dim_qk=192 head_dim_v=128 target=sm_90a "
                   "tiles=64x128x12:warpgroups direction=backward");
             }),
             Catch::EndsWith("tiles: got '64x128x12:warpgroups'; accepted: 64x64x12:warpgroups "
                             "for the sm90a backward at head_dim_qk=192 head_dim_v=128"));
  CHECK_THAT(testing::error_text([] {
               lowered(
                   "dtype=bf16 head_dim_qk=128 head_dim_v=64 target=sm_90a "
                   "tiles=80x128x12:warpgroups direction=backward");
             }),
             Catch::EndsWith("tiles: got '80x128x12:warpgroups'; accepted: 64x128x12:warpgroups "
                             "for the sm90a backward, or 80x128x12:warpgroups at head_dim=128 "
                             "with mask=none and no softcap"));
  // Explicit sm80 shapes are checked against both dims: 8 warps over one key slab split
  // head_dim_qk 128 into 16 columns each, but not head_dim_v 64.
  CHECK_THAT(testing::error_text([] {
               lowered(
                   "dtype=bf16 head_dim_qk=128 head_dim_v=64 direction=backward target=sm_90 "
                   "tiles=64x16x8:slabs");
             }),
             Catch::Contains("splitting the head dims in multiples of 16"));
  CHECK(lowered("dtype=bf16 head_dim_qk=128 head_dim_v=64 direction=backward target=sm_90 "
                "tiles=64x32x8:slabs")
            .tiles_of(KernelRole::backward)
            .dim_warps == 4);
}

TEST_CASE("a (192, 128) plan: kernel names, shared memory and buffers by the right dim", "[pass]") {
  const Lowering forward = lowered(
      "dtype=bf16 head_dim_qk=192 head_dim_v=128 mask=causal "
      "target=sm_90");
  const KernelDesc& fwd = *forward.plan->find(KernelRole::forward);
  CHECK(fwd.name == "attnjit_fwd_bf16_d192v128_causal");
  CHECK(fwd.row == "forward.sm80");
  const KernelTiles& ft = forward.tiles_of(KernelRole::forward);
  CHECK(ft.block_m == 128);
  CHECK(ft.block_n == 48);
  CHECK(ft.warps == 4);
  // Q (192 columns), then two stages of K (192) and V (128).
  CHECK(ft.smem_bytes == 128 * 192 * 2 + 2 * 48 * (192 + 128) * 2);

  const Lowering backward = lowered(
      "dtype=bf16 head_dim_qk=192 head_dim_v=128 mask=causal "
      "direction=backward target=sm_90");
  std::vector<std::string> names;
  for (const KernelDesc& k : backward.plan->kernels) names.push_back(k.name);
  CHECK(names == std::vector<std::string>{"attnjit_bwd_preprocess_bf16_d192v128_zero_dq",
                                          "attnjit_bwd_bf16_d192v128_causal",
                                          "attnjit_bwd_convert_dq_bf16_d192v128",
                                          "attnjit_bwd_reduce_dkdv_bf16_d192v128"});
  const KernelTiles& bt = backward.tiles_of(KernelRole::backward);
  CHECK(bt.row == "backward_slabs.sm80");
  CHECK(bt.dim_warps == 2);
  // K and V, two stages of Q, dO, LSE and D, and the dS^T tile of the atomic dQ product.
  CHECK(bt.smem_bytes == bt.block_n * (192 + 128) * 2 +
                             2 * (bt.block_m * (192 + 128) * 2 + 2 * bt.block_m * 4) +
                             bt.block_n * bt.block_m * 2);
  // dQ by head_dim_qk, GQA's dK partials by head_dim_qk and dV partials by head_dim_v.
  const LaunchExtents extents = jit::detail::launch_extents({2, 300, 500, 8, 2, 1});
  CHECK(buffer_bytes(backward, "dq_accum", extents) == 2 * 8 * 300 * 192 * 4);
  CHECK(buffer_bytes(backward, "dk_partial", extents) == 2 * 8 * 500 * 192 * 4);
  CHECK(buffer_bytes(backward, "dv_partial", extents) == 2 * 8 * 500 * 128 * 4);

  const Lowering det = lowered(
      "dtype=fp16 head_dim_qk=192 head_dim_v=128 mask=causal "
      "direction=backward deterministic=true target=sm_90");
  const KernelDesc& dq = *det.plan->find(KernelRole::backward_dq);
  CHECK(dq.name == "attnjit_bwd_dq_fp16_d192v128_causal");
  CHECK(dq.row == "backward_dq.sm80");
  const KernelTiles& dt = det.tiles_of(KernelRole::backward_dq);
  // Q and dO, then two stages of K and V.
  CHECK(dt.smem_bytes == dt.block_m * (192 + 128) * 2 + 2 * dt.block_n * (192 + 128) * 2);
  CHECK(det.tiles_of(KernelRole::backward).row == "backward_slabs.sm80");
}

TEST_CASE("the sm90a forward of unequal head dims: tiles, shared memory and TMA boxes by both dims",
          "[pass]") {
  // Per pair under a causal mask: the key block, and whether O has a tile of its own (wider
  // than Q: no room in the Q tile).
  struct Expected {
    int d_qk, d_v, block_n;
    bool own_o_tile;
  };
  for (const Expected e : {Expected{192, 128, 128, false}, Expected{128, 64, 128, false},
                           Expected{64, 128, 128, true}, Expected{256, 128, 96, false}}) {
    const std::string text = fmt::format(
        "dtype=bf16 head_dim_qk={} head_dim_v={} mask=causal target=sm_90a", e.d_qk, e.d_v);
    INFO(text);
    const Lowering ir = lowered(text);
    const KernelTiles& tiles = ir.tiles_of(KernelRole::forward);
    CHECK(tiles.row == "forward.sm90a");
    CHECK(tiles.block_m == 128);
    CHECK(tiles.block_n == e.block_n);
    CHECK(tiles.warps == 12);
    // Alignment slack, Q (head_dim_qk), two stages of K (head_dim_qk) and V (head_dim_v), the
    // O tile (head_dim_v) where it has its own, the barriers.
    CHECK(tiles.smem_bytes == 1024 + 128 * e.d_qk * 2 + 2 * e.block_n * (e.d_qk + e.d_v) * 2 +
                                  (e.own_o_tile ? 128 * e.d_v * 2 : 0) + 16 + 2 * 2 * 2 * 8);
    const KernelDesc& kernel = *ir.plan->find(KernelRole::forward);
    CHECK(kernel.tensor_maps == std::vector<TensorMapBox>{{MapTensor::q, 128, 64, 128},
                                                          {MapTensor::k, e.block_n, 64, 128},
                                                          {MapTensor::v, e.block_n, 64, 128},
                                                          {MapTensor::o, 64, 64, 128}});
  }
  // FlashMask: persistent with O through a tile of its own where shared memory holds it:
  // (64, 128) and (128, 64) on their 128-key blocks, (192, 128) on 112-key blocks only.
  const auto persistent = [](const std::string& text) {
    return emit_kernel(lowered(text), *lowered(text).plan->find(KernelRole::forward))
               .find("static constexpr bool kPersistent = true;") != std::string::npos;
  };
  const char* flashmask = "mask=flashmask(causal=true,columns=1) target=sm_90a";
  CHECK(persistent(fmt::format("dtype=bf16 head_dim_qk=64 head_dim_v=128 {}", flashmask)));
  CHECK(persistent(fmt::format("dtype=bf16 head_dim_qk=128 head_dim_v=64 {}", flashmask)));
  CHECK_FALSE(persistent(fmt::format("dtype=bf16 head_dim_qk=192 head_dim_v=128 {}", flashmask)));
  const std::string forced = fmt::format(
      "dtype=bf16 head_dim_qk=192 head_dim_v=128 {} tiles=128x112x12:warpgroups", flashmask);
  CHECK(persistent(forced));
  CHECK(lowered(forced).tiles_of(KernelRole::forward).smem_bytes ==
        1024 + 128 * 192 * 2 + 2 * (112 * (192 + 128) * 2 + 112 * 4 + 16) + 128 * 128 * 2 + 16 +
            2 * 2 * 2 * 8);
  // (192, 128) with a predicate and both score modifiers narrows to 112 keys.
  CHECK(lowered("dtype=bf16 head_dim_qk=192 head_dim_v=128 mask=predicate(q>=k) softcap=true "
                "alibi=true target=sm_90a")
            .tiles_of(KernelRole::forward)
            .block_n == 112);
  // Forced shapes: two consumers for every pair; one (64 rows) where both dims are at most 128;
  // three (192 rows) only where both are at most 96, which no pair is.
  CHECK(lowered("dtype=bf16 head_dim_qk=256 head_dim_v=128 target=sm_90a "
                "tiles=128x64x12:warpgroups")
            .tiles_of(KernelRole::forward)
            .row == "forward.sm90a");
  const KernelTiles one = lowered(
                              "dtype=bf16 head_dim_qk=64 head_dim_v=128 mask=sliding_window "
                              "target=sm_90a tiles=64x128x8:warpgroups")
                              .tiles_of(KernelRole::forward);
  CHECK(one.row == "forward.sm90a");
  CHECK(one.block_m == 64);
  CHECK_THAT(testing::error_text([] {
               lowered(
                   "dtype=bf16 head_dim_qk=128 head_dim_v=64 target=sm_90a "
                   "tiles=192x128x16:warpgroups");
             }),
             Catch::Contains("tiles: got '192x128x16:warpgroups'") &&
                 Catch::Contains(", 64xBNx8:warpgroups with BN a multiple of 16 up to 128"));
  CHECK_THAT(testing::error_text([] {
               lowered(
                   "dtype=bf16 head_dim_qk=192 head_dim_v=128 target=sm_90a "
                   "tiles=64x128x8:warpgroups");
             }),
             Catch::EndsWith("accepted: 128xBNx12:warpgroups with BN a multiple of 16 up to 256 "
                             "for the warpgroup forward"));
}

TEST_CASE(
    "the sm90a backward of unequal head dims: tiles, shared memory and TMA boxes by both dims",
    "[pass]") {
  // (192, 128) and (256, 128) under a causal mask: the wide layout (64 queries, 64 keys, the
  // consumers split both head dims), in both modes.
  struct Expected {
    int d_qk, d_v;
    int panel_qk;  // a consumer's head_dim_qk / 2 columns: 32-column panels at 96
  };
  for (const Expected e : {Expected{192, 128, 32}, Expected{256, 128, 64}}) {
    for (const char* mode : {"", " deterministic=true"}) {
      const std::string text = fmt::format(
          "dtype=bf16 head_dim_qk={} head_dim_v={} mask=causal direction=backward{} "
          "target=sm_90a",
          e.d_qk, e.d_v, mode);
      INFO(text);
      const Lowering ir = lowered(text);
      const KernelTiles& tiles = ir.tiles_of(KernelRole::backward);
      CHECK(tiles.row == "backward.sm90a");
      CHECK(tiles.block_m == 64);
      CHECK(tiles.block_n == 64);
      CHECK(tiles.warps == 12);
      // Alignment slack, K (head_dim_qk) and V (head_dim_v), the stages (three at head_dim_qk
      // 192, else two) of Q, dO, the extra part of the consumers' fp32 dQ (64 rows of
      // head_dim_qk floats less Q and dO) and the statistics (1 KB), the P^T and dS^T tiles, the
      // K/V barrier and the ring's.
      const int q_do = 64 * (e.d_qk + e.d_v) * 2;
      const int stages = e.d_qk == 192 ? 3 : 2;
      CHECK(tiles.smem_bytes == 1024 + 64 * (e.d_qk + e.d_v) * 2 +
                                    stages * (q_do + (64 * e.d_qk * 4 - q_do) + 1024) +
                                    2 * 64 * 64 * 2 + 8 + 2 * stages * 8);
      const KernelDesc& kernel = *ir.plan->find(KernelRole::backward);
      const int qk = e.panel_qk;
      // The atomic mode's GQA sums follow (fp32 boxes of 32 columns).
      const std::vector<TensorMapBox> maps(
          kernel.tensor_maps.begin(),
          kernel.tensor_maps.begin() + std::min<std::size_t>(7, kernel.tensor_maps.size()));
      CHECK(maps == std::vector<TensorMapBox>{{MapTensor::q, 64, qk, qk * 2},
                                              {MapTensor::k, 64, qk, qk * 2},
                                              {MapTensor::v, 64, 64, 128},
                                              {MapTensor::d_o, 64, 64, 128},
                                              {MapTensor::dq_accum, 64, qk / 2, qk * 2},
                                              {MapTensor::d_k, 64, qk, qk * 2},
                                              {MapTensor::d_v, 64, 64, 128}});
    }
  }
  // (128, 64) and (64, 128): d128's shape (64 queries, 128 keys, the consumers split the keys),
  // panels of 64 columns; one dQ buffer (64 x head_dim_qk floats) where each consumer owns 64 of
  // its columns, one per consumer at head_dim_qk 64.
  for (const auto& [d_qk, d_v] : {std::pair{128, 64}, std::pair{64, 128}}) {
    const std::string text = fmt::format(
        "dtype=fp16 head_dim_qk={} head_dim_v={} mask=flashmask(causal=true,columns=1) "
        "direction=backward target=sm_90a",
        d_qk, d_v);
    INFO(text);
    const Lowering ir = lowered(text);
    const KernelTiles& tiles = ir.tiles_of(KernelRole::backward);
    CHECK(tiles.row == "backward.sm90a");
    CHECK(tiles.block_m == 64);
    CHECK(tiles.block_n == 128);
    const int dq_buffers = d_qk / 2 >= 64 ? 1 : 2;
    CHECK(tiles.smem_bytes == 1024 + 128 * (d_qk + d_v) * 2 + 2 * (64 * (d_qk + d_v) * 2 + 1024) +
                                  2 * 128 * 64 * 2 + dq_buffers * 64 * d_qk * 4 + 128 * 4 + 8 +
                                  2 * 2 * 8);
    const KernelDesc& kernel = *ir.plan->find(KernelRole::backward);
    const std::vector<TensorMapBox> maps(kernel.tensor_maps.begin(),
                                         kernel.tensor_maps.begin() + 7);
    CHECK(maps == std::vector<TensorMapBox>{{MapTensor::q, 64, 64, 128},
                                            {MapTensor::k, 128, 64, 128},
                                            {MapTensor::v, 128, 64, 128},
                                            {MapTensor::d_o, 64, 64, 128},
                                            {MapTensor::dq_accum, 64, 32, 128},
                                            {MapTensor::d_k, 64, 64, 128},
                                            {MapTensor::d_v, 64, 64, 128}});
  }
  // Forced: the wide shape, which the automatic choice takes too.
  CHECK(lowered("dtype=fp16 head_dim_qk=256 head_dim_v=128 mask=predicate(q>=k) "
                "direction=backward target=sm_90a tiles=64x64x12:warpgroups")
            .tiles_of(KernelRole::backward)
            .row == "backward.sm90a");
}

TEST_CASE("the kernels of unequal head dims bind both dims", "[emit]") {
  const Lowering forward = lowered("dtype=bf16 head_dim_qk=192 head_dim_v=128 target=sm_90a");
  const std::string fwd = source_of(forward, KernelRole::forward);
  CHECK_THAT(fwd, Catch::Contains("static constexpr int kHeadDimQK = 192;"));
  CHECK_THAT(fwd, Catch::Contains("static constexpr int kHeadDimV = 128;"));
  // The sm90a forward's products: S = Q K^T in 12 k16 steps of head_dim_qk, O += P V 128 wide
  // (head_dim_v) in 8 steps of the key block.
  CHECK_THAT(fwd, Catch::Contains("struct WgmmaSteps<128, 12> {"));
  CHECK_THAT(fwd, Catch::Contains("struct WgmmaSteps<128, 8> {"));

  const Lowering backward = lowered(
      "dtype=bf16 head_dim_qk=128 head_dim_v=64 mask=causal direction=backward target=sm_90");
  for (KernelRole role : {KernelRole::backward}) {
    const std::string src = source_of(backward, role);
    CHECK_THAT(src, Catch::Contains("static constexpr int kHeadDimQK = 128;"));
    CHECK_THAT(src, Catch::Contains("static constexpr int kHeadDimV = 64;"));
  }
  // The sm90a backward at (192, 128): both dims, and the consumers' shares of them as wgmma
  // widths (dK and dQ 96 columns, dV 64, S^T and dP^T 32 queries).
  const std::string wide = source_of(
      lowered("dtype=bf16 head_dim_qk=192 head_dim_v=128 direction=backward target=sm_90a"),
      KernelRole::backward);
  CHECK_THAT(wide, Catch::Contains("#include \"attnjit/sm90a/backward.cuh\""));
  CHECK_THAT(wide, Catch::Contains("static constexpr int kHeadDimQK = 192;"));
  CHECK_THAT(wide, Catch::Contains("static constexpr int kHeadDimV = 128;"));
  for (int n : {32, 64, 96}) {
    CHECK_THAT(wide, Catch::Contains(fmt::format("#define ATTNJIT_WGMMA_N{}\n", n)));
  }
  CHECK_THAT(source_of(backward, KernelRole::backward_preprocess),
             Catch::Contains("attnjit::backward_preprocess<attnjit::bf16, 128, 64, "
                             "/*kZeroDqAccum=*/true>(params);"));
  CHECK_THAT(source_of(backward, KernelRole::backward_convert_dq),
             Catch::Contains("attnjit::backward_convert_dq<attnjit::bf16, 128>(params);"));
  CHECK_THAT(source_of(backward, KernelRole::backward_reduce_dkdv),
             Catch::Contains("attnjit::backward_reduce_dkdv<attnjit::bf16, 128, 64>(params);"));

  const Lowering det = lowered(
      "dtype=bf16 head_dim_qk=64 head_dim_v=128 direction=backward "
      "deterministic=true target=sm_80");
  const std::string dq = source_of(det, KernelRole::backward_dq);
  CHECK_THAT(dq, Catch::Contains("static constexpr int kHeadDimQK = 64;"));
  CHECK_THAT(dq, Catch::Contains("static constexpr int kHeadDimV = 128;"));

  const ReferenceKernel reference =
      emit_reference_kernel(parse_spec("dtype=bf16 head_dim_qk=192 head_dim_v=128 mask=causal"));
  CHECK(reference.name == "attnjit_reference_bf16_d192v128_causal");
  CHECK_THAT(reference.source, Catch::Contains("/*kHeadDimQK=*/192, /*kHeadDimV=*/128,"));
}

TEST_CASE("the TMA maps of unequal head dims cover each tensor by its own dim",
          "[runtime][head_dims]") {
  // Every tensor a map can name, over contiguous [B, S, H, D] activations and the head-major
  // fp32 buffers of 2 batches, 4 query heads on 2 K/V heads, 96 queries and 80 keys: V, O, dO,
  // dV and GQA's dV sums head_dim_v wide (their rows head_dim_v apart), the others head_dim_qk.
  constexpr int kBatch = 2, kHeads = 4, kKvHeads = 2, kSq = 96, kSk = 80;
  // Views are never read: any 16-byte aligned address stands for each tensor.
  alignas(16) static float storage[4];
  for (const char* pair : kPairs) {
    INFO(pair);
    const AttentionSpec spec = parse_spec(fmt::format("dtype=bf16 {} mask=causal", pair));
    const int qk = spec.head_dim_qk;
    const int v = spec.head_dim_v;
    BwdParams bwd{};
    bwd.batch = kBatch;
    bwd.heads = kHeads;
    bwd.kv_heads = kKvHeads;
    bwd.seqlen_q = kSq;
    bwd.seqlen_k = kSk;
    bwd.q = bwd.k = bwd.v = bwd.d_o = bwd.d_k = bwd.d_v = storage;
    bwd.dq_accum = bwd.dk_partial = bwd.dv_partial = storage;
    const auto rows = [](long long& batch, long long& row, long long& head, int seqlen, int heads,
                         int dim) {
      row = static_cast<long long>(heads) * dim;
      head = dim;
      batch = row * seqlen;
    };
    rows(bwd.q_batch_stride, bwd.q_row_stride, bwd.q_head_stride, kSq, kHeads, qk);
    rows(bwd.k_batch_stride, bwd.k_row_stride, bwd.k_head_stride, kSk, kKvHeads, qk);
    rows(bwd.v_batch_stride, bwd.v_row_stride, bwd.v_head_stride, kSk, kKvHeads, v);
    rows(bwd.do_batch_stride, bwd.do_row_stride, bwd.do_head_stride, kSq, kHeads, v);
    rows(bwd.dk_batch_stride, bwd.dk_row_stride, bwd.dk_head_stride, kSk, kKvHeads, qk);
    rows(bwd.dv_batch_stride, bwd.dv_row_stride, bwd.dv_head_stride, kSk, kKvHeads, v);
    struct Expected {
      MapTensor tensor;
      int seqlen, heads, dim;
      bool fp32;
    };
    for (const Expected& e : {Expected{MapTensor::q, kSq, kHeads, qk, false},
                              Expected{MapTensor::k, kSk, kKvHeads, qk, false},
                              Expected{MapTensor::v, kSk, kKvHeads, v, false},
                              Expected{MapTensor::d_o, kSq, kHeads, v, false},
                              Expected{MapTensor::dq_accum, kSq, kHeads, qk, true},
                              Expected{MapTensor::d_k, kSk, kKvHeads, qk, false},
                              Expected{MapTensor::d_v, kSk, kKvHeads, v, false},
                              Expected{MapTensor::dk_sum, kSk, kKvHeads, qk, true},
                              Expected{MapTensor::dv_sum, kSk, kKvHeads, v, true}}) {
      INFO(name_of(e.tensor));
      const std::optional<TensorView> view = jit::detail::backward_map_view(bwd, spec, e.tensor);
      REQUIRE(view);
      CHECK(view->dtype == (e.fp32 ? ScalarType::fp32 : ScalarType::bf16));
      CHECK(view->shape == std::array<std::int64_t, 4>{kBatch, e.seqlen, e.heads, e.dim});
      // fp32 buffers are [B, H, S, D]: rows dim apart, heads seqlen rows.
      const long long row = e.fp32 ? e.dim : static_cast<long long>(e.heads) * e.dim;
      const long long head = e.fp32 ? static_cast<long long>(e.seqlen) * e.dim : e.dim;
      CHECK(view->stride ==
            std::array<std::int64_t, 4>{row * e.seqlen * (e.fp32 ? e.heads : 1), row, head, 1});
    }
    FwdParams fwd{};
    fwd.batch = kBatch;
    fwd.heads = kHeads;
    fwd.kv_heads = kKvHeads;
    fwd.seqlen_q = kSq;
    fwd.seqlen_k = kSk;
    fwd.q = fwd.k = fwd.v = fwd.o = storage;
    CHECK(jit::detail::forward_map_view(fwd, spec, MapTensor::q)->shape[3] == qk);
    CHECK(jit::detail::forward_map_view(fwd, spec, MapTensor::k)->shape[3] == qk);
    CHECK(jit::detail::forward_map_view(fwd, spec, MapTensor::v)->shape[3] == v);
    CHECK(jit::detail::forward_map_view(fwd, spec, MapTensor::o)->shape[3] == v);
  }
}
