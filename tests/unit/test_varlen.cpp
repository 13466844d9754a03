// Packed batches (varlen=true) without a GPU: the spec key's text, validate's refusals, the
// reference kernel's refusal, the plan (varlen_intervals first, its vectors bound by every
// kernel that reads vectors), and every host check of Kernel::forward, backward and
// workspace_size on packed tensors and VarlenArgs. Uses fake device pointers: nothing is
// launched.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "compiler/codegen/emit.hpp"
#include "compiler/ir/lowering.hpp"
#include "compiler/passes/pipeline.hpp"
#include "runtime/jit/driver.hpp"
#include "support/error_text.hpp"

using namespace attnjit;

namespace {

void* fake(std::uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

jit::Kernel compiled(const char* text) {
  jit::CompileOptions options;
  options.no_disk_cache = true;
  return jit::compile(parse_spec(text), options);
}

// The forward spec and the backward spec the launch checks are tested on.
constexpr const char* kForward =
    "dtype=bf16 head_dim=64 mask=causal return_lse=true target=sm_80 varlen=true";
constexpr const char* kBackward =
    "dtype=bf16 head_dim=64 mask=causal direction=backward target=sm_80 varlen=true";

// Three sequences packed: 100 queries and 120 keys in all, 4 query heads on 2 KV heads.
VarlenArgs good_varlen() {
  VarlenArgs v;
  v.cu_seqlens_q = contiguous_view(fake(0x70000), ScalarType::int32, {4});
  v.cu_seqlens_k = contiguous_view(fake(0x71000), ScalarType::int32, {4});
  v.max_seqlen_q = 60;
  v.max_seqlen_k = 70;
  return v;
}

ForwardArgs good_forward() {
  ForwardArgs a;
  a.q = contiguous_view(fake(0x10000), ScalarType::bf16, {100, 4, 64});
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {120, 2, 64});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {120, 2, 64});
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {100, 4, 64});
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {4, 100});
  a.varlen = good_varlen();
  return a;
}

BackwardArgs good_backward() {
  const ForwardArgs f = good_forward();
  BackwardArgs b;
  b.q = f.q;
  b.k = f.k;
  b.v = f.v;
  b.o = f.o;
  b.lse = f.lse;
  b.d_o = contiguous_view(fake(0x80000), ScalarType::bf16, {100, 4, 64});
  b.d_q = contiguous_view(fake(0x90000), ScalarType::bf16, {100, 4, 64});
  b.d_k = contiguous_view(fake(0xa0000), ScalarType::bf16, {120, 2, 64});
  b.d_v = contiguous_view(fake(0xb0000), ScalarType::bf16, {120, 2, 64});
  b.varlen = good_varlen();
  return b;
}

}  // namespace

TEST_CASE("varlen=true prints last and parses back and varlen=false is not printed",
          "[varlen][ir]") {
  const AttentionSpec packed = parse_spec("dtype=bf16 head_dim=64 mask=causal varlen=true");
  CHECK(packed.varlen == VarlenMode::separate);
  const std::string text = to_string(packed);
  CHECK(text ==
        "dtype=bf16 head_dim_qk=64 head_dim_v=64 mask=causal softcap=false alibi=false "
        "sinks=false return_lse=false direction=forward deterministic=false target=auto tiles=auto "
        "varlen=true");
  CHECK(parse_spec(text) == packed);

  const AttentionSpec padded = parse_spec("dtype=bf16 head_dim=64 mask=causal varlen=false");
  CHECK(padded.varlen == VarlenMode::off);
  CHECK(to_string(padded).find("varlen") == std::string::npos);
  CHECK(parse_spec(to_string(padded)) == padded);
  CHECK(padded == parse_spec("dtype=bf16 head_dim=64 mask=causal"));
  CHECK(to_string(padded) != text);

  CHECK(testing::error_text([] { parse_spec("dtype=bf16 head_dim=64 varlen=yes"); }) ==
        "varlen: got 'yes'; accepted: false, true, shared");

  const AttentionSpec shared = parse_spec("dtype=bf16 head_dim=64 mask=causal varlen=shared");
  CHECK(shared.varlen == VarlenMode::shared);
  CHECK(to_string(shared).ends_with(" tiles=auto varlen=shared"));
  CHECK(parse_spec(to_string(shared)) == shared);
}

