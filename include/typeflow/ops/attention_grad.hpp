// Gradient rule of the attention op. The gradients read q, k, v, the upstream gradient and one
// shared attention_stats op (each query row's log-sum-exp and g . o), and recompute the scores,
// as FlashAttention's backward pass does. For self-attention (q, k and v of one shape: equal
// static extents, dyn in the same axes) one attention_grads op computes the three gradients in
// one pass over the tiles, and each operand's gradient is its slice of that op's [3, ...]
// result; otherwise each operand gets an attention_grad op of its own. (Every placeholder's dyn
// is one extent when fed, so q, k and v read from fed tensors agree at run time; a dyn extent
// from elsewhere, a reshape's -1, that differs is attention_grads' run-time error naming the
// shapes.) With dropout the gradient ops draw the forward's mask again (the same seed and run).
// The gradient ops have no rule of their own (no second derivatives).
#pragma once
#include "attention.hpp"
#include "fold.hpp"
#include "layout.hpp"

namespace typeflow {

template <bool Causal, attention_dropout Drop>
struct grad_rule<ops::attention<Causal, Drop>> {
  /// Whether q, k and v have one shape: attention_grads applies.
  template <class Q, class K, class V>
  static constexpr bool self_attention() {
    constexpr auto q = Q::shape_type::dims;
    constexpr auto k = K::shape_type::dims;
    constexpr auto v = V::shape_type::dims;
    if constexpr (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) {
      return false;
    } else {
      bool same = true;
      for (std::size_t i = 0; same && i < q.size(); ++i)
        same = q[i] == k[i] && q[i] == v[i];
      return same;
    }
  }
  template <std::size_t S, class Y, class G, class Q, class K, class V>
  static consteval auto vjp(Y, G, Q q, K, V) {
    // one stats node for the three gradients (one node identity: the same operands)
    using stats = decltype(make_node<ops::attention_stats<Causal>, Q, K, V, Y, G>());
    if constexpr (self_attention<Q, K, V>()) {
      constexpr std::size_t r = Q::shape_type::rank;
      const auto all = make_node<ops::attention_grads<Causal, Drop>, Q, K, V, G, stats>();
      const auto piece = [all]<std::size_t... I>(std::index_sequence<I...>) {
        return typeflow::slice<ints<(I == 0 ? static_cast<std::int64_t>(S) : 0)...>,
                               ints<(I == 0 ? 1 : -1)...>>(all);
      }
      (std::make_index_sequence<r + 1>{});
      return typeflow::reshape_like(piece, q);
    } else {
      return make_node<ops::attention_grad<Causal, static_cast<int>(S), Drop>, Q, K, V, G, stats>();
    }
  }
};

} // namespace typeflow
