// Kernel::forward (and Kernel::backward, for the score modifiers' arguments) rejects bad
// tensors and values with an Error naming the field before touching the device. Uses fake
// device pointers: nothing is launched.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "runtime/jit/driver.hpp"
#include "runtime/launch/predicate_launch.hpp"
#include "support/env_override.hpp"
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

ForwardArgs good_args(int d = 64, int heads = 4, int kv_heads = 2) {
  ForwardArgs a;
  a.q = contiguous_view(fake(0x10000), ScalarType::bf16, {2, 100, heads, d});
  a.k = contiguous_view(fake(0x20000), ScalarType::bf16, {2, 120, kv_heads, d});
  a.v = contiguous_view(fake(0x30000), ScalarType::bf16, {2, 120, kv_heads, d});
  a.o = contiguous_view(fake(0x40000), ScalarType::bf16, {2, 100, heads, d});
  return a;
}

std::string error_of(const jit::Kernel& kernel, const ForwardArgs& args) {
  return testing::error_text([&] { kernel.forward(args); });
}

// The backward arguments of good_args()'s shapes: its tensors, d_o, the gradients and the LSE.
BackwardArgs backward_of(const ForwardArgs& good) {
  BackwardArgs b;
  b.q = good.q;
  b.k = good.k;
  b.v = good.v;
  b.o = good.o;
  b.d_o = contiguous_view(fake(0x80000), ScalarType::bf16, {2, 100, 4, 64});
  b.d_q = contiguous_view(fake(0x90000), ScalarType::bf16, {2, 100, 4, 64});
  b.d_k = contiguous_view(fake(0xa0000), ScalarType::bf16, {2, 120, 2, 64});
  b.d_v = contiguous_view(fake(0xb0000), ScalarType::bf16, {2, 120, 2, 64});
  b.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {2, 4, 100});
  return b;
}

}  // namespace

TEST_CASE("forward names the bad tensor field", "[runtime][args]") {
  const jit::Kernel kernel = compiled("dtype=bf16 head_dim=64 mask=causal target=sm_80");
  ForwardArgs a = good_args();

  a.q.dtype = ScalarType::fp16;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("q.dtype: got 'fp16'; accepted: bf16"));
  a = good_args();
  a.k.rank = 3;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("k.rank: got '3'; accepted: 4"));
  a = good_args();
  a.v.shape[3] = 32;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("v.shape[3]: got '32'; accepted: 64"));
  a = good_args();
  a.o.stride[3] = 2;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("o.stride[3]: got '2'; accepted: 1"));
  a = good_args();
  a.q.stride[1] = 4 * 64 + 4;
  CHECK_THAT(error_of(kernel, a),
             Catch::Contains("q.stride[1]: got '260'; accepted: a non-negative multiple of 8"));
  a = good_args();
  a.k.data = fake(0x20008);
  CHECK_THAT(error_of(kernel, a), Catch::Contains("k.data") && Catch::Contains("16-byte aligned"));
  a = good_args();
  a.q.data = nullptr;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("q: data is null"));
  a = good_args();
  a.k.shape[0] = 3;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("k.shape[0]: got '3'; accepted: 2 (batch of q)"));
  a = good_args(64, 4, 3);
  CHECK_THAT(error_of(kernel, a),
             Catch::Contains("k.shape[2] (kv heads): got '3'; accepted: a divisor of the 4"));
  a = good_args();
  a.o.shape[1] = 99;
  CHECK_THAT(error_of(kernel, a),
             Catch::Contains("o.shape[1]: got '99'; accepted: 100 (seqlen of q)"));
  a = good_args();
  a.window_left = 16;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("apply to mask=sliding_window only"));
  a = good_args();
  a.softmax_scale = -1.f;
  CHECK_THAT(error_of(kernel, a), Catch::Contains("softmax_scale: got '-1'"));
  a = good_args();
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {2, 4, 100});
  CHECK_THAT(error_of(kernel, a), Catch::Contains("lse: given, but the spec has return_lse=false"));
  a = good_args();
  a.startend_row_indices = contiguous_view(fake(0x60000), ScalarType::int32, {2, 1, 120, 1});
  CHECK_THAT(error_of(kernel, a),
             Catch::Contains("startend_row_indices: given, but mask=causal reads no vectors"));
}

