// Gradient rules of the normalization ops: layer_norm's input gradient is layer_norm_grad, its
// scale's layer_norm_grad_gamma, its shift's the upstream gradient summed over the rows.
// batch_norm's three gradients read one batch_norm_grad_stats node (its channel sums): the
// input's is batch_norm_grad, the scale's and shift's are rows of the sums; nothing flows into
// the moments (batch_norm_grad includes their dependence on x) or the moving averages. The
// gradient ops and batch_moments have no rule (no second derivatives yet: asking for one is a
// compile-time error naming the op).
#pragma once
#include "fold.hpp"
#include "norm.hpp"

namespace typeflow {

template <std::uint64_t E>
struct grad_rule<ops::layer_norm<E>> {
  template <std::size_t S, class Y, class G, class X, class Gm, class B>
  static consteval auto vjp(Y, G g, X, Gm, B b) {
    if constexpr (S == 0)
      return make_node<ops::layer_norm_grad<E>, X, Gm, G>();
    else if constexpr (S == 1)
      return make_node<ops::layer_norm_grad_gamma<E>, X, G>();
    else
      return ad::unbroadcast(g, b);
  }
};

template <std::uint64_t E, std::uint64_t D>
struct grad_rule<ops::batch_norm<E, D>> {
  template <std::size_t S, class Y, class G, class X, class M, class Gm, class B, class MM,
            class MV>
  static consteval auto vjp(Y, G, X, M, Gm, B, MM, MV) {
    using Stats = decltype(make_node<ops::batch_norm_grad_stats<E>, X, M, G>());
    if constexpr (S == 0)
      return make_node<ops::batch_norm_grad<E>, X, M, Gm, G, Stats>();
    else if constexpr (S == 2)
      return detail::take_row<1>(Stats{});
    else if constexpr (S == 3)
      return detail::take_row<0>(Stats{});
    else
      return zero_t{}; // the moments (accounted for in x's) and the moving averages
  }
};

} // namespace typeflow
