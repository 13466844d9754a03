// Decoding against a KV cache (kv_cache=contiguous|paged) without a GPU: the spec key's text,
// validate's refusals, the plan (the decode kernel and the merge of its key splits, whose
// buffers and grid exist only when it splits), the split count chosen at launch, every
// decode kernel compiled by NVRTC without spills, and the host checks of the cache arguments.
// Uses fake device pointers: nothing is launched.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "attnjit/attnjit.h"
#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/ir/lowering.hpp"
#include "compiler/passes/pipeline.hpp"
#include "runtime/launch/plan_launch.hpp"
#include "support/error_text.hpp"

using namespace attnjit;

namespace {

void* fake(std::uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

jit::Kernel compiled(const std::string& text) {
  jit::CompileOptions options;
  options.no_disk_cache = true;
  return jit::compile(parse_spec(text), options);
}

// Two sequences of 3 new tokens, 8 query heads over 2 KV heads, d64: a paged pool of 10 pages
// of 16 keys and a block table of 4 pages per sequence.
ForwardArgs paged_args() {
  ForwardArgs a;
  a.q = contiguous_view(fake(0x10000), ScalarType::bf16, {2, 3, 8, 64});
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {10, 16, 2, 64});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {10, 16, 2, 64});
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {2, 3, 8, 64});
  a.kv_cache.cache_seqlens = contiguous_view(fake(0x50000), ScalarType::int32, {2});
  a.kv_cache.block_table = contiguous_view(fake(0x60000), ScalarType::int32, {2, 4});
  return a;
}

constexpr const char* kPaged = "dtype=bf16 head_dim=64 mask=causal target=sm_80 kv_cache=paged";

// The extents of `batch` sequences of one new token, 32 query heads over 8 KV heads, unsplit.
LaunchExtents one_token_extents(int batch) {
  LaunchExtents e;
  e[Extent::batch] = batch;
  e[Extent::seqlen_q] = 1;
  e[Extent::heads] = 32;
  e[Extent::kv_heads] = 8;
  e[Extent::query_groups] = 4;
  e[Extent::splits] = 1;
  return e;
}

}  // namespace

TEST_CASE("kv_cache prints last when set and parses back", "[kv_cache][ir]") {
  const AttentionSpec paged = parse_spec("dtype=bf16 head_dim=128 mask=causal kv_cache=paged");
  CHECK(paged.kv_cache == KvCache::paged);
  CHECK(to_string(paged).ends_with(" tiles=auto kv_cache=paged"));
  CHECK(parse_spec(to_string(paged)) == paged);
  const AttentionSpec plain = parse_spec("dtype=bf16 head_dim=128 mask=causal kv_cache=none");
  CHECK(to_string(plain).find("kv_cache") == std::string::npos);
  CHECK(plain == parse_spec("dtype=bf16 head_dim=128 mask=causal"));
  CHECK(testing::error_text([] { parse_spec("dtype=bf16 head_dim=64 kv_cache=yes"); }) ==
        "kv_cache: got 'yes'; accepted: none, contiguous, paged");
}

TEST_CASE("validate refuses what the decode kernels do not take", "[kv_cache][pass]") {
  const auto refusal = [](const char* text) {
    return testing::error_text([&] { lower(parse_spec(text)); });
  };
  CHECK(refusal("dtype=bf16 head_dim=64 kv_cache=paged direction=backward target=sm_80")
            .starts_with("kv_cache: paged with direction=backward; accepted: direction=forward"));
  CHECK(refusal("dtype=bf16 head_dim=64 kv_cache=contiguous varlen=true target=sm_80")
            .starts_with("kv_cache: contiguous with varlen=true; accepted: varlen=false"));
  CHECK(refusal("dtype=bf16 head_dim=64 tiles=64x64x4 kv_cache=paged target=sm_80")
            .starts_with("tiles: got '64x64x4'; accepted: auto with kv_cache=paged"));
  CHECK(testing::error_text([] {
          jit::compile_reference(parse_spec(kPaged));
        }).starts_with("kv_cache: got 'paged'; accepted: none"));
}

TEST_CASE("a decode plan is the append, the decode kernel and the merge of its splits",
          "[kv_cache][pass]") {
  const Lowering ir =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=none sinks=true return_lse=true target=sm_80 "
                       "kv_cache=contiguous"));
  const KernelPlan& plan = *ir.plan;
  REQUIRE(plan.kernels.size() == 3);
  const KernelDesc& append = plan.kernels[0];
  const KernelDesc& decode = plan.kernels[1];
  const KernelDesc& combine = plan.kernels[2];
  CHECK(append.role == KernelRole::kv_append);
  CHECK(append.phases.front().grid.to_string() == "(ceil(B*Snew*Hkv*32/256), 1, 1)");
  CHECK(decode.role == KernelRole::decode);
  CHECK(decode.name == "attnjit_decode_bf16_d128_none_sinks_contiguous_lse");
  CHECK(decode.phases.front().grid.to_string() == "(splits*(1+prefill*-1), Hkv*ceil(GSq/16), B)");
  CHECK(combine.role == KernelRole::decode_combine);
  CHECK(combine.phases.front().grid.to_string() == "(min(splits+-1, 1)*(B*Sq*H), 1, 1)");
  // On Hopper the decode kernel starts while the append finishes, the merge while the decode
  // kernel does (programmatic dependent launches); before sm_90 every launch waits.
  const Lowering hopper =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=none sinks=true return_lse=true target=sm_90 "
                       "kv_cache=contiguous"));
  REQUIRE(hopper.plan->kernels.size() == 3);
  CHECK(!hopper.plan->kernels[0].dependent_launch);
  CHECK(hopper.plan->kernels[1].dependent_launch);
  CHECK(hopper.plan->kernels[2].dependent_launch);
  CHECK(to_string(hopper).find(" dependent_launch") != std::string::npos);
  for (const KernelDesc& kernel : plan.kernels) CHECK(!kernel.dependent_launch);
  // Without splits the partial rows take no workspace and the merge no launch; without new
  // keys nothing is appended.
  LaunchExtents e = one_token_extents(4);
  const jit::detail::LaunchSchedule unsplit = jit::detail::schedule_plan(plan, e);
  CHECK(unsplit.workspace_bytes == 0);
  CHECK(unsplit.launches.size() == 1);
  e[Extent::splits] = 5;
  const jit::detail::LaunchSchedule split = jit::detail::schedule_plan(plan, e);
  CHECK(split.launches.size() == 2);
  CHECK(split.launches[0].grid == std::array<unsigned, 3>{5, 8, 4});
  e[Extent::new_tokens] = 3;
  const jit::detail::LaunchSchedule appended = jit::detail::schedule_plan(plan, e);
  REQUIRE(appended.launches.size() == 3);
  CHECK(appended.launches[0].grid[0] == (4 * 3 * 8 * 32 + 255) / 256);
  CHECK(split.workspace_bytes >= std::size_t{5} * 4 * 32 * (128 + 1) * 4);
}

