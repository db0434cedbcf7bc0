// Gradient rules of the layout ops: reshape and its views go back by reshape_like, transpose by
// the inverse permutation, concat and slice by slice_like and pad_like (each the gradient of the
// other).
#pragma once
#include "fold.hpp"

namespace typeflow {

template <std::int64_t... D>
struct grad_rule<ops::reshape<D...>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X x) {
    return typeflow::reshape_like(g, x);
  }
};
template <std::int64_t... D>
struct grad_rule<ops::expand_dims<D...>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X x) {
    return typeflow::reshape_like(g, x);
  }
};
template <>
struct grad_rule<ops::reshape_like> {
  template <std::size_t S, class Y, class G, class A, class X>
  static consteval auto vjp(Y, G g, A a, X) {
    if constexpr (S == 0)
      return typeflow::reshape_like(g, a);
    else
      return zero_t{};
  }
};

template <>
struct grad_rule<ops::replica_mean> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X) {
    return typeflow::replica_mean(g);
  }
};

template <std::int64_t... Perm>
struct grad_rule<ops::transpose<Perm...>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X) {
    constexpr std::array<std::int64_t, sizeof...(Perm)> p{Perm...};
    constexpr auto inv = [&] {
      std::array<std::int64_t, sizeof...(Perm)> q{};
      for (std::size_t i = 0; i < p.size(); ++i)
        q[static_cast<std::size_t>(p[i])] = static_cast<std::int64_t>(i);
      return q;
    }();
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return typeflow::transpose<inv[I]...>(g);
    }
    (std::make_index_sequence<sizeof...(Perm)>{});
  }
};

template <class Begin, class Size>
struct grad_rule<ops::slice<Begin, Size>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X x) {
    return typeflow::pad_like<Begin>(g, x);
  }
};
template <class Begin>
struct grad_rule<ops::pad_like<Begin>> {
  template <std::size_t S, class Y, class G, class A, class X>
  static consteval auto vjp(Y, G g, A a, X) {
    if constexpr (S == 0)
      return typeflow::slice_like<Begin>(g, a);
    else
      return zero_t{};
  }
};
template <class Begin>
struct grad_rule<ops::slice_like<Begin>> {
  template <std::size_t S, class Y, class G, class C, class A>
  static consteval auto vjp(Y, G g, C c, A) {
    if constexpr (S == 0)
      return typeflow::pad_like<Begin>(g, c);
    else
      return zero_t{};
  }
};

template <std::int64_t Axis>
struct grad_rule<ops::concat<Axis>> {
  template <std::size_t S, class Y, class G, class... X>
  static consteval auto vjp(Y, G g, X...) {
    constexpr std::size_t R = G::shape_type::rank;
    constexpr std::size_t axis = Axis < 0 ? static_cast<std::size_t>(Axis + R) : Axis;
    constexpr std::array<std::int64_t, sizeof...(X)> extents{X::shape_type::dims[axis]...};
    constexpr std::int64_t begin = [&] {
      std::int64_t b = 0;
      for (std::size_t k = 0; k < S; ++k)
        b += extents[k];
      return b;
    }();
    static_assert(begin >= 0,
                  "concat gradient: extents along the axis before this operand must be static");
    using XS = std::tuple_element_t<S, std::tuple<X...>>;
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return typeflow::slice_like<ints<(I == axis ? begin : 0)...>>(g, XS{});
    }
    (std::make_index_sequence<R>{});
  }
};

} // namespace typeflow
