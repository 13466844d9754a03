// dtype=e4m3: the spec text, and the refusals that name what this version takes (the sm90a
// forward over the call's tensors, equal head dims 64, 128 or 256, masks by index).
#include <catch2/catch.hpp>

#include <string>

#include "attnjit/spec.hpp"
#include "compiler/passes/pipeline.hpp"
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
            .starts_with("dtype: e4m3 with kv_cache=paged varlen=false; accepted: "
                         "kv_cache=none varlen=false"));
  CHECK(refusal("dtype=e4m3 head_dim=128 varlen=true target=sm_90a")
            .starts_with("dtype: e4m3 with kv_cache=none varlen=true; accepted: kv_cache=none "
                         "varlen=false"));
  for (const char* target : {"sm_80", "sm_89", "sm_90"}) {
    CHECK(refusal(std::string("dtype=e4m3 head_dim=128 target=") + target) ==
          std::string("target: got '") + target +
              " with dtype=e4m3'; accepted: sm_90a (FP8 products are Hopper's wgmma forms)");
  }
}
