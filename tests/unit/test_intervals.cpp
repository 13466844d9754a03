// Unit tests of dsl/intervals: the column roles and element rule, validation messages,
// stacking, head broadcast and the dense rendering.
#include <array>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attnjit/error.hpp"
#include "dsl/intervals.hpp"
#include "support/error_text.hpp"

using attnjit::Error;
using attnjit::MaskKind;
using attnjit::dsl::IntervalVectors;
using Catch::Matchers::Contains;

namespace {

/// One sample, one head, with `data` given column by column.
IntervalVectors make(bool causal, int columns, int seqlen_q, int seqlen_k,
                     std::vector<std::int32_t> data) {
  return IntervalVectors{causal, columns, 1, 1, seqlen_q, seqlen_k, std::move(data)};
}

/// The rows masked in column `col`, as a string of 0/1 from row 0 down.
std::string masked_rows(const IntervalVectors& m, int col, int b = 0, int h = 0) {
  std::string rows;
  for (int row = 0; row < m.seqlen_q; ++row) {
    rows += attnjit::dsl::is_masked(m, b, h, row, col) ? '1' : '0';
  }
  return rows;
}

std::string validation_message(const IntervalVectors& m) {
  return attnjit::testing::error_text([&] { attnjit::dsl::validate(m); });
}

}  // namespace

TEST_CASE("interval vectors index batch, head, column and vector", "[dsl]") {
  IntervalVectors m = make(false, 2, 4, 3, {});
  m.batch = 2;
  m.heads = 2;
  for (int n = 0; n < 2 * 2 * 3 * 2; ++n) m.data.push_back(n);
  CHECK(m.at(0, 0, 0, 0) == 0);
  CHECK(m.at(0, 0, 0, 1) == 1);
  CHECK(m.at(0, 0, 2, 1) == 5);
  CHECK(m.at(0, 1, 0, 0) == 6);
  CHECK(m.at(1, 0, 0, 0) == 12);
  CHECK(m.at(1, 1, 2, 1) == 23);
  const attnjit::MaskSpec spec = m.mask_spec();
  CHECK(spec.kind == MaskKind::flashmask);
  CHECK_FALSE(spec.causal);
  CHECK(spec.columns == 2);
}

TEST_CASE("column roles follow the flashmask table", "[dsl]") {
  SECTION("causal, 1 column: causal part and [LTS, Sq)") {
    const IntervalVectors m = make(true, 1, 6, 6, {3, 6, 6, 5, 6, 6});
    CHECK(masked_rows(m, 0) == "000111");
    CHECK(masked_rows(m, 1) == "100000");
    CHECK(masked_rows(m, 2) == "110000");
    CHECK(masked_rows(m, 3) == "111001");
    CHECK(masked_rows(m, 5) == "111110");
  }
  SECTION("causal, 2 columns: causal part and [LTS, LTE)") {
    const IntervalVectors m = make(true, 2, 6, 6, {2, 4, 6, 6, 3, 3});
    CHECK(masked_rows(m, 0) == "001100");
    CHECK(masked_rows(m, 1) == "100000");
    CHECK(masked_rows(m, 2) == "110000");
  }
  SECTION("non-causal, 2 columns: [LTS, Sq) and [0, UTE)") {
    const IntervalVectors m = make(false, 2, 6, 6, {4, 2, 6, 0, 0, 6});
    CHECK(masked_rows(m, 0) == "110011");
    CHECK(masked_rows(m, 1) == "000000");
    CHECK(masked_rows(m, 2) == "111111");
  }
  SECTION("non-causal, 4 columns: [LTS, LTE) and [UTS, UTE)") {
    const IntervalVectors m = make(false, 4, 6, 6, {4, 5, 1, 2, 6, 6, 0, 0, 0, 6, 3, 3});
    CHECK(masked_rows(m, 0) == "010010");
    CHECK(masked_rows(m, 1) == "000000");
    CHECK(masked_rows(m, 2) == "111111");
  }
}

