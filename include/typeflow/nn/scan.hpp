// scan<"block">(body, init, xs): a loop over a sequence's time axis with shared variables (tf.scan,
// jax.lax.scan, the loop inside TF's dynamic_rnn), its graph instantiated once.
//
//   // xs [T, B, D], h0 [B, H]: an Elman RNN, h_{t+1} = tanh([x_t, h_t] W + b)
//   auto hs = ty::scan<"rnn">(
//       [](auto h, auto x) { return ty::tanh(ty::dense<"cell", H>(ty::concat<-1>(x, h))); },
//       h0, xs); // [T, B, H]: h_1 ... h_T
//
// The body is called once, with two placeholders: the carry (init's dtype and shape) and one step
// of xs (xs without its leading axis). It returns the next carry. The scan's value stacks the
// carries h_1 ... h_T along a new leading axis; take the last one, or any slice of each, from it
// (an LSTM carries [h, c] and outputs h: nn/layers.hpp's lstm). Every variable the body reads is
// a variable of the enclosing graph, read by every step (the steps share it; its gradient is the
// sum of the steps'), so an optimizer, a checkpoint, a placement or a replication treat it as
// any other.
//
// The gradient (grad, minimize) runs the body's gradient plan from step T - 1 down to 0. It reads
// each step's carry from the scan's value. scan<"block", Policy>: under ty::store (the default)
// the forward also keeps each step's activations (what the gradient's body plan would compute
// from the step's carry, input and variables) in a run that runs the scan's gradient, and the
// gradient reads them instead of recomputing them; under ty::recompute the gradient recomputes
// them from the step's carry and input (as jax.checkpoint around the body would);
// ty::memory_budget<Bytes> keeps them where the T steps' take at most Bytes. A body with an op
// that has no gradient rule is recomputed under any policy. Random ops in the body draw per
// step, and a recomputation draws as the forward did.
//
// The body must return its carry's dtype and shape, read no placeholder but its two arguments and
// assign no variable; xs and the body's variables have the carry's dtype (float32 or float64).
// The loops run on the CPU (a placement that puts the node on a GPU moves it to cpu<0>;
// describe_placement() says so). The gradient with respect to init, where xs's shape is not
// static, runs the backward loop a second time (a gradient with respect to init alone runs it
// once).
#pragma once
#include <cstdint>
#include <string>

#include "../autodiff/grad.hpp"
#include "../graph/traverse.hpp"
#include "../ops/layout.hpp"
#include "../ops/repeat.hpp"
#include "repeat.hpp"

namespace typeflow {

namespace detail {

/// The name of a scan's step input placeholder: `block/input` (the carry's is `block/carry`).
template <class Block>
struct input_name;
template <char... C>
struct input_name<static_name<C...>> {
  static constexpr char chars[] = {C..., '/', 'i', 'n', 'p', 'u', 't', '\0'};
  static constexpr std::string_view view() { return {chars, sizeof...(C) + 6}; }
};
struct scan_upstream_name {
  static constexpr std::string_view view() { return "scan/upstream"; }
};

/// A sequence's shape without its leading (time) axis.
template <class S>
struct step_shape;
template <std::int64_t D0, std::int64_t... D>
struct step_shape<shape<D0, D...>> {
  using type = shape<D...>;
};

template <class TC, class SC, class TO, class SO>
struct scan_body_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("scan: the body must return its carry's dtype and shape: ")
      << dtype_name<TC> << std::string_view(" ");
    append_dims(b, SC::dims);
    b << std::string_view(" in, ") << dtype_name<TO> << std::string_view(" ");
    append_dims(b, SO::dims);
    b << std::string_view(" out");
    return b;
  }
};
template <class TX, class SX, class TC>
struct scan_input_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("scan: the sequence must have a time axis and the carry's dtype (")
      << dtype_name<TC> << std::string_view("), it is ") << dtype_name<TX> << std::string_view(" ");
    append_dims(b, SX::dims);
    return b;
  }
};
template <std::int64_t N, class H>
struct scan_rule_message {
  static constexpr msg_buf message() {
    msg_buf b;
    if constexpr (N == 0)
      b << std::string_view("scan: the body assigns a variable (a body computes a value only)");
    else if constexpr (N == 1)
      b << std::string_view("scan: the body reads a placeholder other than its carry and its "
                            "step input (feed it through xs, or compute it outside the scan)");
    else
      b << std::string_view("scan: the body's variables must have the carry's dtype");
    return b;
  }
};

template <class Carry>
using scan_seed_t = expr<
    ops::placeholder<scan_upstream_name, typename Carry::value_type, typename Carry::shape_type>>;

/// What scan's op keeps under a policy (ops::keep_none, or ops::keep_activations with a byte
/// budget).
template <class Policy, class Body, class Carry, class Input, class... Params>
struct scan_keep : keep_of<keep_budget<Policy>, Body, scan_seed_t<Carry>, Carry, Input, Params...> {
};
template <class Body, class Carry, class Input, class... Params>
struct scan_keep<typeflow::recompute, Body, Carry, Input, Params...> {
  using type = ops::keep_none;
};
template <class Policy>
inline constexpr bool is_scan_policy = false;
template <>
inline constexpr bool is_scan_policy<typeflow::store> = true;
template <>
inline constexpr bool is_scan_policy<typeflow::recompute> = true;
template <std::uint64_t Bytes>
inline constexpr bool is_scan_policy<typeflow::memory_budget<Bytes>> = true;

