// Gradient rule of the attention op: one attention_grad op per operand, each reading q, k, v,
// the upstream gradient and one shared attention_stats op (each query row's log-sum-exp and
// g . o); the scores are recomputed, as FlashAttention's backward pass does. The gradient ops have
// no rule of their own (no second derivatives).
#pragma once
#include "attention.hpp"
#include "fold.hpp"

namespace typeflow {

template <bool Causal>
struct grad_rule<ops::attention<Causal>> {
  template <std::size_t S, class Y, class G, class Q, class K, class V>
  static consteval auto vjp(Y, G, Q, K, V) {
    // one stats node for the three gradients (one node identity: the same operands)
    using stats = decltype(make_node<ops::attention_stats<Causal>, Q, K, V, Y, G>());
    return make_node<ops::attention_grad<Causal, static_cast<int>(S)>, Q, K, V, G, stats>();
  }
};

} // namespace typeflow
