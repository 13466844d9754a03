// The spec's key table (spec_keys(), what attnc's help lists) and the dtype aliases.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/spec.hpp"

using namespace attnjit;
using Catch::Contains;

TEST_CASE("spec_keys lists every key parse_spec accepts, and only those", "[ir]") {
  const std::vector<SpecKey> keys = spec_keys();
  std::vector<std::string> names;
  for (const SpecKey& key : keys) {
    names.emplace_back(key.name);
    CHECK(!key.accepted.empty());
  }
  CHECK(names == std::vector<std::string>{"dtype", "head_dim", "head_dim_qk", "head_dim_v", "mask",
                                          "softcap", "alibi", "sinks", "return_lse", "direction",
                                          "deterministic", "target", "tiles", "varlen", "kv_cache",
                                          "kv_dtype"});
  // Every key of the canonical text is one of them (head_dim stands for both head dims).
  const std::string canonical = to_string(parse_spec("dtype=bf16 head_dim=64 varlen=true"));
  for (std::size_t from = 0; from < canonical.size();) {
    const std::size_t eq = canonical.find('=', from);
    const std::string key = canonical.substr(from, eq - from);
    INFO(key);
    CHECK(std::find(names.begin(), names.end(), key) != names.end());
    from = std::min(canonical.find(' ', eq), canonical.size()) + 1;
  }
  // An unknown key's message lists the table's keys.
  std::string listed;
  for (const std::string& name : names) listed += (listed.empty() ? "" : ", ") + name;
  CHECK_THROWS_WITH(parse_spec("dtype=bf16 head_dim=64 colour=red"),
                    Contains("spec key: got 'colour'; accepted: " + listed));
}

TEST_CASE("spec_keys says what each key accepts, from the parser's own tables", "[ir]") {
  const auto accepted = [](std::string_view name) {
    for (const SpecKey& key : spec_keys()) {
      if (key.name == name) return key.accepted;
    }
    FAIL("no key " << name);
    return std::string();
  };
  CHECK(accepted("dtype") ==
        "fp16, bf16, e4m3 (required; also float16, half, bfloat16, float8_e4m3fn)");
  CHECK_THAT(accepted("mask"), Contains("flashmask(causal=true|false,columns=1|2|4)"));
  CHECK_THAT(accepted("mask"), Contains("predicate(EXPR)"));
  CHECK_THAT(accepted("target"), Contains("sm_80, sm_86, sm_89, sm_90, sm_90a"));
  CHECK(accepted("softcap") == "false (default), true");
  CHECK(accepted("direction") == "forward (default), backward");
  CHECK_THAT(accepted("tiles"), Contains("BMxBNxW"));
}

TEST_CASE("dtype aliases parse to the canonical dtype and never reach the canonical text", "[ir]") {
  const AttentionSpec bf16 = parse_spec("dtype=bf16 head_dim=128 mask=causal");
  const AttentionSpec fp16 = parse_spec("dtype=fp16 head_dim=128 mask=causal");
  CHECK(parse_spec("dtype=bfloat16 head_dim=128 mask=causal") == bf16);
  CHECK(parse_spec("dtype=float16 head_dim=128 mask=causal") == fp16);
  CHECK(parse_spec("dtype=half head_dim=128 mask=causal") == fp16);
  // The canonical text (the cache key's input) names the canonical dtype.
  CHECK(to_string(parse_spec("dtype=bfloat16 head_dim=128 mask=causal")) == to_string(bf16));
  CHECK(to_string(parse_spec("dtype=half head_dim=128 mask=causal")) == to_string(fp16));
  CHECK_THAT(to_string(parse_spec("dtype=float16 head_dim=64")), Contains("dtype=fp16 "));
  // Aliases are exact words: no case folding, no other spellings.
  CHECK_THROWS_WITH(parse_spec("dtype=BFloat16 head_dim=64"),
                    Contains("dtype: got 'BFloat16'; accepted: fp16, bf16"));
  CHECK_THROWS_WITH(parse_spec("dtype=float32 head_dim=64"),
                    Contains("dtype: got 'float32'; accepted: fp16, bf16"));
}
