// Gradient rules of the elementwise ops, written as expressions of other ops (TensorFlow's
// gradient registry: the gradient of sin is grad * cos(x)). Broadcasting is undone by summing
// over the broadcast axes (ad::unbroadcast).
//
// Conventions at non-differentiable points: relu'(0) = 0; abs'(0) = 0; maximum/minimum send the
// whole gradient to the first operand on ties (the one they return).
#pragma once
#include "debug.hpp"
#include "fold.hpp"
#include "state.hpp"

namespace typeflow {

#define TYPEFLOW_UNARY_GRAD(OP, EXPR)                                                              \
  template <>                                                                                      \
  struct grad_rule<ops::OP> {                                                                      \
    template <std::size_t, class Y, class G, class X>                                              \
    static consteval auto vjp([[maybe_unused]] Y y, G g, [[maybe_unused]] X x) {                   \
      return EXPR;                                                                                 \
    }                                                                                              \
  };
TYPEFLOW_UNARY_GRAD(neg, ad::neg(g))
TYPEFLOW_UNARY_GRAD(abs,
                    typeflow::where(typeflow::greater(x, constant<0>), g,
                                    typeflow::where(typeflow::less(x, constant<0>),
                                                    typeflow::negate(g), typeflow::zeros_like(g))))
TYPEFLOW_UNARY_GRAD(square, ad::mul(g, typeflow::mul(x, constant<2>)))
// relu's gradient reads its output, not its input (y > 0 exactly where x > 0, NaN in neither):
// the input (a bias_add, say) then has relu as its only reader and fuses into relu's loop
// instead of being materialized for the backward pass (TensorFlow's ReluGrad does the same).
TYPEFLOW_UNARY_GRAD(relu,
                    typeflow::where(typeflow::greater(y, constant<0>), g, typeflow::zeros_like(g)))
TYPEFLOW_UNARY_GRAD(exp, ad::mul(g, y))
TYPEFLOW_UNARY_GRAD(log, ad::div(g, x))
TYPEFLOW_UNARY_GRAD(sqrt, ad::div(g, typeflow::mul(y, constant<2>)))
TYPEFLOW_UNARY_GRAD(rsqrt, ad::mul(g, typeflow::mul(typeflow::div(y, x), constant<-0.5>)))
TYPEFLOW_UNARY_GRAD(sin, ad::mul(g, typeflow::cos(x)))
TYPEFLOW_UNARY_GRAD(cos, ad::neg(ad::mul(g, typeflow::sin(x))))
TYPEFLOW_UNARY_GRAD(tanh, ad::mul(g, typeflow::sub(constant<1>, typeflow::mul(y, y))))
TYPEFLOW_UNARY_GRAD(sigmoid, ad::mul(g, typeflow::mul(y, typeflow::sub(constant<1>, y))))
// erf'(x) = 2/sqrt(pi) exp(-x^2)
TYPEFLOW_UNARY_GRAD(erf,
                    ad::mul(g, typeflow::mul(typeflow::exp(typeflow::negate(typeflow::square(x))),
                                             constant<1.12837916709551257390>)))
TYPEFLOW_UNARY_GRAD(gelu, typeflow::gelu_grad(x, g))
TYPEFLOW_UNARY_GRAD(gelu_tanh, typeflow::gelu_tanh_grad(x, g))
#undef TYPEFLOW_UNARY_GRAD

/// Binary ops: the contribution before unbroadcasting, per slot.
#define TYPEFLOW_BINARY_GRAD(OP, DA, DB)                                                           \
  template <>                                                                                      \
  struct grad_rule<ops::OP> {                                                                      \
    template <std::size_t S, class Y, class G, class A, class B>                                   \
    static consteval auto vjp([[maybe_unused]] Y y, G g, A a, B b) {                               \
      if constexpr (S == 0)                                                                        \
        return ad::unbroadcast(DA, a);                                                             \
      else                                                                                         \
        return ad::unbroadcast(DB, b);                                                             \
    }                                                                                              \
  };
TYPEFLOW_BINARY_GRAD(add, g, g)
TYPEFLOW_BINARY_GRAD(sub, g, ad::neg(g))
TYPEFLOW_BINARY_GRAD(mul, ad::mul(g, b), ad::mul(g, a))
TYPEFLOW_BINARY_GRAD(div, ad::div(g, b), ad::neg(ad::mul(g, typeflow::div(y, b))))
TYPEFLOW_BINARY_GRAD(pow,
                     ad::mul(g, typeflow::mul(b, typeflow::pow(a, typeflow::sub(b, constant<1>)))),
                     ad::mul(g, typeflow::mul(y, typeflow::log(a))))
TYPEFLOW_BINARY_GRAD(maximum,
                     typeflow::where(typeflow::greater_equal(a, b), g, typeflow::zeros_like(g)),
                     typeflow::where(typeflow::greater_equal(a, b), typeflow::zeros_like(g), g))
TYPEFLOW_BINARY_GRAD(minimum,
                     typeflow::where(typeflow::less_equal(a, b), g, typeflow::zeros_like(g)),
                     typeflow::where(typeflow::less_equal(a, b), typeflow::zeros_like(g), g))
#undef TYPEFLOW_BINARY_GRAD

template <>
struct grad_rule<ops::equal> : no_gradient {};
template <>
struct grad_rule<ops::not_equal> : no_gradient {};
template <>
struct grad_rule<ops::less> : no_gradient {};
template <>
struct grad_rule<ops::less_equal> : no_gradient {};
template <>
struct grad_rule<ops::greater> : no_gradient {};
template <>
struct grad_rule<ops::greater_equal> : no_gradient {};
template <>
struct grad_rule<ops::zeros_like> : no_gradient {};
template <class Op>
requires(Op::kind == node_kind::leaf) struct grad_rule<Op> : no_gradient {
};
template <ops::assign_mode M>
struct grad_rule<ops::assign_op<M>> : no_gradient {};
template <>
struct grad_rule<ops::group> : no_gradient {};
template <>
struct grad_rule<ops::adam_m> : no_gradient {};
template <>
struct grad_rule<ops::adam_v> : no_gradient {};
template <>
struct grad_rule<ops::apply_adam> : no_gradient {};
template <>
struct grad_rule<ops::momentum_accum> : no_gradient {};
template <>
struct grad_rule<ops::moving_average> : no_gradient {};
template <bool N>
struct grad_rule<ops::apply_momentum<N>> : no_gradient {};

template <>
struct grad_rule<ops::where> {
  template <std::size_t S, class Y, class G, class C, class A, class B>
  static consteval auto vjp(Y, G g, C c, A a, B b) {
    if constexpr (S == 0)
      return zero_t{};
    else if constexpr (S == 1)
      return ad::unbroadcast(typeflow::where(c, g, typeflow::zeros_like(g)), a);
    else
      return ad::unbroadcast(typeflow::where(c, typeflow::zeros_like(g), g), b);
  }
};

namespace detail {
template <class Def>
inline constexpr bool is_save_def = false;
template <class H, class Z>
inline constexpr bool is_save_def<expr<ops::save<H>, Z>> = true;
template <class X>
inline constexpr bool is_saved_copy = is_save_def<def_t<X>>;
} // namespace detail

/// A cast between floating types (16-bit ones included) passes the gradient on, cast to the
/// operand's type; autodiff's saved copies (cast<float> or widen of a save<H>, and the save
/// itself) pass it on as it is (no rounding through H on the way back).
template <dtype U>
struct grad_rule<ops::cast<U>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X) {
    using From = typename X::value_type;
    if constexpr (std::is_same_v<U, float> && detail::is_saved_copy<X>)
      return g;
    else if constexpr ((is_floating<U> || is_half<U>)&&(is_floating<From> || is_half<From>))
      return typeflow::cast<From>(g);
    else
      return zero_t{};
  }
};
template <>
struct grad_rule<ops::widen> : grad_rule<ops::cast<float>> {};
template <class H>
struct grad_rule<ops::save<H>> {
  template <std::size_t, class Y, class G, class X>
  static consteval G vjp(Y, G g, X) {
    return g;
  }
};

template <class Shape>
struct grad_rule<ops::broadcast_to<Shape>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X x) {
    return ad::unbroadcast(g, x);
  }
};

template <>
struct grad_rule<ops::broadcast_like> {
  template <std::size_t S, class Y, class G, class A, class X>
  static consteval auto vjp(Y, G g, A a, X) {
    if constexpr (S == 0)
      return ad::unbroadcast(g, a);
    else
      return zero_t{};
  }
};

template <class Tag>
struct grad_rule<debug::probe_op<Tag>> : pass_through_gradient {};

} // namespace typeflow
