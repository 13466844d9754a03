// The spec's canonical text form: parsing, printing, round trips and parse errors.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/spec.hpp"
#include "support/error_text.hpp"

using namespace attnjit;

namespace {

/// The message parse_spec gives for `text`, or "no error".
std::string message(const std::string& text) {
  return testing::error_text([&] { parse_spec(text); });
}

}  // namespace

TEST_CASE("the issue's spec strings parse exactly as written", "[ir]") {
  const AttentionSpec a = parse_spec("dtype=bf16 head_dim=128 mask=causal");
  CHECK(a.dtype == DType::bf16);
  CHECK(a.head_dim_qk == 128);
  CHECK(a.head_dim_v == 128);
  CHECK(a.mask == MaskSpec{MaskKind::causal, false, 0});
  CHECK(a.target == Arch::auto_detect);
  CHECK(!a.return_lse);

  CHECK(parse_spec("dtype=fp16 head_dim=64 mask=none").dtype == DType::fp16);
  CHECK(parse_spec("dtype=bf16 head_dim=128 mask=sliding_window").mask.kind ==
        MaskKind::sliding_window);
  CHECK(parse_spec("dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1)").mask ==
        MaskSpec{MaskKind::flashmask, true, 1});
  CHECK(parse_spec("dtype=bf16 head_dim=256 mask=flashmask(causal=false,columns=4)").mask ==
        MaskSpec{MaskKind::flashmask, false, 4});
}

TEST_CASE("print and parse round trip", "[ir]") {
  const char* texts[] = {
      "dtype=bf16 head_dim=128 mask=causal",
      "dtype=fp16 head_dim_qk=64 head_dim_v=64 mask=flashmask(causal=false,columns=2) "
      "return_lse=true target=sm_90a",
      "dtype=bf16 head_dim=96 mask=sliding_window direction=forward target=sm_86 "
      "tiles=64x64x4:q_registers",
      "dtype=bf16 head_dim=32 tiles=128x128x4",
      "dtype=bf16 head_dim=64 mask=causal softcap=true",
      "dtype=fp16 head_dim=128 alibi=true softcap=true direction=backward deterministic=true",
      "dtype=bf16 head_dim=64 mask=causal sinks=true direction=backward deterministic=true",
      "dtype=bf16 head_dim=128 sinks=true softcap=true varlen=true",
  };
  for (const char* text : texts) {
    INFO(text);
    const AttentionSpec spec = parse_spec(text);
    const std::string printed = to_string(spec);
    CHECK(parse_spec(printed) == spec);
    CHECK(to_string(parse_spec(printed)) == printed);
  }
  CHECK(
      to_string(parse_spec("mask=causal head_dim=64 dtype=fp16")) ==
      "dtype=fp16 head_dim_qk=64 head_dim_v=64 mask=causal softcap=false alibi=false "
      "sinks=false return_lse=false direction=forward deterministic=false target=auto tiles=auto");
}

