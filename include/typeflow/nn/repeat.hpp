// repeat<N, "block">(body, x): a block of layers applied N times, its graph instantiated once.
//
//   auto h = ty::repeat<50, "block">(
//       [](auto h) { return h + ty::relu(ty::dense<"dense", 64>(h)); }, x);
//
// The body is called once, with a placeholder of x's dtype and shape standing for the carried
// value; each variable it reads (one it creates, or one of the enclosing graph: it is stacked
// too, no longer tied to its other uses) becomes a stacked variable with a leading layer axis
// (`dense/weights` [64, 64] becomes `block/dense/weights` [N, 64, 64], each layer initialized as
// the body's variable would be), an ordinary variable to the session, checkpoints and
// optimizers (whose slots are stacked the same way). The forward runs the body's plan N times;
// the gradient (grad, minimize) runs the body's gradient plan from layer N-1 down to 0, after
// recomputing the layers' inputs (rematerialization, as jax.checkpoint: the forward keeps no
// activations for it, so the forward runs twice in a training step, and the gradient holds the N
// layers' inputs while it runs). So the compile time of a repeat does not grow with N. Two
// repeats with the same block name and body share their variables, as variables of one name do.
//
// The body must map a value of x's shape and dtype (float32 or float64) to one of the same, read
// no placeholder but its argument, assign no variable, and its variables have x's dtype. The loops
// run on the CPU (a placement that puts the node on a GPU moves it to cpu<0>; describe_placement()
// says so).
//
// repeat<N, "block", ty::store>(body, x) keeps the layers' inputs instead: the forward is a
// repeat_stored node whose value stacks h_0 ... h_N ([N + 1, x...]; the user gets row N), and
// the gradient reads each layer's input from it, so a training step runs the layers forward once
// less, and holds the N + 1 carries from the forward to the gradient. In a run that also runs
// the gradient, the forward keeps each layer's own activations too (what the layer's gradient
// plan would compute from its input: ops::keep_activations), and the gradient reads them instead
// of recomputing them; under ty::recompute a layer's gradient plan recomputes them. Both give
// the same values, bit for bit.
//
// repeat<N, "block", ty::checkpoint_every<K>>(body, x) recomputes as ty::recompute does but its
// gradient holds every K-th layer's input only, recomputing the others a segment at a time;
// ty::memory_budget<Bytes> is ty::store where the N + 1 carries fit in Bytes (x's shape static;
// the layers' activations are then kept where they fit in what the carries leave of Bytes,
// measured on the first layer), else a recomputing gradient that holds what fits
// (docs/repeat.md).
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "../autodiff/grad.hpp"
#include "../graph/traverse.hpp"
#include "../ops/layout.hpp"
#include "../ops/repeat.hpp"
#include "../ops/state.hpp"
#include "initializers.hpp"

