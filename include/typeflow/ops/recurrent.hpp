// Recurrent layers as ops of their own: an LSTM over a whole batch-major sequence as one op,
// forward and gradient, where the same layer written as a scan (nn/recurrent.hpp's lstm_scan)
// runs a dozen small ops per step. The forward pass projects every step's input in one product
// before the loop, then runs, per step, one product of the state with the recurrent weights
// fused with the gates' arithmetic; it keeps the gates' activations and the cell states beside
// its output for the gradient (as cuDNN's and oneDNN's training passes keep their workspace).
// The gradient runs the loop backward (one product per step), then forms the weights' and the
// input's gradients as three products over all steps at once. Kernels:
// backend/cpu/kernels/recurrent.hpp (no CUDA kernel: a placement on a GPU runs it on the host).
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "leaves.hpp"
#include "nn.hpp"

namespace typeflow {

namespace detail {
/// "" when x [B, T, E], w [E + U, 4 U] and b [4 U] agree, else what is wrong.
template <std::size_t RX, std::size_t RW, std::size_t RB>
constexpr std::string_view lstm_error(const dims_t<RX>& x, const dims_t<RW>& w,
                                      const dims_t<RB>& b) {
  if constexpr (RX != 3 || RW != 2 || RB != 1) {
    return "x is [batch, steps, features], weights [features + units, 4 units], biases "
           "[4 units]";
  } else {
    if (w[1] == dyn || w[0] == dyn || x[2] == dyn)
      return "x's features and the weights' extents must be static";
    if (w[1] % 4 != 0 || w[1] == 0)
      return "the weights' second extent is not 4 units";
    if (w[0] != x[2] + w[1] / 4)
      return "the weights' first extent is not x's features + units";
    if (b[0] != w[1] && b[0] != dyn)
      return "the biases' extent is not 4 units";
    return {};
  }
}
} // namespace detail

namespace ops {

/// lstm<ForgetBias>(x [B, T, E], w [E + U, 4 U], b [4 U]) -> [B, T, U]: every step's h of an
/// LSTM from a zero state. With z = [x_t, h_t] w + b split into the gates i, f, g, o (in that
/// order, PyTorch's):
///   c_{t+1} = sigmoid(f + ForgetBias) c_t + sigmoid(i) tanh(g),  h_{t+1} = sigmoid(o)
///   tanh(c_{t+1}).
template <double ForgetBias>
struct lstm : nn_base {
  static constexpr std::string_view name = "lstm";
  static constexpr double forget_bias = ForgetBias;
  static std::string attrs() { return "forget_bias " + detail::format_number(ForgetBias); }
  template <class X, class W, class B>
  using value_type = typename X::value_type;
  template <class X, class W, class B>
  static constexpr std::string_view dtype_error() {
    if (!(std::is_same_v<typename X::value_type, float> ||
          std::is_same_v<typename X::value_type, double>))
      return "requires float32 or float64";
    if (!same_dtype<X, W, B>())
      return "operand dtypes differ";
    return {};
  }
  template <std::size_t RX, std::size_t RW, std::size_t RB>
  static constexpr rule_result<3> rule(const dims_t<RX>& x, const dims_t<RW>& w,
                                       const dims_t<RB>& b) {
    rule_result<3> r{detail::lstm_error(x, w, b), {}};
    if constexpr (RX == 3 && RW == 2) {
      r.dims = {x[0], x[1], w[1] == dyn ? dyn : w[1] / 4};
    }
    return r;
  }
};

/// The three gradients of lstm in one op, from (x, w, b, the forward output y, the upstream
/// gradient g): one vector of (E + U) 4 U + 4 U + B T E elements holding w's gradient, b's and
/// x's, in that order (w's and b's first: their offsets are static). It reads the gates and
/// cell states the forward pass kept beside y, or recomputes them where y does not carry them.
template <double ForgetBias>
struct lstm_grads : lstm<ForgetBias> {
  static constexpr std::string_view name = "lstm_grads";
  template <class X, class W, class B, class Y, class G>
  using value_type = typename X::value_type;
  template <class X, class W, class B, class Y, class G>
  static constexpr std::string_view dtype_error() {
    return lstm<ForgetBias>::template dtype_error<X, W, B>();
  }
  template <std::size_t RX, std::size_t RW, std::size_t RB, std::size_t RY, std::size_t RG>
  static constexpr rule_result<1> rule(const dims_t<RX>& x, const dims_t<RW>& w,
                                       const dims_t<RB>& b, const dims_t<RY>&,
                                       const dims_t<RG>& g) {
    rule_result<1> r{detail::lstm_error(x, w, b), {}};
    if constexpr (RX == 3 && RW == 2 && RG == 3) {
      if (r.ok()) {
        const std::int64_t units = w[1] / 4;
        if ((g[0] != x[0] && g[0] != dyn && x[0] != dyn) ||
            (g[1] != x[1] && g[1] != dyn && x[1] != dyn) || g[2] != units)
          r.error = "the upstream gradient is not [batch, steps, units]";
        r.dims[0] = x[0] == dyn || x[1] == dyn ? dyn : w[0] * w[1] + w[1] + x[0] * x[1] * x[2];
      }
    } else if constexpr (RG != 3) {
      r.error = "the upstream gradient is not [batch, steps, units]";
    }
    return r;
  }
};

} // namespace ops

/// lstm_layer<ForgetBias>(x, w, b): the lstm op (see ops::lstm) over x [B, T, E] with weights
/// w [E + U, 4 U] and biases b [4 U]; nn/recurrent.hpp's lstm<"name", Units>(x) makes the
/// variables and calls it.
template <double ForgetBias = 1.0, expression X, expression W, expression B>
consteval auto lstm_layer(X, W, B) {
  return make_node<ops::lstm<ForgetBias>, X, W, B>();
}

} // namespace typeflow
