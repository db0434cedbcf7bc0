// grad(y, x1, x2, ...): symbolic reverse-mode differentiation at compile time. The gradient is
// an ordinary expression type: it can be run, fused, printed and differentiated again.
//
// Reverse accumulation over the topological order of y's graph: the adjoint of a node is the sum
// of its consumers' contributions, each from the consumer op's gradient rule (grad_rule<Op>).
// Only nodes that depend on one of the xs get an adjoint; every other path is zero_t and
// vanishes. Adjoints are class templates (memoized by the compiler) and are instantiated from the
// root down, so the instantiation depth does not grow with the graph.
#pragma once
#include <tuple>

#include "../core/pack.hpp"
#include "../graph/table.hpp"
#include "../ops/attention_grad.hpp"
#include "../ops/elementwise_grad.hpp"
#include "../ops/fold.hpp"
#include "../ops/index_grad.hpp"
#include "../ops/layout_grad.hpp"
#include "../ops/matmul_grad.hpp"
#include "../ops/nn_grad.hpp"
#include "../ops/norm_grad.hpp"
#include "../ops/recurrent_grad.hpp"
#include "../ops/reduce_grad.hpp"
#include "../ops/scope.hpp"

namespace typeflow {

namespace ops {
/// custom_gradient(e, rule): e, whose gradient is rule(upstream, e) (a constexpr callable).
template <class Rule>
struct custom_gradient : identity_base {
  static constexpr std::string_view name = "custom_gradient";
};
} // namespace ops

template <expression E, class Rule>
consteval auto custom_gradient(E, Rule) {
  return make_node<ops::custom_gradient<Rule>, E>();
}

template <>
struct grad_rule<ops::stop_gradient> : no_gradient {};
template <class Rule>
struct grad_rule<ops::custom_gradient<Rule>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G g, X x) {
    return Rule{}(g, x);
  }
};

/// What a gradient reads of the forward pass (the saved-value policy of grad<Policy>(...) and
/// of mixed_precision<H>(optimizer)): saved_exact, the default, reads every forward value as
/// computed; saved_in<H> (H = bfloat16 or float16) reads each float32 intermediate that a
/// gradient rule is handed (a node's output or operand, rank >= 1, not a leaf: variables,
/// placeholders and constants themselves stay exact, values computed from them do not; and
/// nothing an op that keeps_float32 reads, such as the cross-entropy's logits) rounded to H,
/// as cast<float>(save<H>(x)) where an elementwise gradient reads it (the widening fuses into
/// its loop) and widen(save<H>(x)) where a kernel does. max_pool's gradient finds each
/// window's maximum among the rounded values: where two round alike it routes to the first,
/// as if the forward pass had pooled in H (PyTorch's autocast pools its bfloat16 input so).
/// float16 (largest 65504) suits activations of known range only. The rounded copy is a
/// 16-bit tensor that the backward pass keeps instead of the float32 one, which dies with its
/// last forward reader: the activations kept for the backward pass take half the bytes
/// (PyTorch's autocast saves them so, as its half-precision outputs). Ops that read only a
/// shape take the exact node (shape_source_t), so the copy is made only for values.
struct saved_exact {};
template <class H>
requires is_half<H>
struct saved_in {
};

namespace detail {
/// Whether Op's gradient reads its operands (and output) exactly (op_traits::keeps_float32: the
/// cross-entropy, and the selections by value other than pooling, which would otherwise see ties
/// between values that round alike and split or move the gradient between them).
template <class Op>
inline constexpr bool keeps_float32_op = op_traits<Op>::keeps_float32;
template <class Save, class Op, class X>
struct saved_value {
  using type = X;
};
template <class H, class Op, class X>
requires(!keeps_float32_op<Op> && X::op::kind != node_kind::leaf &&
         std::is_same_v<typename X::value_type, float> &&
         (X::shape_type::rank > 0)) struct saved_value<saved_in<H>, Op, X> {
  // Elementwise gradients fuse the widening into their loops; kernels read a stored widening.
  using saved = decltype(make_node<ops::save<H>, X>());
  using type = std::conditional_t<Op::kind == node_kind::elementwise,
                                  decltype(typeflow::cast<float>(saved{})),
                                  decltype(make_node<ops::widen, saved>())>;
};
template <class T>
struct is_save_policy : std::false_type {};
template <>
struct is_save_policy<saved_exact> : std::true_type {};
template <class H>
struct is_save_policy<saved_in<H>> : std::true_type {};
} // namespace detail