TEST_CASE("forward checks lse and the FlashMask vectors", "[runtime][args]") {
  const jit::Kernel kernel = compiled(
      "dtype=bf16 head_dim=64 mask=flashmask(causal=false,columns=2) return_lse=true target=sm_80");
  ForwardArgs a = good_args();
  a.startend_row_indices = contiguous_view(fake(0x60000), ScalarType::int32, {2, 2, 120, 2});
  CHECK_THAT(error_of(kernel, a), Catch::Contains("lse: missing"));
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {2, 4, 99});
  CHECK_THAT(error_of(kernel, a), Catch::Contains("lse.shape[2]: got '99'; accepted: 100"));
  a.lse = contiguous_view(fake(0x50000), ScalarType::fp32, {2, 4, 100});

  ForwardArgs b = a;
  b.startend_row_indices = {};
  CHECK_THAT(error_of(kernel, b), Catch::Contains("startend_row_indices: missing"));
  b = a;
  b.startend_row_indices = contiguous_view(fake(0x60000), ScalarType::int32, {2, 2, 120, 4});
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("startend_row_indices.shape[3]: got '4'; accepted: 2"));
  b = a;
  b.startend_row_indices = contiguous_view(fake(0x60000), ScalarType::int32, {2, 3, 120, 2});
  CHECK_THAT(error_of(kernel, b), Catch::Contains("(mask heads): got '3'; accepted: 1 or 2"));
  b = a;
  b.startend_row_indices.dtype = ScalarType::fp32;
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("startend_row_indices.dtype: got 'fp32'; accepted: int32"));
  b = a;
  b.startend_row_indices.stride[2] = 4;
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("startend_row_indices.stride[2]: got '4'; accepted: 2"));

  if (!runtime::driver_available()) {
    // Valid arguments get as far as the device, which this machine does not have.
    CHECK_THAT(error_of(kernel, a), Catch::Contains("device: no CUDA driver"));
  }
}

TEST_CASE("forward names the bad predicate input", "[runtime][args]") {
  const jit::Kernel kernel =
      compiled("dtype=bf16 head_dim=64 mask=predicate(q-k<$0&&doc[q]==doc[k]) target=sm_80");
  ForwardArgs a = good_args();
  a.predicate.scalars = {100};
  a.predicate.tensors = {{"doc", contiguous_view(fake(0x50000), ScalarType::int32, {2, 120})}};

  ForwardArgs b = a;
  b.predicate.scalars = {};
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("predicate.scalars: got '0 values'; accepted: 1 values, one per "
                             "slot $0 .. $0 of mask=predicate(q-k<$0&&doc[q]==doc[k])"));
  b = a;
  b.predicate.tensors.clear();
  CHECK_THAT(error_of(kernel, b), Catch::Contains("predicate tensor 'doc': missing"));
  b = a;
  b.predicate.tensors[0].name = "docs";
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("predicate.tensors name: got 'docs'; accepted: the tensors the "
                             "predicate reads: doc"));
  b = a;
  b.predicate.tensors.push_back(b.predicate.tensors[0]);
  CHECK_THAT(error_of(kernel, b), Catch::Contains("accepted: each tensor given once"));
  b = a;
  b.predicate.tensors[0].tensor.dtype = ScalarType::fp32;
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("predicate tensor 'doc' dtype: got 'fp32'; accepted: int32"));
  b = a;
  b.predicate.tensors[0].tensor = contiguous_view(fake(0x50000), ScalarType::int32, {3, 120});
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("predicate tensor 'doc' shape[0] (rows): got '3'; accepted: 1 (shared "
                             "by every batch) or 2 (the batch)"));
  b = a;
  b.predicate.tensors[0].tensor = contiguous_view(fake(0x50000), ScalarType::int32, {2, 3, 40});
  CHECK_THAT(error_of(kernel, b), Catch::Contains("predicate tensor 'doc' rank: got '3'"));
  b = a;
  b.predicate.tensors[0].tensor.stride[0] = 128;
  CHECK_THAT(error_of(kernel, b),
             Catch::Contains("predicate tensor 'doc' stride[0]: got '128'; accepted: 120"));
  b = a;
  b.predicate.tensors[0].tensor.data = nullptr;
  CHECK_THAT(error_of(kernel, b), Catch::Contains("predicate tensor 'doc': data is null"));

  // Predicate inputs for a mask that reads none.
  const jit::Kernel causal = compiled("dtype=bf16 head_dim=64 mask=causal target=sm_80");
  ForwardArgs c = good_args();
  c.predicate.scalars = {1};
  CHECK_THAT(
      error_of(causal, c),
      Catch::Contains("predicate: 1 scalars and 0 tensors given, but mask=causal reads none"));

  if (!runtime::driver_available()) {
    // Valid arguments get as far as the device (whose memory check comes last).
    CHECK_THAT(error_of(kernel, a), Catch::Contains("device: no CUDA driver"));
  }
}

