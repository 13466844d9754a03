// float <-> bf16 / fp16 / e4m3 conversions with round-to-nearest-even, on the host, for the
// reference attention and for preparing test inputs. Self-contained on purpose: the tests must
// not share rounding code with the implementation they check.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attnjit/spec.hpp"

namespace attnjit::testing {

/// bf16 bits of `value`, rounded to nearest even; NaN stays a (quiet) NaN.
inline std::uint16_t float_to_bf16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

inline float bf16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// IEEE binary16 bits of `value`, rounded to nearest even, with subnormals and overflow to
/// infinity; NaN stays a (quiet) NaN.
inline std::uint16_t float_to_fp16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7E00u;
  // 65520 is halfway between 65504 (the largest half) and 65536; the tie goes to the even
  // neighbour, which is infinity.
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;
  if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal half
    // Re-bias the exponent (127 -> 15) and drop 13 mantissa bits, rounding to nearest even;
    // a carry out of the mantissa correctly bumps the exponent.
    const std::uint32_t rebased = magnitude - 0x38000000u;
    const std::uint32_t rounded = rebased + 0xFFFu + ((rebased >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  // A subnormal half counts units of 2^-24; the float is (2^23 | mantissa) * 2^(exponent - 150).
  const int exponent = static_cast<int>(magnitude >> 23);
  const int shift = 126 - exponent;  // >= 14 here
  if (shift > 24) return sign;       // below 2^-25: rounds to zero
  const std::uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t units = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  const bool up = rest > half || (rest == half && (units & 1u));
  return static_cast<std::uint16_t>(sign | (units + (up ? 1u : 0u)));
}

inline float fp16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) {
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  // Subnormal or zero: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

/// FP8 E4M3 bits (OCP "fn": bias 7, no infinities, 0x7F / 0xFF NaN, largest finite 448) of
/// `value`, rounded to nearest even, with subnormals (units of 2^-9) and saturation to +-448
/// (as cvt.rn.satfinite); NaN stays NaN.
inline std::uint8_t float_to_e4m3_bits(float value) {
  const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7F;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= 448.0) return sign | 0x7E;
  // A value counts units of its binade's spacing: 2^-9 below 2^-6 (subnormals), else
  // 2^(e - 3) for 2^e <= value < 2^(e + 1).
  int exponent = magnitude < 0x1p-6 ? -6 : std::ilogb(magnitude);
  const double spacing = std::ldexp(1.0, exponent - 3);
  const double units = magnitude / spacing;  // exact: a power-of-two scaling
  double rounded = std::nearbyint(units);    // the default rounding mode: ties to even
  if (rounded >= 16.0) {  // the mantissa carried into the next binade (16 units = 2^(e + 1))
    rounded /= 2.0;
    ++exponent;
  }
  if (rounded < 8.0) return sign | static_cast<std::uint8_t>(rounded);  // subnormal or zero
  const int code = ((exponent + 7) << 3) | (static_cast<int>(rounded) - 8);
  return sign | static_cast<std::uint8_t>(code > 0x7E ? 0x7E : code);
}

inline float e4m3_bits_to_float(std::uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  }
  return (bits & 0x80) != 0 ? -magnitude : magnitude;
}

inline float round_to_bf16(float value) {
  return bf16_bits_to_float(float_to_bf16_bits(value));
}

inline float round_to_fp16(float value) {
  return fp16_bits_to_float(float_to_fp16_bits(value));
}

/// `value` rounded to the nearest value of `dtype` (ties to even).
inline float round_to(DType dtype, float value) {
  return dtype == DType::bf16 ? round_to_bf16(value) : round_to_fp16(value);
}

}  // namespace attnjit::testing