TEST_CASE("tiles take a named layout after a colon; one-letter suffixes are refused", "[ir]") {
  const auto tiles = [](const std::string& value) {
    return parse_spec("dtype=bf16 head_dim=64 tiles=" + value).tiles;
  };
  CHECK(tiles("auto").is_auto());
  CHECK(tiles("128x64x4") == TileShape{128, 64, 4, TileLayout::automatic});
  for (const TileLayoutInfo& info : tile_layouts()) {
    if (info.name.empty()) continue;
    INFO(info.name);
    const std::string value = fmt::format("64x128x12:{}", info.name);
    CHECK(tiles(value) == TileShape{64, 128, 12, info.layout});
    CHECK(to_string(tiles(value)) == value);
  }
  CHECK(to_string(TileShape{128, 64, 4, TileLayout::automatic}) == "128x64x4");
  CHECK(to_string(TileShape{}) == "auto");

  auto message = [](const std::string& value) {
    try {
      parse_spec("dtype=bf16 head_dim=64 tiles=" + value);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  const std::string accepted =
      "auto or BMxBNxW[:LAYOUT], LAYOUT one of q_registers, q_shared, warpgroups (forward) or "
      "slabs, grid, warpgroups (backward), e.g. 128x64x4:q_shared";
  CHECK(message("64x128x12t") ==
        "tiles: got '64x128x12t'; the one-letter suffixes are gone: write 64x128x12:warpgroups "
        "(accepted: " +
            accepted + ")");
  const std::pair<const char*, const char*> retired[] = {{"128x64x4q", "128x64x4:q_registers"},
                                                         {"128x64x8s", "128x64x8:q_shared"},
                                                         {"128x128x12w", "128x128x12:warpgroups"},
                                                         {"64x128x8g", "64x128x8:grid"}};
  for (const auto& [old_value, new_value] : retired) {
    CHECK_THAT(
        message(old_value),
        Catch::StartsWith(fmt::format(
            "tiles: got '{}'; the one-letter suffixes are gone: write {} ", old_value, new_value)));
  }
  CHECK(message("64x64x4:qshared") == "tiles: got '64x64x4:qshared'; accepted: " + accepted);
  CHECK(message("64x64x4:") == "tiles: got '64x64x4:'; accepted: " + accepted);
  CHECK(message(":grid") == "tiles: got ':grid'; accepted: " + accepted);
  CHECK(message("64x64x4x") == "tiles: got '64x64x4x'; accepted: " + accepted);
}

TEST_CASE("score modifiers are spec flags, off by default", "[ir]") {
  const AttentionSpec plain = parse_spec("dtype=bf16 head_dim=128 mask=causal");
  CHECK(!plain.softcap);
  CHECK(!plain.alibi);
  const AttentionSpec both = parse_spec("dtype=bf16 head_dim=128 alibi=true softcap=true");
  CHECK(both.softcap);
  CHECK(both.alibi);
  CHECK_THAT(to_string(both),
             Catch::Contains("mask=none softcap=true alibi=true sinks=false return_lse="));
  CHECK(parse_spec("dtype=bf16 head_dim=128 softcap=true") != plain);
  CHECK(parse_spec("dtype=bf16 head_dim=128 mask=causal alibi=false softcap=false") == plain);
  CHECK_THROWS_WITH(parse_spec("dtype=bf16 head_dim=128 softcap=30"),
                    Catch::Contains("softcap: got '30'; accepted: true, false"));
  CHECK_THROWS_WITH(parse_spec("dtype=bf16 head_dim=128 alibi=yes"),
                    Catch::Contains("alibi: got 'yes'; accepted: true, false"));
  CHECK_THROWS_WITH(parse_spec("dtype=bf16 head_dim=128 alibi=true alibi=true"),
                    Catch::Contains("given twice"));
}

TEST_CASE("sinks are a spec flag printed after alibi, off by default", "[ir]") {
  const AttentionSpec plain = parse_spec("dtype=bf16 head_dim=128 mask=causal");
  CHECK(!plain.sinks);
  const AttentionSpec sinks = parse_spec("dtype=bf16 head_dim=128 mask=causal sinks=true");
  CHECK(sinks.sinks);
  CHECK(sinks != plain);
  CHECK(parse_spec("dtype=bf16 head_dim=128 mask=causal sinks=false") == plain);
  CHECK(to_string(sinks) ==
        "dtype=bf16 head_dim_qk=128 head_dim_v=128 mask=causal softcap=false alibi=false "
        "sinks=true return_lse=false direction=forward deterministic=false target=auto "
        "tiles=auto");
  CHECK(parse_spec(to_string(sinks)) == sinks);
  CHECK_THROWS_WITH(parse_spec("dtype=bf16 head_dim=128 sinks=1"),
                    Catch::Equals("sinks: got '1'; accepted: true, false"));
  CHECK_THROWS_WITH(parse_spec("dtype=bf16 head_dim=128 sinks=true sinks=false"),
                    Catch::Contains("spec: key 'sinks' is given twice"));
}

TEST_CASE("parse errors name the field, the value and what is accepted", "[ir]") {
  // Each spec text and the part of its message that names the field, the value and the
  // accepted values.
  const std::pair<const char*, const char*> bad_specs[] = {
      {"dtype=fp32 head_dim=128", "dtype: got 'fp32'; accepted: fp16, bf16"},
      {"dtype=bf16 head_dim=abc", "head_dim: got 'abc'"},
      {"dtype=bf16 head_dim=128 colour=red", "spec key: got 'colour'; accepted: dtype,"},
      {"dtype=bf16 head_dim=128 mask=flashmask(causal=true", "mask: got 'flashmask(causal=true'"},
      {"dtype=bf16 head_dim=128 mask=flashmask", "without arguments"},
      {"dtype=bf16 head_dim=128 mask=flashmask(causal=yes,columns=1)",
       "flashmask causal: got 'yes'; accepted: true, false"},
      {"dtype=bf16 head_dim=128 mask=flashmask(columns=1)", "needs both arguments"},
      {"dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1,)", "argument: got ''"},
      {"dtype=bf16 head_dim=128 mask=flashmask(causal=true,columns=1,x=2)", "argument: got 'x=2'"},
      {"dtype=bf16 head_dim=128 dtype=fp16", "given twice"},
      {"head_dim=128", "dtype: missing"},
      {"dtype=bf16", "head_dim: missing"},
      {"dtype=bf16 head_dim=64 head_dim_qk=64", "give one or the other"},
      {"dtype=bf16 head_dim_qk=64", "head_dim_v: missing"},
      {"dtype=bf16 head_dim=64 target=sm_75", "target: got 'sm_75'; accepted: auto, sm_80"},
      {"dtype=bf16 head_dim=64 return_lse=1", "return_lse: got '1'; accepted: true, false"},
      {"dtype=bf16 head_dim=64 junk", "key=value words"},
  };
  for (const auto& [text, expected] : bad_specs) {
    CHECK_THAT(message(text), Catch::Contains(expected));
  }
  CHECK_THAT(message("dtype=bf16 head_dim=64 tiles=128x64"),
             Catch::Contains("tiles: got '128x64'"));
}

TEST_CASE("a predicate mask is spec text without spaces and round-trips", "[ir]") {
  const AttentionSpec spec =
      parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k&&doc[q]==doc[k]) target=sm_90");
  MaskSpec expected{MaskKind::predicate};
  expected.predicate = "q>=k&&doc[q]==doc[k]";
  CHECK(spec.mask == expected);
  CHECK(to_string(spec.mask) == "predicate(q>=k&&doc[q]==doc[k])");
  CHECK(parse_spec(to_string(spec)) == spec);
  const AttentionSpec nested = parse_spec("dtype=bf16 head_dim=64 mask=predicate(min(q,k)<$0)");
  CHECK(nested.mask.predicate == "min(q,k)<$0");
  CHECK(parse_spec(to_string(nested)) == nested);

  const std::string spaces =
      "accepted: predicate(EXPR) with EXPR written without spaces (spec words are separated by "
      "spaces), e.g. mask=predicate(q>=k&&doc[q]==doc[k])";
  CHECK(message("dtype=bf16 head_dim=64 mask=predicate(q >= k)") ==
        "mask: got 'predicate(q'; " + spaces);
  CHECK(message("dtype=bf16 head_dim=64 mask=predicate(min(q,k) < 4)") ==
        "mask: got 'predicate(min(q,k)'; " + spaces);
  CHECK(message("dtype=bf16 head_dim=64 mask=predicate(q)x") ==
        "mask: got 'predicate(q)x'; " + spaces);
  CHECK(message("dtype=bf16 head_dim=64 mask=predicate") ==
        "mask: got 'predicate' without arguments; accepted: predicate(EXPR), e.g. predicate(q>=k)");
}

TEST_CASE("the spec parser lifts a predicate's literals into runtime scalars", "[ir]") {
  const AttentionSpec spec = parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k&&(q-k)<256)");
  CHECK(spec.mask.kind == MaskKind::predicate);
  CHECK(spec.mask.predicate == "q>=k&&q-k<$0");
  CHECK(spec.mask.scalars == std::vector<std::int32_t>{256});
  // The text prints the values back in place, so it round-trips.
  CHECK(to_string(spec.mask) == "predicate(q>=k&&q-k<256)");
  CHECK(parse_spec(to_string(spec)) == spec);

  // Only the values differ: the same lifted structure, other scalars.
  const AttentionSpec other = parse_spec("dtype=bf16 head_dim=128 mask=predicate(q>=k&&(q-k)<512)");
  CHECK(other.mask.predicate == spec.mask.predicate);
  CHECK(other.mask.scalars == std::vector<std::int32_t>{512});

  // Several literals in order of appearance, negative ones included; canonical text.
  const AttentionSpec many =
      parse_spec("dtype=fp16 head_dim=64 mask=predicate((k%64)!=-1&&doc[q+2]==doc[k])");
  CHECK(many.mask.predicate == "k%$0!=$1&&doc[q+$2]==doc[k]");
  CHECK(many.mask.scalars == std::vector<std::int32_t>{64, -1, 2});
  CHECK(parse_spec(to_string(many)) == many);

  // Without literals nothing is lifted; $N slots stay for the launch to fill.
  CHECK(parse_spec("dtype=bf16 head_dim=64 mask=predicate(q-k<$0)").mask.scalars.empty());
  CHECK(parse_spec("dtype=bf16 head_dim=64 mask=predicate(((q>=k)))").mask.predicate == "q>=k");
}