namespace typeflow {

/// Where repeat's gradient finds each layer's input (docs/repeat.md): recomputed from x by the
/// gradient (the forward keeps only its value; the default), or stored by the forward (its
/// value keeps h_0 ... h_N, [N + 1, x...]: one forward pass less per training step, N + 1 carries
/// held from the forward to the gradient).
struct recompute {};
struct store {};
/// ty::recompute whose gradient holds every K-th layer's input only, recomputing the K - 1
/// between two of them again as the backward loop reaches them: about N / K + K carries held
/// instead of N, for up to N more layer evaluations (checkpointing every K layers; K near
/// sqrt(N) holds the fewest).
template <std::int64_t K>
struct checkpoint_every {
  static_assert(K >= 1, "repeat: checkpoint_every<K> needs K >= 1");
};
/// A byte budget for what the gradient holds: ty::store where x's shape is static and its N + 1
/// carries fit in Bytes, keeping the layers' activations where they fit in what the carries
/// leave (a scan's budget is its steps' activations); else ty::recompute, whose gradient holds
/// as many carries as Bytes allows and recomputes the fewest layers for it, chosen at run time
/// from the carry's size (the fewest carries, about 2 sqrt(N), where nothing fits).
template <std::uint64_t Bytes>
struct memory_budget {};

/// Initializer of a stacked variable: each of its N layers initialized by Init as a variable of
/// the layer's shape (so glorot_uniform sees a layer's fans, not the stack's). Attributes of Init
/// (weight decay, not_trainable) carry over.
template <class Init>
struct stacked : Init {
  static constexpr bool shaped = true;
  template <class T, std::size_t R>
  static void init(T* data, const dims_t<R>& d, std::mt19937_64& g) {
    static_assert(R >= 1, "stacked: a stacked variable has a layer axis");
    dims_t<R - 1> layer{};
    for (std::size_t i = 0; i + 1 < R; ++i)
      layer[i] = d[i + 1];
    const std::int64_t n = numel(layer);
    for (std::int64_t l = 0; l < d[0]; ++l) {
      if constexpr (requires { Init::shaped; })
        Init::template init<T>(data + l * n, layer, g);
      else
        Init::template init<T>(data + l * n, n, g);
    }
  }
  static std::string describe() {
    if constexpr (requires { Init::describe(); })
      return "stacked(" + std::string(Init::describe()) + ")";
    else
      return "stacked";
  }
};

namespace detail {

/// The body's graph with each variable replaced by a placeholder of the same name, dtype and
/// shape (the layer's slice of the stacked variable is fed there).
template <class Def>
struct body_def_with_params;
template <class E>
struct body_with_params : body_def_with_params<def_t<E>> {};
template <class Op, class... Cs>
struct body_def_with_params<expr<Op, Cs...>> {
  using type = node_t<Op, typename body_with_params<Cs>::type...>;
};
template <class Name, class T, class Shape, class Init>
struct body_with_params<expr<ops::variable<Name, T, Shape, Init>>> {
  using type = expr<ops::placeholder<Name, T, Shape>>;
};

/// The names of a repeat's own placeholders: types a user's placeholder cannot have, so that no
/// placeholder of the enclosing graph is taken for the carry or the upstream gradient.
template <class Block>
struct carry_name;
template <char... C>
struct carry_name<static_name<C...>> {
  static constexpr char chars[] = {C..., '/', 'c', 'a', 'r', 'r', 'y', '\0'};
  static constexpr std::string_view view() { return {chars, sizeof...(C) + 6}; }
};
struct upstream_name {
  static constexpr std::string_view view() { return "repeat/upstream"; }
};

template <class A, class B>
struct scoped_name;
template <char... A, char... B>
struct scoped_name<static_name<A...>, static_name<B...>> {
  using type = static_name<A..., '/', B...>;
};

/// Of the body's nodes: its variables, and whether it reads a placeholder other than the carry
/// or assigns anything.
template <class N, class List>
struct prepend;
template <class N, class... Ts>
struct prepend<N, type_list<Ts...>> {
  using type = type_list<N, Ts...>;
};

template <class List, class N>
struct in_list;
template <class... Ts, class N>
struct in_list<type_list<Ts...>, N> : std::bool_constant<(std::is_same_v<Ts, N> || ...)> {};

/// Allowed: a type_list of the body's own placeholders (its argument, a scan's step input).
template <class Allowed, class... Ns>
struct body_leaves;
template <class Allowed>
struct body_leaves<Allowed> {
  using variables = type_list<>;
  static constexpr bool other_placeholder = false, assigns = false;
};
template <class Allowed, class N, class... Ns>
struct body_leaves<Allowed, N, Ns...> {
  using rest = body_leaves<Allowed, Ns...>;
  static constexpr bool is_var = op_is_variable<typename N::op>::value;
  using variables = std::conditional_t<is_var, typename prepend<N, typename rest::variables>::type,
                                       typename rest::variables>;
  static constexpr bool other_placeholder =
      rest::other_placeholder ||
      (op_traits<typename N::op>::placeholder && !in_list<Allowed, N>::value);
  static constexpr bool assigns =
      rest::assigns || N::op::kind == node_kind::group || op_traits<typename N::op>::state;
};
template <class Allowed, class List>
struct body_leaves_of;
template <class Allowed, class... Ns>
struct body_leaves_of<Allowed, type_list<Ns...>> : body_leaves<Allowed, Ns...> {};

template <class V>
struct param_of;
template <class Name, class T, class Shape, class Init>
struct param_of<expr<ops::variable<Name, T, Shape, Init>>> {
  using type = expr<ops::placeholder<Name, T, Shape>>;
};

template <std::int64_t N, class Block, class V>
struct stacked_of;
template <std::int64_t N, class Block, class Name, class T, std::int64_t... D, class Init>
struct stacked_of<N, Block, expr<ops::variable<Name, T, shape<D...>, Init>>> {
  using type = expr<
      ops::variable<typename scoped_name<Block, Name>::type, T, shape<N, D...>, stacked<Init>>>;
};

/// Who reports a body's error: repeat or remat.
struct who_repeat {
  static constexpr std::string_view view() { return "repeat"; }
};
struct who_remat {
  static constexpr std::string_view view() { return "remat"; }
};
template <class Who, class TIn, class SIn, class TOut, class SOut>
struct repeat_body_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << Who::view() << std::string_view(": the body must return its argument's dtype and shape: ")
      << dtype_name<TIn> << std::string_view(" ");
    append_dims(b, SIn::dims);
    b << std::string_view(" in, ") << dtype_name<TOut> << std::string_view(" ");
    append_dims(b, SOut::dims);
    b << std::string_view(" out");
    return b;
  }
};
template <class Who>
struct repeat_placeholder_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << Who::view()
      << std::string_view(": the body reads a placeholder other than its argument (feed "
                          "it through the argument, or compute it outside the ")
      << Who::view() << std::string_view(")");
    return b;
  }
};
template <class Who, class TVar, class TX>
struct repeat_dtype_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << Who::view() << std::string_view(": the body's variables must have its argument's dtype (")
      << dtype_name<TX> << std::string_view("), one is ") << dtype_name<TVar>;
    return b;
  }
};
template <class T, class List>
struct first_other_dtype {
  using type = void;
};
template <class T, class V, class... Vs>
struct first_other_dtype<T, type_list<V, Vs...>> {
  using type = std::conditional_t<std::is_same_v<typename V::value_type, T>,
                                  typename first_other_dtype<T, type_list<Vs...>>::type,
                                  typename V::value_type>;
};
template <class Who>
struct repeat_assign_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << Who::view()
      << std::string_view(": the body assigns a variable (a body computes a value only)");
    return b;
  }
};