TEST_CASE("varlen=shared runs causal by index with LTS alone, other masks as varlen=true",
          "[varlen][pass]") {
  const Lowering causal =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=causal target=sm_90a varlen=shared"));
  CHECK(causal.mask->causal_by_index);
  CHECK(causal.mask->vectors == std::vector<IntervalVector>{IntervalVector::lts});
  const KernelDesc& writer = causal.plan->kernels.front();
  CHECK(writer.name == "attnjit_varlen_intervals_causal_c1");
  CHECK(causal.plan->scratch[writer.buffers.front().buffer].bytes.to_string() == "Sk*Hm*4");
  CHECK(causal.plan->find(KernelRole::forward)->name ==
        "attnjit_fwd_bf16_d128_varlen_shared_causal");
  const Lowering none =
      lower(parse_spec("dtype=bf16 head_dim=128 mask=none target=sm_90a varlen=shared"));
  CHECK_FALSE(none.mask->causal_by_index);
  CHECK(none.mask->vectors ==
        std::vector<IntervalVector>{IntervalVector::lts, IntervalVector::ute});
}

TEST_CASE("a packed FlashMask folds each key's visible rows into its one-sided vectors",
          "[varlen][pass]") {
  using V = IntervalVector;
  const auto vectors_of = [](const char* mask, const char* varlen) {
    const Lowering ir = lower(parse_spec(
        fmt::format("dtype=bf16 head_dim=128 mask={} target=sm_90a varlen={}", mask, varlen)));
    CHECK(ir.mask->varlen);
    CHECK(ir.mask->needs_minmax);
    return std::pair{ir.mask->causal_by_index, ir.mask->vectors};
  };
  // LTS without LTE takes the sequence's end, UTE without UTS its start (or the causal row).
  CHECK(vectors_of("flashmask(causal=true,columns=1)", "true") ==
        std::pair{false, std::vector<V>{V::lts, V::ute}});
  CHECK(vectors_of("flashmask(causal=false,columns=2)", "true") ==
        std::pair{false, std::vector<V>{V::lts, V::ute}});
  // Under shared boundaries a causal mask is the packed row's diagonal.
  CHECK(vectors_of("flashmask(causal=true,columns=1)", "shared") ==
        std::pair{true, std::vector<V>{V::lts}});
  CHECK(vectors_of("flashmask(causal=true,columns=2)", "shared") ==
        std::pair{true, std::vector<V>{V::lts, V::lte, V::visible_end}});
  // Intervals with both ends keep them; the visible rows take vectors of their own.
  CHECK(vectors_of("flashmask(causal=true,columns=2)", "true") ==
        std::pair{false, std::vector<V>{V::lts, V::lte, V::ute, V::visible_end}});
  CHECK(vectors_of("flashmask(causal=false,columns=4)", "true") ==
        std::pair{false,
                  std::vector<V>{V::lts, V::lte, V::uts, V::ute, V::visible_begin, V::visible_end}});

  const Lowering ir = lower(parse_spec(
      "dtype=bf16 head_dim=128 mask=flashmask(causal=false,columns=4) target=sm_90a varlen=true"));
  const KernelDesc& writer = ir.plan->kernels.front();
  CHECK(writer.name == "attnjit_varlen_intervals_flashmask_c4_c6");
  CHECK(writer.phases[0].grid.to_string() == "(ceil((Sk+1)/256), Hm, 1)");
  CHECK(ir.plan->scratch[writer.buffers.front().buffer].bytes.to_string() == "Sk*Hm*24");
  CHECK(ir.plan->find(KernelRole::forward)->name == "attnjit_fwd_bf16_d128_varlen_flashmask_c4");
  const std::string source = emit_kernel(ir, writer);
  CHECK_THAT(source, Catch::Contains("/*kVisibleBegin=*/4,"));
  CHECK_THAT(source, Catch::Contains("/*kVisibleEnd=*/5>"));
  CHECK_THAT(source, Catch::Contains("varlen_intervals<attnjit::kVarlenNone, /*kUserColumns=*/4"));
}