TEST_CASE("on sm_90a a cache plan adds the prefill kernel, which the launch runs for many tokens",
          "[kv_cache][pass]") {
  const Lowering ir = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=causal sinks=true return_lse=true target=sm_90a "
                 "kv_cache=paged"));
  const KernelPlan& plan = *ir.plan;
  REQUIRE(plan.kernels.size() == 4);
  CHECK(plan.kernels[0].role == KernelRole::kv_append);
  const KernelDesc& prefill = plan.kernels[1];
  CHECK(prefill.role == KernelRole::prefill);
  CHECK(prefill.row == "prefill.sm90a");
  CHECK(prefill.name == "attnjit_prefill_bf16_d128_causal_sinks_paged_lse");
  CHECK(prefill.phases.front().grid.to_string() == "(2*ceil(Sq/128)*prefill, ceil(H/2), B)");
  // K and V are copied per page: the launch encodes boxes of at most a page's rows.
  REQUIRE(prefill.tensor_maps.size() == 4);
  CHECK(to_string(prefill.tensor_maps[1]) == "k=128x64/128B/page");
  CHECK(to_string(prefill.tensor_maps[2]) == "v=128x64/128B/page");
  CHECK(!prefill.tensor_maps[0].page_rows);
  CHECK(plan.kernels[2].role == KernelRole::decode);
  CHECK(plan.kernels[3].role == KernelRole::decode_combine);
  // The launch runs one of them: with the prefill kernel no split, no merge, no partial rows.
  LaunchExtents e = one_token_extents(4);
  e[Extent::seqlen_q] = 2048;
  e[Extent::splits] = 1;
  e[Extent::prefill] = 1;
  e[Extent::new_tokens] = 2048;
  const jit::detail::LaunchSchedule chunk = jit::detail::schedule_plan(plan, e);
  REQUIRE(chunk.launches.size() == 2);
  CHECK(chunk.launches[0].kernel == 0);
  CHECK(chunk.launches[1].kernel == 1);
  CHECK(chunk.launches[1].grid == std::array<unsigned, 3>{32, 16, 4});
  CHECK(chunk.workspace_bytes == 0);
  e[Extent::prefill] = 0;
  e[Extent::splits] = 3;
  const jit::detail::LaunchSchedule decode = jit::detail::schedule_plan(plan, e);
  REQUIRE(decode.launches.size() == 3);
  CHECK(decode.launches[1].kernel == 2);
  CHECK(decode.launches[2].kernel == 3);

  // Contiguous caches are copied as the forward copies its K and V; targets before sm_90a
  // keep the decode kernel alone.
  const Lowering contiguous = lower(parse_spec(
      "dtype=fp16 head_dim=64 mask=sliding_window alibi=true target=sm_90a kv_cache=contiguous"));
  const KernelDesc* windowed = contiguous.plan->find(KernelRole::prefill);
  REQUIRE(windowed != nullptr);
  // Two consumers: the forward's one-consumer tiles (two CTAs an SM) are not the prefill's.
  CHECK(windowed->block_m == 128);
  // Causal d64 takes the forward's three consumers over either cache; with ALiBi or a
  // FlashMask vector's tables, two.
  const auto prefill_rows = [](const char* text) {
    return lower(parse_spec(text)).plan->find(KernelRole::prefill)->block_m;
  };
  CHECK(prefill_rows("dtype=bf16 head_dim=64 mask=causal target=sm_90a kv_cache=contiguous") ==
        192);
  CHECK(prefill_rows("dtype=bf16 head_dim=64 mask=causal target=sm_90a kv_cache=paged") == 192);
  CHECK(prefill_rows(
            "dtype=bf16 head_dim=64 mask=causal alibi=true target=sm_90a kv_cache=paged") == 128);
  CHECK(prefill_rows("dtype=bf16 head_dim=64 mask=flashmask(causal=true,columns=1) "
                     "target=sm_90a kv_cache=paged") == 128);
  for (const TensorMapBox& box : windowed->tensor_maps) CHECK(!box.page_rows);
  for (const char* text : {"dtype=bf16 head_dim=128 mask=causal target=sm_90 kv_cache=paged",
                           "dtype=bf16 head_dim=128 mask=causal target=sm_80 kv_cache=paged",
                           "dtype=bf16 head_dim=32 mask=causal target=sm_90a kv_cache=paged"}) {
    INFO(text);
    CHECK(lower(parse_spec(text)).plan->find(KernelRole::prefill) == nullptr);
  }
}

