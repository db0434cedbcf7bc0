// Every call here and in the rules is qualified (typeflow::mul, not a * b): an unqualified call
// makes the compiler collect the associated namespaces of the whole nested argument type
// (argument-dependent lookup), which made gradients of long chains compile in quadratic time.
//
// Building blocks of gradient rules: a "no contribution" marker and constructors that fold at the
// type level (multiplication by a typed one or zero, addition of zero, double negation), plus
// undoing broadcasting and re-expanding reductions.
#pragma once
#include <array>
#include <cstdint>
#include <utility>

#include "elementwise.hpp"
#include "layout.hpp"
#include "reduce.hpp"

namespace typeflow {

/// No gradient flows along this path (paths that cannot reach the loss vanish).
struct zero_t {};

/// The gradient rule of an op: `template <std::size_t Slot, class Y, class G, class... X>
/// static consteval auto vjp(Y node, G upstream, X... operands)` returns the contribution to
/// operand `Slot` (an expression, or zero_t). Each op family specializes it next to the op.
template <class Op>
struct grad_rule;

/// The gradient of an op that passes its one operand through unchanged (with_device scopes,
/// debug probes): the incoming gradient itself.
struct pass_through_gradient {
  template <std::size_t, class Y, class G, class X>
  static consteval G vjp(Y, G g, X) {
    return g;
  }
};

/// For ops without a gradient (comparisons, argmax, integer results).
struct no_gradient {
  template <std::size_t, class... A>
  static consteval zero_t vjp(A...) {
    return {};
  }
};

namespace ad {

template <class E>
struct value_of_constant : std::false_type {};
template <std::uint64_t B>
struct value_of_constant<expr<ops::literal<B>>> : std::true_type {
  static constexpr double value = ops::literal<B>::value;
};
template <std::uint64_t B, class T, class S>
struct value_of_constant<expr<ops::full<B, T, S>>> : std::true_type {
  static constexpr double value = ops::full<B, T, S>::value;
};

/// A typed one: a constant whose value is 1.
template <class E>
constexpr bool is_one() {
  if constexpr (value_of_constant<E>::value)
    return value_of_constant<E>::value == 1.0;
  else
    return false;
}
/// A typed zero: zeros_like(...) or a constant whose value is 0.
template <class E>
constexpr bool is_zero() {
  if constexpr (std::is_same_v<E, zero_t>)
    return true;
  else if constexpr (std::is_same_v<typename E::op, ops::zeros_like>)
    return true;
  else if constexpr (value_of_constant<E>::value)
    return value_of_constant<E>::value == 0.0;
  else
    return false;
}

template <class Op, class C, class... Cs>
consteval C first_child(expr<Op, C, Cs...>) {
  return {};
}

template <class A, class B>
consteval auto add(A a, B b) {
  if constexpr (is_zero<A>())
    return b;
  else if constexpr (is_zero<B>())
    return a;
  else
    return typeflow::add(a, b);
}
template <class A>
consteval auto neg(A a) {
  if constexpr (is_zero<A>())
    return zero_t{};
  else if constexpr (std::is_same_v<typename A::op, ops::neg>)
    return ad::first_child(a);
  else
    return typeflow::negate(a);
}
/// The product of two constants as one constant: typed (full) when either is typed, so that a
/// weak literal never stands for a typed adjoint.
template <class A, class B>
consteval auto constant_product() {
  constexpr double v = value_of_constant<A>::value * value_of_constant<B>::value;
  if constexpr (!detail::weak_t<A>::value)
    return expr<ops::full<detail::bits<v>, typename A::value_type, typename A::shape_type>>{};
  else if constexpr (!detail::weak_t<B>::value)
    return expr<ops::full<detail::bits<v>, typename B::value_type, typename B::shape_type>>{};
  else
    return expr<ops::literal<detail::bits<v>>>{};
}

template <class A, class B>
consteval auto mul(A a, B b) {
  if constexpr (is_zero<A>() || is_zero<B>())
    return zero_t{};
  else if constexpr (value_of_constant<A>::value && value_of_constant<B>::value &&
                     (detail::weak_t<A>::value || detail::weak_t<B>::value))
    return constant_product<A, B>();
  else if constexpr (is_one<A>() && !(detail::weak_t<B>::value && !detail::weak_t<A>::value))
    return b;
  else if constexpr (is_one<B>() && !(detail::weak_t<A>::value && !detail::weak_t<B>::value))
    return a;
  else
    return typeflow::mul(a, b);
}
template <class A, class B>
consteval auto sub(A a, B b) {
  return ad::add(a, ad::neg(b));
}
template <class A, class B>
consteval auto div(A a, B b) {
  if constexpr (is_zero<A>())
    return zero_t{};
  else if constexpr (is_one<B>())
    return a;
  else
    return typeflow::div(a, b);
}

/// Sum of any number of contributions, zero_t skipped.
consteval zero_t sum_all() {
  return {};
}
template <class A, class... Rest>
consteval auto sum_all(A a, Rest... rest) {
  return ad::add(a, ad::sum_all(rest...));
}

/// Undo broadcasting: reduce a contribution c to the shape of operand `like`.
template <class C, class Like>
consteval auto unbroadcast(C c, Like like) {
  if constexpr (std::is_same_v<C, zero_t>) {
    return zero_t{};
  } else {
    constexpr auto cd = C::shape_type::dims;
    constexpr auto ld = Like::shape_type::dims;
    constexpr std::size_t rc = cd.size(), rl = ld.size();
    static_assert(rc >= rl, "gradient: contribution has a lower rank than its operand");
    // A dyn extent of the operand against a static one of the contribution may be 1 when fed:
    // then the axes to sum are known only at run time.
    constexpr bool runtime = [&] {
      for (std::size_t i = rc - rl; i < rc; ++i)
        if (ld[i - (rc - rl)] == dyn && cd[i] != dyn && cd[i] != 1)
          return true;
      return false;
    }();
    constexpr auto axes = [&] {
      std::array<bool, rc> a{};
      for (std::size_t i = 0; i < rc; ++i)
        a[i] = i < rc - rl || (ld[i - (rc - rl)] == 1 && cd[i] != 1);
      return a;
    }();
    constexpr std::size_t n = [&] {
      std::size_t k = 0;
      for (bool b : axes)
        k += b;
      return k;
    }();
    if constexpr (runtime) {
      return typeflow::sum_to_like(c, like);
    } else if constexpr (n == 0) {
      return c;
    } else {
      constexpr auto list = [&] {
        std::array<std::int64_t, n> l{};
        std::size_t k = 0;
        for (std::size_t i = 0; i < rc; ++i)
          if (axes[i])
            l[k++] = static_cast<std::int64_t>(i);
        return l;
      }();
      auto summed = [&]<std::size_t... K>(std::index_sequence<K...>) {
        return typeflow::sum<list[K]...>(c, keepdims);
      }
      (std::make_index_sequence<n>{});
      if constexpr (rc == rl)
        return summed;
      else
        return typeflow::reshape_like(summed, like);
    }
  }
}

/// g broadcast to x's shape: broadcast_to a static shape (g alone: x is not read, so it need not
/// be kept for the gradient and can stay inside its reader's loop), else broadcast_like(g, x).
template <class G, class X>
consteval auto broadcast_as(G g, X x) {
  constexpr bool is_static = [] {
    for (auto d : X::shape_type::dims)
      if (d == dyn)
        return false;
    return true;
  }();
  if constexpr (is_static)
    return typeflow::broadcast_to<typename X::shape_type>(g);
  else
    return typeflow::broadcast_like(g, x);
}

/// Bring the upstream gradient of a reduction over `Axes` (with or without keepdims) back to
/// the shape of its operand x.
template <bool Keep, std::int64_t... Axes, class G, class X>
consteval auto expand_reduced(G g, X x) {
  if constexpr (std::is_same_v<G, zero_t>) {
    return zero_t{};
  } else if constexpr (Keep || sizeof...(Axes) == 0) {
    return ad::broadcast_as(g, x);
  } else {
    constexpr std::size_t R = X::shape_type::rank;
    constexpr auto mask = ops::reduced_mask<R, Axes...>();
    constexpr std::size_t n = sizeof...(Axes);
    constexpr auto list = [&] {
      std::array<std::int64_t, n> l{};
      std::size_t k = 0;
      for (std::size_t i = 0; i < R; ++i)
        if (mask[i])
          l[k++] = static_cast<std::int64_t>(i);
      return l;
    }();
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return ad::broadcast_as(typeflow::expand_dims<list[K]...>(g), x);
    }
    (std::make_index_sequence<n>{});
  }
}

} // namespace ad
} // namespace typeflow
