// Gradient rule of the lstm op: one lstm_grads node computes the three gradients in one backward
// loop; each operand's gradient is its piece of that node's vector (w's and b's at static
// offsets first, x's the rest), reshaped to the operand's shape (views, no copies). lstm_grads
// has no rule of its own (no second derivatives: asking for one is a compile-time error naming
// the op).
#pragma once
#include "fold.hpp"
#include "layout.hpp"
#include "recurrent.hpp"

namespace typeflow {

template <double ForgetBias>
struct grad_rule<ops::lstm<ForgetBias>> {
  template <std::size_t S, class Y, class G, class X, class W, class B>
  static consteval auto vjp(Y, G, X x, W w, B b) {
    constexpr std::int64_t w_size = W::shape_type::dims[0] * W::shape_type::dims[1];
    constexpr std::int64_t b_size = W::shape_type::dims[1];
    const auto all = make_node<ops::lstm_grads<ForgetBias>, X, W, B, Y, G>();
    if constexpr (S == 0)
      return typeflow::reshape_like(typeflow::slice<ints<w_size + b_size>, ints<-1>>(all), x);
    else if constexpr (S == 1)
      return typeflow::reshape_like(typeflow::slice<ints<0>, ints<w_size>>(all), w);
    else
      return typeflow::reshape_like(typeflow::slice<ints<w_size>, ints<b_size>>(all), b);
  }
};

} // namespace typeflow
