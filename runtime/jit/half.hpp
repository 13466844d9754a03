// Host conversions between float and the 16-bit formats bf16 and fp16 (IEEE binary16), and from
// float to FP8 E4M3, for making test inputs and reading outputs. Round to nearest even; NaN stays
// NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace attnjit::runtime {

/// float -> bf16, round to nearest even; overflow gives infinity, NaN a quiet NaN.
inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

/// bf16 -> float (exact).
inline float bf16_to_float(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

/// float -> fp16, round to nearest even; overflow gives infinity, tiny values subnormals or
/// zero, NaN a quiet NaN.
inline std::uint16_t float_to_fp16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 = 65504 + half an ulp rounds (to even) up to 2^16, which is infinity.
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  const std::uint32_t exponent = magnitude >> 23;
  std::uint32_t mantissa = magnitude & 0x7fffffu;
  std::uint32_t shift = 13;  // float mantissa bits dropped
  std::uint32_t half = 0;
  if (exponent >= 113) {  // normal in fp16: 2^-14 and up
    half = ((exponent - 112) << 10) | (mantissa >> 13);
  } else {
    // Subnormal in fp16, in units of 2^-24: the full significand shifted right.
    if (exponent < 102) return sign;  // below half the smallest subnormal
    mantissa |= 0x800000u;
    shift = 126 - exponent;
    half = mantissa >> shift;
  }
  const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  // A carry out of the mantissa correctly bumps the exponent (or reaches the smallest normal).
  if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

/// float -> FP8 E4M3 (OCP's: largest finite 448, no infinities), round to nearest even,
/// saturating to +-448 as cvt.rn.satfinite does; below 2^-6 subnormals (units of 2^-9); NaN a
/// NaN.
inline std::uint8_t float_to_e4m3(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7fu);
  const float magnitude = std::fabs(value);
  if (magnitude >= 448.f) return static_cast<std::uint8_t>(sign | 0x7eu);
  if (magnitude < 0x1p-6f) {
    return static_cast<std::uint8_t>(sign |
                                     static_cast<std::uint32_t>(std::nearbyint(magnitude * 512.f)));
  }
  // The float's exponent and top three mantissa bits, rounded at the fourth (a carry moves the
  // exponent); e4m3's exponent bias is 7 against the float's 127.
  const std::uint32_t m = std::bit_cast<std::uint32_t>(magnitude);
  const std::uint32_t rounded = (m + 0x7ffffu + ((m >> 20) & 1u)) >> 20;
  return static_cast<std::uint8_t>(sign | (rounded - (120u << 3)));
}

/// fp16 -> float (exact).
inline float fp16_to_float(std::uint16_t value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value & 0x8000u) << 16;
  const std::uint32_t exponent = (value >> 10) & 0x1fu;
  const std::uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace attnjit::runtime