TEST_CASE("a packed predicate finds the sequences in cu_seqlens: no vectors, no varlen kernel",
          "[varlen][pass][predicate]") {
  const Lowering ir = lower(parse_spec(
      "dtype=bf16 head_dim=128 mask=predicate((q/64+k/64+b)%2==0||h==1) target=sm_90a "
      "varlen=true direction=backward"));
  CHECK(ir.mask->element_predicate);
  CHECK(ir.mask->varlen);
  CHECK_FALSE(ir.mask->builds_varlen_vectors());
  CHECK(ir.mask->vectors.empty());
  CHECK_FALSE(ir.mask->table_per_batch);  // the packed row is one batch row
  CHECK(ir.mask->table_per_head);
  CHECK_THAT(to_string(ir), Catch::Contains("table_rows=[1,h] sequences=cu_seqlens"));
  for (const KernelDesc& kernel : ir.plan->kernels) {
    CHECK(kernel.role != KernelRole::varlen_intervals);
    if (kernel.role == KernelRole::predicate_blocks) {
      CHECK_THAT(emit_kernel(ir, kernel), Catch::Contains("/*kVarlen=*/true>(params);"));
    }
    if (kernel.role == KernelRole::backward) {
      CHECK_THAT(emit_kernel(ir, kernel), Catch::Contains("/*kVarlen=*/true>"));
    }
  }
}

TEST_CASE("varlen=shared takes the queries' boundaries for the keys", "[varlen][runtime][args]") {
  const jit::Kernel kernel =
      compiled("dtype=bf16 head_dim=64 mask=causal return_lse=true target=sm_80 varlen=shared");
  ForwardArgs a = good_forward();
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {a.q.shape[0], 2, 64});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {a.q.shape[0], 2, 64});
  a.varlen.seqused_k = {};
  ForwardArgs other = a;
  CHECK(testing::error_text([&] { kernel.forward(other); }) ==
        "cu_seqlens_k: a tensor other than cu_seqlens_q, but the spec has varlen=shared; "
        "accepted: cu_seqlens_q itself or none (compile with varlen=true for keys with "
        "boundaries of their own)");
  ForwardArgs used = a;
  used.varlen.cu_seqlens_k = used.varlen.cu_seqlens_q;
  used.varlen.seqused_k =
      contiguous_view(fake(0x72000), ScalarType::int32, {used.varlen.cu_seqlens_q.shape[0] - 1});
  CHECK_THAT(testing::error_text([&] { kernel.forward(used); }),
             Catch::StartsWith("seqused_k: given, but the spec has varlen=shared"));
  ForwardArgs totals = a;
  totals.varlen.cu_seqlens_k = {};
  totals.k.shape[0] -= 1;
  totals.v.shape[0] -= 1;
  CHECK_THAT(testing::error_text([&] { kernel.forward(totals); }),
             Catch::StartsWith("k.shape[0] (total_k): got '"));
  ForwardArgs padded = a;
  padded.q = contiguous_view(fake(0x10000), ScalarType::bf16, {1, a.q.shape[0], 4, 64});
  CHECK(testing::error_text([&] { kernel.forward(padded); }) ==
        "q.rank: got '4'; accepted: 3 ([total_q, heads, head_dim]: the spec has varlen=shared)");
}

