// Gradient rule of matmul, for every combination of transpose flags and broadcast batch
// dimensions: C = op(A) op(B) gives dop(A) = G op(B)^T and dop(B) = op(A)^T G, each product
// broadcast as the forward one was and then summed over the batch dimensions its operand was
// stretched along (ad::unbroadcast); a matrix with static extents applied to a batch gets that
// sum as one product of the batch folded into rows.
#pragma once
#include "fold.hpp"
#include "layout.hpp"
#include "matmul.hpp"

namespace typeflow {

template <bool TA, bool TB>
struct grad_rule<ops::matmul<TA, TB>> {
  /// Whether c's batch dimensions are x's (the same rank and extents).
  template <std::size_t RC, std::size_t RX>
  static constexpr bool same_batch(const dims_t<RC>& c, const dims_t<RX>& x) {
    bool same = RC == RX;
    for (std::size_t i = 0; same && i + 2 < RX; ++i)
      same = c[i] == x[i];
    return same;
  }
  /// c (an operand's gradient at the broadcast batch shape) summed to operand x's shape, where
  /// x's batch dimensions are not already c's.
  template <class C, class X>
  static consteval auto to_operand(C c, X x) {
    if constexpr (same_batch(C::shape_type::dims, X::shape_type::dims))
      return c;
    else
      return ad::unbroadcast(c, x);
  }
  template <std::size_t S, class Y, class G, class A, class B>
  static consteval auto vjp(Y, G g, A a, B b) {
    constexpr auto bd = B::shape_type::dims;
    if constexpr (S == 0) {
      if constexpr (!TA && !TB)
        return to_operand(typeflow::matmul<false, true>(g, b), a);
      else if constexpr (!TA && TB)
        return to_operand(typeflow::matmul<false, false>(g, b), a);
      else if constexpr (TA && !TB)
        return to_operand(typeflow::matmul<false, true>(b, g), a);
      else
        return to_operand(typeflow::matmul<true, true>(b, g), a);
    } else if constexpr (A::shape_type::rank > 2 && bd.size() == 2 && !TA && bd[0] != dyn &&
                         bd[1] != dyn) {
      // a batch times one matrix: the matrix's gradient sums over the batch, as one product of
      // the batch folded into rows: [rows, k]^T [rows, n] (or its transpose)
      constexpr std::int64_t k = TB ? bd[1] : bd[0], n = TB ? bd[0] : bd[1];
      const auto a2 = typeflow::reshape<-1, k>(a);
      const auto g2 = typeflow::reshape<-1, n>(g);
      if constexpr (!TB)
        return typeflow::matmul<true, false>(a2, g2);
      else
        return typeflow::matmul<true, false>(g2, a2);
    } else {
      if constexpr (!TA && !TB)
        return to_operand(typeflow::matmul<true, false>(a, g), b);
      else if constexpr (!TA && TB)
        return to_operand(typeflow::matmul<true, false>(g, a), b);
      else if constexpr (TA && !TB)
        return to_operand(typeflow::matmul<false, false>(a, g), b);
      else
        return to_operand(typeflow::matmul<true, true>(g, a), b);
    }
  }
};

} // namespace typeflow
