// Gradient rule of matmul (2-D and batched), for every combination of transpose flags:
// C = op(A) op(B) gives dop(A) = G op(B)^T and dop(B) = op(A)^T G.
#pragma once
#include "fold.hpp"
#include "matmul.hpp"

namespace typeflow {

template <bool TA, bool TB>
struct grad_rule<ops::matmul<TA, TB>> {
  template <std::size_t S, class Y, class G, class A, class B>
  static consteval auto vjp(Y, G g, A a, B b) {
    if constexpr (S == 0) {
      if constexpr (!TA && !TB)
        return typeflow::matmul<false, true>(g, b);
      else if constexpr (!TA && TB)
        return typeflow::matmul<false, false>(g, b);
      else if constexpr (TA && !TB)
        return typeflow::matmul<false, true>(b, g);
      else
        return typeflow::matmul<true, true>(b, g);
    } else {
      if constexpr (!TA && !TB)
        return typeflow::matmul<true, false>(a, g);
      else if constexpr (!TA && TB)
        return typeflow::matmul<true, false>(g, a);
      else if constexpr (TA && !TB)
        return typeflow::matmul<false, false>(a, g);
      else
        return typeflow::matmul<true, true>(g, a);
    }
  }
};

} // namespace typeflow