/// A saved-value policy (saved_exact or saved_in<H>).
template <class T>
concept save_policy = detail::is_save_policy<T>::value;

/// Several gradients at once: a tuple of empty expression types (structured bindings and
/// std::get work). Lighter than std::tuple, whose constructors check traits on every element.
template <class... G>
struct gradients {
  template <std::size_t I>
  using type_at = pack_element_t<I, pack<G...>>; // (std::tuple_element: a name per look-up)
  template <std::size_t I>
  constexpr type_at<I> get() const {
    return {};
  }
};
template <std::size_t I, class... G>
constexpr auto get(gradients<G...>) {
  return typename gradients<G...>::template type_at<I>{};
}

/// Calls f with every gradient: apply([](auto... g) { return fetch(loss, g...); }, grads).
template <class F, class... G>
constexpr auto apply(F&& f, gradients<G...>) {
  return f(G{}...);
}

/// Marks the upstream gradient of a non-scalar y: grad(y, x, seed(g)).
template <expression E>
struct seed_t {
  using type = E;
};
template <expression E>
consteval seed_t<E> seed(E) {
  return {};
}

namespace detail {
template <class X>
struct grad_wrt_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("grad: cannot differentiate with respect to ");
    if constexpr (X::op::kind == node_kind::leaf)
      b << std::string_view("\"") << X::op::name << std::string_view("\"");
    else
      b << std::string_view("an expression");
    b << std::string_view(" of dtype ") << dtype_name<typename X::value_type>;
    return b;
  }
};

template <class Op>
struct no_rule_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("grad: no gradient rule for op ") << Op::name;
    return b;
  }
};

template <class Op>
concept has_rule = requires {
  sizeof(grad_rule<Op>);
};

/// What node N (upstream gradient G) contributes to the adjoint of its operand S. A class of its
/// own, not a member of backprop: backprop is named after every x of the gradient, and g++
/// mangles the name of each function it instantiates (apply, once per edge: quadratic in the
/// variables of a training op).
template <class Save, class N, std::size_t S, class G, class Def = def_t<N>>
struct contribution {
  using type = zero_t;
};
template <class Save, class N, class Op, class... Cs, std::size_t S, class G>
requires(!std::is_same_v<G, zero_t>) struct contribution<Save, N, S, G, expr<Op, Cs...>> {
  static consteval auto apply() {
    if constexpr (!has_rule<Op>) {
      using invalid [[maybe_unused]] = reject<no_rule_message<Op>>;
      return zero_t{};
    } else {
      return grad_rule<Op>::template vjp<S>(typename saved_value<Save, Op, N>::type{}, G{},
                                            typename saved_value<Save, Op, Cs>::type{}...);
    }
  }
  using type = decltype(apply());
};

/// The gradient of x from its adjoint A (zero_t where nothing flows to x), shaped as x.
template <class A, class X>
consteval auto gradient_from(X x) {
  if constexpr (std::is_same_v<A, zero_t>)
    return typeflow::zeros_like(x);
  else if constexpr (std::is_same_v<typename A::shape_type, typename X::shape_type>)
    return A{};
  else
    return typeflow::broadcast_like(A{}, x);
}

/// The position of X in table P, 0 where it is absent.
template <class P, class X, bool In = P::template contains_c<X>::value>
struct position_in : std::integral_constant<std::size_t, 0> {};
template <class P, class X>
struct position_in<P, X, true>
    : std::integral_constant<std::size_t, P::template index_c<X>::value> {};
