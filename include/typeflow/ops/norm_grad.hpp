// Gradient rules of the normalization ops: layer_norm's input gradient is layer_norm_grad, its
// scale's layer_norm_grad_gamma, its shift's the upstream gradient summed over the rows. The
// gradient ops themselves have no rule (no second derivatives through layer_norm yet: asking for
// one is a compile-time error naming layer_norm_grad).
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

} // namespace typeflow