TEST_CASE("the launch runs the prefill kernel where it reads the cache less, unless told otherwise",
          "[kv_cache][runtime]") {
  const KernelPlan plan =
      *lower(parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_90a kv_cache=paged")).plan;
  ForwardArgs a = paged_args();  // pages of 16
  jit::detail::Shapes s;
  s.decode = true;
  const auto chosen = [&](int batch, int heads, int kv_heads, int seqlen_q) {
    s.batch = batch;
    s.heads = heads;
    s.kv_heads = kv_heads;
    s.seqlen_q = seqlen_q;
    jit::detail::allow_prefill(plan, a, s);
    return jit::detail::runs_prefill(s, 132);
  };
  // 32 query heads over 8: the decode kernel up to 16 new tokens a sequence at batch 16 (its
  // 64 rows per KV head against 4K prefill tiles), the prefill kernel from 32; at batch 1 the
  // prefill kernel's 32 tiles leave SMs idle: the decode kernel up to 64 tokens.
  CHECK(!chosen(16, 32, 8, 16));
  CHECK(chosen(16, 32, 8, 32));
  CHECK(jit::detail::decode_splits(s, 132) == 1);
  CHECK(!chosen(1, 32, 8, 64));
  CHECK(chosen(1, 32, 8, 128));
  CHECK(chosen(1, 32, 8, 2048));
  // Without GQA each KV head's tokens are its own rows: from 32 tokens at batch 16.
  CHECK(!chosen(16, 8, 8, 16));
  CHECK(chosen(16, 8, 8, 32));
  a.kv_cache.num_splits = 4;  // a split count asks for the decode kernel
  CHECK(!chosen(1, 32, 8, 2048));
  a = paged_args();
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {10, 4, 2, 64});  // pages of 4 rows
  CHECK(!chosen(1, 32, 8, 2048));
  a = paged_args();
  a.kv_cache.cu_seqlens_q = contiguous_view(fake(0x90000), ScalarType::int32, {3});
  CHECK(chosen(1, 32, 8, 2048));  // ragged new tokens: max_seqlen_q each
  const KernelPlan sm80 =
      *lower(parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_80 kv_cache=paged")).plan;
  a = paged_args();
  jit::detail::allow_prefill(sm80, a, s);
  CHECK(!jit::detail::runs_prefill(s, 132));
}

TEST_CASE("FlashMask vectors over a cache add the min/max tables of each kernel's key blocks",
          "[kv_cache][pass]") {
  const Lowering ir = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) target=sm_90a "
                 "kv_cache=paged"));
  const KernelPlan& plan = *ir.plan;
  REQUIRE(plan.kernels.size() == 6);
  CHECK(plan.kernels[0].role == KernelRole::flashmask_minmax);
  CHECK(plan.kernels[0].block_n == 64);  // the decode kernel's key blocks
  CHECK(plan.kernels[1].role == KernelRole::flashmask_minmax);
  CHECK(plan.kernels[1].block_n == 128);  // the prefill kernel's
  CHECK(plan.kernels[2].role == KernelRole::kv_append);
  const KernelDesc& prefill = plan.kernels[3];
  CHECK(prefill.role == KernelRole::prefill);
  CHECK(prefill.name == "attnjit_prefill_bf16_d128_flashmask_causal_c1_paged");
  const KernelDesc& decode = plan.kernels[4];
  CHECK(decode.role == KernelRole::decode);
  CHECK(decode.name == "attnjit_decode_bf16_d128_flashmask_causal_c1_paged");
  CHECK(plan.kernels[5].role == KernelRole::decode_combine);
  // Each binds the table of its key blocks; no CTA order is built (none of the kernels is one).
  const auto table_of = [&](const KernelDesc& kernel) {
    const auto table = std::ranges::find_if(
        kernel.buffers, [](const BufferBinding& b) { return b.field == ParamField::minmax; });
    REQUIRE(table != kernel.buffers.end());
    return table->buffer;
  };
  CHECK(plan.scratch[table_of(decode)].name == "minmax_bn64");
  CHECK(plan.scratch[table_of(prefill)].name == "minmax_bn128");
  CHECK(plan.kernels[0].buffers.front().buffer == table_of(decode));
  CHECK(plan.kernels[1].buffers.front().buffer == table_of(prefill));
  // On other targets the decode kernel alone, with its table.
  const Lowering sm80 = lower(parse_spec(
      "dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1) target=sm_80 kv_cache=paged"));
  REQUIRE(sm80.plan->kernels.size() == 4);
  CHECK(sm80.plan->kernels[0].block_n == 64);
  CHECK(sm80.plan->find(KernelRole::prefill) == nullptr);
  // Without splits, the table is the workspace: B x Hm x key blocks x 2 ints.
  LaunchExtents e = one_token_extents(2);
  e[Extent::seqlen_k] = 4096;
  e[Extent::mask_heads] = 8;
  const jit::detail::LaunchSchedule unsplit = jit::detail::schedule_plan(plan, e);
  CHECK(unsplit.workspace_bytes >= std::size_t{2} * 8 * 64 * 8);
  CHECK(unsplit.launches.size() == 2);  // the tables and the decode kernel
  REQUIRE(plan.kernels[unsplit.launches[0].kernel].block_n == 64);
  // Where the launch runs the prefill kernel: the tables of its key blocks and the kernel.
  e[Extent::prefill] = 1;
  e[Extent::splits] = 1;
  const jit::detail::LaunchSchedule prefilled = jit::detail::schedule_plan(plan, e);
  REQUIRE(prefilled.launches.size() == 2);
  CHECK(plan.kernels[prefilled.launches[0].kernel].block_n == 128);
  CHECK(plan.kernels[prefilled.launches[1].kernel].role == KernelRole::prefill);
}

TEST_CASE("a predicate over a cache has a block table for the kernel the launch runs",
          "[kv_cache][pass]") {
  const Lowering ir =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=predicate(k<=q&&q-k<$0) target=sm_90a "
                       "kv_cache=contiguous"));
  const KernelPlan& plan = *ir.plan;
  // Each table has a row per sequence (each has its own keys and positions): 16 new tokens x
  // the decode kernel's key blocks, and the prefill kernel's tiles.
  CHECK(ir.mask->table_per_batch);
  CHECK(ir.mask->decode_table);
  REQUIRE(plan.kernels.size() == 6);
  const KernelDesc& decode_blocks = plan.kernels[0];
  CHECK(decode_blocks.role == KernelRole::predicate_blocks);
  CHECK(decode_blocks.orders == KernelRole::decode);
  CHECK(decode_blocks.block_m == 16);
  CHECK(decode_blocks.block_n == 64);
  const KernelDesc& prefill_blocks = plan.kernels[1];
  CHECK(prefill_blocks.role == KernelRole::predicate_blocks);
  CHECK(prefill_blocks.orders == KernelRole::prefill);
  CHECK(plan.kernels[2].role == KernelRole::kv_append);
  const KernelDesc& prefill = plan.kernels[3];
  CHECK(prefill.name == "attnjit_prefill_bf16_d128_predicate_contiguous");
  CHECK(prefill_blocks.block_m == prefill.block_m);
  CHECK(prefill_blocks.block_n == prefill.block_n);
  const KernelDesc& decode = plan.kernels[4];
  CHECK(decode.name == "attnjit_decode_bf16_d128_predicate_contiguous");
  CHECK(plan.kernels[5].role == KernelRole::decode_combine);
  const auto table_of = [&](const KernelDesc& kernel) {
    const auto table = std::ranges::find_if(
        kernel.buffers, [](const BufferBinding& b) { return b.field == ParamField::minmax; });
    REQUIRE(table != kernel.buffers.end());
    return plan.scratch[table->buffer].name;
  };
  CHECK(table_of(decode) == "predicate_table_bm16_bn64");
  CHECK(table_of(prefill) == "predicate_table_bm128_bn128");
  // No CTA order over a cache.
  CHECK(plan.find(KernelRole::cta_order) == nullptr);
  // The decode kernel's launch: its table (B x 1 token tile x 64-key blocks), no bits.
  LaunchExtents e = one_token_extents(2);
  e[Extent::seqlen_k] = 4096;
  const jit::detail::LaunchSchedule decoded = jit::detail::schedule_plan(plan, e);
  REQUIRE(decoded.launches.size() == 2);
  CHECK(decoded.launches[0].kernel == 0);
  CHECK(decoded.launches[0].grid == std::array<unsigned, 3>{2 * 64, 1, 1});
  CHECK(decoded.launches[1].kernel == 4);
  // The prefill kernel's: its table (B x query blocks x key blocks of the capacity) first.
  e[Extent::seqlen_q] = 300;
  e[Extent::new_tokens] = 300;
  e[Extent::prefill] = 1;
  const jit::detail::LaunchSchedule prefilled = jit::detail::schedule_plan(plan, e);
  REQUIRE(prefilled.launches.size() == 3);
  CHECK(prefilled.launches[0].kernel == 1);
  const unsigned tiles = 2 * ((300 + prefill.block_m - 1) / prefill.block_m) *
                         ((4096 + prefill.block_n - 1) / prefill.block_n);
  CHECK(prefilled.launches[0].grid == std::array<unsigned, 3>{tiles, 1, 1});
  CHECK(prefilled.launches[2].kernel == 3);
  CHECK(prefilled.workspace_bytes >= std::size_t{tiles} * 4);
  // A predicate that reads h would need a decode table row per query head: the decode kernel
  // classifies its blocks itself and binds no table.
  const Lowering per_head =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=predicate(k<=q&&h<$0) target=sm_90a "
                       "kv_cache=paged"));
  CHECK(!per_head.mask->decode_table);
  REQUIRE(per_head.plan->kernels.size() == 5);
  CHECK(per_head.plan->kernels[0].orders == KernelRole::prefill);
  for (const BufferBinding& b : per_head.plan->find(KernelRole::decode)->buffers) {
    CHECK(b.field != ParamField::minmax);
  }
}