TEST_CASE("the causal part is bottom-right aligned when Sq != Sk", "[dsl]") {
  SECTION("fewer queries than keys") {
    // Sq = 3, Sk = 5, no interval masking: query i sees keys j <= i + 2.
    const IntervalVectors m = make(true, 1, 3, 5, {3, 3, 3, 3, 3});
    const std::vector<std::uint8_t> dense = attnjit::dsl::dense_mask(m, 0, 0);
    const std::vector<std::uint8_t> expected = {0, 0, 0, 1, 1,  //
                                                0, 0, 0, 0, 1,  //
                                                0, 0, 0, 0, 0};
    CHECK(dense == expected);
  }
  SECTION("more queries than keys") {
    // Sq = 4, Sk = 2: query i sees keys j <= i - 2, so rows 0 and 1 see nothing.
    const IntervalVectors m = make(true, 2, 4, 2, {4, 4, 4, 4});
    CHECK(masked_rows(m, 0) == "1100");
    CHECK(masked_rows(m, 1) == "1110");
  }
}

TEST_CASE("validate accepts well-formed vectors", "[dsl]") {
  CHECK_NOTHROW(attnjit::dsl::validate(make(true, 1, 4, 4, {0, 4, 2, 4})));
  CHECK_NOTHROW(attnjit::dsl::validate(make(true, 2, 4, 2, {0, 4, 4, 4})));
  CHECK_NOTHROW(attnjit::dsl::validate(make(false, 2, 4, 2, {0, 4, 4, 0})));
  CHECK_NOTHROW(attnjit::dsl::validate(make(false, 4, 4, 1, {1, 2, 0, 4})));
}

TEST_CASE("validate rejects bad layouts and shapes", "[dsl]") {
  CHECK_THAT(validation_message(make(false, 3, 4, 1, {0, 0, 0})),
             Contains("columns: got '3'") && Contains("accepted: 1, 2 or 4"));
  CHECK_THAT(validation_message(make(true, 4, 4, 1, {0, 4, 0, 0})),
             Contains("columns: got '4' with causal=true") && Contains("accepted: 1"));
  CHECK_THAT(validation_message(make(false, 1, 4, 1, {0})),
             Contains("columns: got '1' with causal=false") && Contains("accepted: 2"));
  CHECK_THAT(validation_message(make(false, 0, 4, 1, {})), Contains("columns: got '0'"));
  IntervalVectors no_batch = make(true, 1, 4, 1, {4});
  no_batch.batch = 0;
  CHECK_THAT(validation_message(no_batch), Contains("batch: got '0'; accepted: >= 1"));
  CHECK_THAT(validation_message(make(true, 1, 0, 1, {0})), Contains("seqlen_q: got '0'"));
  CHECK_THAT(validation_message(make(true, 1, 4, -2, {})), Contains("seqlen_k: got '-2'"));
}

TEST_CASE("validate rejects a data size that does not match the shape", "[dsl]") {
  IntervalVectors m = make(false, 2, 100, 50, std::vector<std::int32_t>(199, 100));
  m.heads = 2;
  CHECK_THAT(validation_message(m), Contains("startend_row_indices: got 199 values") &&
                                        Contains("batch*heads*seqlen_k*columns = 1*2*50*2 = 200"));
}

