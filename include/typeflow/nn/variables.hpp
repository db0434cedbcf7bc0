// Variables of a graph, found at compile time: find_variable<"conv1/weights">(loss), the
// trainable variables that minimize() differentiates, the losses collection of weight decays,
// global_step and run-time hyper-parameters.
#pragma once
#include <array>

#include "../graph/table.hpp"
#include "../ops/nn.hpp"
#include "../ops/state.hpp"
#include "initializers.hpp"

namespace typeflow {

/// The step counter every optimizer's minimize() increments (int64, not trainable).
inline constexpr auto global_step =
    variable<"global_step", std::int64_t, shape<>, not_trainable<zeros>>;

/// A run-time hyper-parameter: a scalar variable, not trainable, initialized to V; change it
/// between steps with `session.write(lr, 0.005f)` (no recompilation).
template <fixed_string Name, dtype T, auto V>
inline constexpr auto hyperparameter = variable<Name, T, shape<>, not_trainable<fill<V>>>;

namespace detail {

template <fixed_string Name>
struct no_variable_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("find_variable: no variable \"") << Name.view()
      << std::string_view("\" in this graph");
    return b;
  }
};

/// Positions of the plan's nodes that satisfy Pred, in plan order.
template <class P, template <class> class Pred>
struct select_nodes {
  struct result {
    std::array<std::size_t, P::size> at{};
    std::size_t count = 0;
  };
  template <std::size_t... I>
  static consteval result make(std::index_sequence<I...>) {
    result r;
    const bool keep[] = {Pred<typename P::template node<I>>::value...};
    for (std::size_t i = 0; i < P::size; ++i)
      if (keep[i])
        r.at[r.count++] = i;
    return r;
  }
  static constexpr result value = make(std::make_index_sequence<P::size>{});
  template <class Seq>
  struct list_of;
  template <std::size_t... K>
  struct list_of<std::index_sequence<K...>> {
    using type = type_list<typename P::template node<value.at[K]>...>;
  };
  using type = typename list_of<std::make_index_sequence<value.count>>::type;
};

template <class E>
struct is_trainable_node : std::bool_constant<is_variable_t<E>::value && is_trainable_t<E>::value> {
};
template <class E>
struct is_decayed_node : std::bool_constant<is_variable_t<E>::value &&
                                            variable_traits<typename E::op>::weight_decay != 0> {};

template <class E>
struct has_updates_node : std::bool_constant<op_traits<typename E::op>::has_updates> {};

/// The assignments node N's op asks every training step to run (Op::updates(operands...)).
template <class N>
consteval auto node_updates() {
  return []<class... C>(type_list<C...>) { return N::op::updates(C{}...); }(typename N::children{});
}
template <class... N>
consteval auto group_updates(type_list<N...>) {
  return typeflow::group(node_updates<N>()...);
}

} // namespace detail

/// The trainable variables of E's graph, as a type_list in plan order.
template <class E>
using trainable_variables_t =
    typename detail::select_nodes<graph::node_table<E>, detail::is_trainable_node>::type;

/// The variable named Name in E's graph (a compile error naming it when there is none).
template <fixed_string Name, expression E>
consteval auto find_variable(E) {
  using P = graph::node_table<E>;
  constexpr std::size_t at = []<std::size_t... I>(std::index_sequence<I...>) {
    const std::string_view names[] = {
        detail::variable_name<typename P::template node<I>::op>::value...};
    for (std::size_t i = 0; i < P::size; ++i)
      if (names[i] == Name.view() && !names[i].empty())
        return i;
    return P::size;
  }
  (std::make_index_sequence<P::size>{});
  if constexpr (at == P::size) {
    using invalid [[maybe_unused]] = detail::reject<detail::no_variable_message<Name>>;
    return invalid_expr{};
  } else {
    return typename P::template node<at>{};
  }
}

namespace detail {
template <class Loss, class... V>
consteval auto add_decays(Loss loss, type_list<V...>) {
  if constexpr (sizeof...(V) == 0)
    return loss;
  else
    return (loss + ... +
            (typeflow::l2_loss(V{}) * constant<variable_traits<typename V::op>::weight_decay>));
}
} // namespace detail

/// The seed's total loss: `loss` plus weight_decay * l2_loss(v) for every variable of its graph
/// declared `with_weight_decay` (TensorFlow's collection of losses, gathered at compile time).
template <expression Loss>
consteval auto add_weight_decay(Loss loss) {
  using P = graph::node_table<Loss>;
  return detail::add_decays(loss,
                            typename detail::select_nodes<P, detail::is_decayed_node>::type{});
}

/// The assignments that the ops of E's graph ask every training step to run, as one group (an
/// empty group when there are none): batch norm's moving averages, TensorFlow's
/// tf.get_collection(UPDATE_OPS). minimize() adds them to its training op itself; a training op
/// written by hand groups them with its own: `ty::group(my_update, ty::update_ops(loss))`.
template <expression E>
consteval auto update_ops(E) {
  using P = graph::node_table<E>;
  return detail::group_updates(typename detail::select_nodes<P, detail::has_updates_node>::type{});
}

namespace detail {
/// Train, grouped with update_ops(loss) where loss's graph has any (else Train itself: a graph
/// with no batch norm keeps its training op's type).
template <class Loss, class Train>
consteval auto with_updates(Loss, Train train) {
  using U = typename select_nodes<graph::node_table<Loss>, has_updates_node>::type;
  if constexpr (std::is_same_v<U, type_list<>>)
    return train;
  else
    return typeflow::group(train, group_updates(U{}));
}
} // namespace detail

} // namespace typeflow
