// Leaves: placeholders (fed), variables (kept by the session), constants and fills.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>

#include "../graph/node.hpp"

namespace typeflow {

namespace detail {
template <class T, class Shape>
struct leaf_base : no_dtype_rule {
  static constexpr node_kind kind = node_kind::leaf;
  template <class...>
  using value_type = T;
  static constexpr rule_result<Shape::rank> rule() { return {{}, Shape::dims}; }
};

inline std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// splitmix64: seeds per-variable generators from (session seed, variable name).
constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
constexpr std::uint64_t hash_name(std::string_view s, std::uint64_t seed) {
  std::uint64_t h = mix(seed);
  for (char c : s)
    h = mix(h ^ static_cast<unsigned char>(c));
  return h;
}

/// Uniform double in [0, 1) from 53 random bits.
inline double uniform01(std::mt19937_64& g) {
  return static_cast<double>(g() >> 11) * 0x1.0p-53;
}
inline double standard_normal(std::mt19937_64& g) {
  // Box-Muller, portable across standard libraries (std::normal_distribution is not).
  double u1 = 0;
  while (u1 <= 0)
    u1 = uniform01(g);
  const double u2 = uniform01(g);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
} // namespace detail

/// Initializers: how the session fills a variable's storage. A user initializer is any type with
/// `template <class T> static void init(T* data, std::int64_t n, std::mt19937_64& rng)`.
namespace detail {
/// Floating-point template arguments are kept as their bit patterns: g++ 12 fails (an internal
/// compiler error) to deduce through base classes whose arguments hold distinct doubles.
template <auto V>
inline constexpr std::uint64_t bits = std::bit_cast<std::uint64_t>(static_cast<double>(V));
} // namespace detail

template <std::uint64_t Bits>
struct fill_bits {
  static constexpr double value = std::bit_cast<double>(Bits);
  template <class T>
  static void init(T* data, std::int64_t n, std::mt19937_64&) {
    for (std::int64_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(value);
  }
  static std::string describe() { return "fill(" + detail::format_number(value) + ")"; }
};
/// fill<V>: every element is V.
template <auto V>
using fill = fill_bits<detail::bits<V>>;
using zeros = fill<0>;
using ones = fill<1>;

/// Uniform in [Lo, Hi).
template <std::uint64_t LoBits, std::uint64_t HiBits>
struct uniform_bits {
  static constexpr double Lo = std::bit_cast<double>(LoBits), Hi = std::bit_cast<double>(HiBits);
  template <class T>
  static void init(T* data, std::int64_t n, std::mt19937_64& g) {
    for (std::int64_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(Lo + (Hi - Lo) * detail::uniform01(g));
  }
  static std::string describe() {
    return "uniform(" + detail::format_number(Lo) + ", " + detail::format_number(Hi) + ")";
  }
};

template <auto Lo, auto Hi>
using uniform = uniform_bits<detail::bits<Lo>, detail::bits<Hi>>;

/// Normal with the given mean and standard deviation.
template <std::uint64_t MeanBits, std::uint64_t StddevBits>
struct normal_bits {
  static constexpr double Mean = std::bit_cast<double>(MeanBits),
                          Stddev = std::bit_cast<double>(StddevBits);
  template <class T>
  static void init(T* data, std::int64_t n, std::mt19937_64& g) {
    for (std::int64_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(Mean + Stddev * detail::standard_normal(g));
  }
  static std::string describe() {
    return "normal(" + detail::format_number(Mean) + ", " + detail::format_number(Stddev) + ")";
  }
};

template <auto Mean, auto Stddev>
using normal = normal_bits<detail::bits<Mean>, detail::bits<Stddev>>;

/// TensorFlow's truncated normal: draws beyond two standard deviations are redrawn.
template <std::uint64_t StddevBits, std::uint64_t MeanBits>
struct truncated_normal_bits {
  static constexpr double Mean = std::bit_cast<double>(MeanBits),
                          Stddev = std::bit_cast<double>(StddevBits);
  template <class T>
  static void init(T* data, std::int64_t n, std::mt19937_64& g) {
    for (std::int64_t i = 0; i < n; ++i) {
      double z = detail::standard_normal(g);
      while (std::abs(z) > 2.0)
        z = detail::standard_normal(g);
      data[i] = static_cast<T>(Mean + Stddev * z);
    }
  }
  static std::string describe() {
    return "truncated_normal(" + detail::format_number(Stddev) + ")";
  }
};

template <auto Stddev, auto Mean = 0.0>
using truncated_normal = truncated_normal_bits<detail::bits<Stddev>, detail::bits<Mean>>;

namespace detail {
template <class Name, class Shape>
struct dyn_variable_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("variable \"") << Name::view()
      << std::string_view("\": every extent of a variable must be static: ");
    append_dims(b, Shape::dims);
    return b;
  }
};
} // namespace detail

namespace ops {

/// Name is a static_name (see name_t).
template <class Name, dtype T, class Shape>
struct placeholder : detail::leaf_base<T, Shape> {
  static constexpr leaf_kind leaf = leaf_kind::placeholder;
  static constexpr std::string_view name = Name::view();
  static std::string to_string() { return std::string(name); }
};

template <class Name, dtype T, class Shape, class Init>
struct variable : detail::leaf_base<T, Shape> {
  using extents_checked [[maybe_unused]] = typename typeflow::detail::reject_unless<
      is_static(Shape::dims), typeflow::detail::dyn_variable_message<Name, Shape>>::type;
  static constexpr leaf_kind leaf = leaf_kind::variable;
  static constexpr std::string_view name = Name::view();
  using initializer = Init;
  static std::string to_string() { return std::string(name); }
};

/// A weakly typed scalar: it adopts the dtype of the tensor it meets (`x * constant<2>`).
template <std::uint64_t Bits>
struct literal : detail::leaf_base<double, shape<>> {
  static constexpr leaf_kind leaf = leaf_kind::constant;
  static constexpr bool weak = true;
  static constexpr std::uint64_t bits = Bits;
  static constexpr double value = std::bit_cast<double>(Bits);
  /// The literal of another value (constant folding of literal-only expressions).
  template <std::uint64_t B>
  using with_bits = literal<B>;
  static constexpr std::string_view name = "constant";
  static std::string to_string() { return detail::format_number(value); }
};

/// A typed tensor of one value.
template <std::uint64_t Bits, dtype T, class Shape>
struct full : detail::leaf_base<T, Shape> {
  static_assert(is_static(Shape::dims), "full: every extent must be static");
  static constexpr leaf_kind leaf = leaf_kind::constant;
  static constexpr std::uint64_t bits = Bits;
  static constexpr double value = std::bit_cast<double>(Bits);
  static constexpr std::string_view name = "full";
  static std::string to_string() {
    return "full(" + detail::format_number(value) + ", " + std::string(dtype_name<T>) + ", " +
           dims_string(Shape::dims) + ")";
  }
};

} // namespace ops

/// A fed input: `placeholder<"images", float, shape<dyn, 28, 28, 1>>`.
template <fixed_string Name, dtype T, class Shape>
inline constexpr expr<ops::placeholder<name_t<Name>, T, Shape>> placeholder{};

/// A variable kept by the session; its identity is its name.
template <fixed_string Name, dtype T, class Shape, class Init = zeros>
inline constexpr expr<ops::variable<name_t<Name>, T, Shape, Init>> variable{};

/// A compile-time scalar that adopts the dtype of the other operand.
template <auto V>
inline constexpr expr<ops::literal<detail::bits<V>>> constant{};

/// A compile-time tensor filled with one value: `full<0, float, shape<3, 4>>`.
template <auto V, dtype T, class Shape>
inline constexpr expr<ops::full<detail::bits<V>, T, Shape>> full{};

namespace detail {
/// A variable op's name; empty for other ops.
template <class Op>
struct variable_name {
  static constexpr std::string_view value{};
};
template <class Op>
requires(op_traits<Op>::variable) struct variable_name<Op> {
  static constexpr std::string_view value = Op::name;
};
} // namespace detail

/// Traits of node types as classes (the library's own form: see expr in graph/node.hpp).
template <class E, leaf_kind K>
struct is_leaf_of_t
    : std::bool_constant<op_traits<typename E::op>::leaf_code == static_cast<int>(K)> {};
template <class E>
using is_placeholder_t = is_leaf_of_t<E, leaf_kind::placeholder>;
template <class E>
using is_variable_t = is_leaf_of_t<E, leaf_kind::variable>;
template <class E>
using is_constant_t = is_leaf_of_t<E, leaf_kind::constant>;

template <class E>
inline constexpr bool is_leaf = E::op::kind == node_kind::leaf;
template <class E>
inline constexpr bool is_placeholder = is_placeholder_t<E>::value;
template <class E>
inline constexpr bool is_variable = is_variable_t<E>::value;
template <class E>
inline constexpr bool is_constant = is_constant_t<E>::value;

} // namespace typeflow