TEST_CASE("validate names the first bad element, its value and what is accepted", "[dsl]") {
  // 2 heads of 40 columns, 4 vectors, seqlen_q = 100, all columns unmasked to start with.
  IntervalVectors m = make(false, 4, 100, 40, {});
  m.heads = 2;
  for (int n = 0; n < 2 * 40; ++n) m.data.insert(m.data.end(), {100, 100, 0, 0});
  struct BadElements {
    std::string name;
    std::vector<std::array<int, 4>> elements;  ///< head, column, vector, value
    std::string message;
  };
  const std::string message_start = "startend_row_indices[batch=0, head=";
  const BadElements cases[] = {
      // A later bad element is not the one reported.
      {"LTE below LTS",
       {{1, 37, 0, 15}, {1, 37, 1, 12}, {1, 39, 1, 0}},
       message_start +
           "1, column=37] LTE=12 is below LTS=15; accepted: LTS <= LTE <= 100 (seqlen_q)"},
      {"UTE below UTS",
       {{0, 3, 2, 9}, {0, 3, 3, 5}},
       message_start + "0, column=3] UTE=5 is below UTS=9; accepted: UTS <= UTE <= 100 (seqlen_q)"},
      {"negative value",
       {{1, 0, 2, -1}},
       message_start +
           "1, column=0] UTS=-1 is outside [0, 100]; accepted: 0 <= UTS <= 100 (seqlen_q)"},
      {"an end below its start comes before a bad value of a later vector",
       {{0, 5, 0, 15}, {0, 5, 1, 12}, {0, 5, 2, -3}},
       message_start +
           "0, column=5] LTE=12 is below LTS=15; accepted: LTS <= LTE <= 100 (seqlen_q)"},
      {"an end above seqlen_q comes before a bad value of a later vector",
       {{0, 5, 0, 15}, {0, 5, 1, 101}, {0, 5, 2, -3}},
       message_start +
           "0, column=5] LTE=101 is outside [0, 100]; accepted: 0 <= LTE <= 100 (seqlen_q)"},
      {"value above seqlen_q",
       {{0, 12, 0, 101}},
       message_start +
           "0, column=12] LTS=101 is outside [0, 100]; accepted: 0 <= LTS <= 100 (seqlen_q)"},
  };
  for (const BadElements& bad : cases) {
    INFO(bad.name);
    IntervalVectors changed = m;
    for (const auto& [h, col, c, value] : bad.elements) {
      changed.data[(static_cast<std::size_t>(h) * 40 + col) * 4 + c] = value;
    }
    CHECK(validation_message(changed) == bad.message);
  }
  // The roles of 2-column layouts are named by the layout.
  IntervalVectors causal = make(true, 2, 10, 2, {4, 4, 6, 5});
  CHECK_THAT(validation_message(causal),
             Contains("[batch=0, head=0, column=1] LTE=5 is below LTS=6"));
  IntervalVectors bidirectional = make(false, 2, 10, 2, {4, 4, 6, 11});
  CHECK_THAT(validation_message(bidirectional),
             Contains("[batch=0, head=0, column=1] UTE=11 is outside [0, 10]"));
  IntervalVectors second_batch = make(true, 1, 10, 2, {10, 10, 3, -4});
  second_batch.batch = 2;
  CHECK_THAT(validation_message(second_batch),
             Contains("[batch=1, head=0, column=1] LTS=-4 is outside [0, 10]"));
}

TEST_CASE("stack concatenates single samples into a batch", "[dsl]") {
  const std::vector<IntervalVectors> samples = {make(true, 1, 3, 3, {1, 2, 3}),
                                                make(true, 1, 3, 3, {3, 3, 0})};
  const IntervalVectors batch = attnjit::dsl::stack(samples);
  CHECK(batch.batch == 2);
  CHECK(batch.heads == 1);
  CHECK(batch.data == std::vector<std::int32_t>{1, 2, 3, 3, 3, 0});
  CHECK(batch.at(1, 0, 2, 0) == 0);
  CHECK(masked_rows(batch, 2, 1) == "111");
  CHECK_NOTHROW(attnjit::dsl::validate(batch));
}

TEST_CASE("stack rejects mismatched samples", "[dsl]") {
  const IntervalVectors first = make(true, 1, 3, 3, {3, 3, 3});
  const auto message = [&](IntervalVectors second) {
    const std::vector<IntervalVectors> samples = {first, std::move(second)};
    return attnjit::testing::error_text([&] { attnjit::dsl::stack(samples); });
  };
  IntervalVectors two = first;
  two.batch = 2;
  CHECK_THAT(message(two), Contains("samples[1].batch: got 2; accepted: 1"));
  CHECK_THAT(message(make(true, 2, 3, 3, {3, 3, 3, 3, 3, 3})),
             Contains("samples[1].columns: got 2; accepted: 1"));
  CHECK_THAT(message(make(true, 1, 4, 3, {4, 4, 4})), Contains("samples[1].seqlen_q: got 4"));
  CHECK_THAT(message(make(true, 1, 3, 2, {3, 3})), Contains("samples[1].seqlen_k: got 2"));
  IntervalVectors heads = first;
  heads.heads = 2;
  CHECK_THAT(message(heads), Contains("samples[1].heads: got 2"));
  IntervalVectors short_data = first;
  short_data.data.pop_back();
  CHECK_THAT(message(short_data), Contains("samples[1].data: got 2 values"));
  CHECK_THROWS_AS(attnjit::dsl::stack({}), Error);
}

