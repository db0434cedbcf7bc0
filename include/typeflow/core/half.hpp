// 16-bit floating-point storage types: bfloat16 (8-bit exponent, 7-bit mantissa: float32's range
// at a quarter of its precision) and float16 (IEEE 754 binary16: 5-bit exponent, 10-bit
// mantissa). They hold values; arithmetic happens in float32 (an elementwise op on them computes
// in float32 and rounds its result once, see compute_type in graph/node.hpp).
//
// Conversions from float32 round to nearest, ties to even, as PyTorch, NumPy and the hardware's
// conversion instructions do (bit for bit PyTorch's for every value but NaN, whose payload may
// differ): values past the largest finite one become infinities, float16 keeps subnormals, a
// NaN stays a (quiet) NaN of the same sign. From float64 they convert through
// float32 (as PyTorch's `double -> bfloat16` does). To float32 they are exact. Usable in constant
// expressions, on the host and in CUDA kernels.
#pragma once
#include <bit>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <ostream>
#include <type_traits>

#include "dtype.hpp"

namespace typeflow {

namespace detail {
TYPEFLOW_HD constexpr std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, make it quiet
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
}

TYPEFLOW_HD constexpr std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) // NaN: quiet, with the top mantissa bits kept
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  if (a >= 0x477ff000u) // rounds past 65504: infinity (and infinity itself)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) { // below 2^-14: a float16 subnormal (or zero)
    if (a < 0x33000000u) // below half the smallest subnormal 2^-25: zero (2^-25 itself ties to 0)
      return sign;
    const std::uint32_t mant = (a & 0x007fffffu) | 0x00800000u; // with the implicit one
    const int shift = 126 - static_cast<int>(a >> 23);          // 14..24 - 1: to 2^-24 units
    const std::uint32_t q = mant >> (shift + 0);
    const std::uint32_t rest = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t r = q + ((rest > half || (rest == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  // normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even
  const std::uint32_t rebased = a - 0x38000000u; // exponent - 112, in place
  const std::uint32_t lsb = (rebased >> 13) & 1u;
  return static_cast<std::uint16_t>(sign | ((rebased + 0x0fffu + lsb) >> 13));
}

TYPEFLOW_HD constexpr float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x03ffu;
  if (e == 0x1f) // infinity or NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e != 0)
    return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0)
    return std::bit_cast<float>(sign);
  // subnormal: m * 2^-24, exact in float32
  int shift = 0;
  std::uint32_t mm = m;
  while (!(mm & 0x0400u)) {
    mm <<= 1;
    ++shift;
  }
  return std::bit_cast<float>(sign | ((113u - static_cast<std::uint32_t>(shift)) << 23) |
                              ((mm & 0x03ffu) << 13));
}
} // namespace detail

/// bfloat16: a float32 with its low 16 mantissa bits rounded away.
struct bfloat16 {
  std::uint16_t bits; ///< uninitialized by default, as a float is (a tensor zero-fills)
  bfloat16() = default;
  TYPEFLOW_HD constexpr explicit bfloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  TYPEFLOW_HD constexpr explicit bfloat16(double d) : bfloat16(static_cast<float>(d)) {}
  template <class I>
  requires std::is_integral_v<I> TYPEFLOW_HD constexpr explicit bfloat16(I i)
      : bfloat16(static_cast<float>(i)) {}
  TYPEFLOW_HD constexpr operator float() const { // NOLINT: widening is exact
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  TYPEFLOW_HD static constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 r{};
    r.bits = b;
    return r;
  }
  friend TYPEFLOW_HD constexpr bool operator==(bfloat16 a, bfloat16 b) {
    return static_cast<float>(a) == static_cast<float>(b);
  }
};