/// Row `Row` of a [M, x...] stack, as x's shape.
template <std::int64_t Row, class Y, class X, std::size_t... I>
consteval auto stack_row(std::index_sequence<I...>) {
  return typeflow::reshape_like(
      typeflow::slice<ints<Row, (static_cast<std::int64_t>(I) * 0)...>,
                      ints<1, (static_cast<std::int64_t>(I) * 0 - 1)...>>(Y{}),
      X{});
}

/// A repeat policy as what the graph is built with: store, or what a recomputing gradient holds.
template <std::int64_t N, class X, class Policy>
struct resolved_policy;
template <std::int64_t N, class X>
struct resolved_policy<N, X, recompute> {
  using type = ops::hold_all;
};
template <std::int64_t N, class X>
struct resolved_policy<N, X, store> {
  using type = store;
};
template <std::int64_t N, class X, std::int64_t K>
struct resolved_policy<N, X, checkpoint_every<K>> {
  using type = ops::hold_every<K>;
};
/// The bytes of a repeat's N + 1 carries of x's (static) shape: what a memory_budget stores
/// first.
template <std::int64_t N, class X>
inline constexpr std::uint64_t
    carries_bytes = static_cast<std::uint64_t>(N + 1) *
                    static_cast<std::uint64_t>(numel(X::shape_type::dims)) *
                    sizeof(typename X::value_type);