TEST_CASE("validate refuses the masks and modifiers a packed batch does not take",
          "[varlen][pass]") {
  const auto error_of = [](const char* text) {
    return testing::error_text([&] { lower(parse_spec(text)); });
  };
  CHECK(error_of("dtype=bf16 head_dim=64 mask=causal alibi=true target=sm_80 varlen=true") ==
        "alibi: got 'true'; accepted: false with varlen=true in this version (ALiBi in a packed "
        "batch takes varlen=shared: the keys on the queries' boundaries)");
  CHECK(error_of("dtype=bf16 head_dim=64 mask=causal alibi=true target=sm_80 varlen=shared") ==
        "no error");
  // Soft-capping, every dtype and both directions are accepted.
  CHECK(error_of("dtype=fp16 head_dim=128 mask=sliding_window softcap=true direction=backward "
                 "deterministic=true target=sm_90a varlen=true") == "no error");
}

TEST_CASE("the reference kernel refuses a packed batch", "[varlen][runtime]") {
  CHECK(testing::error_text([] {
          jit::compile_reference(
              parse_spec("dtype=bf16 head_dim=64 mask=causal target=sm_80 varlen=true"));
        }) ==
        "varlen: got 'true'; accepted: false: the reference kernel takes padded batches (check a "
        "packed batch sequence by sequence)");
}

TEST_CASE("a varlen plan starts with varlen_intervals whose vectors every reading kernel binds",
          "[varlen][pass]") {
  for (const char* text :
       {"dtype=bf16 head_dim=128 mask=causal target=sm_90a varlen=true",
        "dtype=fp16 head_dim=64 mask=none target=sm_80 varlen=true",
        "dtype=bf16 head_dim=64 mask=sliding_window direction=backward target=sm_80 varlen=true",
        "dtype=bf16 head_dim=128 mask=causal direction=backward deterministic=true target=sm_90a "
        "varlen=true"}) {
    INFO(text);
    const AttentionSpec spec = parse_spec(text);
    const Lowering ir = lower(spec);
    REQUIRE(ir.mask);
    CHECK(ir.mask->varlen);
    CHECK(ir.mask->needs_minmax);
    CHECK(ir.mask->vectors ==
          std::vector<IntervalVector>{IntervalVector::lts, IntervalVector::ute});
    CHECK_FALSE(ir.mask->causal_by_index);
    CHECK_FALSE(ir.mask->window_by_index);

    const std::vector<KernelDesc>& kernels = ir.plan->kernels;
    REQUIRE(kernels.size() >= 4);
    const KernelDesc& writer = kernels.front();
    CHECK(writer.role == KernelRole::varlen_intervals);
    CHECK(writer.name ==
          "attnjit_varlen_intervals_" + std::string(name_of(spec.mask.kind)) + "_c2");
    REQUIRE(writer.buffers.size() == 1);
    const BufferBinding intervals = writer.buffers.front();
    CHECK(intervals.field == ParamField::varlen_intervals);
    CHECK(ir.plan->scratch[intervals.buffer].name == "varlen_intervals");
    CHECK(std::count_if(kernels.begin(), kernels.end(), [](const KernelDesc& k) {
            return k.role == KernelRole::varlen_intervals;
          }) == 1);
    int readers = 0;
    for (const KernelDesc& kernel : kernels) {
      INFO(kernel.name);
      const bool binds = std::ranges::find(kernel.buffers, intervals) != kernel.buffers.end();
      switch (kernel.role) {
        case KernelRole::varlen_intervals:
          break;
        case KernelRole::flashmask_minmax:
          CHECK(kernel.name.find("_c2_") != std::string::npos);
          [[fallthrough]];
        case KernelRole::cta_order:
        case KernelRole::forward:
        case KernelRole::backward:
        case KernelRole::backward_dq:
          CHECK(binds);
          ++readers;
          break;
        default:
          CHECK_FALSE(binds);
      }
      if (kernel.role == KernelRole::forward || kernel.role == KernelRole::backward) {
        CHECK(kernel.name.find("_varlen_" + std::string(name_of(spec.mask.kind))) !=
              std::string::npos);
      }
    }
    CHECK(readers >= 2);  // a min/max table and the attention kernel at least
  }
}

