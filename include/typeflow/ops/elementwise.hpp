// Elementwise ops with NumPy broadcasting. Each op is one scalar functor (`eval`); the backends
// instantiate fused loops from the functor types (docs/architecture.md).
#pragma once
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "broadcast.hpp"
#include "leaves.hpp"

namespace typeflow {

namespace detail {
/// gelu_tanh's derivative at x, given t = tanh(sqrt(2/pi) (x + 0.044715 x^3)).
template <class C>
TYPEFLOW_HD constexpr C gelu_tanh_slope(C x, C t) {
  return C(0.5) * (C(1) + t) +
         C(0.5) * x * (C(1) - t * t) * C(0.79788456080286535588) * (C(1) + C(0.134145) * x * x);
}
} // namespace detail

namespace ops {

/// Shared by all elementwise ops: NumPy broadcasting of the children's shapes.
struct elementwise_base {
  static constexpr node_kind kind = node_kind::elementwise;
  template <std::size_t... R>
  static constexpr auto rule(const dims_t<R>&... d) {
    return detail::broadcast_rule(d...);
  }
};

/// Arithmetic on numbers (not bool); all strongly typed operands share one dtype.
struct arith_base : elementwise_base {
  template <class... Cs>
  using value_type = compute_type<Cs...>;
  template <class... Cs>
  static constexpr std::string_view dtype_error() {
    if (!same_dtype<Cs...>())
      return "operand dtypes differ";
    if (std::is_same_v<compute_type<Cs...>, bool>)
      return "arithmetic on bool";
    return {};
  }
};

/// Functions defined on floating-point tensors only.
struct float_base : arith_base {
  template <class... Cs>
  static constexpr std::string_view dtype_error() {
    if (!same_dtype<Cs...>())
      return "operand dtypes differ";
    if (!is_floating<compute_of<compute_type<Cs...>>>)
      return "requires a floating-point dtype";
    return {};
  }
};

/// Comparisons: operands share one dtype; the result is bool.
struct compare_base : elementwise_base {
  template <class...>
  using value_type = bool;
  template <class... Cs>
  static constexpr std::string_view dtype_error() {
    return same_dtype<Cs...>() ? std::string_view{} : std::string_view{"operand dtypes differ"};
  }
};

#define TYPEFLOW_UNARY(NAME, BASE, EXPR)                                                           \
  struct NAME : BASE {                                                                             \
    static constexpr std::string_view name = #NAME;                                                \
    template <class C, class A>                                                                    \
    TYPEFLOW_HD static constexpr C eval(A a_) {                                                    \
      const C x = static_cast<C>(a_);                                                              \
      return EXPR;                                                                                 \
    }                                                                                              \
  };
TYPEFLOW_UNARY(neg, arith_base, -x)
TYPEFLOW_UNARY(abs, arith_base, x < C(0) ? C(-x) : (x == C(0) ? C(0) : x)) // abs(-0.) = +0.
TYPEFLOW_UNARY(square, arith_base, x* x)
// relu'(0) = 0; NaN propagates.
struct relu : arith_base {
  static constexpr std::string_view name = "relu";
  static constexpr epilogue_role epilogue = epilogue_role::activation; // folds into conv, matmul
  template <class C, class A>
  TYPEFLOW_HD static constexpr C eval(A a_) {
    const C x = static_cast<C>(a_);
    return x < C(0) ? C(0) : x;
  }
};
TYPEFLOW_UNARY(exp, float_base, std::exp(x))
TYPEFLOW_UNARY(log, float_base, std::log(x))
TYPEFLOW_UNARY(sqrt, float_base, std::sqrt(x))
TYPEFLOW_UNARY(rsqrt, float_base, C(1) / std::sqrt(x))
TYPEFLOW_UNARY(sin, float_base, std::sin(x))
TYPEFLOW_UNARY(cos, float_base, std::cos(x))
TYPEFLOW_UNARY(tanh, float_base, std::tanh(x))
TYPEFLOW_UNARY(sigmoid, float_base, C(1) / (C(1) + std::exp(-x)))
TYPEFLOW_UNARY(erf, float_base, std::erf(x))
/// gelu(x) = x * Phi(x), Phi the standard normal CDF (the exact form, PyTorch's
/// approximate='none'), computed as 0.5 x erfc(-x / sqrt 2): 1 + erf(x / sqrt 2) would cancel in
/// the negative tail.
TYPEFLOW_UNARY(gelu, float_base, C(0.5) * x * std::erfc(x * C(-0.70710678118654752440)))
/// The tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's;
/// PyTorch's approximate='tanh').
TYPEFLOW_UNARY(gelu_tanh, float_base,
               C(0.5) * x *
                   (C(1) + std::tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x))))
