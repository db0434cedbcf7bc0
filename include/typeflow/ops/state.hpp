// State: assign, assign_add, assign_sub on variables, and group(...) to run several as one step.
//
// Semantics of one `session::run`: every read of a variable sees its value at the start of the
// run; each assignment computes its new value from those reads (assign_add: start value + delta)
// and all assignments are committed at the end of the run, in the plan's order, so when several
// assign one variable in the same run the last in that order wins.
#pragma once
#include "elementwise.hpp"

namespace typeflow {
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
    rule_result<RV> r{{}, v};
    auto b = detail::broadcast_rule(v, x);
    if (!b.ok() || RX > RV) {
      r.error = "value shape does not match the variable";
      return r;
    }
    for (std::size_t i = 0; i < RV; ++i)
      if (b.dims[i] != v[i])
        r.error = "value shape does not match the variable";
    return r;
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

} // namespace typeflow