TEST_CASE("concat_keys lays pieces along the keys, head by head; key_range takes one back",
          "[dsl][varlen]") {
  // Two heads: a piece of 2 keys over 3 rows, then 3 keys over 1 row (columns LTS, UTE).
  const IntervalVectors first{false, 2, 1, 2, 3, 2, {3, 0, 2, 1, /*head 1*/ 1, 0, 3, 2}};
  const IntervalVectors second{
      false, 2, 1, 2, 1, 3, {1, 0, 0, 0, 1, 1, /*head 1*/ 0, 0, 1, 0, 1, 1}};
  const std::vector<IntervalVectors> pieces = {first, second};
  const IntervalVectors packed = attnjit::dsl::concat_keys(pieces);
  CHECK(packed.seqlen_k == 5);
  CHECK(packed.seqlen_q == 3);
  CHECK(packed.heads == 2);
  CHECK(packed.data ==
        std::vector<std::int32_t>{3, 0, 2, 1, 1, 0, 0, 0, 1, 1, 1, 0, 3, 2, 0, 0, 1, 0, 1, 1});
  const IntervalVectors back = attnjit::dsl::key_range(packed, 2, 3, 1);
  CHECK(back.seqlen_q == 1);
  CHECK(back.seqlen_k == 3);
  CHECK(back.data == second.data);
  CHECK(attnjit::dsl::key_range(packed, 0, 2, 3).data == first.data);

  IntervalVectors other = second;
  other.columns = 4;
  const std::vector<IntervalVectors> mixed = {first, other};
  CHECK_THAT(attnjit::testing::error_text([&] { attnjit::dsl::concat_keys(mixed); }),
             Contains("concat_keys: pieces[1].columns: got 4; accepted: 2"));
  CHECK_THAT(attnjit::testing::error_text([&] { attnjit::dsl::key_range(packed, 3, 3, 1); }),
             Contains("key_range: keys: got '[3, 6)'; accepted: a range within the 5 keys"));
  CHECK_THROWS_AS(attnjit::dsl::concat_keys({}), Error);
}

TEST_CASE("broadcast_heads repeats a single-head mask", "[dsl]") {
  IntervalVectors m = make(false, 2, 4, 2, {1, 0, 4, 2, 2, 1, 0, 4});
  m.batch = 2;
  const IntervalVectors wide = attnjit::dsl::broadcast_heads(m, 3);
  CHECK(wide.heads == 3);
  CHECK(wide.data.size() == 2u * 3 * 2 * 2);
  CHECK_NOTHROW(attnjit::dsl::validate(wide));
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 3; ++h) {
      for (int col = 0; col < 2; ++col) {
        for (int c = 0; c < 2; ++c) CHECK(wide.at(b, h, col, c) == m.at(b, 0, col, c));
      }
    }
  }
  CHECK_THROWS_WITH(attnjit::dsl::broadcast_heads(wide, 6), Contains("mask heads: got '3'"));
  CHECK_THROWS_WITH(attnjit::dsl::broadcast_heads(m, 0), Contains("heads: got '0'"));
}

TEST_CASE("dense_mask renders every element with the causal part", "[dsl]") {
  IntervalVectors m = make(true, 2, 4, 4, {2, 3, 4, 4, 0, 4, 4, 4});
  m.heads = 2;
  m.data.insert(m.data.end(), {0, 0, 0, 0, 0, 0, 0, 0});
  const std::vector<std::uint8_t> head0 = attnjit::dsl::dense_mask(m, 0, 0);
  const std::vector<std::uint8_t> expected = {0, 1, 1, 1,  //
                                              0, 0, 1, 1,  //
                                              1, 0, 1, 1,  //
                                              0, 0, 1, 0};
  CHECK(head0 == expected);
  const std::vector<std::uint8_t> head1 = attnjit::dsl::dense_mask(m, 0, 1);
  CHECK(head1 == std::vector<std::uint8_t>{0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  CHECK_THROWS_WITH(attnjit::dsl::dense_mask(m, 1, 0), Contains("batch index: got '1'"));
  CHECK_THROWS_WITH(attnjit::dsl::dense_mask(m, 0, 2), Contains("head index: got '2'"));
  CHECK_THROWS_AS(attnjit::dsl::dense_mask(make(true, 1, 4, 4, {5, 4, 4, 4}), 0, 0), Error);
}
