// Scaled dot-product attention as one op: softmax(q k^T / sqrt(D) [+ causal mask]) v, with the
// FlashAttention algorithm's memory behaviour: the forward pass keeps one running maximum, sum
// and output row per query (an online softmax over blocks of keys) and never stores the
// [T, S] scores; the backward pass recomputes them. Its gradients read q, k, v and the upstream
// gradient through one attention_stats op (each query row's log-sum-exp and g . o): for
// self-attention (q, k, v of one shape) one attention_grads op computes all three, else
// three attention_grad ops (q's, k's, v's). Kernels: backend/cpu/kernels/attention.hpp,
// backend/cuda/attention.cuh.
#pragma once
#include <cstdint>
#include <string>

#include "nn.hpp"

namespace typeflow {

namespace detail {
/// "" when q [..., T, D], k [..., S, D], v [..., S, Dv] agree, else what is wrong.
template <std::size_t RQ, std::size_t RK, std::size_t RV>
constexpr std::string_view attention_error(const dims_t<RQ>& q, const dims_t<RK>& k,
                                           const dims_t<RV>& v) {
  if constexpr (RQ < 2 || RK != RQ || RV != RQ) {
    return "q, k and v need one rank, 2 or more: [..., T, D], [..., S, D], [..., S, Dv]";
  } else {
    const auto differ = [](std::int64_t a, std::int64_t b) {
      return a != b && a != dyn && b != dyn;
    };
    for (std::size_t i = 0; i + 2 < RQ; ++i)
      if (differ(q[i], k[i]) || differ(q[i], v[i]))
        return "the batch extents of q, k and v differ";
    if (differ(q[RQ - 1], k[RK - 1]))
      return "q and k differ in their feature extent";
    if (differ(k[RK - 2], v[RV - 2]))
      return "k and v differ in their sequence extent";
    return {};
  }
}
} // namespace detail

/// Dropout on attention's probabilities (as PyTorch's scaled_dot_product_attention's
/// dropout_p = 1 - keep): each probability of softmax(q k^T / sqrt(D)) is kept with probability
/// `keep` and scaled by 1 / keep, else zeroed, before the product with v. The mask is drawn
/// afresh on every run from (seed, the session's run count, the element's batch entry, query and
/// key), by the dropout ops' hash (backend/common/dropout.hpp), and drawn again, the same, by
/// the gradient. keep = 1 (the default) is no dropout. Give each layer its own seed.
struct attention_dropout {
  double keep = 1.0;
  std::uint64_t seed = 0;
};

namespace ops {

/// attention<Causal, Drop>(q, k, v) -> [..., T, Dv]. Causal: query i attends to keys j <= i.
template <bool Causal, attention_dropout Drop = attention_dropout{}>
struct attention : nn_base {
  static_assert(Drop.keep > 0.0 && Drop.keep <= 1.0, "attention: dropout's keep must be in (0, 1]");
  static constexpr std::string_view name = "attention";
  static constexpr bool causal = Causal;
  static constexpr attention_dropout dropout = Drop;
  static constexpr bool draws = Drop.keep < 1.0; // a new mask each run (graph/op_traits.hpp)
  static std::string attrs() {
    std::string s = Causal ? "causal" : "";
    if constexpr (Drop.keep < 1.0)
      s += std::string(Causal ? ", " : "") + "keep=" + std::to_string(Drop.keep) +
           ", seed=" + std::to_string(Drop.seed);
    return s;
  }
  template <class Q, class K, class V>
  using value_type = typename Q::value_type;
  template <class Q, class K, class V>
  static constexpr std::string_view dtype_error() {
    if (!(detail::floating_operand<Q> && detail::floating_operand<K> &&
          detail::floating_operand<V>))
      return "requires a floating-point dtype";
    if (!same_dtype<Q, K, V>())
      return "operand dtypes differ";
    return {};
  }
  template <std::size_t RQ, std::size_t RK, std::size_t RV>
  static constexpr rule_result<RQ> rule(const dims_t<RQ>& q, const dims_t<RK>& k,
                                        const dims_t<RV>& v) {
    rule_result<RQ> r{detail::attention_error(q, k, v), q};
    if constexpr (RQ >= 2 && RV == RQ)
      r.dims[RQ - 1] = v[RV - 1];
    return r;
  }
};

/// What attention_stats and attention_grad share: five operands, the first three q, k, v.
template <bool Causal, attention_dropout Drop = attention_dropout{}>
struct attention_backward_base : attention<Causal, Drop> {
  template <class Q, class K, class V, class A, class B>
  using value_type = typename Q::value_type;
  template <class Q, class K, class V, class A, class B>
  static constexpr std::string_view dtype_error() {
    return attention<Causal, Drop>::template dtype_error<Q, K, V>();
  }
};

/// What the backward pass needs of each query row, computed once for the three gradients:
/// [..., T, 2] holding the row's log-sum-exp L of its scores and D = g . o (the upstream
/// gradient's row times the forward output's), from (q, k, v, o, g). With dropout the same: L
/// is over the scores before dropout, and D = g . o over the output after it.
template <bool Causal>
struct attention_stats : attention_backward_base<Causal> {
  static constexpr std::string_view name = "attention_stats";
  template <std::size_t RQ, std::size_t RK, std::size_t RV, std::size_t RO, std::size_t RG>
  static constexpr rule_result<RQ> rule(const dims_t<RQ>& q, const dims_t<RK>& k,
                                        const dims_t<RV>& v, const dims_t<RO>&, const dims_t<RG>&) {
    rule_result<RQ> r{detail::attention_error(q, k, v), q};
    if constexpr (RQ >= 1)
      r.dims[RQ - 1] = 2;
    return r;
  }
};

/// The gradient of attention with respect to operand Which (0: q, 1: k, 2: v), from
/// (q, k, v, the upstream gradient g, attention_stats); Drop: the forward's dropout, whose mask
/// it draws again.
template <bool Causal, int Which, attention_dropout Drop = attention_dropout{}>
struct attention_grad : attention_backward_base<Causal, Drop> {
  static constexpr std::string_view name =
      Which == 0 ? std::string_view{"attention_grad_q"}
                 : (Which == 1 ? std::string_view{"attention_grad_k"}
                               : std::string_view{"attention_grad_v"});
  static constexpr int which = Which;
  template <std::size_t RQ, std::size_t RK, std::size_t RV, std::size_t RG, std::size_t RS>
  static constexpr rule_result<(Which == 0 ? RQ : (Which == 1 ? RK : RV))>
  rule(const dims_t<RQ>& q, const dims_t<RK>& k, const dims_t<RV>& v, const dims_t<RG>&,
       const dims_t<RS>&) {
    if constexpr (Which == 0)
      return {detail::attention_error(q, k, v), q};
    else if constexpr (Which == 1)
      return {detail::attention_error(q, k, v), k};
    else
      return {detail::attention_error(q, k, v), v};
  }
};

/// The three gradients in one op, for self-attention's shapes (q, k and v of one shape
/// [..., T, D], checked again on the run's extents): [3, ..., T, D] holding q's, k's and v's
/// gradients, from (q, k, v, the upstream gradient g, attention_stats). One pass over the tiles
/// forms each tile's scores and dS once for all three (FlashAttention-2's backward), where three
/// attention_grad ops form them three times.
template <bool Causal, attention_dropout Drop = attention_dropout{}>
struct attention_grads : attention_backward_base<Causal, Drop> {
  static constexpr std::string_view name = "attention_grads";
  template <std::size_t RQ, std::size_t RK, std::size_t RV, std::size_t RG, std::size_t RS>
  static constexpr rule_result<RQ + 1> rule(const dims_t<RQ>& q, const dims_t<RK>& k,
                                            const dims_t<RV>& v, const dims_t<RG>&,
                                            const dims_t<RS>&) {
    rule_result<RQ + 1> r{detail::attention_error(q, k, v), {}};
    r.dims[0] = 3;
    for (std::size_t i = 0; i < RQ; ++i)
      r.dims[i + 1] = q[i];
    if constexpr (RQ >= 2 && RK == RQ && RV == RQ)
      if (r.ok() && (q[RQ - 2] != k[RK - 2] || q[RQ - 1] != v[RV - 1]))
        r.error = "q, k and v need one shape (self-attention)";
    return r;
  }
};

} // namespace ops

/// attention(q, k, v) and attention<true>(q, k, v) (causal): softmax(q k^T / sqrt(D)) v over
/// q [..., T, D], k [..., S, D], v [..., S, Dv], as one op that never stores the [T, S] scores
/// (PyTorch's scaled_dot_product_attention with is_causal). attention<Causal, {.keep = 0.9,
/// .seed = 7}>(q, k, v) applies dropout to the probabilities (see attention_dropout); its
/// kernels are the CPU's (a placement on a GPU runs it on the host, as describe_placement says).
template <bool Causal = false, attention_dropout Drop = attention_dropout{}, expression Q,
          expression K, expression V>
consteval auto attention(Q, K, V) {
  return make_node<ops::attention<Causal, Drop>, Q, K, V>();
}

} // namespace typeflow