template <std::int64_t N, class X, std::uint64_t Bytes>
struct resolved_policy<N, X, memory_budget<Bytes>> {
  static constexpr bool stores = is_static(X::shape_type::dims) && carries_bytes<N, X> <= Bytes;
  using type = std::conditional_t<stores, store, ops::hold_budget<Bytes>>;
};
template <class Policy>
inline constexpr bool is_repeat_policy = false;
template <>
inline constexpr bool is_repeat_policy<recompute> = true;
template <>
inline constexpr bool is_repeat_policy<store> = true;
template <std::int64_t K>
inline constexpr bool is_repeat_policy<checkpoint_every<K>> = true;
template <std::uint64_t Bytes>
inline constexpr bool is_repeat_policy<memory_budget<Bytes>> = true;

/// A loop body's gradients with respect to Wrt... (its carry, a scan's step input, its
/// variables) from upstream gradient Seed, as a type_list: what the loop's vjp runs per layer or
/// step, and what ops::keep_activations keeps activations for.
template <class Body, class Seed, class... Wrt>
struct body_grads {
  template <class G>
  struct as_list {
    using type = type_list<G>;
  };
  template <class... G>
  struct as_list<gradients<G...>> {
    using type = type_list<G...>;
  };
  using type =
      typename as_list<decltype(typeflow::grad(Body{}, Wrt{}..., typeflow::seed(Seed{})))>::type;
};
/// Whether every op of a body's graph has a gradient rule (a body that has not keeps nothing, so
/// that a loop nobody differentiates, such as a sampling loop, compiles).
template <class Nodes>
struct all_differentiable;
template <class... N>
struct all_differentiable<type_list<N...>>
    : std::bool_constant<((is_leaf<N> || has_rule<typename N::op>)&&...)> {};
/// What a loop keeps under a byte budget (~0: none): ops::keep_activations for the body's
/// gradients, or ops::keep_none where the body cannot be differentiated.
template <std::uint64_t Budget, class Body, class Seed, class... Wrt>
struct keep_of {
  using type = ops::keep_none;
};
template <std::uint64_t Budget, class Body, class Seed, class... Wrt>
requires all_differentiable<graph::topological_order<Body>>::value struct keep_of<Budget, Body,
                                                                                  Seed, Wrt...> {
  using type = ops::keep_activations<Seed, typename body_grads<Body, Seed, Wrt...>::type, Budget>;
};
/// The budget of what a stored repeat (or a scan) keeps under Policy: none for ty::store.
template <class Policy>
inline constexpr std::uint64_t keep_budget = ~std::uint64_t{0};
template <std::uint64_t Bytes>
inline constexpr std::uint64_t keep_budget<memory_budget<Bytes>> = Bytes;
/// What a stored repeat's layers' activations may take under Policy: keep_budget, less the
/// N + 1 carries that a memory_budget stores (one budget for both: the carries first).
template <std::int64_t N, class X, class Policy>
inline constexpr std::uint64_t repeat_keep_budget = keep_budget<Policy>;
template <std::int64_t N, class X, std::uint64_t Bytes>
inline constexpr std::uint64_t repeat_keep_budget<N, X, memory_budget<Bytes>> =
    carries_bytes<N, X> < Bytes ? Bytes - carries_bytes<N, X> : 0;
template <class Carry>
using repeat_seed_t =
    expr<ops::placeholder<upstream_name, typename Carry::value_type, typename Carry::shape_type>>;

template <std::int64_t N, class Block, class Body, class Carry, class Policy, class X, class... V>
consteval auto make_repeat(X, type_list<V...>) {
  using B = typename body_with_params<Body>::type;
  using Hold = typename resolved_policy<N, X, Policy>::type;
  if constexpr (std::is_same_v<Hold, store>) {
    using Keep = typename keep_of<repeat_keep_budget<N, X, Policy>, B, repeat_seed_t<Carry>, Carry,
                                  typename param_of<V>::type...>::type;
    using Y =
        decltype(make_node<ops::repeat_stored<N, B, Carry, Keep, typename param_of<V>::type...>, X,
                           typename stacked_of<N, Block, V>::type...>());
    return stack_row<N, Y, X>(std::make_index_sequence<X::shape_type::rank>{});
  } else {
    return make_node<ops::repeat<N, Hold, B, Carry, typename param_of<V>::type...>, X,
                     typename stacked_of<N, Block, V>::type...>();
  }
}