TEST_CASE("predicate masks compile, and so do their reference kernels", "[cache]") {
  const AttentionSpec spec = parse_spec("dtype=bf16 head_dim=64 mask=predicate(q>=k) target=sm_90");
  const jit::Kernel kernel = compiled("dtype=bf16 head_dim=64 mask=predicate(q>=k) target=sm_90");
  REQUIRE(kernel.info().kernels.size() == 3);
  CHECK(kernel.info().kernels[0].name.find("predicate_blocks") != std::string::npos);
  CHECK(kernel.info().kernels[1].name.find("cta_order") != std::string::npos);
  CHECK(jit::compile_reference(spec).info().kernels.size() == 1);
}

TEST_CASE("the budget of predicate tile bits comes from ATTNJIT_PREDICATE_BITS_MIB",
          "[runtime][args]") {
  using jit::detail::predicate_bits_budget;
  {
    const testing::EnvOverride unset("ATTNJIT_PREDICATE_BITS_MIB", nullptr);
    CHECK(predicate_bits_budget() == std::size_t{256} << 20);
  }
  {
    const testing::EnvOverride none("ATTNJIT_PREDICATE_BITS_MIB", "0");
    CHECK(predicate_bits_budget() == 0);
  }
  {
    const testing::EnvOverride some("ATTNJIT_PREDICATE_BITS_MIB", "3");
    CHECK(predicate_bits_budget() == std::size_t{3} << 20);
  }
  for (const char* bad : {"-1", "12x", "1.5", "1048577", " 4"}) {
    INFO(bad);
    const testing::EnvOverride value("ATTNJIT_PREDICATE_BITS_MIB", bad);
    try {
      predicate_bits_budget();
      FAIL("no error");
    } catch (const Error& error) {
      CHECK_THAT(error.what(), Catch::Contains("ATTNJIT_PREDICATE_BITS_MIB") &&
                                   Catch::Contains(bad) && Catch::Contains("from 0 to 1048576"));
    }
  }
}

TEST_CASE("predicate backward plans a key-row table for the main kernel and a query-row one for dQ",
          "[cache]") {
  const jit::Kernel kernel = compiled(
      "dtype=bf16 head_dim=64 mask=predicate(q>=k) direction=backward deterministic=true "
      "target=sm_90");
  std::vector<std::string> tables;
  for (const auto& k : kernel.info().kernels) {
    if (k.name.find("predicate_blocks") != std::string::npos) tables.push_back(k.name);
  }
  REQUIRE(tables.size() == 2);
  CHECK(tables[0].find("_key_rows") != std::string::npos);
  CHECK(tables[1].find("_key_rows") == std::string::npos);
}

