// Host bf16/fp16 conversions (and the tests' e4m3 one): known values, rounding ties, specials and
// exact round trips.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/jit/half.hpp"
#include "support/half_round.hpp"

using namespace attnjit::runtime;

TEST_CASE("fp16 conversion of known values", "[runtime]") {
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(-2.5f) == 0xc100);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);
  CHECK(float_to_fp16(0.0f) == 0x0000);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_fp16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(float_to_fp16(1e-5f) == 0x00a8);                  // subnormal
  CHECK(float_to_fp16(6e-8f) == 0x0001);                  // rounds up to the smallest
  CHECK(float_to_fp16(1e-8f) == 0x0000);                  // underflows to zero
  CHECK(float_to_fp16(-1e-8f) == 0x8000);
  CHECK(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24: even
  CHECK(float_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);  // tie between 1 and 2 units: even
  CHECK(float_to_fp16(65519.0f) == 0x7bff);
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // overflow to infinity
  CHECK(float_to_fp16(1e10f) == 0x7c00);
  CHECK(float_to_fp16(-1e10f) == 0xfc00);
  CHECK(float_to_fp16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(float_to_fp16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  const std::uint16_t nan = float_to_fp16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  CHECK(std::isnan(fp16_to_float(nan)));
  CHECK(std::isnan(fp16_to_float(0x7c01)));
  CHECK(fp16_to_float(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(fp16_to_float(0x3c00) == 1.0f);
  CHECK(fp16_to_float(0x0001) == std::ldexp(1.0f, -24));
}

TEST_CASE("fp16 rounds ties to even", "[runtime]") {
  CHECK(float_to_fp16(2049.0f) == 0x6800);  // 2048 and 2050: 2048 is even
  CHECK(float_to_fp16(2051.0f) == 0x6802);  // 2050 and 2052: 2052 is even
  CHECK(float_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(float_to_fp16(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);
  CHECK(float_to_fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(float_to_fp16(std::ldexp(2047.0f, -25)) == 0x0400);  // carries into the normals
}

TEST_CASE("bf16 conversion of known values", "[runtime]") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(-2.5f) == 0xc020);
  CHECK(float_to_bf16(65504.0f) == 0x4780);                 // rounds up to 65536
  CHECK(bf16_to_float(0x7f7f) == std::ldexp(255.0f, 120));  // bf16 max, (2 - 2^-7) * 2^127
  CHECK(float_to_bf16(bf16_to_float(0x7f7f)) == 0x7f7f);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // overflow to infinity
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);        // tie: even
  CHECK(float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);        // tie: even
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  // A NaN whose payload lies only in the dropped bits must not become infinity.
  const std::uint16_t nan = float_to_bf16(std::bit_cast<float>(0x7f800001u));
  CHECK(std::isnan(bf16_to_float(nan)));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("every non-NaN 16-bit pattern round-trips exactly", "[runtime]") {
  int fp16_mismatches = 0;
  int bf16_mismatches = 0;
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto pattern = static_cast<std::uint16_t>(bits);
    const float as_fp16 = fp16_to_float(pattern);
    if (!std::isnan(as_fp16) && float_to_fp16(as_fp16) != pattern) ++fp16_mismatches;
    const float as_bf16 = bf16_to_float(pattern);
    if (!std::isnan(as_bf16) && float_to_bf16(as_bf16) != pattern) ++bf16_mismatches;
  }
  CHECK(fp16_mismatches == 0);
  CHECK(bf16_mismatches == 0);
}

// The tests' own e4m3 conversion (support/half_round.hpp), which prepares FP8 inputs and their
// reference values.
TEST_CASE("e4m3 test conversion: known values, ties, saturation and round trips", "[runtime]") {
  using attnjit::testing::e4m3_bits_to_float;
  using attnjit::testing::float_to_e4m3_bits;
  CHECK(float_to_e4m3_bits(1.0f) == 0x38);
  CHECK(float_to_e4m3_bits(-2.0f) == 0xc0);
  CHECK(float_to_e4m3_bits(448.0f) == 0x7e);
  CHECK(float_to_e4m3_bits(1000.0f) == 0x7e);  // saturates
  CHECK(float_to_e4m3_bits(-1e30f) == 0xfe);
  CHECK(float_to_e4m3_bits(std::ldexp(1.0f, -6)) == 0x08);    // smallest normal
  CHECK(float_to_e4m3_bits(std::ldexp(1.0f, -9)) == 0x01);    // smallest subnormal
  CHECK(float_to_e4m3_bits(std::ldexp(1.0f, -10)) == 0x00);   // tie between 0 and 1 unit: even
  CHECK(float_to_e4m3_bits(std::ldexp(3.0f, -10)) == 0x02);   // tie between 1 and 2 units: even
  CHECK(float_to_e4m3_bits(std::ldexp(15.5f, -10)) == 0x08);  // carries into the normals
  CHECK(float_to_e4m3_bits(17.0f) == 0x58);                   // tie between 16 and 18: 16 is even
  CHECK(float_to_e4m3_bits(19.0f) == 0x5a);                   // tie between 18 and 20: 20 is even
  CHECK(float_to_e4m3_bits(31.0f) == 0x60);  // tie between 30 and 32: 32 (the next binade)
  CHECK(float_to_e4m3_bits(-0.0f) == 0x80);
  CHECK(std::isnan(e4m3_bits_to_float(float_to_e4m3_bits(std::nanf("")))));
  CHECK(e4m3_bits_to_float(0x7e) == 448.0f);
  CHECK(e4m3_bits_to_float(0x01) == std::ldexp(1.0f, -9));
  CHECK(e4m3_bits_to_float(0xb9) == -1.125f);
  int mismatches = 0;
  for (int bits = 0; bits < 256; ++bits) {
    const auto pattern = static_cast<std::uint8_t>(bits);
    const float value = e4m3_bits_to_float(pattern);
    if (!std::isnan(value) && float_to_e4m3_bits(value) != pattern) ++mismatches;
  }
  CHECK(mismatches == 0);
}

// The runtime's e4m3 conversion (attnc's FP8 inputs) against the tests' own: every code's value,
// the midpoints between neighbouring codes (ties), the values a little off them, and specials.
TEST_CASE("e4m3 conversion agrees with the tests' on codes, ties and their neighbours",
          "[runtime]") {
  using attnjit::testing::e4m3_bits_to_float;
  using attnjit::testing::float_to_e4m3_bits;
  int mismatches = 0;
  const auto compare = [&](float value) {
    if (float_to_e4m3(value) != float_to_e4m3_bits(value)) ++mismatches;
  };
  for (int bits = 0; bits < 0x7e; ++bits) {
    const float low = e4m3_bits_to_float(static_cast<std::uint8_t>(bits));
    const float high = e4m3_bits_to_float(static_cast<std::uint8_t>(bits + 1));
    const float middle = (low + high) / 2;
    for (const float value :
         {low, middle, std::nextafter(middle, 0.f), std::nextafter(middle, 1000.f)}) {
      compare(value);
      compare(-value);
    }
  }
  for (const float value : {448.f, 460.f, 464.f, 1e30f, std::numeric_limits<float>::infinity(),
                            std::ldexp(1.f, -12), 0.f}) {
    compare(value);
    compare(-value);
  }
  CHECK(mismatches == 0);
  CHECK((float_to_e4m3(std::nanf("")) & 0x7f) == 0x7f);
}
