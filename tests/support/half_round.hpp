// float <-> bf16 / fp16 conversions with round-to-nearest-even, on the host, for the
// reference attention and for preparing test inputs. Self-contained on purpose: the tests must
// not share rounding code with the implementation they check.
#pragma once

#include <bit>
#include <cstdint>

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