TEST_CASE("forward and backward check the score modifiers' arguments", "[runtime][args]") {
  const jit::Kernel plain = compiled("dtype=bf16 head_dim=64 mask=causal target=sm_80");
  ForwardArgs a = good_args();
  a.softcap = 30.f;
  CHECK_THAT(error_of(plain, a),
             Catch::Contains("softcap: got '30'; accepted: 0 (the spec has softcap=false"));
  a = good_args();
  a.alibi_slopes = contiguous_view(fake(0x70000), ScalarType::fp32, {4});
  CHECK_THAT(error_of(plain, a),
             Catch::Contains("alibi_slopes: given, but the spec has alibi=false"));

  const jit::Kernel both =
      compiled("dtype=bf16 head_dim=64 mask=causal softcap=true alibi=true target=sm_80");
  const ForwardArgs good = [] {
    ForwardArgs g = good_args();
    g.softcap = 30.f;
    g.alibi_slopes = contiguous_view(fake(0x70000), ScalarType::fp32, {4});
    return g;
  }();
  a = good;
  a.softcap = 0.f;
  CHECK_THAT(error_of(both, a),
             Catch::Contains("softcap: got '0'; accepted: a finite value > 0 (the spec has "
                             "softcap=true)"));
  a.softcap = -2.5f;
  CHECK_THAT(error_of(both, a), Catch::Contains("softcap: got '-2.5'"));
  a.softcap = std::numeric_limits<float>::infinity();
  CHECK_THAT(error_of(both, a), Catch::Contains("softcap: got 'inf'"));
  a.softcap = std::numeric_limits<float>::quiet_NaN();
  CHECK_THAT(error_of(both, a), Catch::Contains("softcap: got 'nan'"));
  a = good;
  a.alibi_slopes = {};
  CHECK_THAT(error_of(both, a),
             Catch::Contains("alibi_slopes: missing; accepted: for alibi=true an fp32 [4] tensor"));
  a = good;
  a.alibi_slopes.dtype = ScalarType::bf16;
  CHECK_THAT(error_of(both, a), Catch::Contains("alibi_slopes.dtype: got 'bf16'; accepted: fp32"));
  a = good;
  a.alibi_slopes = contiguous_view(fake(0x70000), ScalarType::fp32, {2, 2});
  CHECK_THAT(error_of(both, a), Catch::Contains("alibi_slopes.rank: got '2'; accepted: 1"));
  a = good;
  a.alibi_slopes = contiguous_view(fake(0x70000), ScalarType::fp32, {2});
  CHECK_THAT(error_of(both, a),
             Catch::Contains("alibi_slopes.shape[0]: got '2'; accepted: 4 (heads of q)"));
  a = good;
  a.alibi_slopes.stride[0] = 2;
  CHECK_THAT(error_of(both, a),
             Catch::Contains("alibi_slopes.stride[0]: got '2'; accepted: 1 (the tensor must be "
                             "contiguous)"));
  a = good;
  a.alibi_slopes.data = fake(0x70002);
  CHECK_THAT(error_of(both, a),
             Catch::Contains("alibi_slopes.data") && Catch::Contains("4-byte aligned"));

  const jit::Kernel grad =
      compiled("dtype=bf16 head_dim=64 mask=causal softcap=true direction=backward target=sm_80");
  BackwardArgs b = backward_of(good);
  const auto backward_error = [&](const BackwardArgs& args) {
    return testing::error_text([&] { grad.backward(args); });
  };
  CHECK_THAT(backward_error(b), Catch::Contains("softcap: got '0'; accepted: a finite value > 0"));
  b.softcap = 50.f;
  b.alibi_slopes = good.alibi_slopes;
  CHECK_THAT(backward_error(b),
             Catch::Contains("alibi_slopes: given, but the spec has alibi=false"));
  if (!runtime::driver_available()) {
    b.alibi_slopes = {};
    CHECK_THAT(backward_error(b), Catch::Contains("device: no CUDA driver"));
    CHECK_THAT(error_of(both, good), Catch::Contains("device: no CUDA driver"));
  }
}

TEST_CASE("forward and backward check the sinks and their gradient", "[runtime][args]") {
  const jit::Kernel plain = compiled("dtype=bf16 head_dim=64 mask=causal target=sm_80");
  const TensorView sinks = contiguous_view(fake(0x70000), ScalarType::fp32, {4});
  ForwardArgs a = good_args();
  a.sinks = sinks;
  CHECK(error_of(plain, a) ==
        "sinks: given, but the spec has sinks=false; accepted: no sinks (compile with sinks=true "
        "to add sink logits)");

  const jit::Kernel forward =
      compiled("dtype=bf16 head_dim=64 mask=causal sinks=true target=sm_80");
  ForwardArgs good = good_args();
  good.sinks = sinks;
  a = good;
  a.sinks = {};
  CHECK(error_of(forward, a) ==
        "sinks: missing; accepted: for sinks=true an fp32 [4] tensor (one sink logit per query "
        "head) in device memory");
  a = good;
  a.sinks.dtype = ScalarType::bf16;
  CHECK(error_of(forward, a) == "sinks.dtype: got 'bf16'; accepted: fp32");
  a = good;
  a.sinks = contiguous_view(fake(0x70000), ScalarType::fp32, {2, 2});
  CHECK(error_of(forward, a) ==
        "sinks.rank: got '2'; accepted: 1 ([heads], one sink logit per query head)");
  a = good;
  a.sinks = contiguous_view(fake(0x70000), ScalarType::fp32, {2});
  CHECK(error_of(forward, a) == "sinks.shape[0]: got '2'; accepted: 4 (heads of q)");
  a = good;
  a.sinks.stride[0] = 2;
  CHECK(error_of(forward, a) ==
        "sinks.stride[0]: got '2'; accepted: 1 (the tensor must be contiguous)");
  a = good;
  a.sinks.data = fake(0x70002);
  CHECK(error_of(forward, a) == "sinks.data: got '0x70002'; accepted: a 4-byte aligned address");

  const jit::Kernel backward =
      compiled("dtype=bf16 head_dim=64 mask=causal sinks=true direction=backward target=sm_80");
  BackwardArgs b = backward_of(good);
  b.sinks = sinks;
  const auto backward_error = [&](const jit::Kernel& kernel, const BackwardArgs& args) {
    return testing::error_text([&] { kernel.backward(args); });
  };
  CHECK(backward_error(backward, b) ==
        "d_sinks: missing; accepted: for sinks=true an fp32 [4] tensor (the sinks' gradient, one "
        "per query head, written by the backward) in device memory");
  b.d_sinks = contiguous_view(fake(0xc0000), ScalarType::fp16, {4});
  CHECK(backward_error(backward, b) == "d_sinks.dtype: got 'fp16'; accepted: fp32");
  b.d_sinks = contiguous_view(fake(0xc0000), ScalarType::fp32, {8});
  CHECK(backward_error(backward, b) == "d_sinks.shape[0]: got '8'; accepted: 4 (heads of q)");
  b.d_sinks = contiguous_view(fake(0xc0000), ScalarType::fp32, {4});
  b.sinks = {};
  CHECK(backward_error(backward, b) ==
        "sinks: missing; accepted: for sinks=true an fp32 [4] tensor (one sink logit per query "
        "head) in device memory");
  const jit::Kernel no_sinks =
      compiled("dtype=bf16 head_dim=64 mask=causal direction=backward target=sm_80");
  CHECK(backward_error(no_sinks, b) ==
        "d_sinks: given, but the spec has sinks=false; accepted: no d_sinks (compile with "
        "sinks=true to return the sinks' gradient)");
  if (!runtime::driver_available()) {
    b.sinks = sinks;
    CHECK_THAT(backward_error(backward, b), Catch::Contains("device: no CUDA driver"));
    CHECK_THAT(error_of(forward, good), Catch::Contains("device: no CUDA driver"));
  }
}

