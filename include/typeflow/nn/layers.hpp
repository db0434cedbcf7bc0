// Layer helpers that create named variables as the seed's _variable_on_cpu does: a layer named
// "conv1" owns "conv1/weights" and "conv1/biases". The variables' types carry their initializer
// and attributes, so the same layer written twice is the same variable (shared by name).
#pragma once
#include "../ops/matmul.hpp"
#include "../ops/nn.hpp"
#include "../ops/norm.hpp"
#include "initializers.hpp"

namespace typeflow {

namespace detail {
template <std::uint64_t DecayBits, class Init>
struct decayed {
  using type = weight_decay_bits<DecayBits, Init>;
};
template <class Init>
struct decayed<0, Init> { // bits of +0.0
  using type = Init;
};
} // namespace detail

/// The weights variable of a layer: `Name/weights`, optionally with weight decay.
template <fixed_string Name, dtype T, class Shape, class Init, auto Decay = 0.0>
inline constexpr auto layer_weights =
    variable<Name + fixed_string("/weights"), T, Shape,
             typename detail::decayed<detail::bits<Decay>, Init>::type>;
/// The biases variable of a layer: `Name/biases`.
template <fixed_string Name, dtype T, std::int64_t N, class Init>
inline constexpr auto layer_biases = variable<Name + fixed_string("/biases"), T, shape<N>, Init>;

/// dense<"local3", 1024>(x): x [..., in] times `Name/weights` [in, Units] plus `Name/biases`
/// (no activation). The input's last extent must be static.
template <fixed_string Name, std::int64_t Units, class WInit = glorot_uniform, class BInit = zeros,
          auto Decay = 0.0, expression X>
consteval auto dense(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    using T = typename X::value_type;
    static_assert(X::shape_type::rank > 0, "dense: the input is a scalar");
    constexpr std::int64_t in = X::shape_type::dims[X::shape_type::rank - 1];
    static_assert(in != dyn, "dense: the input's last extent must be static");
    return typeflow::bias_add(
        typeflow::matmul(x, layer_weights<Name, T, shape<in, Units>, WInit, Decay>),
        layer_biases<Name, T, Units, BInit>);
  }
}

/// conv2d_layer<"conv1", 5, 5, 32>(x): conv2d of x [N, H, W, C] with `Name/weights`
/// [KH, KW, C, Filters] plus `Name/biases` (no activation).
template <fixed_string Name, std::int64_t KH, std::int64_t KW, std::int64_t Filters,
          class WInit = glorot_uniform, class BInit = zeros, auto Decay = 0.0,
          padding P = padding::same, std::int64_t Stride = 1, expression X>
consteval auto conv2d_layer(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    using T = typename X::value_type;
    static_assert(X::shape_type::rank == 4, "conv2d_layer: the input is not [N, H, W, C]");
    constexpr std::int64_t c = X::shape_type::dims[X::shape_type::rank - 1];
    static_assert(c != dyn, "conv2d_layer: the input's channel extent must be static");
    return typeflow::bias_add(
        typeflow::conv2d<P, Stride, Stride>(
            x, layer_weights<Name, T, shape<KH, KW, c, Filters>, WInit, Decay>),
        layer_biases<Name, T, Filters, BInit>);
  }
}

/// layer_norm_layer<"ln1">(x): layer_norm over the last axis of x [..., D] with `Name/gamma`
/// (ones) and `Name/beta` (zeros), both [D]; eps as layer_norm's.
template <fixed_string Name, auto Eps = 1e-5, expression X>
consteval auto layer_norm_layer(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    using T = typename X::value_type;
    static_assert(X::shape_type::rank > 0, "layer_norm_layer: the input is a scalar");
    constexpr std::int64_t d = X::shape_type::dims[X::shape_type::rank - 1];
    static_assert(d != dyn, "layer_norm_layer: the input's last extent must be static");
    return typeflow::layer_norm<Eps>(x, variable<Name + fixed_string("/gamma"), T, shape<d>, ones>,
                                     variable<Name + fixed_string("/beta"), T, shape<d>, zeros>);
  }
}

} // namespace typeflow
