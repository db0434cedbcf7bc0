// Initializers and variable attributes. An initializer is any type with
// `template <class T> static void init(T* data, std::int64_t n, std::mt19937_64& rng)` (or, with
// a member `shaped`, `init(T* data, const dims_t<R>& dims, rng)` when it needs the shape, as
// glorot_uniform does). Attributes wrap an initializer and so become part of the variable's
// type: `with_weight_decay<0.004, truncated_normal<0.04>>` puts the variable in the losses
// collection (nn::add_weight_decay), `not_trainable<zeros>` keeps it out of minimize().
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "../ops/leaves.hpp"

namespace typeflow {

namespace detail {
/// sqrt usable in constant expressions (Newton's method).
constexpr double const_sqrt(double x) {
  if (x <= 0)
    return 0;
  double r = x > 1 ? x : 1;
  for (int i = 0; i < 100; ++i)
    r = 0.5 * (r + x / r);
  return r;
}
} // namespace detail

/// TensorFlow's constant_initializer(v).
template <auto V>
using constant_initializer = fill<V>;

/// Glorot (Xavier) uniform: U(-l, l) with l = sqrt(6 / (fan_in + fan_out)); for a filter
/// [KH, KW, I, O] fan_in = KH*KW*I and fan_out = KH*KW*O (TensorFlow's convention).
struct glorot_uniform {
  static constexpr bool shaped = true;
  template <class T, std::size_t R>
  static void init(T* data, const dims_t<R>& d, std::mt19937_64& g) {
    double fan_in = 1, fan_out = 1;
    if constexpr (R == 1) {
      fan_in = fan_out = static_cast<double>(d[0]);
    } else if constexpr (R >= 2) {
      double receptive = 1;
      for (std::size_t i = 0; i + 2 < R; ++i)
        receptive *= static_cast<double>(d[i]);
      fan_in = receptive * static_cast<double>(d[R - 2]);
      fan_out = receptive * static_cast<double>(d[R - 1]);
    }
    const double limit = std::sqrt(6.0 / (fan_in + fan_out));
    const std::int64_t n = numel(d);
    for (std::int64_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(-limit + 2 * limit * detail::uniform01(g));
  }
  static std::string describe() { return "glorot_uniform"; }
};

/// He (Kaiming) normal: N(0, 2 / fan_in), fan_in = KH*KW*I for a filter [KH, KW, I, O] and I for
/// a matrix [I, O] (torch.nn.init.kaiming_normal_, TF's variance_scaling(2.0)): for layers
/// followed by relu, as in a residual net.
struct he_normal {
  static constexpr bool shaped = true;
  template <class T, std::size_t R>
  static void init(T* data, const dims_t<R>& d, std::mt19937_64& g) {
    double fan_in = 1;
    for (std::size_t i = 0; i + 1 < R; ++i)
      fan_in *= static_cast<double>(d[i]);
    const double stddev = std::sqrt(2.0 / fan_in);
    const std::int64_t n = numel(d);
    for (std::int64_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(stddev * detail::standard_normal(g));
  }
  static std::string describe() { return "he_normal"; }
};

/// Attribute: the variable joins the losses collection with decay * l2_loss(variable).
template <std::uint64_t DecayBits, class Init>
struct weight_decay_bits : Init {
  static constexpr double weight_decay = std::bit_cast<double>(DecayBits);
  static std::string describe() {
    return Init::describe() + ", weight_decay(" + detail::format_number(weight_decay) + ")";
  }
};
template <auto Decay, class Init>
using with_weight_decay = weight_decay_bits<detail::bits<Decay>, Init>;

/// Attribute: the variable is state, not a parameter (global_step, slots, hyper-parameters).
template <class Init>
struct not_trainable : Init {
  static constexpr bool trainable = false;
  static std::string describe() { return Init::describe() + ", not trainable"; }
};

namespace detail {
template <class Init>
constexpr bool init_trainable() {
  if constexpr (requires { Init::trainable; })
    return Init::trainable;
  else
    return true;
}
template <class Init>
constexpr double init_weight_decay() {
  if constexpr (requires { Init::weight_decay; })
    return Init::weight_decay;
  else
    return 0.0;
}

template <class Op>
struct variable_traits {
  static constexpr bool trainable = false;
  static constexpr double weight_decay = 0;
};
template <class Name, dtype T, class Shape, class Init>
struct variable_traits<ops::variable<Name, T, Shape, Init>> {
  static constexpr auto name = Name::value;
  static constexpr bool trainable = is_floating<T> && init_trainable<Init>();
  static constexpr double weight_decay = init_weight_decay<Init>();
};
} // namespace detail

/// Whether minimize() trains variable node V: a floating-point variable not marked not_trainable.
template <class V>
struct is_trainable_t : std::bool_constant<detail::variable_traits<typename V::op>::trainable> {};

} // namespace typeflow