TEST_CASE("the workspace: its size for the shapes, and a caller's that is too small",
          "[runtime][args]") {
  // Causal needs no scratch; FlashMask needs its min/max tables and CTA order.
  CHECK(compiled("dtype=bf16 head_dim=64 mask=causal target=sm_80").workspace_size(good_args()) ==
        0);
  const jit::Kernel kernel =
      compiled("dtype=bf16 head_dim=64 mask=flashmask(causal=true,columns=1) target=sm_80");
  ForwardArgs a = good_args();
  a.startend_row_indices = contiguous_view(fake(0x50000), ScalarType::int32, {2, 1, 120, 1});
  const std::size_t bytes = kernel.workspace_size(a);
  CHECK(bytes > 0);
  CHECK(bytes % 256 == 0);
  // Data pointers play no part in the size.
  ForwardArgs shapes_only = a;
  shapes_only.q.data = shapes_only.k.data = shapes_only.v.data = shapes_only.o.data = nullptr;
  CHECK(kernel.workspace_size(shapes_only) == bytes);
  // Longer keys, more key blocks: a larger table and order.
  ForwardArgs longer = a;
  longer.k.shape[1] = longer.v.shape[1] = longer.startend_row_indices.shape[2] = 12000;
  longer.k.stride = contiguous_view(nullptr, ScalarType::bf16, {2, 12000, 2, 64}).stride;
  longer.v.stride = longer.k.stride;
  CHECK(kernel.workspace_size(longer) > bytes);

  a.workspace = {fake(0x60000), bytes - 256};
  CHECK(error_of(kernel, a) == fmt::format("workspace.bytes: got '{}'; accepted: at least {} bytes "
                                           "for these shapes (Kernel::workspace_size)",
                                           bytes - 256, bytes));
  a.workspace = {fake(0x60010), bytes};
  CHECK_THAT(error_of(kernel, a), Catch::Contains("workspace.data") &&
                                      Catch::Contains("a 256-byte aligned device pointer"));
  a.workspace = {nullptr, bytes};
  CHECK_THAT(error_of(kernel, a), Catch::StartsWith("workspace.data: got 'null'"));

  const jit::Kernel backward =
      compiled("dtype=bf16 head_dim=64 mask=causal direction=backward target=sm_80");
  BackwardArgs b;
  b.q = a.q;
  b.k = a.k;
  // The dQ accumulator (B*H*Sq*d fp32) and the row statistics (2 of B*H*Sq fp32), each rounded
  // to 256 bytes; no GQA partials with H == Hkv.
  b.k.shape[2] = 4;
  const std::size_t rows = 2 * 4 * 100;
  const auto round = [](std::size_t n) { return (n + 255) / 256 * 256; };
  CHECK(backward.workspace_size(b) == 2 * round(rows * 4) + round(rows * 64 * 4));
}