TEST_CASE("the split count gives the SMs a CTA each and takes what is asked",
          "[kv_cache][runtime]") {
  jit::detail::Shapes s;
  s.decode = true;
  s.head_dim_qk = 64;  // two CTAs per SM
  s.heads = 32;
  s.kv_heads = 8;
  s.seqlen_q = 1;
  s.batch = 64;
  s.seqlen_k = 8192;
  CHECK(jit::detail::decode_splits(s, 132) == 1);  // 512 CTAs: two slots of every SM
  s.batch = 16;
  CHECK(jit::detail::decode_splits(s, 132) == 2);  // 128 CTAs: 256 fill 97% of 264 slots
  s.batch = 4;
  CHECK(jit::detail::decode_splits(s, 132) == 8);  // 32 CTAs: 256
  s.batch = 1;
  s.seqlen_k = 32768;
  CHECK(jit::detail::decode_splits(s, 132) == 30);  // 8 CTAs: 240 >= 0.9 x 264
  s.seqlen_q = 8;  // two 16-row tiles of 4 query heads x 8 tokens per KV head
  CHECK(jit::detail::decode_splits(s, 132) == 15);
  s.seqlen_q = 1;
  s.seqlen_k = 300;  // at least 64 keys a split
  CHECK(jit::detail::decode_splits(s, 132) == 5);
  // A contiguous cache from head dim 128: one CTA per SM (a paged one keeps both slots).
  s.seqlen_k = 32768;
  s.head_dim_qk = 128;
  CHECK(jit::detail::decode_splits(s, 132) == 15);  // 8 CTAs: 120 >= 0.9 x 132
  s.batch = 4;
  s.seqlen_k = 8192;
  CHECK(jit::detail::decode_splits(s, 132) == 4);
  s.batch = 16;
  CHECK(jit::detail::decode_splits(s, 132) == 1);
  s.paged = true;
  CHECK(jit::detail::decode_splits(s, 132) == 2);
  s.num_splits = 7;
  CHECK(jit::detail::decode_splits(s, 132) == 7);
  s.decode = false;
  CHECK(jit::detail::decode_splits(s, 132) == 1);
}

TEST_CASE("every decode kernel compiles without spills", "[kv_cache][nvrtc]") {
  for (const char* dims :
       {"head_dim=32", "head_dim=64", "head_dim=96", "head_dim=128", "head_dim=192", "head_dim=256",
        "head_dim_qk=192 head_dim_v=128", "head_dim_qk=128 head_dim_v=64"}) {
    for (const char* variant : {"mask=none kv_cache=contiguous",
                                "mask=causal softcap=true alibi=true sinks=true return_lse=true "
                                "kv_cache=paged",
                                "mask=sliding_window kv_cache=paged"}) {
      for (const char* target : {"sm_80", "sm_86", "sm_90a"}) {
        const std::string text = fmt::format("dtype=bf16 {} {} target={}", dims, variant, target);
        INFO(text);
        // sm_86's 101376 bytes take head dims up to 128 (checked below).
        if (std::string_view(target) == "sm_86" &&
            (std::string_view(dims).find("192") != std::string_view::npos ||
             std::string_view(dims).find("256") != std::string_view::npos)) {
          continue;
        }
        const jit::Kernel kernel = compiled(text);
        for (const jit::KernelReport& report : kernel.info().kernels) {
          INFO(report.name << ": " << report.registers << " registers");
          CHECK(report.spill_bytes == 0);
        }
      }
    }
  }
  // FlashMask vectors (every column set) and predicates, on the head dims most used.
  for (const char* dims : {"head_dim=64", "head_dim=128", "head_dim_qk=192 head_dim_v=128"}) {
    for (const char* variant :
         {"mask=predicate(doc[q]==doc[k]&&k<=q) alibi=true kv_cache=paged",
          "mask=predicate(k<=q&&q-k<$0) softcap=true kv_cache=contiguous",
          "mask=flashmask(causal=true,columns=1) kv_cache=paged",
          "mask=flashmask(causal=true,columns=2) softcap=true alibi=true sinks=true "
          "kv_cache=contiguous",
          "mask=flashmask(causal=false,columns=2) return_lse=true kv_cache=paged",
          "mask=flashmask(causal=false,columns=4) kv_cache=paged"}) {
      for (const char* target : {"sm_80", "sm_90a"}) {
        const std::string text = fmt::format("dtype=fp16 {} {} target={}", dims, variant, target);
        INFO(text);
        const jit::Kernel kernel = compiled(text);
        for (const jit::KernelReport& report : kernel.info().kernels) {
          INFO(report.name << ": " << report.registers << " registers");
          CHECK(report.spill_bytes == 0);
        }
      }
    }
  }
}