/// Where the xs of a gradient are in table P: present[k] and at[k] for the k-th x.
template <class P, class XList>
struct x_positions;
template <class P, class... Xs>
struct x_positions<P, type_list<Xs...>> {
  static constexpr std::size_t size = sizeof...(Xs);
  static constexpr std::array<bool, size + 1> present{P::template contains_c<Xs>::value..., false};
  static constexpr std::array<std::size_t, size + 1> at{position_in<P, Xs>::value..., 0};
};

/// The adjoints of Y's graph seeded with Seed, for the xs listed in XList (type_list<X...>).
/// One class parameter for the xs, not a pack: g++ copies a class template's argument packs each
/// time it instantiates a member template of it (tsubst_argument_pack, for every adjoint and
/// every look-up), which made a gradient with respect to n variables quadratic in memory.
template <class Y, class Seed, class Save, class XList>
struct backprop {
  using P = graph::node_table<Y>;
  static constexpr std::size_t n = P::size;
  template <std::size_t I>
  using node = typename P::template node<I>;

  // Plain arrays (see core/pack.hpp's fill_all): every adjoint reads them.
  struct tables {
    bool depends[n]{};
    std::size_t begin[n + 1]{};
    std::size_t who[P::n_edges + 1]{}, slot[P::n_edges + 1]{};
  };
  static consteval tables make() {
    tables t;
    const auto& f = P::topology;
    std::array<bool, n> is_x{};
    using X = x_positions<P, XList>;
    for (std::size_t k = 0; k < X::size; ++k)
      if (X::present[k])
        is_x[X::at[k]] = true;
    for (std::size_t i = 0; i < n; ++i) {
      t.depends[i] = is_x[i];
      for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e)
        t.depends[i] = t.depends[i] || t.depends[f.edges[e]];
    }
    std::array<std::size_t, n + 1> count{};
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e)
        ++count[f.edges[e]];
    copy_all(t.begin, graph::bucket_begins(count));
    std::size_t fill[n + 1]{};
    copy_all(fill, t.begin);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e) {
        const std::size_t k = f.edges[e];
        t.who[fill[k]] = i;
        t.slot[fill[k]++] = e - f.edge_begin[i];
      }
    return t;
  }
  static constexpr tables tab = make();

  template <std::size_t I, bool Root = (I + 1 == n), bool Dep = tab.depends[I]>
  struct adjoint {
    using type = zero_t;
  };

  template <std::size_t I, class Seq>
  struct gather;
  template <std::size_t I, std::size_t... K>
  struct gather<I, std::index_sequence<K...>> {
    using type = decltype(ad::sum_all(
        typename contribution<Save, node<tab.who[tab.begin[I] + K]>, tab.slot[tab.begin[I] + K],
                              typename adjoint<tab.who[tab.begin[I] + K]>::type>::type{}...));
  };

  template <std::size_t I, bool Dep>
  struct adjoint<I, true, Dep> {
    using type = Seed;
  };
  template <std::size_t I>
  struct adjoint<I, false, true> {
    using type =
        typename gather<I, std::make_index_sequence<tab.begin[I + 1] - tab.begin[I]>>::type;
  };

  /// Instantiates every adjoint from the root down, so that each one finds its consumers'
  /// adjoints already made (no deep recursion).
  template <class Seq>
  struct all;
  template <std::size_t... K>
  struct all<std::index_sequence<K...>> {
    using type = type_list<typename adjoint<n - 1 - K>::type...>;
  };
  using forced = typename all<std::make_index_sequence<n>>::type;

  /// The adjoint of x (zero_t where x is not in the graph); the gradient is gradient_from.
  template <class X, bool In = P::template contains_c<X>::value>
  struct adjoint_of {
    using type = zero_t;
  };
  template <class X>
  struct adjoint_of<X, true> {
    using type = typename adjoint<P::template index_c<X>::value>::type;
  };
};