TEST_CASE("a predicate in a spec names its errors by line and column", "[ir]") {
  CHECK(message("dtype=bf16 head_dim=64 mask=predicate(q>=k&&(q-k)<)") ==
        "mask=predicate(q>=k&&(q-k)<): mask expression, line 1 column 13: expected an operand (a "
        "number, b, h, q, k, $N, name[index], min, max, abs or '('), got end of input");
  CHECK(message("dtype=bf16 head_dim=64 mask=predicate(q-k<$0+1)") ==
        "mask=predicate(q-k<$0+1): got 'q-k<$0+1'; accepted: numbers (each becomes a runtime "
        "scalar) or $N slots (the launch gives their values), not both");
  // At most as many numbers as the kernels have scalar slots.
  std::string sixteen = "q>=0";
  for (int i = 1; i < 16; ++i) sixteen += "&&k!=" + std::to_string(i);
  CHECK(parse_spec("dtype=bf16 head_dim=64 mask=predicate(" + sixteen + ")").mask.scalars.size() ==
        16);
  CHECK_THAT(message("dtype=bf16 head_dim=64 mask=predicate(" + sixteen + "&&k!=16)"),
             Catch::Contains("16"));
  CHECK_THROWS_AS(parse_spec("dtype=bf16 head_dim=64 mask=predicate(" + sixteen + "&&k!=16)"),
                  Error);
}