TEST_CASE("varlen forward names the bad packed tensor", "[varlen][runtime][args]") {
  const jit::Kernel kernel = compiled(kForward);
  const auto error_of = [&](const ForwardArgs& args) {
    return testing::error_text([&] { kernel.forward(args); });
  };
  ForwardArgs a = good_forward();
  if (!runtime::driver_available()) {
    CHECK_THAT(error_of(a), Catch::StartsWith("device: no CUDA driver"));
  }

  a.q.data = nullptr;
  CHECK(error_of(a) == "q: data is null; accepted: a device pointer");
  a = good_forward();
  a.k.dtype = ScalarType::fp16;
  CHECK(error_of(a) == "k.dtype: got 'fp16'; accepted: bf16 (the spec's dtype)");
  a = good_forward();
  a.q = contiguous_view(fake(0x10000), ScalarType::bf16, {1, 100, 4, 64});
  CHECK(error_of(a) ==
        "q.rank: got '4'; accepted: 3 ([total_q, heads, head_dim]: the spec has varlen=true)");
  a = good_forward();
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {120, 2, 1, 64});
  CHECK(error_of(a) ==
        "v.rank: got '4'; accepted: 3 ([total_k, heads, head_dim]: the spec has varlen=true)");
  a = good_forward();
  a.k.shape[2] = 32;
  CHECK(error_of(a) == "k.shape[2]: got '32'; accepted: 64 (the spec's head dim)");
  a = good_forward();
  a.q.shape[0] = -1;
  CHECK(error_of(a) == "q.shape[0] (total_q): got '-1'; accepted: 0 to 1073741823");
  a = good_forward();
  a.o.shape[1] = 70000;
  CHECK(error_of(a) == "o.shape[1] (heads): got '70000'; accepted: 0 to 65535");
  a = good_forward();
  a.q.stride[2] = 2;
  CHECK(error_of(a) == "q.stride[2]: got '2'; accepted: 1 (the head dim must be contiguous)");

  // The totals and heads of the pairs that share them.
  a = good_forward();
  a.v.shape[0] = 119;
  CHECK(error_of(a) == "v.shape[0] (total_k): got '119'; accepted: 120 (total_k of k)");
  a = good_forward();
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {120, 1, 64});
  CHECK(error_of(a) == "v.shape[1] (kv heads): got '1'; accepted: 2 (kv heads of k)");
  a = good_forward();
  a.o.shape[0] = 99;
  CHECK(error_of(a) == "o.shape[0] (total_q): got '99'; accepted: 100 (total_q of q)");
  a = good_forward();
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {100, 2, 64});
  CHECK(error_of(a) == "o.shape[1] (heads): got '2'; accepted: 4 (heads of q)");
  a = good_forward();
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {120, 3, 64});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {120, 3, 64});
  CHECK(error_of(a) ==
        "k.shape[1] (kv heads): got '3'; accepted: a divisor of the 4 query heads (GQA/MQA)");

  // The LSE: [heads, total_q] fp32.
  a = good_forward();
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {1, 4, 100});
  CHECK(error_of(a) ==
        "lse.rank: got '3'; accepted: 2 ([heads, total_q]: the spec has varlen=true)");
  a = good_forward();
  a.lse.dtype = ScalarType::bf16;
  CHECK(error_of(a) == "lse.dtype: got 'bf16'; accepted: fp32");
  a = good_forward();
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {2, 100});
  CHECK(error_of(a) == "lse.shape[0] (heads): got '2'; accepted: 4 (heads of q)");
  a = good_forward();
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {4, 99});
  CHECK(error_of(a) == "lse.shape[1] (total_q): got '99'; accepted: 100 (total_q of q)");
  a = good_forward();
  a.lse.stride = {200, 2};
  CHECK(error_of(a) == "lse.stride[1]: got '2'; accepted: 1");
  a = good_forward();
  a.lse = {};
  CHECK_THAT(error_of(a), Catch::StartsWith("lse: missing"));

  a = good_forward();
  a.startend_row_indices = contiguous_view(fake(0x60000), ScalarType::int32, {1, 1, 120, 2});
  CHECK(error_of(a) ==
        "startend_row_indices: given, but mask=causal reads no vectors; accepted: no "
        "startend_row_indices");
}