template <class Save, class Y, class Seed, class... Xs>
consteval auto grad_impl(Y, Seed, Xs... xs) {
  constexpr bool bad_x = !all_of({is_floating<typename Xs::value_type>..., true});
  if constexpr (bad_x) {
    (
        [] {
          if constexpr (!is_floating<typename Xs::value_type>)
            using invalid [[maybe_unused]] = reject<grad_wrt_message<Xs>>;
        }(),
        ...);
    return invalid_expr{};
  } else {
    using B = backprop<Y, Seed, Save, type_list<Xs...>>;
    static_assert(B::forced::size == B::n);
    if constexpr (sizeof...(Xs) == 1)
      return gradient_from<typename B::template adjoint_of<Xs...>::type>(xs...);
    else
      return gradients<decltype(gradient_from<typename B::template adjoint_of<Xs>::type>(xs))...>{};
  }
}

template <class T>
struct is_seed : std::false_type {};
template <class E>
struct is_seed<seed_t<E>> : std::true_type {};
template <class T>
struct seed_type {
  using type = T;
};
template <class E>
struct seed_type<seed_t<E>> {
  using type = E;
};

template <class... T>
struct last_of {
  using type = pack_element_t<sizeof...(T) - 1, pack<T...>>;
};
} // namespace detail

namespace detail {
/// grad of a non-scalar y without an upstream gradient (G void), or with one of another shape.
template <class Y, class G>
struct grad_seed_message {
  static constexpr msg_buf message() {
    msg_buf b;
    if constexpr (std::is_void_v<G>) {
      b << std::string_view("grad: y is not a scalar: ");
      append_dims(b, Y::shape_type::dims);
      b << std::string_view("; pass its upstream gradient: grad(y, x..., seed)");
    } else {
      b << std::string_view("grad: the seed's shape differs from y's: ");
      append_dims(b, G::shape_type::dims);
      b << std::string_view(" for ");
      append_dims(b, Y::shape_type::dims);
    }
    return b;
  }
};
} // namespace detail

/// grad(y, x1, x2, ...) for a scalar y; grad(y, x1, ..., g) for a non-scalar y with upstream g
/// (a vector-Jacobian product; `seed(g)` marks it explicitly, also for a scalar y). One x gives
/// an expression, several give ty::gradients (structured bindings, ty::get, ty::apply).
/// grad<saved_in<bfloat16>>(y, ...) reads the forward values rounded to bfloat16 (see
/// saved_in); grad(y, ...) is grad<saved_exact>(y, ...).
template <save_policy Save, expression Y, class... Args>
consteval auto grad(Y y, Args... args) {
  static_assert(sizeof...(Args) >= 1, "grad: name at least one expression to differentiate by");
  using Last = typename detail::last_of<Args...>::type;
  constexpr bool wrapped = detail::is_seed<Last>::value;
  if constexpr (any_invalid<Y, Args...>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else if constexpr ((wrapped || Y::shape_type::rank > 0) && sizeof...(Args) < 2) {
    using invalid [[maybe_unused]] = detail::reject<detail::grad_seed_message<Y, void>>;
    return invalid_expr{};
  } else if constexpr (wrapped || Y::shape_type::rank > 0) {
    using G = typename detail::seed_type<Last>::type;
    if constexpr (!std::is_same_v<typename G::shape_type, typename Y::shape_type>) {
      using invalid [[maybe_unused]] = detail::reject<detail::grad_seed_message<Y, G>>;
      return invalid_expr{};
    } else {
      const pack<Args...> all{{args}...};
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return detail::grad_impl<Save>(y, G{}, pack_get<I>(all)...);
      }
      (std::make_index_sequence<sizeof...(Args) - 1>{});
    }
  } else {
    static_assert(is_floating<typename Y::value_type>, "grad: y must be floating-point");
    return detail::grad_impl<Save>(y, full<1, typename Y::value_type, shape<>>, args...);
  }
}

template <expression Y, class... Args>
consteval auto grad(Y y, Args... args) {
  return grad<saved_exact>(y, args...);
}

} // namespace typeflow

// Structured bindings of gradients: not part of the API reference.
/// \cond std_specializations
template <class... G>
struct std::tuple_size<typeflow::gradients<G...>>
    : std::integral_constant<std::size_t, sizeof...(G)> {};
template <std::size_t I, class... G>
struct std::tuple_element<I, typeflow::gradients<G...>> {
  using type = typename typeflow::gradients<G...>::template type_at<I>;
};
/// \endcond