/// The slice of a repeat's packed gradient (VJP's value) for its operand S: x (0), or a stacked
/// variable.
template <std::size_t S, class VJP, class X, class... St>
consteval auto repeat_grad_slice(X x) {
  if constexpr (S == 0) {
    constexpr std::int64_t at = (std::int64_t{0} + ... + numel(St::shape_type::dims));
    return typeflow::reshape_like(typeflow::slice<ints<at>, ints<-1>>(VJP{}), x);
  } else {
    constexpr std::int64_t at = [] {
      constexpr std::int64_t sz[] = {numel(St::shape_type::dims)..., 0};
      std::int64_t o = 0;
      for (std::size_t i = 0; i + 1 < S; ++i)
        o += sz[i];
      return o;
    }();
    using SV = std::tuple_element_t<S - 1, std::tuple<St...>>;
    return typeflow::reshape_like(
        typeflow::slice<ints<at>, ints<numel(SV::shape_type::dims)>>(VJP{}), SV{});
  }
}

/// The checks of a block's body (repeat's and remat's) on its value Out, then Make's node of the
/// body's variables: invalid_expr after one error that Who names.
template <class Who, class Carry, class X, class Out, class Make>
consteval auto checked_block(Make make) {
  if constexpr (any_invalid<Out>) {
    return invalid_expr{};
  } else {
    using L = body_leaves_of<type_list<Carry>, graph::topological_order<Out>>;
    if constexpr (L::assigns) {
      using invalid [[maybe_unused]] = reject<repeat_assign_message<Who>>;
      return invalid_expr{};
    } else if constexpr (L::other_placeholder) {
      using invalid [[maybe_unused]] = reject<repeat_placeholder_message<Who>>;
      return invalid_expr{};
    } else if constexpr (!std::is_same_v<typename Out::value_type, typename X::value_type> ||
                         !std::is_same_v<typename Out::shape_type, typename X::shape_type>) {
      using invalid [[maybe_unused]] =
          reject<repeat_body_message<Who, typename X::value_type, typename X::shape_type,
                                     typename Out::value_type, typename Out::shape_type>>;
      return invalid_expr{};
    } else if constexpr (!std::is_void_v<typename first_other_dtype<typename X::value_type,
                                                                    typename L::variables>::type>) {
      using invalid [[maybe_unused]] = reject<repeat_dtype_message<
          Who, typename first_other_dtype<typename X::value_type, typename L::variables>::type,
          typename X::value_type>>;
      return invalid_expr{};
    } else {
      return make(typename L::variables{});
    }
  }
}

} // namespace detail

/// repeat<N, "block", Policy = ty::recompute>(body, x): see the header comment.
template <std::int64_t N, fixed_string Block, class Policy = recompute, class Body, expression X>
consteval auto repeat(Body body, X) {
  static_assert(N >= 1, "repeat: the layer count N must be at least 1");
  static_assert(detail::is_repeat_policy<Policy>,
                "repeat: the policy is ty::recompute, ty::store, ty::checkpoint_every<K> or "
                "ty::memory_budget<Bytes>");
  static_assert(is_floating<typename X::value_type>,
                "repeat: the carried value must be float32 or float64");
  using Carry = expr<ops::placeholder<detail::carry_name<name_t<Block>>, typename X::value_type,
                                      typename X::shape_type>>;
  using Out = decltype(body(Carry{}));
  return detail::checked_block<detail::who_repeat, Carry, X, Out>(
      []<class... V>(type_list<V...> vs) {
        return detail::make_repeat<N, name_t<Block>, Out, Carry, Policy>(X{}, vs);
      });
}