TEST_CASE("errors quote at most about 200 bytes of the input", "[ir]") {
  const std::string huge(120000, 'x');
  for (const std::string& text :
       {"dtype=bf16 head_dim=64 mask=" + huge, "dtype=bf16 head_dim=64 " + huge + "=1",
        "dtype=bf16 " + huge + "=1 " + huge + "=1", "dtype=bf16 head_dim=" + huge,
        "dtype=bf16 head_dim=64 mask=" + huge + "(", "dtype=bf16 head_dim=64 " + huge}) {
    try {
      parse_spec(text);
      FAIL("no error");
    } catch (const Error& error) {
      const std::string message = error.what();
      INFO(message.substr(0, 400));
      CHECK(message.size() < 600);
      CHECK_THAT(message, Catch::Contains("... (120"));
    }
  }
  CHECK(quoted_input("short") == "short");
  CHECK(quoted_input(std::string(200, 'a')) == std::string(200, 'a'));
  // Cut before a multi-byte character, never inside one.
  const std::string accents = std::string(159, 'a') + "\xc3\xa9" + std::string(100, 'b');
  CHECK(quoted_input(accents) == std::string(159, 'a') + "... (261 bytes in all)");
}

TEST_CASE("the table of mask kinds: every kind's row names, spells and prints it", "[ir]") {
  const auto kinds = mask_kinds();
  REQUIRE(kinds.size() == 5);
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const MaskKindInfo& row = kinds[i];
    INFO(row.name);
    CHECK(static_cast<std::size_t>(row.kind) == i);
    CHECK(&info_of(row.kind) == &row);
    CHECK(name_of(row.kind) == row.name);
    CHECK(row.syntax.substr(0, row.name.size()) == row.name);
    CHECK((row.parse_arguments == nullptr) == (row.syntax == row.name));
  }
  CHECK(info_of(MaskKind::flashmask).interval_vectors);
  CHECK(info_of(MaskKind::predicate).predicate);
  const std::string spec = "dtype=bf16 head_dim=64 mask=";
  CHECK(message(spec + "diag") ==
        "mask: got 'diag'; accepted: none, causal, sliding_window, flashmask, "
        "predicate");
  CHECK(message(spec + "none(1)") ==
        "mask: got 'none(1)'; accepted: none, causal, sliding_window, "
        "flashmask(causal=true|false,columns=1|2|4), predicate(EXPR)");
  CHECK(message(spec + "predicate") ==
        "mask: got 'predicate' without arguments; accepted: predicate(EXPR), e.g. predicate(q>=k)");
  CHECK(message(spec + "flashmask") ==
        "mask: got 'flashmask' without arguments; accepted: "
        "flashmask(causal=true|false,columns=1|2|4)");
}
