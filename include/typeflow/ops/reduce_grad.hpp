// Gradient rules of the reductions. max and min route the gradient to the elements equal to the
// result, shared equally among ties (as TensorFlow does); argmax has no gradient.
#pragma once
#include "fold.hpp"

namespace typeflow {

template <class R, bool Keep, std::int64_t... Axes>
struct grad_rule<ops::reduce<R, Keep, Axes...>> {
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y y, G g, X x) {
    using T = typename X::value_type;
    if constexpr (std::is_same_v<R, ops::reducers::argmax> || !is_floating<T>) {
      return zero_t{};
    } else if constexpr (std::is_same_v<R, ops::reducers::sum>) {
      return ad::expand_reduced<Keep, Axes...>(g, x);
    } else if constexpr (std::is_same_v<R, ops::reducers::mean>) {
      return ad::div(ad::expand_reduced<Keep, Axes...>(g, x), typeflow::element_count<Axes...>(x));
    } else {
      // max / min: mask of the elements equal to the result, normalized over ties.
      const auto hit =
          typeflow::cast<T>(typeflow::equal(x, ad::expand_reduced<Keep, Axes...>(y, x)));
      const auto ties = ad::expand_reduced<true, Axes...>(typeflow::sum<Axes...>(hit, keepdims), x);
      return ad::mul(ad::expand_reduced<Keep, Axes...>(g, x), typeflow::div(hit, ties));
    }
  }
};

template <std::int64_t... Axes>
struct grad_rule<ops::element_count<Axes...>> : no_gradient {};

template <>
struct grad_rule<ops::sum_to_like> {
  template <std::size_t S, class Y, class G, class C, class X>
  static consteval auto vjp(Y, G g, C c, X) {
    if constexpr (S == 0)
      return typeflow::broadcast_like(g, c);
    else
      return zero_t{};
  }
};

} // namespace typeflow
