// Gradient rules of the index ops: gather's is a scatter-add into zeros shaped as params;
// gather_grad's (with respect to its upstream gradient) is gather again, so second derivatives
// through an embedding lookup work; indices and one_hot have none (integers); a band's is the
// upstream gradient's band.
#pragma once
#include "fold.hpp"
#include "index.hpp"

namespace typeflow {

template <>
struct grad_rule<ops::gather> {
  template <std::size_t S, class Y, class G, class P, class Ix>
  static consteval auto vjp(Y, G, P, Ix) {
    if constexpr (S == 0)
      return make_node<ops::gather_grad, shape_source_t<P>, Ix, G>();
    else
      return zero_t{}; // indices are integers
  }
};

template <>
struct grad_rule<ops::gather_grad> {
  template <std::size_t S, class Y, class G, class P, class Ix, class Up>
  static consteval auto vjp(Y, G g, P, Ix ix, Up) {
    if constexpr (S == 2)
      return typeflow::gather(g, ix);
    else
      return zero_t{}; // params' dims only; indices are integers
  }
};

template <std::int64_t Depth, dtype T>
struct grad_rule<ops::one_hot<Depth, T>> : no_gradient {};
template <dtype T, class Shape, std::size_t Axis>
struct grad_rule<ops::iota<T, Shape, Axis>> : no_gradient {};

template <std::int64_t Lower, std::int64_t Upper, ops::band_fill Fill>
struct grad_rule<ops::band<Lower, Upper, Fill>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X) {
    return typeflow::band_part<Lower, Upper>(g);
  }
};

} // namespace typeflow
