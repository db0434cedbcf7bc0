// State: assign, assign_add, assign_sub on variables, the optimizers' updates as assignments of
// their own (Adam's adam_m, adam_v, apply_adam; Momentum's momentum_accum, apply_momentum), a
// moving average (batch norm's statistics), and group(...) to run several as one step.
//
// Semantics of one `session::run`: every read of a variable sees its value at the start of the
// run; each assignment computes its new value from those reads (assign_add: start value + delta)
// and all assignments are committed at the end of the run, in the plan's order, so when several
// assign one variable in the same run the last in that order wins.
#pragma once
#include "elementwise.hpp"

namespace typeflow {
namespace detail {
/// An assignment's shape rule: the variable's shape, every other operand broadcasting to it.
template <std::size_t RV, std::size_t... RX>
constexpr rule_result<RV> assignment_rule(std::string_view error, const dims_t<RV>& v,
                                          const dims_t<RX>&... x) {
  rule_result<RV> r{{}, v};
  auto b = broadcast_rule(v, x...);
  if (!b.ok() || ((RX > RV) || ...)) {
    r.error = error;
    return r;
  }
  for (std::size_t i = 0; i < RV; ++i)
    if (b.dims[i] != v[i])
      r.error = error;
  return r;
}
} // namespace detail

namespace ops {

enum class assign_mode { set, add, sub };

template <assign_mode Mode>
struct assign_op : elementwise_base {
  static constexpr std::string_view name = Mode == assign_mode::set   ? "assign"
                                           : Mode == assign_mode::add ? "assign_add"
                                                                      : "assign_sub";
  static constexpr assign_mode mode = Mode;
  static constexpr bool is_state = true;
  template <class V, class X>
  using value_type = typename V::value_type;
  template <class V, class X>
  static constexpr std::string_view dtype_error() {
    if (!V::variable)
      return "the target must be a variable";
    if (!same_dtype<V, X>())
      return "operand dtypes differ";
    if (Mode != assign_mode::set && std::is_same_v<typename V::value_type, bool>)
      return "arithmetic on bool";
    return {};
  }
  template <std::size_t RV, std::size_t RX>
  static constexpr rule_result<RV> rule(const dims_t<RV>& v, const dims_t<RX>& x) {
    return detail::assignment_rule("value shape does not match the variable", v, x);
  }
  /// The new value (what is fetched); for add/sub computed from the value at the start of the run.
  template <class C, class V, class X>
  TYPEFLOW_HD static C eval(V v, X x) {
    if constexpr (Mode == assign_mode::set)
      return static_cast<C>(x);
    else if constexpr (Mode == assign_mode::add)
      return static_cast<C>(v + static_cast<C>(x));
    else
      return static_cast<C>(v - static_cast<C>(x));
  }
};

/// An assignment whose new value is a function of the variable and Arity - 1 other operands
/// (Adam's and Momentum's updates below): the variable is operand 0, the others broadcast to its
/// shape, all of one floating dtype (scalar literals adopt it). An optional last operand, a bool
/// scalar `ok`, keeps the variable as it is where false (a loss-scaled step that overflowed:
/// nn/optimizers.hpp's guarded), bit for bit.
template <std::size_t Arity>
struct update_base : elementwise_base {
  static constexpr bool is_state = true;
  static constexpr bool takes_ok = true; ///< an optional last operand `ok` (see above)
  template <class V, class... X>
  using value_type = typename V::value_type;
  template <class... Cs>
  static constexpr std::string_view dtype_error() {
    using V = pack_element_t<0, pack<Cs...>>;
    if constexpr (sizeof...(Cs) != Arity && sizeof...(Cs) != Arity + 1) {
      return "wrong number of operands";
    } else {
      if (!V::variable)
        return "the target must be a variable";
      if (![]<std::size_t... K>(std::index_sequence<K...>) {
            return same_dtype<pack_element_t<K, pack<Cs...>>...>();
          }(std::make_index_sequence<Arity>{}))
        return "operand dtypes differ";
      if (!is_floating<compute_of<typename V::value_type>>)
        return "requires a floating-point dtype";
      if constexpr (sizeof...(Cs) == Arity + 1)
        if (!std::is_same_v<typename pack_element_t<Arity, pack<Cs...>>::value_type, bool>)
          return "the last operand (ok) must be bool";
      return {};
    }
  }
  template <std::size_t RV, std::size_t... RX>
  static constexpr rule_result<RV> rule(const dims_t<RV>& v, const dims_t<RX>&... x) {
    return detail::assignment_rule("an operand's shape does not broadcast to the variable's", v,
                                   x...);
  }
  /// new where every `ok` (none or one) is true, else the variable's value `old`.
  template <class C, class... Ok>
  TYPEFLOW_HD static C keep_unless(C next, C old, Ok... ok) {
    return (true && ... && static_cast<bool>(ok)) ? next : old;
  }
};

/// Adam's first moment, as an assignment of m: m <- b1 m + (1 - b1) g. Operands (m, g, b1[, ok]).
struct adam_m : update_base<3> {
  static constexpr std::string_view name = "adam_m";
  template <class C, class M, class G, class B1>
  TYPEFLOW_HD static C next(M m, G g, B1 b1) {
    const C b = static_cast<C>(b1);
    return static_cast<C>(static_cast<C>(m) * b + static_cast<C>(g) * (C(1) - b));
  }
  template <class C, class M, class G, class B1, class... Ok>
  TYPEFLOW_HD static C eval(M m, G g, B1 b1, Ok... ok) {
    return keep_unless<C>(next<C>(m, g, b1), static_cast<C>(m), ok...);
  }
};
/// Adam's second moment, as an assignment of v: v <- b2 v + (1 - b2) g^2. Operands
/// (v, g, b2[, ok]).
struct adam_v : update_base<3> {
  static constexpr std::string_view name = "adam_v";
  template <class C, class V, class G, class B2>
  TYPEFLOW_HD static C next(V v, G g, B2 b2) {
    const C b = static_cast<C>(b2);
    const C x = static_cast<C>(g);
    return static_cast<C>(static_cast<C>(v) * b + x * x * (C(1) - b));
  }
  template <class C, class V, class G, class B2, class... Ok>
  TYPEFLOW_HD static C eval(V v, G g, B2 b2, Ok... ok) {
    return keep_unless<C>(next<C>(v, g, b2), static_cast<C>(v), ok...);
  }
};
/// Adam's step of a variable, as an assignment of it: var <- var - rate m' / (sqrt(v') + eps),
/// with m' and v' the moments that adam_m and adam_v assign in the same run (recomputed from the
/// values at the start of the run, which every read sees). Operands
/// (var, m, v, g, rate, b1, b2, eps[, ok]).
struct apply_adam : update_base<8> {
  static constexpr std::string_view name = "apply_adam";
  template <class C, class W, class M, class V, class G, class R, class B1, class B2, class E,
            class... Ok>
  TYPEFLOW_HD static C eval(W w, M m, V v, G g, R rate, B1 b1, B2 b2, E eps, Ok... ok) {
    const C m1 = adam_m::next<C>(m, g, b1);
    const C v1 = adam_v::next<C>(v, g, b2);
    const C next = static_cast<C>(static_cast<C>(w) - static_cast<C>(rate) * m1 /
                                                          (std::sqrt(v1) + static_cast<C>(eps)));
    return keep_unless<C>(next, static_cast<C>(w), ok...);
  }
};

/// A moving average, as an assignment of v: v <- decay v + (1 - decay) x (TensorFlow's
/// assign_moving_average; batch norm's moving mean and variance, ops/norm.hpp). Operands
/// (v, x, decay[, ok]).
struct moving_average : update_base<3> {
  static constexpr std::string_view name = "moving_average";
  template <class C, class V, class X, class D, class... Ok>
  TYPEFLOW_HD static C eval(V v, X x, D decay, Ok... ok) {
    return keep_unless<C>(adam_m::next<C>(v, x, decay), static_cast<C>(v), ok...);
  }
};

/// Momentum's accumulator, as an assignment of it: accum <- accum m + g. Operands
/// (accum, g, m[, ok]).
struct momentum_accum : update_base<3> {
  static constexpr std::string_view name = "momentum_accum";
  template <class C, class A, class G, class M>
  TYPEFLOW_HD static C next(A accum, G g, M m) {
    return static_cast<C>(static_cast<C>(accum) * static_cast<C>(m) + static_cast<C>(g));
  }
  template <class C, class A, class G, class M, class... Ok>
  TYPEFLOW_HD static C eval(A accum, G g, M m, Ok... ok) {
    return keep_unless<C>(next<C>(accum, g, m), static_cast<C>(accum), ok...);
  }
};
/// Momentum's step of a variable, as an assignment of it, with a' the accumulator that
/// momentum_accum assigns in the same run: var <- var - a' lr, or with Nesterov
/// var <- var - (g + a' m) lr. Operands (var, accum, g, lr, m[, ok]).
template <bool Nesterov>
struct apply_momentum : update_base<5> {
  static constexpr std::string_view name = Nesterov ? "apply_nesterov" : "apply_momentum";
  template <class C, class W, class A, class G, class L, class M, class... Ok>
  TYPEFLOW_HD static C eval(W w, A accum, G g, L lr, M m, Ok... ok) {
    const C a = momentum_accum::next<C>(accum, g, m);
    const C step = Nesterov ? static_cast<C>(static_cast<C>(g) + a * static_cast<C>(m)) : a;
    return keep_unless<C>(static_cast<C>(static_cast<C>(w) - step * static_cast<C>(lr)),
                          static_cast<C>(w), ok...);
  }
};

struct group : no_dtype_rule {
  static constexpr node_kind kind = node_kind::group;
  static constexpr std::string_view name = "group";
  template <class...>
  using value_type = void;
  template <std::size_t... R>
  static constexpr rule_result<0> rule(const dims_t<R>&...) {
    return {};
  }
};

} // namespace ops

template <class E>
struct is_state_op_t : std::bool_constant<op_traits<typename E::op>::state> {};
template <class E>
inline constexpr bool is_state_op = is_state_op_t<E>::value;

/// assign(var, value): the variable takes the value (broadcast to its shape) at the end of the run.
template <expression V, expression X>
consteval auto assign(V, X) {
  return make_node<ops::assign_op<ops::assign_mode::set>, V, X>();
}
/// assign_add(var, delta)
template <expression V, expression X>
consteval auto assign_add(V, X) {
  return make_node<ops::assign_op<ops::assign_mode::add>, V, X>();
}
/// assign_sub(var, delta)
template <expression V, expression X>
consteval auto assign_sub(V, X) {
  return make_node<ops::assign_op<ops::assign_mode::sub>, V, X>();
}

/// group(ops...): one node that runs all of them; fetching it yields no value.
template <class... E>
requires expressions<E...>
consteval auto group(E...) {
  return make_node<ops::group, E...>();
}

/// Adam's update of variable v from its gradient g, slots m and s (slot variables of v), the
/// step's rate and the betas and epsilon, as three assignments (nn/optimizers.hpp's adam): three
/// nodes where the same update written out with add and mul is fourteen.
template <expression V, expression M, expression S, expression G, expression R, expression B1,
          expression B2, expression Eps>
consteval auto adam_update(V, M, S, G, R, B1, B2, Eps) {
  return typeflow::group(make_node<ops::adam_m, M, G, B1>(), make_node<ops::adam_v, S, G, B2>(),
                         make_node<ops::apply_adam, V, M, S, G, R, B1, B2, Eps>());
}

/// Momentum's update of variable v from its gradient g and its slot accum, as two assignments
/// (nn/optimizers.hpp's momentum): two nodes where written with add and mul it is seven.
template <bool Nesterov, expression V, expression A, expression G, expression LR, expression M>
consteval auto momentum_update(V, A, G, LR, M) {
  return typeflow::group(make_node<ops::momentum_accum, A, G, M>(),
                         make_node<ops::apply_momentum<Nesterov>, V, A, G, LR, M>());
}

} // namespace typeflow
