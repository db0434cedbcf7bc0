// Recurrent layers: the LSTM cell on scan (nn/scan.hpp), and an LSTM layer over a batch-major
// sequence, as one op (ops/recurrent.hpp) or as the scan of the cell.
//
//   auto y = ty::lstm<"lstm1", 256>(x);       // x [B, T, E] -> y [B, T, 256]: h_1 ... h_T
//   auto y = ty::lstm_scan<"lstm1", 256>(x);  // the same layer, the same variables, as a scan
//
// The cell is PyTorch's nn.LSTM / TF's LSTMCell without peepholes or projection: with z = [x_t,
// h_t] W + b split into the gates i, f, g, o (in that order, PyTorch's),
//   c_{t+1} = sigmoid(f + forget_bias) * c_t + sigmoid(i) * tanh(g)
//   h_{t+1} = sigmoid(o) * tanh(c_{t+1})
// W is `Name/weights` [E + Units, 4 Units] (glorot_uniform: TF's default), b `Name/biases`
// [4 Units] (zeros), and forget_bias 1.0 as TF's BasicLSTMCell adds (0.0 gives PyTorch's cell).
// Both layers start from zeros and return every step's h. lstm is the lstm op: one product per
// step fused with the gates' arithmetic, its gradient one backward loop (the way cuDNN and oneDNN
// run a layer). lstm_scan carries [h, c] as one value [B, 2 Units] through a scan whose body is
// elementwise ops, slices, a concat and a matmul, so its gradient is derived as any graph's: the
// reference the op is tested against, and the form to start from for a cell of one's own.
#pragma once
#include <cstdint>
#include <tuple>

#include "../ops/elementwise.hpp"
#include "../ops/layout.hpp"
#include "../ops/recurrent.hpp"
#include "initializers.hpp"
#include "layers.hpp"
#include "scan.hpp"

namespace typeflow {

/// lstm_cell<"lstm", Units>(carry, x): one step of an LSTM, carry = [h, c] [B, 2 Units] and x
/// [B, E] to the next carry (see the header comment).
template <fixed_string Name, std::int64_t Units, auto ForgetBias = 1.0,
          class WInit = glorot_uniform, class BInit = zeros, expression C, expression X>
consteval auto lstm_cell(C carry, X x) {
  static_assert(C::shape_type::rank >= 1 &&
                    C::shape_type::dims[C::shape_type::rank - 1] == 2 * Units,
                "lstm_cell: the carry is [h, c], its last extent 2 Units");
  auto [h, c] = typeflow::split<-1, 2>(carry);
  auto z = typeflow::dense<Name, 4 * Units, WInit, BInit>(typeflow::concat<-1>(x, h));
  auto [i, f, g, o] = typeflow::split<-1, 4>(z);
  auto next_c =
      typeflow::sigmoid(f + constant<ForgetBias>) * c + typeflow::sigmoid(i) * typeflow::tanh(g);
  auto next_h = typeflow::sigmoid(o) * typeflow::tanh(next_c);
  return typeflow::concat<-1>(next_h, next_c);
}

namespace detail {
/// Zeros [B, N] for a batch-major x [B, ...] (B read from x at run time where it is dyn).
template <std::int64_t N, expression X>
consteval auto zero_state(X x) {
  constexpr std::size_t r = X::shape_type::rank;
  return [x]<std::size_t... I>(std::index_sequence<I...>) {
    auto first = typeflow::slice<ints<(I * 0)...>, ints<(I == 0 ? -1 : 1)...>>(x); // [B, 1, ...]
    return typeflow::broadcast_to<shape<X::shape_type::dims[0], N>>(
        typeflow::reshape<-1, 1>(typeflow::zeros_like(first)));
  }
  (std::make_index_sequence<r>{});
}
} // namespace detail

/// lstm_scan<"lstm", Units>(x): an LSTM over x [B, T, E] (batch-major, as a replicated session
/// splits a feed along its first axis) from a zero state, as a scan of lstm_cell; [B, T, Units],
/// every step's h.
template <fixed_string Name, std::int64_t Units, auto ForgetBias = 1.0,
          class WInit = glorot_uniform, class BInit = zeros, expression X>
consteval auto lstm_scan(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    static_assert(X::shape_type::rank == 3, "lstm: the input is not [B, T, E]");
    static_assert(X::shape_type::dims[2] != dyn, "lstm: the input's last extent must be static");
    auto carries = typeflow::scan<Name>(
        [](auto carry, auto xt) {
          return typeflow::lstm_cell<Name, Units, ForgetBias, WInit, BInit>(carry, xt);
        },
        detail::zero_state<2 * Units>(x), typeflow::transpose<1, 0, 2>(x)); // [T, B, 2 Units]
    return typeflow::transpose<1, 0, 2>(
        typeflow::slice<ints<0, 0, 0>, ints<-1, -1, Units>>(carries)); // h of each step
  }
}

/// lstm<"lstm", Units>(x): an LSTM over x [B, T, E] from a zero state as one op (ops::lstm);
/// [B, T, Units], every step's h. The same layer as lstm_scan, with the same variables.
template <fixed_string Name, std::int64_t Units, auto ForgetBias = 1.0,
          class WInit = glorot_uniform, class BInit = zeros, expression X>
consteval auto lstm(X x) {
  if constexpr (any_invalid<X>) { // an earlier mistake, reported already
    return invalid_expr{};
  } else {
    static_assert(X::shape_type::rank == 3, "lstm: the input is not [B, T, E]");
    constexpr std::int64_t in = X::shape_type::dims[2];
    static_assert(in != dyn, "lstm: the input's last extent must be static");
    using T = typename X::value_type;
    return typeflow::lstm_layer<static_cast<double>(ForgetBias)>(
        x, layer_weights<Name, T, shape<in + Units, 4 * Units>, WInit>,
        layer_biases<Name, T, 4 * Units, BInit>);
  }
}

} // namespace typeflow