#undef TYPEFLOW_UNARY

/// A selection by value (maximum, minimum): its gradient reads its operands exactly (a 16-bit
/// saved copy would see ties between values that round alike and move the gradient).
struct select_base : arith_base {
  static constexpr bool keeps_float32 = true;
};

#define TYPEFLOW_BINARY(NAME, BASE, RESULT, EXPR)                                                  \
  struct NAME : BASE {                                                                             \
    static constexpr std::string_view name = #NAME;                                                \
    template <class C, class A, class B>                                                           \
    TYPEFLOW_HD static constexpr RESULT eval(A a_, B b_) {                                         \
      const C a = static_cast<C>(a_);                                                              \
      const C b = static_cast<C>(b_);                                                              \
      return EXPR;                                                                                 \
    }                                                                                              \
  };
TYPEFLOW_BINARY(add, arith_base, C, a + b)
TYPEFLOW_BINARY(sub, arith_base, C, a - b)
TYPEFLOW_BINARY(mul, arith_base, C, a* b)
// Integer division truncates toward zero; an integer divided by zero gives 0 (no trap).
TYPEFLOW_BINARY(div, arith_base, C, (std::is_integral_v<C> && b == C(0)) ? C(0) : C(a / b))
TYPEFLOW_BINARY(pow, float_base, C, std::pow(a, b))
// The gradients of gelu and gelu_tanh: gelu_grad(x, g) = g * gelu'(x), one functor each (one
// node in a gradient graph instead of about ten).
TYPEFLOW_BINARY(gelu_grad, float_base, C,
                b*(C(0.5) * (C(1) + std::erf(a * C(0.70710678118654752440))) +
                   a * C(0.39894228040143267794) * std::exp(C(-0.5) * a * a)))
TYPEFLOW_BINARY(gelu_tanh_grad, float_base, C,
                b* detail::gelu_tanh_slope(a, std::tanh(C(0.79788456080286535588) *
                                                        (a + C(0.044715) * a * a * a))))
// Ties go to the first operand (documented for the gradient).
TYPEFLOW_BINARY(maximum, select_base, C, a < b ? b : a)
TYPEFLOW_BINARY(minimum, select_base, C, b < a ? b : a)
TYPEFLOW_BINARY(equal, compare_base, bool, a == b)
TYPEFLOW_BINARY(not_equal, compare_base, bool, a != b)
TYPEFLOW_BINARY(less, compare_base, bool, a < b)
TYPEFLOW_BINARY(less_equal, compare_base, bool, a <= b)
TYPEFLOW_BINARY(greater, compare_base, bool, a > b)
TYPEFLOW_BINARY(greater_equal, compare_base, bool, a >= b)
#undef TYPEFLOW_BINARY

