// dtype=e4m3: the spec text, the refusals that name what this version takes (the sm90a
// forward over the call's tensors, padded or packed, equal head dims 64, 128 or 256, masks by
// index or FlashMask vectors), and the descales' shapes.
#include <catch2/catch.hpp>

#include <string>

#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "compiler/passes/pipeline.hpp"
#include "runtime/launch/launch_support.hpp"
#include "support/error_text.hpp"

using namespace attnjit;

TEST_CASE("e4m3 is a dtype of the spec text, printed as e4m3", "[ir][fp8]") {
  const AttentionSpec spec = parse_spec("dtype=e4m3 head_dim=128 mask=causal target=sm_90a");
  CHECK(spec.dtype == DType::e4m3);
  CHECK(to_string(spec).starts_with("dtype=e4m3 "));
  CHECK(parse_spec(to_string(spec)) == spec);
  CHECK(parse_spec("dtype=float8_e4m3fn head_dim=128 target=sm_90a") ==
        parse_spec("dtype=e4m3 head_dim=128 target=sm_90a"));
  CHECK(size_of(DType::e4m3) == 1);
  const Lowering ir = lower(spec);
  CHECK(ir.plan->find(KernelRole::forward)->row == "forward.sm90a");
}

TEST_CASE("e4m3 refusals name the field, the value and what is accepted", "[pass][fp8]") {
  const auto refusal = [](const std::string& text) {
    return testing::error_text([&] { lower(parse_spec(text)); });
  };
  CHECK(refusal("dtype=e4m3 head_dim=128 direction=backward target=sm_90a")
            .starts_with("dtype: e4m3 with direction=backward; accepted: direction=forward"));
  CHECK(refusal("dtype=e4m3 head_dim=96 target=sm_90a") ==
        "head_dim: got '96 with dtype=e4m3'; accepted: 64, 128 or 256 (equal head dims)");
  CHECK(refusal("dtype=e4m3 head_dim_qk=192 head_dim_v=128 target=sm_90a") ==
        "head_dim: got '(192, 128) with dtype=e4m3'; accepted: 64, 128 or 256 (equal head "
        "dims)");
  CHECK(refusal("dtype=e4m3 head_dim=128 mask=predicate(q>=k) target=sm_90a")
            .starts_with("mask: got 'predicate(q>=k) with dtype=e4m3'; accepted: none, causal, "
                         "sliding_window or flashmask(...)"));
  CHECK(refusal("dtype=e4m3 head_dim=128 kv_cache=paged target=sm_90a")
            .starts_with("dtype: e4m3 with kv_cache=paged; accepted: kv_cache=none (an FP8 "
                         "cache under 16-bit queries is kv_dtype=e4m3)"));
  for (const char* target : {"sm_80", "sm_89", "sm_90"}) {
    CHECK(refusal(std::string("dtype=e4m3 head_dim=128 target=") + target) ==
          std::string("target: got '") + target +
              " with dtype=e4m3'; accepted: sm_90a (FP8 products are Hopper's wgmma forms)");
  }
}

TEST_CASE("a packed batch's e4m3 descales are per sequence and set the per-row factors",
          "[runtime][fp8][varlen]") {
  const AttentionSpec packed =
      parse_spec("dtype=e4m3 head_dim=128 mask=causal varlen=true target=sm_90a");
  CHECK_NOTHROW(lower(packed));
  jit::detail::Shapes shapes;
  shapes.batch = 1;  // a packed batch launches as one row
  shapes.kv_heads = 2;
  ForwardArgs args;
  int boundaries[4] = {};  // three sequences; the values stay on the device
  args.varlen.cu_seqlens_q = contiguous_view(boundaries, ScalarType::int32, {4});
  float factors[6] = {};
  const TensorView per_sequence = contiguous_view(factors, ScalarType::fp32, {3, 2});
  const TensorView one = contiguous_view(factors, ScalarType::fp32, {1});
  FwdParams p{};

  args.q_descale = per_sequence;
  args.k_descale = one;
  jit::detail::fill_descales(p, packed, args, shapes);
  CHECK(p.descale_rows == 1);
  CHECK(p.descale_per_tensor == 2);
  CHECK(p.q_descale == factors);

  // Factors per tensor keep the CTA's factors; so does a padded batch's [B, Hkv].
  args.q_descale = one;
  jit::detail::fill_descales(p, packed, args, shapes);
  CHECK(p.descale_rows == 0);
  CHECK(p.descale_per_tensor == 3);
  const AttentionSpec padded = parse_spec("dtype=e4m3 head_dim=128 mask=causal target=sm_90a");
  jit::detail::Shapes padded_shapes = shapes;
  padded_shapes.batch = 3;
  ForwardArgs padded_args;
  padded_args.v_descale = per_sequence;
  jit::detail::fill_descales(p, padded, padded_args, padded_shapes);
  CHECK(p.descale_rows == 0);
  CHECK(p.descale_per_tensor == 0);

  // [1, Hkv] is not a packed batch's shape (its launch's batch of one row notwithstanding).
  args.v_descale = contiguous_view(factors, ScalarType::fp32, {1, 2});
  CHECK(testing::error_text([&] { jit::detail::fill_descales(p, packed, args, shapes); }) ==
        "v_descale.shape: got '[1, 2]'; accepted: [3, 2] contiguous (sequences, kv heads) or "
        "[1]");
}