TEST_CASE("decode launches name the bad cache argument", "[kv_cache][runtime][args]") {
  const jit::Kernel kernel = compiled(kPaged);
  const auto refusal = [&](ForwardArgs a) {
    return testing::error_text([&] { kernel.forward(a); });
  };
  ForwardArgs a = paged_args();
  a.kv_cache.block_table = {};
  CHECK(refusal(a).starts_with("kv_cache.block_table: missing; accepted: for kv_cache=paged"));
  a = paged_args();
  a.kv_cache.block_table = contiguous_view(fake(0x60000), ScalarType::int32, {3, 4});
  CHECK(refusal(a) == "kv_cache.block_table.shape[0]: got '3'; accepted: 2 (batch of q)");
  a = paged_args();
  a.kv_cache.cache_seqlens = contiguous_view(fake(0x50000), ScalarType::fp32, {2});
  CHECK(refusal(a) == "kv_cache.cache_seqlens.dtype: got 'fp32'; accepted: int32");
  a = paged_args();
  a.kv_cache.num_splits = 300;
  CHECK(refusal(a).starts_with("kv_cache.num_splits: got '300'; accepted: 0 (chosen"));
  a = paged_args();
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {10, 24, 2, 64});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {10, 24, 2, 64});
  CHECK(refusal(a).starts_with("k.shape[1] (page_size): got '24'; accepted: a power of two"));
  a = paged_args();
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {9, 16, 2, 64});
  CHECK(refusal(a) == "v.shape[0]: got '9'; accepted: 10 (pages of k)");
  // The decode kernel's copies address a page's rows with 32-bit products of these strides.
  a = paged_args();
  a.v.stride[0] = std::int64_t{1} << 30;
  CHECK(refusal(a) ==
        "v.stride[0]: got '1073741824'; accepted: 0 to 1073741823 elements (a page pool's page "
        "and row strides within 2 GiB)");

  a = paged_args();
  a.kv_cache.k_new = contiguous_view(fake(0x70000), ScalarType::bf16, {2, 3, 2, 64});
  CHECK(refusal(a).starts_with("kv_cache.v_new: missing; accepted: k_new and v_new together"));
  a.kv_cache.v_new = contiguous_view(fake(0x78000), ScalarType::bf16, {2, 2, 2, 64});
  CHECK(refusal(a) == "kv_cache.v_new.shape[1]: got '2'; accepted: 3 (new tokens of k_new)");
  a.kv_cache.v_new = contiguous_view(fake(0x78000), ScalarType::bf16, {2, 3, 1, 64});
  CHECK(refusal(a) == "kv_cache.v_new.shape[2]: got '1'; accepted: 2 (kv heads of the cache)");
  a.kv_cache.v_new = contiguous_view(fake(0x78000), ScalarType::bf16, {2, 3, 2, 64});
  a.kv_cache.cache_seqlens = {};
  CHECK(refusal(a).starts_with("kv_cache.cache_seqlens: missing; accepted: with k_new/v_new"));

  // FlashMask vectors over a cache: a row per key of the capacity (4 pages of 16).
  const jit::Kernel masked = compiled(
      "dtype=bf16 head_dim=64 mask=flashmask(causal=true,columns=1) target=sm_80 "
      "kv_cache=paged");
  a = paged_args();
  a.startend_row_indices = contiguous_view(fake(0x80000), ScalarType::int32, {2, 1, 48, 1});
  CHECK(testing::error_text([&] { masked.forward(a); }) ==
        "startend_row_indices.shape[2]: got '48'; accepted: 64 (the cache's capacity: a row "
        "per key)");
  a.startend_row_indices = contiguous_view(fake(0x80000), ScalarType::int32, {2, 4, 64, 1});
  CHECK(testing::error_text([&] { masked.forward(a); }) ==
        "startend_row_indices.shape[1] (mask heads): got '4'; accepted: 1 or 2 (the kv heads)");
  a.startend_row_indices = {};
  CHECK(testing::error_text([&] { masked.forward(a); })
            .starts_with("startend_row_indices: missing; accepted: for "
                         "mask=flashmask(causal=true,columns=1) an int32"));

  const jit::Kernel plain = compiled("dtype=bf16 head_dim=64 mask=causal target=sm_80");
  ForwardArgs p = paged_args();
  p.k = contiguous_view(fake(0x20000), ScalarType::bf16, {2, 64, 2, 64});
  p.v = contiguous_view(fake(0x30000), ScalarType::bf16, {2, 64, 2, 64});
  CHECK(testing::error_text([&] { plain.forward(p); })
            .starts_with("kv_cache: cache arguments (cache_seqlens, block_table, num_splits, "
                         "k_new, v_new or cu_seqlens_q) given, but the spec has kv_cache=none"));
}

namespace {

// paged_args() with ragged new tokens: 5 packed rows (3 and 2 per sequence), at most 3.
ForwardArgs ragged_args() {
  ForwardArgs a = paged_args();
  a.q = contiguous_view(fake(0x10000), ScalarType::bf16, {5, 8, 64});
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {5, 8, 64});
  a.kv_cache.cu_seqlens_q = contiguous_view(fake(0x58000), ScalarType::int32, {3});
  a.kv_cache.max_seqlen_q = 3;
  return a;
}

}  // namespace