/// where(cond, a, b): cond is bool; a and b share one dtype.
struct where : elementwise_base {
  static constexpr std::string_view name = "where";
  template <class Cond, class A, class B>
  using value_type = compute_type<A, B>;
  template <class Cond, class A, class B>
  using compute = compute_type<A, B>;
  template <class Cond, class A, class B>
  static constexpr std::string_view dtype_error() {
    if (!std::is_same_v<typename Cond::value_type, bool>)
      return "condition must be bool";
    if (!same_dtype<A, B>())
      return "operand dtypes differ";
    return {};
  }
  template <class C, class Cond, class A, class B>
  TYPEFLOW_HD static C eval(Cond c, A a, B b) {
    return c ? static_cast<C>(a) : static_cast<C>(b);
  }
};

template <dtype U>
struct cast : elementwise_base, no_dtype_rule {
  static constexpr std::string_view name = "cast";
  static constexpr bool sets_dtype = true; ///< its result is U even from literals
  template <class...>
  using value_type = U;
  static std::string attrs() { return std::string(dtype_name<U>); }
  template <class C, class A>
  TYPEFLOW_HD static U eval(A a) {
    if constexpr (std::is_same_v<U, bool>)
      return a != A(0);
    else
      return static_cast<U>(a);
  }
};

/// save<H>(x): a float32 x rounded to H (bfloat16 or float16) and stored so, for the backward
/// pass to keep instead of x (autodiff's saved_in<H>; cast<float> widens it where it is read).
/// A cast that is always a step of its own (graph/node.hpp's always_stored): fused into its
/// readers, it would be neither stored in 16 bits nor let x die early.
template <class H>
struct save : cast<H> {
  static constexpr std::string_view name = "save";
  static constexpr bool stored = true;
};

/// widen(s): a saved 16-bit copy read back as float32 by a kernel (a matmul, convolution or
/// pool gradient). A cast<float> of its own type, so that it is a node apart from the
/// cast<float> of the same copy that elementwise gradients read: those fuse the widening into
/// their loops, while this one is stored, right before the kernel that reads it
/// (compile::plan's schedule()).
struct widen : cast<float> {
  static constexpr std::string_view name = "widen";
};

} // namespace ops

/// A float32 value saved in 16 bits by a gradient (cast<float>(save<H>(z)), widen(save<H>(z))
/// or save<H>(z)) has z's shape: an op that reads only the shape takes z.
namespace detail {
/// Z for the definition of save<H>(Z), void otherwise.
template <class Def>
struct saved_operand {
  using type = void;
};
template <class H, class Z>
struct saved_operand<expr<ops::save<H>, Z>> {
  using type = Z;
};
/// S for the definition of cast<float>(S) or widen(S) where S is a save<H>(Z), void otherwise.
template <class Def>
struct widened_save {
  using type = void;
};
template <class S>
requires(!std::is_void_v<typename saved_operand<def_t<S>>::type>) struct widened_save<
    expr<ops::cast<float>, S>> {
  using type = S;
};
template <class S>
requires(!std::is_void_v<typename saved_operand<def_t<S>>::type>) struct widened_save<
    expr<ops::widen, S>> {
  using type = S;
};
template <class X, class W = typename widened_save<def_t<X>>::type>
struct saved_source {
  using type = typename saved_operand<def_t<W>>::type;
};
template <class X>
struct saved_source<X, void> {
  using type = typename saved_operand<def_t<X>>::type;
};
} // namespace detail
template <class X>
requires(!std::is_void_v<typename detail::saved_source<X>::type>) struct shape_source<X> {
  using type = typename detail::saved_source<X>::type;
};
template <class X>
requires(!std::is_void_v<typename detail::widened_save<def_t<X>>::type>) struct stored_source<X> {
  using type = typename detail::widened_save<def_t<X>>::type;
};