TEST_CASE("varlen forward takes e4m3 packed tensors with a bf16 o",
          "[varlen][runtime][args][fp8]") {
  const jit::Kernel kernel =
      compiled("dtype=e4m3 head_dim=64 mask=causal return_lse=true target=sm_90a varlen=true");
  const auto error_of = [&](const ForwardArgs& args) {
    return testing::error_text([&] { kernel.forward(args); });
  };
  ForwardArgs a = good_forward();
  for (TensorView* t : {&a.q, &a.k, &a.v}) t->dtype = ScalarType::e4m3;
  if (!runtime::driver_available()) {
    CHECK_THAT(error_of(a), Catch::StartsWith("device: no CUDA driver"));
  }
  ForwardArgs wrong = a;
  wrong.o.dtype = ScalarType::e4m3;
  CHECK(error_of(wrong) == "o.dtype: got 'e4m3'; accepted: bf16 (the spec's dtype)");
  wrong = a;
  wrong.k.dtype = ScalarType::bf16;
  CHECK(error_of(wrong) == "k.dtype: got 'bf16'; accepted: e4m3 (the spec's dtype)");
}

TEST_CASE("varlen forward names the bad sequence boundaries", "[varlen][runtime][args]") {
  const jit::Kernel kernel = compiled(kForward);
  const auto error_of = [&](const ForwardArgs& args) {
    return testing::error_text([&] { kernel.forward(args); });
  };
  ForwardArgs a = good_forward();
  a.varlen.cu_seqlens_q = {};
  CHECK(error_of(a) ==
        "cu_seqlens_q: missing; accepted: an int32 device tensor [B + 1, B >= 1 sequences] (the "
        "spec packs its batch: varlen=true or shared)");
  a = good_forward();
  a.varlen = {};
  CHECK_THAT(error_of(a), Catch::StartsWith("cu_seqlens_q: missing"));
  a = good_forward();
  a.varlen.cu_seqlens_k = {};
  CHECK(error_of(a) ==
        "cu_seqlens_k: missing; accepted: an int32 device tensor [B + 1: as many entries as "
        "cu_seqlens_q] (the spec packs its batch: varlen=true or shared)");
  a = good_forward();
  a.varlen.cu_seqlens_q.dtype = ScalarType::fp32;
  CHECK(error_of(a) == "cu_seqlens_q.dtype: got 'fp32'; accepted: int32");
  a = good_forward();
  a.varlen.cu_seqlens_k = contiguous_view(fake(0x71000), ScalarType::int32, {1, 4});
  CHECK(error_of(a) == "cu_seqlens_k.rank: got '2'; accepted: 1");
  a = good_forward();
  a.varlen.cu_seqlens_q.data = fake(0x70002);
  CHECK_THAT(error_of(a), Catch::StartsWith("cu_seqlens_q.data: got '") &&
                              Catch::EndsWith("accepted: a 4-byte aligned address"));
  a = good_forward();
  a.varlen.cu_seqlens_q.stride[0] = 2;
  CHECK(error_of(a) ==
        "cu_seqlens_q.stride[0]: got '2'; accepted: 1 (the tensor must be contiguous)");
  a = good_forward();
  a.varlen.cu_seqlens_q = contiguous_view(fake(0x70000), ScalarType::int32, {1});
  CHECK(error_of(a) ==
        "cu_seqlens_q.shape[0]: got '1'; accepted: B + 1 entries for B >= 1 sequences");
  a = good_forward();
  a.varlen.cu_seqlens_k = contiguous_view(fake(0x71000), ScalarType::int32, {5});
  CHECK(error_of(a) ==
        "cu_seqlens_k.shape[0]: got '5'; accepted: 4 (B + 1: as many entries as cu_seqlens_q)");
  a = good_forward();
  a.varlen.seqused_k = contiguous_view(fake(0x72000), ScalarType::int32, {4});
  CHECK(error_of(a) == "seqused_k.shape[0]: got '4'; accepted: 3 (B: one per sequence)");
  a = good_forward();
  a.varlen.seqused_k = contiguous_view(fake(0x72000), ScalarType::fp16, {3});
  CHECK(error_of(a) == "seqused_k.dtype: got 'fp16'; accepted: int32");

  // max_seqlen_q/k: required, 0 to the total.
  a = good_forward();
  a.varlen.max_seqlen_q = -1;
  CHECK(error_of(a) ==
        "max_seqlen_q: got '-1'; accepted: 0 to 100 (total_q): the longest query sequence or "
        "more");
  a = good_forward();
  a.varlen.max_seqlen_q = 101;
  CHECK_THAT(error_of(a), Catch::StartsWith("max_seqlen_q: got '101'; accepted: 0 to 100"));
  a = good_forward();
  a.varlen.max_seqlen_k = 121;
  CHECK(error_of(a) ==
        "max_seqlen_k: got '121'; accepted: 0 to 120 (total_k): the longest key sequence or "
        "more");
  a = good_forward();
  a.varlen.max_seqlen_k = -5;
  CHECK_THAT(error_of(a), Catch::StartsWith("max_seqlen_k: got '-5'"));

  if (!runtime::driver_available()) {
    // seqused_k given well, and the bounds at the totals: as far as the device.
    a = good_forward();
    a.varlen.seqused_k = contiguous_view(fake(0x72000), ScalarType::int32, {3});
    a.varlen.max_seqlen_q = 100;
    a.varlen.max_seqlen_k = 0;
    CHECK_THAT(error_of(a), Catch::StartsWith("device: no CUDA driver"));
  }
}

