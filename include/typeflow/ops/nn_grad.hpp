// Gradient rules of the neural-network ops. conv2d's gradients are the two backprop ops;
// pooling's are pool_grad (max routes to the window's first maximum, avg spreads over the valid
// positions); the fused cross-entropy's is upstream * (softmax - onehot). The backprop ops
// themselves have no rule (no second derivatives through convolutions or pools yet).
#pragma once
#include "fold.hpp"
#include "nn.hpp"

namespace typeflow {

template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct grad_rule<ops::conv2d<P, SH, SW, DH, DW>> {
  template <std::size_t S, class Y, class G, class X, class W>
  static consteval auto vjp(Y, G g, X x, W w) {
    if constexpr (S == 0)
      return typeflow::conv2d_backprop_input<P, SH, SW, DH, DW>(g, w, x);
    else
      return typeflow::conv2d_backprop_filter<P, SH, SW, DH, DW>(x, g, w);
  }
};

template <ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW, std::int64_t SH,
          std::int64_t SW>
struct grad_rule<ops::pool<K, P, KH, KW, SH, SW>> {
  // Max pooling's gradient compares x's values, read from a 16-bit saved copy as it is;
  // average pooling's reads x's shape only.
  template <std::size_t, class Y, class G, class X>
  static consteval auto vjp(Y, G, X) {
    if constexpr (K == ops::pool_kind::max)
      return make_node<ops::pool_grad<K, P, KH, KW, SH, SW>, stored_source_t<X>, G>();
    else
      return make_node<ops::pool_grad<K, P, KH, KW, SH, SW>, shape_source_t<X>, G>();
  }
};

template <>
struct grad_rule<ops::sparse_softmax_xent> {
  template <std::size_t S, class Y, class G, class L, class Lab>
  static consteval auto vjp(Y, G g, L, Lab) {
    if constexpr (S == 0)
      return ad::mul(typeflow::expand_dims<1>(g),
                     make_node<ops::sparse_softmax_xent_grad, L, Lab>());
    else
      return zero_t{}; // labels are integers
  }
};

template <std::uint64_t Seed>
struct grad_rule<ops::dropout_mask<Seed>> : no_gradient {};

template <>
struct grad_rule<ops::bias_add> {
  template <std::size_t S, class Y, class G, class X, class B>
  static consteval auto vjp(Y, G g, X x, B b) {
    if constexpr (S == 0)
      return ad::unbroadcast(g, x);
    else
      return ad::unbroadcast(g, b);
  }
};

} // namespace typeflow