/// remat<"name">(body, x): body(x), whose activations the gradient recomputes from x instead of
/// keeping them from the forward pass (jax.checkpoint and jax.remat, TensorFlow's
/// recompute_grad): between the forward and the gradient only x is held. The body is a block as
/// repeat's (x's dtype and shape out, no placeholder but its argument, nothing assigned), and
/// its variables stay the model's own (not stacked, not renamed): a one-layer repeat whose
/// variables are its operands as they are. It runs on the CPU, as repeat does.
template <fixed_string Name = "remat", class Body, expression X>
consteval auto remat(Body body, X) {
  static_assert(is_floating<typename X::value_type>, "remat: the value must be float32 or float64");
  using Carry = expr<ops::placeholder<detail::carry_name<name_t<Name>>, typename X::value_type,
                                      typename X::shape_type>>;
  using Out = decltype(body(Carry{}));
  return detail::checked_block<detail::who_remat, Carry, X, Out>([]<class... V>(type_list<V...>) {
    return make_node<ops::repeat<1, ops::hold_all, typename detail::body_with_params<Out>::type,
                                 Carry, typename detail::param_of<V>::type...>,
                     X, V...>();
  });
}

/// The gradient of repeat: one repeat_vjp node (the backward loop) whose vector is sliced into
/// the gradient of x and of each stacked variable.
template <std::int64_t N, class Hold, class Body, class Carry, class... Params>
struct grad_rule<ops::repeat<N, Hold, Body, Carry, Params...>> {
  using seed_ph = detail::repeat_seed_t<Carry>;
  using grads_list = typename detail::body_grads<Body, seed_ph, Carry, Params...>::type;
  template <std::size_t S, class Y, class G, class X, class... St>
  static consteval auto vjp(Y, G, X x, St...) {
    using vjp_node =
        decltype(make_node<ops::repeat_vjp<N, Hold, Body, Carry, seed_ph, grads_list, Params...>, G,
                           X, St...>());
    return detail::repeat_grad_slice<S, vjp_node, X, St...>(x);
  }
};

namespace detail {
/// The gradient of the stacked carries as the user's graph makes it: the gradient of row N
/// (the value the user gets, sliced out by stack_row) padded with zeros to [N + 1, x...]. Its
/// `row` is that gradient ([1, x...]), or void when G is something else.
template <std::int64_t N, class Def>
struct last_row_gradient {
  using type = void;
};
template <std::int64_t N, class Begin, class Row, class Shape>
struct last_row_gradient<N, expr<ops::pad_like<Begin>, Row, Shape>> {
  static constexpr bool row_n = [] {
    if (Begin::values.size() == 0 || Begin::values[0] != N)
      return false;
    for (std::size_t i = 1; i < Begin::values.size(); ++i)
      if (Begin::values[i] != 0)
        return false;
    return Row::shape_type::rank >= 1 && Row::shape_type::dims[0] == 1;
  }();
  using type = std::conditional_t<row_n, Row, void>;
};
} // namespace detail

/// The gradient of repeat under ty::store: one repeat_stored_vjp node, which reads the layers'
/// inputs from the stored carries, sliced as repeat's. Where only the last row has a gradient
/// (the stacked carries reach the user as their last row), it reads that row's gradient
/// ([1, x...]) instead of the zero-padded [N + 1, x...] one, which is then never made.
template <std::int64_t N, class Body, class Carry, class Keep, class... Params>
struct grad_rule<ops::repeat_stored<N, Body, Carry, Keep, Params...>>
    : grad_rule<ops::repeat<N, ops::hold_all, Body, Carry, Params...>> {
  using base = grad_rule<ops::repeat<N, ops::hold_all, Body, Carry, Params...>>;
  template <std::size_t S, class Y, class G, class X, class... St>
  static consteval auto vjp(Y, G, X x, St...) {
    using row = typename detail::last_row_gradient<N, def_t<G>>::type;
    constexpr bool last_row = !std::is_void_v<row>;
    using vjp_node =
        decltype(make_node<ops::repeat_stored_vjp<N, last_row, Body, Carry, typename base::seed_ph,
                                                  typename base::grads_list, Params...>,
                           std::conditional_t<last_row, row, G>, Y, X, St...>());
    return detail::repeat_grad_slice<S, vjp_node, X, St...>(x);
  }
};

} // namespace typeflow