TEST_CASE("a padded kernel refuses packed arguments and the reverse", "[varlen][runtime][args]") {
  const jit::Kernel padded =
      compiled("dtype=bf16 head_dim=64 mask=causal return_lse=true target=sm_80");
  ForwardArgs a;
  a.q = contiguous_view(fake(0x10000), ScalarType::bf16, {2, 50, 4, 64});
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {2, 60, 2, 64});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {2, 60, 2, 64});
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {2, 50, 4, 64});
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {2, 4, 50});
  const std::string given =
      "cu_seqlens_q/cu_seqlens_k/seqused_k/max_seqlen: given, but the spec has varlen=false; "
      "accepted: none of them (compile with varlen=true or varlen=shared for packed batches)";
  for (int field = 0; field < 4; ++field) {
    ForwardArgs b = a;
    if (field == 0) b.varlen.cu_seqlens_q = good_varlen().cu_seqlens_q;
    if (field == 1) b.varlen.cu_seqlens_k = good_varlen().cu_seqlens_k;
    if (field == 2) b.varlen.seqused_k = contiguous_view(fake(0x72000), ScalarType::int32, {3});
    if (field == 3) b.varlen.max_seqlen_k = 60;
    CHECK(testing::error_text([&] { padded.forward(b); }) == given);
  }
  // Packed tensors without varlen: the padded rank.
  const ForwardArgs packed = good_forward();
  ForwardArgs c = packed;
  c.varlen = {};
  CHECK(testing::error_text([&] { padded.forward(c); }) ==
        "q.rank: got '3'; accepted: 4 ([batch, seq, heads, head_dim])");

  const jit::Kernel grad =
      compiled("dtype=bf16 head_dim=64 mask=causal direction=backward target=sm_80");
  BackwardArgs b = good_backward();
  CHECK(testing::error_text([&] { grad.backward(b); }) == given);
}