/// float16: IEEE 754 binary16.
struct float16 {
  std::uint16_t bits; ///< uninitialized by default, as a float is (a tensor zero-fills)
  float16() = default;
  TYPEFLOW_HD constexpr explicit float16(float f) : bits(detail::float_to_f16_bits(f)) {}
  TYPEFLOW_HD constexpr explicit float16(double d) : float16(static_cast<float>(d)) {}
  template <class I>
  requires std::is_integral_v<I> TYPEFLOW_HD constexpr explicit float16(I i)
      : float16(static_cast<float>(i)) {}
  TYPEFLOW_HD constexpr operator float() const { // NOLINT: widening is exact
    return detail::f16_bits_to_float(bits);
  }
  TYPEFLOW_HD static constexpr float16 from_bits(std::uint16_t b) {
    float16 r{};
    r.bits = b;
    return r;
  }
  friend TYPEFLOW_HD constexpr bool operator==(float16 a, float16 b) {
    return static_cast<float>(a) == static_cast<float>(b);
  }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

template <>
struct dtype_traits<bfloat16> {
  static constexpr std::string_view name = "bfloat16";
};
template <>
struct dtype_traits<float16> {
  static constexpr std::string_view name = "float16";
};

/// Whether T is one of the 16-bit floating-point storage types.
template <class T>
inline constexpr bool is_half = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

/// The type T's values compute in: float32 for the 16-bit types, T itself otherwise.
template <class T>
using compute_of = std::conditional_t<is_half<T>, float, T>;

inline std::ostream& operator<<(std::ostream& o, bfloat16 v) {
  return o << static_cast<float>(v);
}
inline std::ostream& operator<<(std::ostream& o, float16 v) {
  return o << static_cast<float>(v);
}

} // namespace typeflow

namespace typeflow::detail {
/// The bit patterns and extents std::numeric_limits gives for each 16-bit type.
struct bfloat16_limits {
  static constexpr bool iec559 = false;
  static constexpr int digits = 8, digits10 = 2, max_digits10 = 4;
  static constexpr int min_exponent = -125, min_exponent10 = -37;
  static constexpr int max_exponent = 128, max_exponent10 = 38;
  static constexpr std::uint16_t lowest = 0xff7f, max = 0x7f7f, min = 0x0080, denorm_min = 0x0001,
                                 epsilon = 0x3c00, round_error = 0x3f00, infinity = 0x7f80,
                                 quiet_NaN = 0x7fc0, signaling_NaN = 0x7fa0;
};
struct float16_limits {
  static constexpr bool iec559 = true;
  static constexpr int digits = 11, digits10 = 3, max_digits10 = 5;
  static constexpr int min_exponent = -13, min_exponent10 = -4;
  static constexpr int max_exponent = 16, max_exponent10 = 4;
  static constexpr std::uint16_t lowest = 0xfbff, max = 0x7bff, min = 0x0400, denorm_min = 0x0001,
                                 epsilon = 0x1400, round_error = 0x3800, infinity = 0x7c00,
                                 quiet_NaN = 0x7e00, signaling_NaN = 0x7d00;
};
/// std::numeric_limits of a 16-bit type H from its table L.
template <class H, class L>
struct half_numeric_limits {
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false,
                        is_exact = false, has_infinity = true, has_quiet_NaN = true,
                        has_signaling_NaN = true, has_denorm_loss = false, is_iec559 = L::iec559,
                        is_bounded = true, is_modulo = false, traps = false,
                        tinyness_before = false;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr int radix = 2, digits = L::digits, digits10 = L::digits10,
                       max_digits10 = L::max_digits10, min_exponent = L::min_exponent,
                       min_exponent10 = L::min_exponent10, max_exponent = L::max_exponent,
                       max_exponent10 = L::max_exponent10;
  static constexpr H lowest() { return H::from_bits(L::lowest); }
  static constexpr H max() { return H::from_bits(L::max); }
  static constexpr H min() { return H::from_bits(L::min); }
  static constexpr H denorm_min() { return H::from_bits(L::denorm_min); }
  static constexpr H epsilon() { return H::from_bits(L::epsilon); }
  static constexpr H round_error() { return H::from_bits(L::round_error); }
  static constexpr H infinity() { return H::from_bits(L::infinity); }
  static constexpr H quiet_NaN() { return H::from_bits(L::quiet_NaN); }
  static constexpr H signaling_NaN() { return H::from_bits(L::signaling_NaN); }
};
} // namespace typeflow::detail

// Not part of the API reference.
/// \cond std_specializations
template <>
class std::numeric_limits<typeflow::bfloat16>
    : public typeflow::detail::half_numeric_limits<typeflow::bfloat16,
                                                   typeflow::detail::bfloat16_limits> {};
template <>
class std::numeric_limits<typeflow::float16>
    : public typeflow::detail::half_numeric_limits<typeflow::float16,
                                                   typeflow::detail::float16_limits> {};
/// \endcond