TEST_CASE("ragged new tokens are packed rows of q, o, lse and the appended keys",
          "[kv_cache][runtime][args]") {
  const jit::Kernel kernel = compiled(kPaged);
  const auto refusal = [&](ForwardArgs a) {
    return testing::error_text([&] { kernel.forward(a); });
  };
  ForwardArgs a = ragged_args();
  a.q = paged_args().q;
  CHECK(refusal(a) ==
        "q.rank: got '4'; accepted: 3 ([total_q, heads, head_dim]: new tokens "
        "packed by cu_seqlens_q)");
  a = ragged_args();
  a.kv_cache.max_seqlen_q = 0;
  CHECK(refusal(a).starts_with("kv_cache.max_seqlen_q: got '0'; accepted: 1 to "));
  a = paged_args();
  a.kv_cache.max_seqlen_q = 2;
  CHECK(refusal(a) == "kv_cache.max_seqlen_q: got '2'; accepted: 0 without cu_seqlens_q");
  a = ragged_args();
  a.kv_cache.cu_seqlens_q = contiguous_view(fake(0x58000), ScalarType::int32, {1});
  CHECK(refusal(a) ==
        "kv_cache.cu_seqlens_q.shape[0]: got '1'; accepted: B + 1 with B >= 1 sequences");
  a = ragged_args();
  a.kv_cache.cu_seqlens_q = contiguous_view(fake(0x58000), ScalarType::int32, {4});
  CHECK(refusal(a) == "kv_cache.cache_seqlens.shape[0]: got '2'; accepted: 3 (batch of q)");
  a = ragged_args();
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {4, 8, 64});
  CHECK(refusal(a) == "o.shape[0] (total_q): got '4'; accepted: 5 (total_q of q)");
  a = ragged_args();
  a.lse = contiguous_view(fake(0x48000), ScalarType::fp32, {2, 8, 3});
  CHECK(refusal(a) ==
        "lse.rank: got '3'; accepted: 2 ([heads, total_q]: new tokens packed by cu_seqlens_q)");
  a = ragged_args();
  a.kv_cache.k_new = contiguous_view(fake(0x70000), ScalarType::bf16, {2, 3, 2, 64});
  a.kv_cache.v_new = contiguous_view(fake(0x78000), ScalarType::bf16, {5, 2, 64});
  CHECK(
      refusal(a).starts_with("kv_cache.k_new.rank: got '4'; accepted: 3 ([total_q, kv heads, "
                             "head_dim]: each sequence appends its new tokens"));
  a.kv_cache.k_new = contiguous_view(fake(0x70000), ScalarType::bf16, {4, 2, 64});
  CHECK(refusal(a) == "kv_cache.k_new.shape[0] (total_q): got '4'; accepted: 5 (total_q of q)");
  // The workspace follows B x max_seqlen_q rows: three splits of 2 x 3 x 8 rows of 64 floats.
  a = ragged_args();
  a.kv_cache.num_splits = 3;
  CHECK(kernel.workspace_size(a) >= std::size_t{3} * 2 * 3 * 8 * (64 + 1) * 4);
  a.q.data = nullptr;  // the workspace needs shapes only
  CHECK(kernel.workspace_size(a) >= std::size_t{3} * 2 * 3 * 8 * (64 + 1) *
                                        4);  // FlashMask vectors' tables follow their mask heads: 2
                                             // sequences x 2 heads x 1024 blocks of
  // 64 keys x 2 ints, twice one head's.
  const jit::Kernel masked = compiled(
      "dtype=bf16 head_dim=64 mask=flashmask(causal=true,columns=1) target=sm_80 "
      "kv_cache=paged");
  a = ragged_args();
  a.kv_cache.num_splits = 1;
  a.kv_cache.block_table = contiguous_view(fake(0x60000), ScalarType::int32, {2, 4096});
  a.startend_row_indices = contiguous_view(fake(0x80000), ScalarType::int32, {2, 1, 65536, 1});
  const std::size_t one_head = masked.workspace_size(a);
  CHECK(one_head >= std::size_t{2} * 1024 * 8);
  a.startend_row_indices = contiguous_view(fake(0x80000), ScalarType::int32, {2, 2, 65536, 1});
  CHECK(masked.workspace_size(a) >= one_head + std::size_t{2} * 1024 * 8);
}

namespace {

// The C ABI's descriptor of a TensorView (its data pointer kept).
attnjit_tensor descriptor(const TensorView& t) {
  attnjit_tensor d{};
  d.data = t.data;
  d.dtype = t.dtype == ScalarType::bf16   ? ATTNJIT_BF16
            : t.dtype == ScalarType::fp16 ? ATTNJIT_FP16
            : t.dtype == ScalarType::fp32 ? ATTNJIT_FP32
                                          : ATTNJIT_INT32;
  d.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) {
    d.shape[i] = t.shape[i];
    d.stride[i] = t.stride[i];
  }
  return d;
}

std::string c_error(int code) {
  INFO(attnjit_last_error());
  CHECK(code == ATTNJIT_USER_ERROR);
  return attnjit_last_error();
}

}  // namespace