TEST_CASE("varlen backward checks the gradients like their tensors", "[varlen][runtime][args]") {
  const jit::Kernel kernel = compiled(kBackward);
  const auto error_of = [&](const BackwardArgs& args) {
    return testing::error_text([&] { kernel.backward(args); });
  };
  BackwardArgs b = good_backward();
  if (!runtime::driver_available()) {
    CHECK_THAT(error_of(b), Catch::StartsWith("device: no CUDA driver"));
  }
  b.d_o = contiguous_view(fake(0x80000), ScalarType::bf16, {1, 100, 4, 64});
  CHECK(error_of(b) == "d_o.rank: got '4'; accepted: 3 (that of o)");
  b = good_backward();
  b.d_q.shape[0] = 99;
  CHECK(error_of(b) == "d_q.shape[0]: got '99'; accepted: 100 (that of q)");
  b = good_backward();
  b.d_k = contiguous_view(fake(0xa0000), ScalarType::bf16, {120, 4, 64});
  CHECK(error_of(b) == "d_k.shape[1]: got '4'; accepted: 2 (that of k)");
  b = good_backward();
  b.d_v.dtype = ScalarType::fp16;
  CHECK(error_of(b) == "d_v.dtype: got 'fp16'; accepted: bf16 (that of v)");
  b = good_backward();
  b.d_q.data = nullptr;
  CHECK(error_of(b) == "d_q: data is null; accepted: a device pointer");
  b = good_backward();
  b.d_o.stride[0] = 4 * 64 + 4;
  CHECK(error_of(b) ==
        "d_o.stride[0]: got '260'; accepted: a non-negative multiple of 8 elements (16-byte "
        "aligned rows)");

  // The packed tensors and boundaries as for the forward.
  b = good_backward();
  b.k.shape[0] = 121;
  CHECK(error_of(b) == "v.shape[0] (total_k): got '120'; accepted: 121 (total_k of k)");
  b = good_backward();
  b.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {4, 101});
  CHECK(error_of(b) == "lse.shape[1] (total_q): got '101'; accepted: 100 (total_q of q)");
  b = good_backward();
  b.varlen.cu_seqlens_k = contiguous_view(fake(0x71000), ScalarType::int32, {3});
  CHECK(error_of(b) ==
        "cu_seqlens_k.shape[0]: got '3'; accepted: 4 (B + 1: as many entries as cu_seqlens_q)");
  b = good_backward();
  b.varlen.max_seqlen_k = 500;
  CHECK_THAT(error_of(b), Catch::StartsWith("max_seqlen_k: got '500'; accepted: 0 to 120"));
  b = good_backward();
  b.startend_row_indices = contiguous_view(fake(0x60000), ScalarType::int32, {1, 1, 120, 2});
  CHECK_THAT(error_of(b), Catch::StartsWith("startend_row_indices: given, but mask=causal"));
}

TEST_CASE("varlen workspace holds the vectors of every packed key", "[varlen][runtime][args]") {
  const jit::Kernel forward = compiled(kForward);
  const ForwardArgs a = good_forward();
  const std::size_t bytes = forward.workspace_size(a);
  CHECK(bytes >= 120 * 8);  // the (LTS, UTE) of each packed key
  CHECK(bytes % 256 == 0);
  ForwardArgs longer = a;
  longer.k.shape[0] = longer.v.shape[0] = 12000;
  CHECK(forward.workspace_size(longer) >= bytes + (12000 - 120) * 8);
  ForwardArgs bad = a;
  bad.q.rank = 2;
  CHECK(testing::error_text([&] { forward.workspace_size(bad); }) ==
        "q.rank: got '2'; accepted: 3 ([total_q, heads, head_dim]: the spec has varlen=true)");
  // Padded tensors for a packed spec are refused here too, by the spec, not by their ranks.
  ForwardArgs padded = a;
  padded.q = contiguous_view(fake(0x10000), ScalarType::bf16, {1, 100, 4, 64});
  CHECK_THAT(testing::error_text([&] { forward.workspace_size(padded); }),
             Catch::StartsWith("q.rank: got '4'; accepted: 3"));

  const jit::Kernel backward = compiled(kBackward);
  const BackwardArgs b = good_backward();
  CHECK(backward.workspace_size(b) > 120 * 8);
  BackwardArgs bad_b = b;
  bad_b.q.rank = bad_b.k.rank = 1;
  CHECK_THAT(testing::error_text([&] { backward.workspace_size(bad_b); }),
             Catch::StartsWith("q.rank: got '1'; accepted: 3"));
}