template <class Block, class Body, class Carry, class Input, class Policy, class H, class X,
          class... V>
consteval auto make_scan(H, X, type_list<V...>) {
  using B = typename body_with_params<Body>::type;
  using Keep = typename scan_keep<Policy, B, Carry, Input, typename param_of<V>::type...>::type;
  return make_node<ops::scan<B, Carry, Input, Keep, typename param_of<V>::type...>, H, X, V...>();
}

} // namespace detail

/// scan<"block", Policy = ty::store>(body, init, xs): see the header comment.
template <fixed_string Block, class Policy = store, class Body, expression H, expression X>
consteval auto scan(Body body, H, X) {
  using T = typename H::value_type;
  static_assert(is_floating<T>, "scan: the carry must be float32 or float64");
  static_assert(detail::is_scan_policy<Policy>,
                "scan: the policy is ty::store, ty::recompute or ty::memory_budget<Bytes> (a scan "
                "keeps its carries: checkpoint_every is repeat's)");
  if constexpr (X::shape_type::rank == 0 || !std::is_same_v<typename X::value_type, T>) {
    using invalid [[maybe_unused]] = detail::reject<
        detail::scan_input_message<typename X::value_type, typename X::shape_type, T>>;
    return invalid_expr{};
  } else {
    using Carry =
        expr<ops::placeholder<detail::carry_name<name_t<Block>>, T, typename H::shape_type>>;
    using Input = expr<ops::placeholder<detail::input_name<name_t<Block>>, T,
                                        typename detail::step_shape<typename X::shape_type>::type>>;
    using Out = decltype(body(Carry{}, Input{}));
    if constexpr (any_invalid<Out>) {
      return invalid_expr{};
    } else {
      using L = detail::body_leaves_of<type_list<Carry, Input>, graph::topological_order<Out>>;
      if constexpr (L::assigns) {
        using invalid [[maybe_unused]] = detail::reject<detail::scan_rule_message<0, H>>;
        return invalid_expr{};
      } else if constexpr (L::other_placeholder) {
        using invalid [[maybe_unused]] = detail::reject<detail::scan_rule_message<1, H>>;
        return invalid_expr{};
      } else if constexpr (!std::is_same_v<typename Out::value_type, T> ||
                           !std::is_same_v<typename Out::shape_type, typename H::shape_type>) {
        using invalid [[maybe_unused]] = detail::reject<detail::scan_body_message<
            T, typename H::shape_type, typename Out::value_type, typename Out::shape_type>>;
        return invalid_expr{};
      } else if constexpr (!std::is_void_v<typename detail::first_other_dtype<
                               T, typename L::variables>::type>) {
        using invalid [[maybe_unused]] = detail::reject<detail::scan_rule_message<2, H>>;
        return invalid_expr{};
      } else {
        return detail::make_scan<name_t<Block>, Out, Carry, Input, Policy>(H{}, X{},
                                                                           typename L::variables{});
      }
    }
  }
}

/// The gradient of scan: one scan_vjp node (the backward loop) whose vector is sliced into the
/// gradients of init, of xs and of each shared variable.
template <class Body, class Carry, class Input, class Keep, class... Params>
struct grad_rule<ops::scan<Body, Carry, Input, Keep, Params...>> {
  using seed_ph = detail::scan_seed_t<Carry>;
  using grads_list = typename detail::body_grads<Body, seed_ph, Carry, Input, Params...>::type;
  template <std::size_t S, class Y, class G, class H, class X, class... St>
  static consteval auto vjp(Y, G, H h, X x, St...) {
    // init's gradient sits before xs's where xs's size is not static (so that its offset is);
    // the variables' and xs's gradients share the other node
    constexpr bool init_first = S == 0 && !is_static(X::shape_type::dims);
    using vjp_node =
        decltype(make_node<
                 ops::scan_vjp<Body, Carry, Input, seed_ph, grads_list, init_first, Params...>, G,
                 Y, H, X, St...>());
    constexpr std::int64_t shared = (std::int64_t{0} + ... + numel(St::shape_type::dims));
    if constexpr (S == 0 && init_first) {
      return typeflow::reshape_like(
          typeflow::slice_like<ints<shared>>(vjp_node{}, typeflow::reshape<-1>(h)), h);
    } else if constexpr (S == 0) {
      return typeflow::reshape_like(
          typeflow::slice<ints<shared + numel(X::shape_type::dims)>, ints<-1>>(vjp_node{}), h);
    } else if constexpr (S == 1) {
      return typeflow::reshape_like(
          typeflow::slice_like<ints<shared>>(vjp_node{}, typeflow::reshape<-1>(x)), x);
    } else {
      constexpr std::int64_t at = [] {
        constexpr std::int64_t sz[] = {numel(St::shape_type::dims)..., 0};
        std::int64_t o = 0;
        for (std::size_t i = 0; i + 2 < S; ++i)
          o += sz[i];
        return o;
      }();
      using SV = std::tuple_element_t<S - 2, std::tuple<St...>>;
      return typeflow::reshape_like(
          typeflow::slice<ints<at>, ints<numel(SV::shape_type::dims)>>(vjp_node{}), SV{});
    }
  }
};

} // namespace typeflow