TEST_CASE("a KV cache's launch is prepared with attnjit_launch_prepare_kvcache only",
          "[kv_cache][c_api]") {
  attnjit_kernel* paged = nullptr;
  attnjit_kernel* plain = nullptr;
  REQUIRE(attnjit_compile(kPaged, &paged) == ATTNJIT_OK);
  REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=causal target=sm_80", &plain) == ATTNJIT_OK);
  const ForwardArgs a = paged_args();
  std::array<attnjit_tensor, ATTNJIT_SLOT_COUNT> slots{};
  slots[ATTNJIT_SLOT_Q] = descriptor(a.q);
  slots[ATTNJIT_SLOT_K] = descriptor(a.k);
  slots[ATTNJIT_SLOT_V] = descriptor(a.v);
  slots[ATTNJIT_SLOT_O] = descriptor(a.o);
  slots[ATTNJIT_SLOT_CACHE_SEQLENS] = descriptor(a.kv_cache.cache_seqlens);
  slots[ATTNJIT_SLOT_BLOCK_TABLE] = descriptor(a.kv_cache.block_table);
  attnjit_launch* launch = nullptr;
  CHECK(c_error(attnjit_launch_prepare(paged, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0,
                                       0.f, -1, &launch))
            .starts_with("kernel: got 'a spec with kv_cache=paged'; accepted: a spec with "
                         "kv_cache=none"));
  CHECK(c_error(attnjit_launch_prepare_kvcache(plain, slots.data(), ATTNJIT_SLOT_COUNT, nullptr,
                                               0.f, -1, 0, 0.f, 0, 0, -1, &launch))
            .starts_with("kernel: got 'a spec with kv_cache=none'"));
  CHECK(c_error(attnjit_launch_prepare_kvcache(paged, slots.data(), ATTNJIT_SLOT_COUNT_SINKS,
                                               nullptr, 0.f, -1, 0, 0.f, 0, 0, -1, &launch))
            .starts_with("tensor_count: got '16'; accepted: 23 (ATTNJIT_SLOT_COUNT) or 20"));
  REQUIRE(attnjit_launch_prepare_kvcache(paged, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1,
                                         0, 0.f, 3, 0, -1, &launch) == ATTNJIT_OK);
  // Three splits: the partial rows of 2 x 3 x 8 rows of 64 floats and their LSEs.
  std::size_t bytes = 0;
  REQUIRE(attnjit_launch_workspace_size(launch, &bytes) == ATTNJIT_OK);
  CHECK(bytes >= std::size_t{3} * 2 * 3 * 8 * (64 + 1) * 4);
  attnjit_launch_release(launch);
  // Ragged new tokens: packed q and o, cu_seqlens_q in its slot and max_seqlen_q.
  const ForwardArgs r = ragged_args();
  slots[ATTNJIT_SLOT_Q] = descriptor(r.q);
  slots[ATTNJIT_SLOT_O] = descriptor(r.o);
  slots[ATTNJIT_SLOT_CU_SEQLENS_Q] = descriptor(r.kv_cache.cu_seqlens_q);
  CHECK(c_error(attnjit_launch_prepare_kvcache(paged, slots.data(), ATTNJIT_SLOT_COUNT, nullptr,
                                               0.f, -1, 0, 0.f, 3, 0, -1, &launch)) ==
        "kv_cache.max_seqlen_q: got '0'; accepted: 1 or more (the most new tokens of a "
        "sequence) with a cu_seqlens_q tensor");
  REQUIRE(attnjit_launch_prepare_kvcache(paged, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1,
                                         0, 0.f, 3, 3, -1, &launch) == ATTNJIT_OK);
  REQUIRE(attnjit_launch_workspace_size(launch, &bytes) == ATTNJIT_OK);
  CHECK(bytes >= std::size_t{3} * 2 * 3 * 8 * (64 + 1) * 4);
  attnjit_launch_release(launch);
  slots[ATTNJIT_SLOT_Q] = descriptor(a.q);
  slots[ATTNJIT_SLOT_O] = descriptor(a.o);
  slots[ATTNJIT_SLOT_CU_SEQLENS_Q] = {};
  // The cache's slots belong to a KV cache's launch.
  slots[ATTNJIT_SLOT_K] =
      descriptor(contiguous_view(fake(0x20000), ScalarType::bf16, {2, 64, 2, 64}));
  slots[ATTNJIT_SLOT_V] = slots[ATTNJIT_SLOT_K];
  CHECK(c_error(attnjit_launch_prepare(plain, slots.data(), ATTNJIT_SLOT_COUNT, nullptr, 0.f, -1, 0,
                                       0.f, -1, &launch))
            .starts_with("tensors[16] (cache_seqlens): got 'a tensor'; accepted: rank 0"));
  attnjit_release(paged);
  attnjit_release(plain);
}

TEST_CASE("targets with less shared memory decode with two stages up to head dim 128",
          "[kv_cache][pass]") {
  const Lowering ir =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_86 kv_cache=paged"));
  CHECK(ir.tiles_of(KernelRole::decode).kv_stages == 2);
  CHECK(lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90a kv_cache=paged"))
            .tiles_of(KernelRole::decode)
            .kv_stages == 3);
  CHECK(testing::error_text([] {
          lower(parse_spec("dtype=bf16 head_dim=192 target=sm_89 kv_cache=contiguous"));
        }) ==
        "(head_dim_qk, head_dim_v): got '(192, 192) with kv_cache=contiguous on sm_89'; "
        "accepted: head dims whose decode stages fit 101376 bytes of shared memory (up to "
        "128 here; sm_80 and sm_90 take every head dim)");
}

TEST_CASE("an e4m3 cache: kv_dtype prints last, and validate names what it takes",
          "[kv_cache][fp8][pass]") {
  const AttentionSpec fp8 =
      parse_spec("dtype=bf16 head_dim=128 mask=causal kv_cache=paged kv_dtype=e4m3");
  CHECK(fp8.kv_dtype == DType::e4m3);
  CHECK(to_string(fp8).ends_with(" tiles=auto kv_cache=paged kv_dtype=e4m3"));
  CHECK(parse_spec(to_string(fp8)) == fp8);
  CHECK(!parse_spec("dtype=bf16 head_dim=128 kv_cache=paged").kv_dtype);
  const auto refusal = [](const char* text) {
    return testing::error_text([&] { lower(parse_spec(text)); });
  };
  CHECK(refusal("dtype=bf16 head_dim=128 kv_cache=paged kv_dtype=bf16 target=sm_90a") ==
        "kv_dtype: got 'bf16'; accepted: e4m3 (leave kv_dtype out for a cache of dtype=bf16)");
  CHECK(refusal("dtype=bf16 head_dim=128 kv_dtype=e4m3 target=sm_90a")
            .starts_with("kv_dtype: e4m3 with kv_cache=none; accepted: kv_cache=contiguous or "
                         "paged"));
  CHECK(refusal("dtype=e4m3 head_dim=128 kv_cache=paged kv_dtype=e4m3 target=sm_90a")
            .starts_with("dtype: e4m3 with kv_cache=paged; accepted"));
  CHECK(refusal("dtype=fp16 head_dim=96 kv_cache=contiguous kv_dtype=e4m3 target=sm_90a") ==
        "head_dim: got '96 with kv_dtype=e4m3'; accepted: 64, 128 or 256 (equal head dims)");
  CHECK(refusal("dtype=bf16 head_dim_qk=192 head_dim_v=128 kv_cache=paged kv_dtype=e4m3 "
                "target=sm_90a") ==
        "head_dim: got '(192, 128) with kv_dtype=e4m3'; accepted: 64, 128 or 256 (equal head "
        "dims)");
  for (const char* target : {"sm_80", "sm_86"}) {
    CHECK(
        refusal(fmt::format("dtype=bf16 head_dim=64 kv_cache=paged kv_dtype=e4m3 target={}", target)
                    .c_str())
            .starts_with(fmt::format("target: got '{} with kv_dtype=e4m3'; accepted: sm_89, "
                                     "sm_90 or sm_90a",
                                     target)));
  }
}