namespace ops {

/// broadcast_to<shape<...>>(x): NumPy's broadcast_to, fused like any elementwise op.
template <class Shape>
struct broadcast_to : no_dtype_rule {
  static constexpr node_kind kind = node_kind::elementwise;
  static constexpr std::string_view name = "broadcast_to";
  template <class A>
  using value_type = typename A::value_type;
  static std::string attrs() { return dims_string(Shape::dims); }
  static constexpr void attrs_message(detail::msg_buf& b) {
    b << std::string_view(" to ");
    append_dims(b, Shape::dims);
  }
  template <std::size_t R>
  static constexpr rule_result<Shape::rank> rule(const dims_t<R>& d) {
    rule_result<Shape::rank> r{{}, Shape::dims};
    if (R > Shape::rank) {
      r.error = "rank above the target rank";
      return r;
    }
    auto b = detail::broadcast_rule(d, Shape::dims);
    if (!b.ok())
      r.error = "shape cannot be broadcast";
    for (std::size_t i = 0; i < Shape::rank && b.ok(); ++i) {
      if (Shape::dims[i] == dyn) // a dyn target extent is the input's own (1 stays 1)
        r.dims[i] = i + R >= Shape::rank ? d[i + R - Shape::rank] : dyn;
      else if (b.dims[i] != Shape::dims[i])
        r.error = "shape cannot be broadcast";
    }
    return r;
  }
  template <class C, class A>
  TYPEFLOW_HD static A eval(A a) {
    return a;
  }
};

/// An elementwise op whose value is its operand's (stop_gradient, custom_gradient): only the
/// gradient differs.
struct identity_base : elementwise_base, no_dtype_rule {
  template <class A>
  using value_type = typename A::value_type;
  template <class C, class A>
  TYPEFLOW_HD static A eval(A a) {
    return a;
  }
};

/// stop_gradient(e): e, through which no gradient flows.
struct stop_gradient : identity_base {
  static constexpr std::string_view name = "stop_gradient";
};

/// zeros_like(x): zeros with x's dtype and shape (a typed zero, as gradients produce).
struct zeros_like : elementwise_base, no_dtype_rule {
  static constexpr std::string_view name = "zeros_like";
  template <class A>
  using value_type = typename A::value_type;
  template <class A>
  using compute = typename A::value_type;
  template <class C, class A>
  TYPEFLOW_HD static C eval(A) {
    return C(0);
  }
};

/// broadcast_like(a, x): a broadcast to x's (run-time) shape; x only gives the shape.
struct broadcast_like : no_dtype_rule {
  static constexpr node_kind kind = node_kind::elementwise;
  static constexpr std::string_view name = "broadcast_like";
  template <class A, class X>
  using value_type = typename A::value_type;
  template <class A, class X>
  using compute = typename A::value_type;
  template <std::size_t RA, std::size_t RX>
  static constexpr rule_result<RX> rule(const dims_t<RA>& a, const dims_t<RX>& x) {
    rule_result<RX> r{{}, x};
    const auto b = detail::broadcast_rule(a, x);
    if (!b.ok() || RA > RX) {
      r.error = "shape cannot be broadcast";
      return r;
    }
    for (std::size_t i = 0; i < RX; ++i)
      if (b.dims[i] != x[i] && b.dims[i] != dyn && x[i] != dyn)
        r.error = "shape cannot be broadcast";
    return r;
  }
  template <class C, class A, class X>
  TYPEFLOW_HD static C eval(A a, X) {
    return static_cast<C>(a);
  }
};

} // namespace ops

#define TYPEFLOW_UNARY_FN(NAME)                                                                    \
  template <expression A>                                                                          \
  consteval auto NAME(A) {                                                                         \
    return make_node<ops::NAME, A>();                                                              \
  }
TYPEFLOW_UNARY_FN(abs)
TYPEFLOW_UNARY_FN(square)
TYPEFLOW_UNARY_FN(relu)
TYPEFLOW_UNARY_FN(exp)
TYPEFLOW_UNARY_FN(log)
TYPEFLOW_UNARY_FN(sqrt)
TYPEFLOW_UNARY_FN(rsqrt)
TYPEFLOW_UNARY_FN(sin)
TYPEFLOW_UNARY_FN(cos)
TYPEFLOW_UNARY_FN(tanh)
TYPEFLOW_UNARY_FN(sigmoid)
TYPEFLOW_UNARY_FN(erf)
TYPEFLOW_UNARY_FN(gelu)
TYPEFLOW_UNARY_FN(gelu_tanh)
#undef TYPEFLOW_UNARY_FN

