// Optimizers: gradient descent, momentum (optionally Nesterov) and Adam, as TensorFlow 1.x's.
// `opt.minimize(loss)` differentiates loss with respect to every trainable variable of its graph
// and returns the training op: a group of assignments (the variables, their slots,
// global_step += 1, and the graph's update_ops such as batch norm's moving averages), all computed
// from the values at the start of the run and committed at its end. Slot variables are named after
// their variable ("conv1/weights/momentum"). The hyper-parameters are scalar expressions: weak
// literals (`constant<0.9>`), or run-time values (hyperparameter<...> variables, placeholders, or a
// schedule such as exponential_decay of global_step), so a schedule changes them between steps
// without recompiling.
#pragma once
#include "../autodiff/grad.hpp"
#include "../ops/state.hpp"
#include "variables.hpp"

namespace typeflow {

/// A slot of variable V: `<V's name>` + Suffix, V's dtype and shape, zeros, not trainable.
template <class V, fixed_string Suffix>
inline constexpr auto slot_variable =
    variable<detail::variable_traits<typename V::op>::name + Suffix, typename V::value_type,
             typename V::shape_type, not_trainable<zeros>>;

namespace detail {

template <class G, std::size_t I>
struct gradient_at {
  using type = typename G::template type_at<I>;
};

/// The saved-value policy of an optimizer's gradients (grad.hpp's saved_exact or saved_in<H>):
/// Opt::save where it names one (mixed_precision), else saved_exact.
template <class Opt>
struct save_of {
  using type = saved_exact;
};
template <class Opt>
requires requires {
  typename Opt::save;
}
struct save_of<Opt> {
  using type = typename Opt::save;
};

/// Whether E's value may differ between the towers of a replicated session (graph/node.hpp's
/// varies, made with each node).
template <class E>
using tower_dependent = typeflow::detail::varies<E>;

/// The towers' mean of gradient G: replica_mean(G), with a term of a sum that is the same in
/// every tower (not tower_dependent: the weight-decay gradient) added after the mean instead of
/// before it. The value is the same up to rounding (the mean of equal terms is the term), and
/// replica_mean, a stored value, then holds only the batch's part: the weight-decay term fuses
/// into the update's loop instead of a pass of its own over the gradient.
template <class G>
consteval auto tower_mean(G) {
  if constexpr (std::is_same_v<typename G::op, ops::add>) {
    return []<class A, class B>(type_list<A, B>) {
      if constexpr (!tower_dependent<B>::value)
        return typeflow::add(detail::tower_mean(A{}), B{});
      else if constexpr (!tower_dependent<A>::value)
        return typeflow::add(A{}, detail::tower_mean(B{}));
      else
        return typeflow::replica_mean(G{});
    }(typename G::children{});
  } else {
    return typeflow::replica_mean(G{});
  }
}

/// Applies Opt::update(v, g) to each trainable variable of Loss's graph.
template <class Opt, class Loss, class... V, std::size_t... I>
consteval auto apply_updates(Loss loss, type_list<V...>, std::index_sequence<I...>) {
  static_assert(sizeof...(V) > 0, "minimize: the loss depends on no trainable variable");
  using G = decltype(typeflow::grad<typename save_of<Opt>::type>(loss, V{}...));
  // Each gradient passes through replica_mean (tower_mean): the towers of a replicated session
  // average there; any other session reads the gradient itself.
  if constexpr (sizeof...(V) == 1)
    return typeflow::group(Opt::update(V{}..., detail::tower_mean(G{})),
                           typeflow::assign_add(global_step, constant<1>));
  else
    return typeflow::group(
        Opt::update(V{}, detail::tower_mean(typename G::template type_at<I>{}))...,
        typeflow::assign_add(global_step, constant<1>));
}

template <class Opt, class Loss>
consteval auto minimize(Loss) {
  static_assert(Loss::shape_type::rank == 0, "minimize: the loss must be a scalar");
  if constexpr (any_invalid<Loss>) { // an earlier mistake, reported already
    return invalid_group{};
  } else {
    using Vs = trainable_variables_t<Loss>;
    return detail::with_updates(Loss{}, []<class... V>(type_list<V...>) {
      return detail::apply_updates<Opt>(Loss{}, type_list<V...>{}, std::index_sequence_for<V...>{});
    }(Vs{}));
  }
}

} // namespace detail

// The updates call typeflow::add, mul, ... by qualified name rather than through operators:
// an operator or an unqualified call looks its operands' types up by ADL, and clang walks every
// template argument of a node type for it without remembering what it has seen, which is
// exponential in the depth of a gradient (whose subgraphs are shared). g++ is not affected.

/// Plain gradient descent: v -= lr * g.
template <class LR>
struct gradient_descent_optimizer {
  template <class V, class G>
  static consteval auto update(V v, G g) {
    return typeflow::assign_sub(v, typeflow::mul(g, LR{}));
  }
  template <expression Loss>
  consteval auto minimize(Loss loss) const {
    return detail::minimize<gradient_descent_optimizer>(loss);
  }
};
template <expression LR>
consteval auto gradient_descent(LR) {
  return gradient_descent_optimizer<LR>{};
}

struct nesterov_t {};
/// Pass to momentum(...) for Nesterov's accelerated gradient.
inline constexpr nesterov_t nesterov{};

/// TensorFlow's MomentumOptimizer: accum = momentum * accum + g; then v -= lr * accum, or with
/// Nesterov v -= lr * g + lr * momentum * accum (the new accum).
template <class LR, class M, bool Nesterov>
struct momentum_optimizer {
  template <class V, class G>
  static consteval auto update(V v, G g) {
    constexpr auto accum = slot_variable<V, "/momentum">;
    // Two assignments (momentum_accum, apply_momentum), one node each: seven with add and mul.
    return typeflow::momentum_update<Nesterov>(v, accum, g, LR{}, M{});
  }
  template <expression Loss>
  consteval auto minimize(Loss loss) const {
    return detail::minimize<momentum_optimizer>(loss);
  }
};
template <expression LR, expression M>
consteval auto momentum(LR, M) {
  return momentum_optimizer<LR, M, false>{};
}
template <expression LR, expression M>
consteval auto momentum(LR, M, nesterov_t) {
  return momentum_optimizer<LR, M, true>{};
}

/// Adam (Kingma and Ba), as TensorFlow's AdamOptimizer: with t = global_step + 1,
/// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, and
/// var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps).
template <class LR, class B1, class B2, class Eps>
struct adam_optimizer {
  template <class V, class G>
  static consteval auto update(V v, G g) {
    using T = typename V::value_type;
    constexpr auto m = slot_variable<V, "/adam_m">;
    constexpr auto s = slot_variable<V, "/adam_v">;
    constexpr auto t = typeflow::cast<T>(global_step + constant<1>);
    constexpr auto rate = LR{} * typeflow::sqrt(constant<1> - typeflow::pow(B2{}, t)) /
                          (constant<1> - typeflow::pow(B1{}, t));
    // Three assignments (adam_m, adam_v, apply_adam), each one node: fourteen nodes per variable
    // when written with add and mul, most of a transformer's training graph.
    return typeflow::adam_update(v, m, s, g, rate, B1{}, B2{}, Eps{});
  }
  template <expression Loss>
  consteval auto minimize(Loss loss) const {
    return detail::minimize<adam_optimizer>(loss);
  }
};
template <expression LR, expression B1 = decltype(constant<0.9>),
          expression B2 = decltype(constant<0.999>), expression Eps = decltype(constant<1e-8>)>
consteval auto adam(LR, B1 = {}, B2 = {}, Eps = {}) {
  return adam_optimizer<LR, B1, B2, Eps>{};
}

/// Dynamic loss scaling's parameters. The defaults are PyTorch's GradScaler's (TensorFlow's
/// LossScaleOptimizer starts at 2^15 and grows after 2000 steps too).
struct loss_scale_params {
  double initial = 65536.0; ///< the first scale (2^16)
  double growth = 2.0;      ///< its factor after `interval` finite steps in a row ...
  double backoff = 0.5;     ///< ... and after a step with an inf or NaN gradient
  std::int64_t interval = 2000;
};

namespace detail {

template <class E>
inline constexpr bool is_group = std::is_same_v<typename E::op, ops::group>;

/// E's assignments made conditional on the scalar bool Ok: assign(v, x) and assign_add(v, x)
/// keep v where Ok is false (v + x computed as the commit would), assign_sub subtracts zero
/// (v - 0 is v, -0 included): a skipped step changes no variable, bit for bit.
template <class Ok, class E>
consteval auto guarded(Ok, E) {
  using Op = typename E::op;
  if constexpr (std::is_same_v<Op, ops::group>) {
    return []<class... C>(type_list<C...>) {
      return typeflow::group(detail::guarded(Ok{}, C{})...);
    }(typename E::children{});
  } else if constexpr (requires { Op::takes_ok; }) {
    // The optimizers' update ops take the condition as their last operand (ops/state.hpp).
    return []<class... C>(type_list<C...>) {
      return make_node<Op, C..., Ok>();
    }(typename E::children{});
  } else if constexpr (is_state_op<E>) {
    return []<class V, class X>(type_list<V, X>) {
      if constexpr (Op::mode == ops::assign_mode::set)
        return typeflow::assign(V{}, typeflow::where(Ok{}, X{}, V{}));
      else if constexpr (Op::mode == ops::assign_mode::add)
        return typeflow::assign(V{}, typeflow::where(Ok{}, typeflow::add(V{}, X{}), V{}));
      else
        return typeflow::assign_sub(V{}, typeflow::where(Ok{}, X{}, typeflow::zeros_like(X{})));
    }(typename E::children{});
  } else {
    static_assert(is_group<E> || is_state_op<E>,
                  "loss_scaled: the optimizer's update must be assignments, or groups of them "
                  "(a skipped step must be able to keep every variable)");
    return E{};
  }
}

/// a + b + ..., through typeflow::add (no operator: see below).
template <class A, class... B>
consteval auto add_all(A a, B... b) {
  if constexpr (sizeof...(B) == 0)
    return a;
  else
    return typeflow::add(a, detail::add_all(b...));
}

/// A gradient averaged over the towers (replica_mean), then divided by the loss scale S.
template <class S, class V, class G>
consteval auto unscale(S, V, G) {
  return typeflow::div(detail::tower_mean(G{}), typeflow::cast<typename V::value_type>(S{}));
}

/// The I-th of N gradients grad(...) returned (one gradient is not a tuple).
template <class G, std::size_t I, std::size_t N>
consteval auto gradient_of() {
  if constexpr (N == 1)
    return G{};
  else
    return typename G::template type_at<I>{};
}

} // namespace detail

/// Dynamic loss scaling around an optimizer, in the graph (PyTorch's GradScaler, TensorFlow's
/// LossScaleOptimizer): the loss is multiplied by the variable `loss_scale` before
/// differentiation and each gradient divided by it after (exact while no value over- or
/// underflows: the scale is a power of two); a step whose gradients hold an inf or NaN applies
/// no update (every assignment of the wrapped optimizer keeps its variable) and halves the scale;
/// `interval` finite steps in a row double it (unless that overflows). `loss_scale` and
/// `loss_scale/good_steps` are ordinary variables (checkpointed, readable; one pair per graph:
/// two loss-scaled optimizers in one run would share them); global_step counts every step,
/// skipped or not, as TensorFlow's does. Nothing waits for the host: the skip is a
/// predicate computed on the device, so a step captured as a CUDA graph keeps working.
template <loss_scale_params P, class Opt>
struct loss_scale_optimizer {
  static constexpr auto scale =
      variable<"loss_scale", float, shape<>, not_trainable<fill<P.initial>>>;
  static constexpr auto good_steps =
      variable<"loss_scale/good_steps", std::int64_t, shape<>, not_trainable<zeros>>;