TEST_CASE("an e4m3 cache's plan: the decode kernel alone, stages of one byte an element",
          "[kv_cache][fp8][pass]") {
  // No prefill kernel reads an e4m3 cache: the decode kernel serves every call.
  const Lowering ir = lower(
      parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_90a kv_cache=paged kv_dtype=e4m3"));
  REQUIRE(ir.plan->kernels.size() == 3);
  CHECK(ir.plan->find(KernelRole::prefill) == nullptr);
  CHECK(ir.plan->kernels[0].name == "attnjit_kv_append_bf16_kve4m3_d128_paged");
  CHECK(ir.plan->kernels[0].phases.front().grid.to_string() == "(ceil(B*Snew*Hkv*16/256), 1, 1)");
  CHECK(ir.plan->kernels[1].name == "attnjit_decode_bf16_kve4m3_d128_causal_paged");
  // About 96 KB of keys in flight per CTA; sm_89's 101376 bytes.
  const auto stages = [](const char* dims, const char* target) {
    return lower(parse_spec(fmt::format("dtype=bf16 {} target={} kv_cache=contiguous "
                                        "kv_dtype=e4m3",
                                        dims, target)))
        .tiles_of(KernelRole::decode)
        .kv_stages;
  };
  CHECK(stages("head_dim=64", "sm_90a") == 6);  // of 128 keys up to d128, 64 at d256
  CHECK(stages("head_dim=128", "sm_90a") == 3);
  CHECK(stages("head_dim=256", "sm_90a") == 3);
  CHECK(stages("head_dim=64", "sm_89") == 6);
  CHECK(stages("head_dim=128", "sm_89") == 2);
  CHECK(stages("head_dim=256", "sm_89") == 2);
  CHECK(lower(parse_spec("dtype=bf16 head_dim=128 target=sm_90a kv_cache=paged kv_dtype=e4m3"))
            .tiles_of(KernelRole::decode)
            .block_n == 128);
  // Half the bytes per key: a contiguous cache at d128 takes both CTA slots of every SM.
  jit::detail::Shapes s;
  s.decode = true;
  s.head_dim_qk = 128;
  s.heads = 32;
  s.kv_heads = 8;
  s.seqlen_q = 1;
  s.batch = 16;
  s.seqlen_k = 8192;
  CHECK(jit::detail::decode_splits(s, 132) == 1);
  s.fp8_kv = true;
  CHECK(jit::detail::decode_splits(s, 132) == 2);
}

TEST_CASE("every e4m3-cache decode kernel compiles without spills", "[kv_cache][fp8][nvrtc]") {
  for (const char* dims : {"head_dim=64", "head_dim=128", "head_dim=256"}) {
    for (const char* variant :
         {"mask=none kv_cache=contiguous",
          "mask=causal softcap=true alibi=true sinks=true return_lse=true kv_cache=paged",
          "mask=sliding_window alibi=true sinks=true kv_cache=contiguous",
          "mask=flashmask(causal=true,columns=1) softcap=true alibi=true kv_cache=paged",
          "mask=flashmask(causal=false,columns=4) kv_cache=contiguous",
          "mask=predicate(doc[q]==doc[k]&&k<=q) alibi=true sinks=true kv_cache=paged"}) {
      for (const char* target : {"sm_89", "sm_90a"}) {
        const std::string text =
            fmt::format("dtype=bf16 {} {} kv_dtype=e4m3 target={}", dims, variant, target);
        INFO(text);
        const jit::Kernel kernel = compiled(text);
        for (const jit::KernelReport& report : kernel.info().kernels) {
          INFO(report.name << ": " << report.registers << " registers");
          CHECK(report.spill_bytes == 0);
        }
      }
    }
  }
}

TEST_CASE("e4m3-cache launches take k and v descales and name the bad ones",
          "[kv_cache][fp8][runtime][args]") {
  const jit::Kernel kernel =
      compiled("dtype=bf16 head_dim=64 mask=causal target=sm_90a kv_cache=paged kv_dtype=e4m3");
  const auto refusal = [&](const ForwardArgs& a) {
    return testing::error_text([&] { kernel.forward(a); });
  };
  const auto fp8_args = [] {
    ForwardArgs a = paged_args();
    a.k = contiguous_view(fake(0x20000), ScalarType::e4m3, {10, 16, 2, 64});
    a.v = contiguous_view(fake(0x30000), ScalarType::e4m3, {10, 16, 2, 64});
    return a;
  };
  // A 16-bit cache under kv_dtype=e4m3.
  CHECK(refusal(paged_args()) ==
        "k.dtype: got 'bf16'; accepted: e4m3 (the spec's kv_dtype: the cache's type)");
  ForwardArgs a = fp8_args();
  a.q = contiguous_view(fake(0x10000), ScalarType::e4m3, {2, 3, 8, 64});
  CHECK(refusal(a).starts_with("q.dtype: got 'e4m3'; accepted: bf16"));
  // The queries are not quantized: no q_descale.
  a = fp8_args();
  a.q_descale = contiguous_view(fake(0x90000), ScalarType::fp32, {1});
  CHECK(refusal(a) ==
        "q_descale: got 'given with dtype=bf16 kv_dtype=e4m3'; accepted: empty (the queries are "
        "not quantized: k_descale and v_descale apply to the e4m3 cache)");
  a = fp8_args();
  a.k_descale = contiguous_view(fake(0x90000), ScalarType::fp32, {3});
  CHECK(refusal(a) ==
        "k_descale.shape: got '[3]'; accepted: [2, 2] contiguous (batch, kv heads) or [1]");
  a = fp8_args();
  a.v_descale = contiguous_view(fake(0x90000), ScalarType::bf16, {2, 2});
  CHECK(refusal(a) == "v_descale.dtype: got 'bf16'; accepted: fp32");
  // New keys to append are of the cache's type.
  a = fp8_args();
  a.kv_cache.k_new = contiguous_view(fake(0x70000), ScalarType::bf16, {2, 3, 2, 64});
  a.kv_cache.v_new = contiguous_view(fake(0x78000), ScalarType::e4m3, {2, 3, 2, 64});
  CHECK(refusal(a) ==
        "kv_cache.k_new.dtype: got 'bf16'; accepted: e4m3 (the spec's kv_dtype: the cache's "
        "type)");
  // Rows of 16 bytes: 64 one-byte elements need strides in multiples of 16 of them.
  a = fp8_args();
  a.k.stride[0] = 2056;
  CHECK(refusal(a) ==
        "k.stride[0]: got '2056'; accepted: a non-negative multiple of 16 elements (16-byte "
        "aligned rows)");
  // A 16-bit cache's descales are refused as before.
  const jit::Kernel plain = compiled(kPaged);
  a = paged_args();
  a.k_descale = contiguous_view(fake(0x90000), ScalarType::fp32, {1});
  CHECK(testing::error_text([&] { plain.forward(a); }) ==
        "k_descale: got 'given with dtype=bf16'; accepted: empty (descale factors apply to "
        "dtype=e4m3 and to kv_dtype=e4m3 caches' k and v)");
}
