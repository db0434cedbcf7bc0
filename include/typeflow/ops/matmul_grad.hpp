// Gradient rule of matmul (2-D, batched, and a batch times one matrix), for every combination of
// transpose flags: C = op(A) op(B) gives dop(A) = G op(B)^T and dop(B) = op(A)^T G; a matrix
// applied to a batch gets the sum over the batch, one product of the batch folded into rows.
#pragma once
#include "fold.hpp"
#include "layout.hpp"
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
    } else if constexpr (A::shape_type::rank > 2 && B::shape_type::rank == 2) {
      // a batch times one matrix: the matrix's gradient sums over the batch, as one product of
      // the batch folded into rows: [rows, k]^T [rows, n] (or its transpose)
      constexpr auto bd = B::shape_type::dims;
      constexpr std::int64_t k = TB ? bd[1] : bd[0], n = TB ? bd[0] : bd[1];
      const auto a2 = typeflow::reshape<-1, k>(a);
      const auto g2 = typeflow::reshape<-1, n>(g);
      if constexpr (!TB)
        return typeflow::matmul<true, false>(a2, g2);
      else
        return typeflow::matmul<true, false>(g2, a2);
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