  template <expression Loss>
  consteval auto minimize(Loss) const {
    static_assert(Loss::shape_type::rank == 0, "minimize: the loss must be a scalar");
    constexpr bool wide = std::is_same_v<typename Loss::value_type, float> ||
                          std::is_same_v<typename Loss::value_type, double>;
    static_assert(wide, "loss_scaled: the loss must be float32 or float64 (the scale, 2^16, is "
                        "infinite in float16; float16 products come from "
                        "session_options::precision)");
    if constexpr (!wide)
      return invalid_expr{};
    else
      return detail::with_updates(Loss{}, minimize_impl(Loss{}));
  }

private:
  // (16-bit variables are not trainable: the master weights are float32 or float64.)
  template <class Loss>
  static consteval auto minimize_impl(Loss) {
    using Vs = trainable_variables_t<Loss>;
    return []<class... V>(type_list<V...>) {
      static_assert(sizeof...(V) > 0, "minimize: the loss depends on no trainable variable");
      using T = typename Loss::value_type;
      using G = decltype(typeflow::grad<typename detail::save_of<Opt>::type>(
          typeflow::mul(Loss{}, typeflow::cast<T>(scale)), V{}...));
      return []<std::size_t... I>(std::index_sequence<I...>) {
        constexpr std::size_t n = sizeof...(V);
        // inf * 0 and NaN * 0 are NaN, finite * 0 is 0: the sum is NaN exactly when a gradient
        // holds an inf or NaN, and NaN is the one value unequal to itself.
        constexpr auto probe = detail::add_all(typeflow::cast<float>(typeflow::sum(typeflow::mul(
            detail::unscale(scale, V{}, detail::gradient_of<G, I, n>()), constant<0>)))...);
        constexpr auto finite = typeflow::equal(probe, probe);
        constexpr auto grown = typeflow::mul(scale, full<P.growth, float, shape<>>);
        constexpr auto next_good = typeflow::add(good_steps, constant<1>);
        constexpr auto grow = typeflow::equal(next_good, full<P.interval, std::int64_t, shape<>>);
        constexpr auto grown_ok = typeflow::equal(typeflow::sub(grown, grown), constant<0>);
        constexpr auto next_scale = typeflow::where(
            finite, typeflow::where(grow, typeflow::where(grown_ok, grown, scale), scale),
            typeflow::mul(scale, full<P.backoff, float, shape<>>));
        constexpr auto zero_count = typeflow::zeros_like(good_steps);
        constexpr auto next_count =
            typeflow::where(finite, typeflow::where(grow, zero_count, next_good), zero_count);
        return typeflow::group(
            detail::guarded(
                finite,
                Opt::update(V{}, detail::unscale(scale, V{}, detail::gradient_of<G, I, n>())))...,
            typeflow::assign(scale, next_scale), typeflow::assign(good_steps, next_count),
            typeflow::assign_add(global_step, constant<1>));
      }
      (std::index_sequence_for<V...>{});
    }(Vs{});
  }
};

/// An optimizer whose gradients read the forward pass's activations rounded to H (bfloat16 or
/// float16) and keep those 16-bit copies, not the float32 values, for the backward pass
/// (grad.hpp's saved_in<H>): about half the activation bytes of a training step. The
/// variables, the optimizer's slots and the update stay as Opt's (float32 master weights), and
/// the forward pass and the loss are computed exactly as without it; products in 16 bits come
/// from session_options::precision. Wraps any optimizer; with loss_scaled, in either order.
template <class H, class Opt>
requires is_half<H>
struct mixed_precision_optimizer {
  using save = saved_in<H>;
  template <class V, class G>
  static consteval auto update(V v, G g) {
    return Opt::update(v, g);
  }
  template <expression Loss>
  consteval auto minimize(Loss) const {
    static_assert(Loss::shape_type::rank == 0, "minimize: the loss must be a scalar");
    using Vs = trainable_variables_t<Loss>;
    return detail::with_updates(Loss{}, []<class... V>(type_list<V...>) {
      return detail::apply_updates<mixed_precision_optimizer>(Loss{}, type_list<V...>{},
                                                              std::index_sequence_for<V...>{});
    }(Vs{}));
  }
};

/// `mixed_precision<ty::bfloat16>(opt).minimize(loss)`: see mixed_precision_optimizer.
template <class H, class Opt>
consteval auto mixed_precision(Opt) {
  static_assert(is_half<H>, "mixed_precision<H>: H must be ty::bfloat16 or ty::float16");
  if constexpr (is_half<H>)
    return mixed_precision_optimizer<H, Opt>{};
  else
    return invalid_expr{};
}

/// `mixed_precision<H>(loss_scaled(opt))`: the wrappers commute, so this is
/// `loss_scaled(mixed_precision<H>(opt))`, the same type.
template <class H, loss_scale_params P, class Opt>
consteval auto mixed_precision(loss_scale_optimizer<P, Opt>) {
  return loss_scale_optimizer<P, decltype(typeflow::mixed_precision<H>(Opt{}))>{};
}

/// `loss_scaled(opt).minimize(loss)`, or with parameters: `loss_scaled<{.initial = 32768}>(opt)`.
template <loss_scale_params P = loss_scale_params{}, class Opt>
consteval auto loss_scaled(Opt) {
  return loss_scale_optimizer<P, Opt>{};
}

/// TensorFlow's exponential_decay: lr * rate^(global_step / decay_steps), the exponent an
/// integer division when Staircase. An expression: it changes every step with no recompilation.
template <std::int64_t DecaySteps, auto Rate, bool Staircase = false, expression LR>
consteval auto exponential_decay(LR lr) {
  using T = typename LR::value_type;
  if constexpr (Staircase)
    return lr * typeflow::pow(full<Rate, T, shape<>>,
                              typeflow::cast<T>(global_step / constant<DecaySteps>));
  else
    return lr * typeflow::pow(full<Rate, T, shape<>>,
                              typeflow::cast<T>(global_step) / constant<DecaySteps>);
}

} // namespace typeflow