#define TYPEFLOW_BINARY_FN(NAME)                                                                   \
  template <expression A, expression B>                                                            \
  consteval auto NAME(A, B) {                                                                      \
    return make_node<ops::NAME, A, B>();                                                           \
  }
TYPEFLOW_BINARY_FN(add)
TYPEFLOW_BINARY_FN(sub)
TYPEFLOW_BINARY_FN(mul)
TYPEFLOW_BINARY_FN(div)
TYPEFLOW_BINARY_FN(pow)
TYPEFLOW_BINARY_FN(gelu_grad) // gelu_grad(x, g) = g * gelu'(x)
TYPEFLOW_BINARY_FN(gelu_tanh_grad)
TYPEFLOW_BINARY_FN(maximum)
TYPEFLOW_BINARY_FN(minimum)
TYPEFLOW_BINARY_FN(equal)
TYPEFLOW_BINARY_FN(not_equal)
TYPEFLOW_BINARY_FN(less)
TYPEFLOW_BINARY_FN(less_equal)
TYPEFLOW_BINARY_FN(greater)
TYPEFLOW_BINARY_FN(greater_equal)
#undef TYPEFLOW_BINARY_FN

/// stop_gradient(e): e, through which no gradient flows (its value is e's).
template <expression E>
consteval auto stop_gradient(E) {
  return make_node<ops::stop_gradient, E>();
}

template <expression A>
consteval auto negate(A) {
  return make_node<ops::neg, A>();
}

template <expression A>
consteval auto operator-(A) {
  return make_node<ops::neg, A>();
}
template <expression A, expression B>
consteval auto operator+(A, B) {
  return make_node<ops::add, A, B>();
}
template <expression A, expression B>
consteval auto operator-(A, B) {
  return make_node<ops::sub, A, B>();
}
template <expression A, expression B>
consteval auto operator*(A, B) {
  return make_node<ops::mul, A, B>();
}
template <expression A, expression B>
consteval auto operator/(A, B) {
  return make_node<ops::div, A, B>();
}
template <expression A, expression B>
consteval auto operator==(A, B) {
  return make_node<ops::equal, A, B>();
}
template <expression A, expression B>
consteval auto operator!=(A, B) {
  return make_node<ops::not_equal, A, B>();
}
template <expression A, expression B>
consteval auto operator<(A, B) {
  return make_node<ops::less, A, B>();
}
template <expression A, expression B>
consteval auto operator<=(A, B) {
  return make_node<ops::less_equal, A, B>();
}
template <expression A, expression B>
consteval auto operator>(A, B) {
  return make_node<ops::greater, A, B>();
}
template <expression A, expression B>
consteval auto operator>=(A, B) {
  return make_node<ops::greater_equal, A, B>();
}

/// where(cond, a, b): elementwise choice, broadcasting all three.
template <expression Cond, expression A, expression B>
consteval auto where(Cond, A, B) {
  return make_node<ops::where, Cond, A, B>();
}

/// cast<U>(x): convert the dtype (to bool: x != 0).
template <dtype U, expression A>
consteval auto cast(A) {
  return make_node<ops::cast<U>, A>();
}

/// zeros_like(x)
template <expression A>
consteval auto zeros_like(A) {
  return make_node<ops::zeros_like, shape_source_t<A>>();
}

/// broadcast_like(a, x): a broadcast to the shape of x.
template <expression A, expression X>
consteval auto broadcast_like(A, X) {
  return make_node<ops::broadcast_like, A, shape_source_t<X>>();
}

/// broadcast_to<shape<...>>(x)
template <class Shape, expression A>
consteval auto broadcast_to(A) {
  return make_node<ops::broadcast_to<Shape>, A>();
}

} // namespace typeflow
