// Ops that read by integer index or by an element's coordinates: gather (an embedding lookup)
// with its gradient, a scatter-add; one_hot; band_part and causal_mask. Their kernels are
// backend/cpu/kernels/index.hpp and backend/cuda/index.cuh.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "nn.hpp"

namespace typeflow {

namespace ops {

/// gather(params [V, D...], indices [I...]) -> [I..., D...]: row indices[i] of params for each
/// index (TensorFlow's tf.gather at axis 0, tf.nn.embedding_lookup). An index outside [0, V)
/// is a run-time error naming it, its position and V.
struct gather : nn_base {
  static constexpr std::string_view name = "gather";
  template <class P, class Ix>
  using value_type = typename P::value_type;
  template <class P, class Ix>
  static constexpr std::string_view dtype_error() {
    if (!detail::index_operand<Ix>)
      return "indices need dtype int32 or int64";
    return {};
  }
  template <std::size_t RP, std::size_t RI>
  static constexpr rule_result<(RP == 0 ? RI : RI + RP - 1)> rule(const dims_t<RP>& p,
                                                                  const dims_t<RI>& ix) {
    rule_result<(RP == 0 ? RI : RI + RP - 1)> r;
    if constexpr (RP == 0) {
      r.error = "params must have rank >= 1";
    } else {
      for (std::size_t k = 0; k < RI; ++k)
        r.dims[k] = ix[k];
      for (std::size_t k = 1; k < RP; ++k)
        r.dims[RI + k - 1] = p[k];
    }
    return r;
  }
};

/// gather's gradient with respect to params: zeros shaped as params (operand 0, read for its
/// dims only) with each row g[i...] added into row indices[i...]; repeated indices add up.
struct gather_grad : nn_base {
  static constexpr std::string_view name = "gather_grad";
  static constexpr unsigned shape_only = 1u; // params: graph/node.hpp
  template <class P, class Ix, class G>
  using value_type = typename G::value_type;
  template <class P, class Ix, class G>
  static constexpr std::string_view dtype_error() {
    if (!detail::index_operand<Ix>)
      return "indices need dtype int32 or int64";
    if (!detail::floating_operand<G>)
      return "the gradient needs a floating-point dtype";
    return {};
  }
  template <std::size_t RP, std::size_t RI, std::size_t RG>
  static constexpr rule_result<RP> rule(const dims_t<RP>& p, const dims_t<RI>& ix,
                                        const dims_t<RG>& g) {
    rule_result<RP> r{{}, p};
    if (RP == 0 || RG + 1 != RI + RP) {
      r.error = "the gradient's rank is not indices' rank + params' rank - 1";
      return r;
    }
    const auto differ = [](std::int64_t a, std::int64_t b) {
      return a != b && a != dyn && b != dyn;
    };
    for (std::size_t k = 0; k < RI; ++k)
      if (differ(g[k], ix[k]))
        r.error = "the gradient's leading extents differ from the indices'";
    for (std::size_t k = 1; k < RP; ++k)
      if (differ(g[RI + k - 1], p[k]))
        r.error = "the gradient's row extents differ from params'";
    return r;
  }
};

/// one_hot<Depth, T>(indices [I...]) -> [I..., Depth] of dtype T: 1 where the last coordinate
/// equals the index, else 0. An index outside [0, Depth) gives a row of zeros, as TensorFlow's
/// tf.one_hot does (-1 marks padding).
template <std::int64_t Depth, dtype T>
struct one_hot : nn_base {
  static_assert(Depth >= 1, "one_hot: the depth must be at least 1");
  static constexpr std::string_view name = "one_hot";
  static constexpr std::int64_t depth = Depth;
  static std::string attrs() { return "depth " + std::to_string(Depth); }
  template <class Ix>
  using value_type = T;
  template <class Ix>
  static constexpr std::string_view dtype_error() {
    if (!detail::index_operand<Ix>)
      return "indices need dtype int32 or int64";
    return {};
  }
  template <std::size_t RI>
  static constexpr rule_result<RI + 1> rule(const dims_t<RI>& ix) {
    rule_result<RI + 1> r;
    for (std::size_t k = 0; k < RI; ++k)
      r.dims[k] = ix[k];
    r.dims[RI] = Depth;
    return r;
  }
};

/// What band<> writes outside its band: zeros (tf.linalg.band_part) or -infinity (an attention
/// mask: softmax then gives those positions exactly 0).
enum class band_fill { zero, minus_infinity };

/// Keeps the elements of each matrix (the last two axes) with i - j <= Lower and j - i <= Upper
/// (a negative bound: unbounded on that side), and writes Fill elsewhere.
template <std::int64_t Lower, std::int64_t Upper, band_fill Fill>
struct band : nn_base {
  static constexpr std::string_view name =
      Fill == band_fill::zero ? std::string_view{"band_part"} : std::string_view{"causal_mask"};
  static std::string attrs() {
    return "lower " + std::to_string(Lower) + ", upper " + std::to_string(Upper);
  }
  template <class X>
  using value_type = typename X::value_type;
  template <class X>
  static constexpr std::string_view dtype_error() {
    if (Fill == band_fill::minus_infinity && !detail::floating_operand<X>)
      return "requires a floating-point dtype";
    return {};
  }
  template <std::size_t R>
  static constexpr rule_result<R> rule(const dims_t<R>& x) {
    rule_result<R> r{{}, x};
    if (R < 2)
      r.error = "needs rank 2 or more (it masks the last two axes)";
    return r;
  }
  /// Whether element (i, j) of a matrix lies in the band.
  TYPEFLOW_HD static constexpr bool keeps(std::int64_t i, std::int64_t j) {
    return (Lower < 0 || i - j <= Lower) && (Upper < 0 || j - i <= Upper);
  }
};

/// iota<T, Shape, Axis>: a tensor of Shape and dtype T whose every element is its coordinate
/// along Axis (jax.lax.broadcasted_iota); no operands. Shape is static.
template <dtype T, class Shape, std::size_t Axis>
struct iota : nn_base, no_dtype_rule {
  static_assert(Axis < Shape::rank, "iota: the axis is out of range");
  static_assert(!std::is_same_v<T, bool>, "iota: bool has no coordinates");
  static constexpr std::string_view name = "iota";
  static constexpr std::size_t axis = Axis;
  static std::string attrs() { return "axis " + std::to_string(Axis); }
  template <class...>
  using value_type = T;
  static constexpr rule_result<Shape::rank> rule() {
    rule_result<Shape::rank> r{{}, Shape::dims};
    for (std::size_t k = 0; k < Shape::rank; ++k)
      if (Shape::dims[k] == dyn)
        r.error = "its shape must be static";
    return r;
  }
};

} // namespace ops

/// band_part<lower, upper>(x): the band of each matrix of x (its last two axes), zeros elsewhere,
/// as tf.linalg.band_part; a negative bound keeps that whole triangle (band_part<-1, 0> is the
/// lower triangle).
template <std::int64_t Lower, std::int64_t Upper, expression X>
consteval auto band_part(X) {
  return make_node<ops::band<Lower, Upper, ops::band_fill::zero>, X>();
}

/// causal_mask(scores): scores [..., T, S] with -infinity where j > i (a position attends to
/// itself and to earlier ones), so that a softmax over the last axis gives those 0. Its
/// gradient is the upstream gradient's lower triangle.
template <expression X>
consteval auto causal_mask(X) {
  return make_node<ops::band<-1, 0, ops::band_fill::minus_infinity>, X>();
}

/// gather(params, indices): rows of params [V, D...] picked by integer indices [I...], giving
/// [I..., D...]. Its gradient with respect to params is a scatter-add (repeated indices add up);
/// indices have none.
template <expression P, expression Ix>
consteval auto gather(P, Ix) {
  return make_node<ops::gather, P, Ix>();
}

/// iota<T, shape<...>, axis>: each element its coordinate along the axis, of dtype T (a
/// compile-time shape; jax.lax.broadcasted_iota). range<n> (int32) or range<n, T>: 0, 1, ...,
/// n - 1 (tf.range(n)), for instance the positions of a sequence: gather(pos_table, range<T>).
template <dtype T, class Shape, std::size_t Axis = 0>
inline constexpr auto iota = make_node<ops::iota<T, Shape, Axis>>();
template <std::int64_t N, dtype T = std::int32_t>
inline constexpr auto range = iota<T, shape<N>, 0>;

/// one_hot<depth>(indices) (float) or one_hot<depth, T>(indices): [I...] -> [I..., depth].
template <std::int64_t Depth, dtype T = float, expression Ix>
consteval auto one_hot(Ix) {
  return make_node<ops::one_hot<Depth, T>, Ix>();
}

} // namespace typeflow
