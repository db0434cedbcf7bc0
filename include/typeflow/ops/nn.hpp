// Neural-network ops in TensorFlow's layouts: conv2d (NHWC input, HWIO filter), max/avg pooling,
// bias_add, softmax, log_softmax and logsumexp over any axis, the fused sparse softmax
// cross-entropy, l2_loss and dropout.
//
// Window geometry follows TensorFlow exactly: with SAME padding out = ceil(in / stride) and the
// padding total = max((out - 1) * stride + (k - 1) * dilation + 1 - in, 0), of which the smaller
// half goes before; with VALID padding out = ceil((in - (k - 1) * dilation) / stride).
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "elementwise.hpp"
#include "layout.hpp"
#include "reduce.hpp"

namespace typeflow {

enum class padding { same, valid };

namespace detail {

struct window_geometry {
  std::int64_t out = 0, pad_before = 0;
  bool ok = true;
};

/// One spatial axis of a window op; `dyn` in, `dyn` out.
constexpr window_geometry window_axis(std::int64_t in, std::int64_t k, std::int64_t stride,
                                      std::int64_t dilation, padding p) {
  window_geometry g;
  if (in == dyn) {
    g.out = dyn;
    return g;
  }
  const std::int64_t ek = (k - 1) * dilation + 1;
  if (p == padding::valid) {
    if (in < ek) {
      g.ok = false;
      return g;
    }
    g.out = (in - ek) / stride + 1;
  } else {
    g.out = (in + stride - 1) / stride;
    const std::int64_t total = (g.out - 1) * stride + ek - in;
    g.pad_before = total > 0 ? total / 2 : 0;
  }
  return g;
}

constexpr std::string_view padding_name(padding p) {
  return p == padding::same ? "SAME" : "VALID";
}

/// A window's attributes as text ("same, strides 2,2"): one function for every window op.
inline std::string window_text(std::string_view padding, std::string_view label,
                               const std::int64_t* values, std::size_t n) {
  std::string s = std::string(padding) + ", " + std::string(label) + " ";
  for (std::size_t k = 0; k < n; ++k) {
    if (k > 0)
      s += ',';
    s += std::to_string(values[k]);
  }
  return s;
}

template <padding P, std::int64_t... V>
struct window_attrs {
  static constexpr void message(msg_buf& b, std::string_view label) {
    b << std::string_view(" (") << padding_name(P) << std::string_view(", ") << label
      << std::string_view(" ");
    bool first = true;
    ((b << std::string_view(first ? "" : ",") << V, first = false), ...);
    b << std::string_view(")");
  }
  static std::string text(std::string_view label) {
    static constexpr std::int64_t values[] = {V...};
    return window_text(padding_name(P), label, values, sizeof...(V));
  }
};

template <class X>
constexpr bool floating_operand = is_floating<typename X::value_type>;

/// Indices and labels: int32 or int64.
template <class X>
constexpr bool index_operand = std::is_same_v<typename X::value_type, std::int32_t> ||
                               std::is_same_v<typename X::value_type, std::int64_t>;

} // namespace detail

namespace ops {

/// Region boundary ops with kernels of their own.
struct nn_base {
  static constexpr node_kind kind = node_kind::nn;
};

/// conv2d: x [N, H, W, C] (NHWC) with filter w [KH, KW, C, O] (HWIO) gives [N, OH, OW, O].
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct conv2d : nn_base {
  static_assert(SH >= 1 && SW >= 1 && DH >= 1 && DW >= 1,
                "conv2d: strides and dilations must be at least 1");
  static constexpr std::string_view name = "conv2d";
  static constexpr epilogue_role epilogue = epilogue_role::producer;
  static constexpr bool follows_precision = true; // graph/node.hpp; its gradients too
  static constexpr padding pad = P;
  static constexpr std::int64_t sh = SH, sw = SW, dh = DH, dw = DW;
  template <class X, class W>
  using value_type = typename X::value_type;
  template <class X, class W>
  static constexpr std::string_view dtype_error() {
    if (!std::is_same_v<typename X::value_type, typename W::value_type>)
      return "input and filter dtypes differ";
    if (!detail::floating_operand<X>)
      return "requires a floating-point dtype";
    return {};
  }
  template <std::size_t RX, std::size_t RW>
  static constexpr rule_result<4> rule(const dims_t<RX>& x, const dims_t<RW>& w) {
    rule_result<4> r;
    if constexpr (RX != 4 || RW != 4) {
      r.error = "input must be [N, H, W, C] and filter [KH, KW, C, O]";
      return r;
    } else {
      if (x[3] != w[2] && x[3] != dyn && w[2] != dyn) {
        r.error = "input channels differ from the filter's";
        return r;
      }
      const auto gh = detail::window_axis(x[1], w[0], SH, DH, P);
      const auto gw = detail::window_axis(x[2], w[1], SW, DW, P);
      if (!gh.ok || !gw.ok) {
        r.error = "filter larger than the input with VALID padding";
        return r;
      }
      r.dims = {x[0], gh.out, gw.out, w[3]};
      return r;
    }
  }
  static constexpr void attrs_message(detail::msg_buf& b) {
    detail::window_attrs<P, SH, SW, DH, DW>::message(b, "strides,dilations");
  }
  static std::string attrs() {
    return detail::window_attrs<P, SH, SW, DH, DW>::text("strides,dilations");
  }
};

/// The gradient of conv2d with respect to its input: (dy, w, x) -> shaped as x.
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct conv2d_backprop_input : conv2d<P, SH, SW, DH, DW> {
  static constexpr std::string_view name = "conv2d_backprop_input";
  static constexpr unsigned shape_only = 1u << 2; // x: graph/node.hpp
  template <class G, class W, class X>
  using value_type = typename G::value_type;
  template <class G, class W, class X>
  static constexpr std::string_view dtype_error() {
    return {};
  }
  template <std::size_t RG, std::size_t RW, std::size_t RX>
  static constexpr rule_result<RX> rule(const dims_t<RG>&, const dims_t<RW>&, const dims_t<RX>& x) {
    return {{}, x};
  }
};

/// The gradient of conv2d with respect to its filter: (x, dy, w) -> shaped as w.
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct conv2d_backprop_filter : conv2d<P, SH, SW, DH, DW> {
  static constexpr std::string_view name = "conv2d_backprop_filter";
  template <class X, class G, class W>
  using value_type = typename G::value_type;
  template <class X, class G, class W>
  static constexpr std::string_view dtype_error() {
    return {};
  }
  template <std::size_t RX, std::size_t RG, std::size_t RW>
  static constexpr rule_result<RW> rule(const dims_t<RX>&, const dims_t<RG>&, const dims_t<RW>& w) {
    return {{}, w};
  }
};

enum class pool_kind { max, avg };

/// Pooling over [N, H, W, C] with a KH x KW window. Padded positions never win a max and are
/// not counted in an average (TensorFlow's convention).
template <pool_kind K, padding P, std::int64_t KH, std::int64_t KW, std::int64_t SH,
          std::int64_t SW>
struct pool : nn_base {
  static_assert(KH >= 1 && KW >= 1 && SH >= 1 && SW >= 1,
                "pool: window and strides must be at least 1");
  static constexpr std::string_view name = K == pool_kind::max ? "max_pool" : "avg_pool";
  static constexpr pool_kind reduction = K;
  static constexpr padding pad = P;
  static constexpr std::int64_t kh = KH, kw = KW, sh = SH, sw = SW;
  template <class X>
  using value_type = typename X::value_type;
  template <class X>
  static constexpr std::string_view dtype_error() {
    return detail::floating_operand<X> ? std::string_view{}
                                       : std::string_view{"requires a floating-point dtype"};
  }
  template <std::size_t RX>
  static constexpr rule_result<4> rule(const dims_t<RX>& x) {
    rule_result<4> r;
    if constexpr (RX != 4) {
      r.error = "input must be [N, H, W, C]";
      return r;
    } else {
      const auto gh = detail::window_axis(x[1], KH, SH, 1, P);
      const auto gw = detail::window_axis(x[2], KW, SW, 1, P);
      if (!gh.ok || !gw.ok) {
        r.error = "window larger than the input with VALID padding";
        return r;
      }
      r.dims = {x[0], gh.out, gw.out, x[3]};
      return r;
    }
  }
  static constexpr void attrs_message(detail::msg_buf& b) {
    detail::window_attrs<P, KH, KW, SH, SW>::message(b, "window,strides");
  }
  static std::string attrs() {
    return detail::window_attrs<P, KH, KW, SH, SW>::text("window,strides");
  }
};

/// The gradient of a pool: (x, dy) -> shaped as x, of dy's dtype. Max pooling routes each
/// output's gradient to the first maximum of its window (row-major window order), as
/// TensorFlow's MaxPoolGrad does; x may be a float32 gradient's 16-bit saved copy (autodiff's
/// saved_in<H>), whose values it compares widened. Average pooling reads only x's shape.
template <pool_kind K, padding P, std::int64_t KH, std::int64_t KW, std::int64_t SH,
          std::int64_t SW>
struct pool_grad : pool<K, P, KH, KW, SH, SW> {
  static constexpr std::string_view name = K == pool_kind::max ? "max_pool_grad" : "avg_pool_grad";
  static constexpr bool writes_in_pieces = true; // one image at a time (graph/node.hpp)
  static constexpr bool takes_half = true;       // x (graph/node.hpp)
  static constexpr unsigned shape_only = K == pool_kind::avg ? 1u : 0u;
  template <class X, class G>
  using value_type = typename G::value_type;
  template <class X, class G>
  static constexpr std::string_view dtype_error() {
    using TX = typename X::value_type;
    using TG = typename G::value_type;
    if (is_half<TG> || (std::is_same_v<TX, TG> ? !detail::floating_operand<G>
                                               : !(is_half<TX> && std::is_same_v<TG, float>)))
      return "x and dy need one floating-point dtype (or x bfloat16 or float16, dy float32)";
    return {};
  }
  template <std::size_t RX, std::size_t RG>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RG>&) {
    return {{}, x};
  }
};

/// The fused, numerically stable softmax cross-entropy of logits [N, K] against integer labels
/// [N] in [0, K): loss[n] = logsumexp(logits[n]) - logits[n, labels[n]].
struct sparse_softmax_xent : nn_base {
  static constexpr std::string_view name = "sparse_softmax_cross_entropy_with_logits";
  static constexpr bool keeps_float32 = true; // its gradient reads the logits exactly (grad.hpp)
  template <class L, class Y>
  using value_type = typename L::value_type;
  template <class L, class Y>
  static constexpr std::string_view dtype_error() {
    if (!detail::floating_operand<L>)
      return "logits need a floating-point dtype";
    if (!detail::index_operand<Y>)
      return "labels need dtype int32 or int64";
    return {};
  }
  template <std::size_t RL, std::size_t RY>
  static constexpr rule_result<1> rule(const dims_t<RL>& l, const dims_t<RY>& y) {
    rule_result<1> r;
    if constexpr (RL != 2 || RY != 1) {
      r.error = "logits must be [N, K] and labels [N]";
      return r;
    } else {
      if (l[0] != y[0] && l[0] != dyn && y[0] != dyn)
        r.error = "logits and labels disagree on the batch extent";
      r.dims = {l[0] == dyn ? y[0] : l[0]};
      return r;
    }
  }
};

/// softmax(logits) - onehot(labels): the gradient of sparse_softmax_xent per unit upstream.
struct sparse_softmax_xent_grad : sparse_softmax_xent {
  static constexpr std::string_view name = "sparse_softmax_cross_entropy_grad";
  template <std::size_t RL, std::size_t RY>
  static constexpr rule_result<RL> rule(const dims_t<RL>& l, const dims_t<RY>& y) {
    return {sparse_softmax_xent::rule(l, y).error, l};
  }
};

/// A dropout mask shaped as x: each element is 1/keep_prob with probability keep_prob, else 0.
/// Drawn afresh on every run from (Seed, the session's run count, the element's index).
template <std::uint64_t Seed>
struct dropout_mask : nn_base {
  static constexpr std::string_view name = "dropout_mask";
  static constexpr std::uint64_t seed = Seed;
  static constexpr bool draws = true; // a new mask each run (graph/op_traits.hpp)
  template <class X, class Keep>
  using value_type = typename X::value_type;
  template <class X, class Keep>
  static constexpr std::string_view dtype_error() {
    if (!detail::floating_operand<X>)
      return "requires a floating-point dtype";
    if (!std::is_same_v<typename X::value_type, typename Keep::value_type> &&
        !detail::weak_t<Keep>::value)
      return "keep_prob must have the input's dtype";
    return {};
  }
  template <std::size_t RX, std::size_t RK>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RK>&) {
    rule_result<RX> r{{}, x};
    if (RK != 0)
      r.error = "keep_prob must be a scalar";
    return r;
  }
};

/// bias_add(x, b): b [C] added along x's last axis (C).
struct bias_add : arith_base {
  static constexpr std::string_view name = "bias_add";
  static constexpr epilogue_role epilogue = epilogue_role::bias;
  template <std::size_t RX, std::size_t RB>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RB>& b) {
    rule_result<RX> r{{}, x};
    if constexpr (RB != 1 || RX < 1)
      r.error = "bias must be [C] and the input [..., C]";
    else if (x[RX - 1] != b[0] && x[RX - 1] != dyn && b[0] != dyn)
      r.error = "bias length differs from the input's last extent";
    return r;
  }
  template <class C, class A, class B>
  TYPEFLOW_HD static C eval(A a, B b) {
    return static_cast<C>(static_cast<C>(a) + static_cast<C>(b));
  }
};

} // namespace ops

/// conv2d<padding, stride_h, stride_w, dilation_h, dilation_w>(x, w): NHWC x HWIO -> NHWC.
template <padding P, std::int64_t SH = 1, std::int64_t SW = SH, std::int64_t DH = 1,
          std::int64_t DW = DH, expression X, expression W>
consteval auto conv2d(X, W) {
  return make_node<ops::conv2d<P, SH, SW, DH, DW>, X, W>();
}

template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW,
          expression G, expression W, expression X>
consteval auto conv2d_backprop_input(G, W, X) {
  return make_node<ops::conv2d_backprop_input<P, SH, SW, DH, DW>, G, W, shape_source_t<X>>();
}
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW,
          expression X, expression G, expression W>
consteval auto conv2d_backprop_filter(X, G, W) {
  return make_node<ops::conv2d_backprop_filter<P, SH, SW, DH, DW>, X, G, W>();
}

/// max_pool<padding, window_h, window_w, stride_h, stride_w>(x) over [N, H, W, C].
template <padding P, std::int64_t KH, std::int64_t KW = KH, std::int64_t SH = KH,
          std::int64_t SW = KW, expression X>
consteval auto max_pool(X) {
  return make_node<ops::pool<ops::pool_kind::max, P, KH, KW, SH, SW>, X>();
}
/// avg_pool<padding, window_h, window_w, stride_h, stride_w>(x) over [N, H, W, C].
template <padding P, std::int64_t KH, std::int64_t KW = KH, std::int64_t SH = KH,
          std::int64_t SW = KW, expression X>
consteval auto avg_pool(X) {
  return make_node<ops::pool<ops::pool_kind::avg, P, KH, KW, SH, SW>, X>();
}

/// bias_add(x, b): adds b [C] along the last axis of x [..., C].
template <expression X, expression B>
consteval auto bias_add(X, B) {
  return make_node<ops::bias_add, X, B>();
}

/// sparse_softmax_cross_entropy_with_logits(logits [N, K], labels [N]) -> [N].
template <expression L, expression Y>
consteval auto sparse_softmax_cross_entropy_with_logits(L, Y) {
  return make_node<ops::sparse_softmax_xent, L, Y>();
}

/// log_softmax<axis = -1>(x): x - max - log(sum(exp(x - max))) along one axis (negative from
/// the end), stable for large logits.
template <std::int64_t Axis = -1, expression X>
consteval auto log_softmax(X x) {
  auto shifted = x - stop_gradient(typeflow::max<Axis>(x, keepdims));
  return shifted - typeflow::log(typeflow::sum<Axis>(typeflow::exp(shifted), keepdims));
}

/// softmax<axis = -1>(x) along one axis (negative from the end).
template <std::int64_t Axis = -1, expression X>
consteval auto softmax(X x) {
  auto e = typeflow::exp(x - stop_gradient(typeflow::max<Axis>(x, keepdims)));
  return e / typeflow::sum<Axis>(e, keepdims);
}

/// logsumexp<axis = -1>(x[, keepdims]): log(sum(exp(x))) along one axis, shifted by the
/// maximum so that large values neither overflow nor lose precision (tf.reduce_logsumexp,
/// torch.logsumexp). Its gradient is softmax<axis>(x) times the upstream gradient.
template <std::int64_t Axis = -1, expression X>
consteval auto logsumexp(X x, keepdims_t) {
  auto m = stop_gradient(typeflow::max<Axis>(x, keepdims));
  return typeflow::log(typeflow::sum<Axis>(typeflow::exp(x - m), keepdims)) + m;
}
template <std::int64_t Axis = -1, expression X>
consteval auto logsumexp(X x) {
  auto m = stop_gradient(typeflow::max<Axis>(x, keepdims));
  auto l = typeflow::log(typeflow::sum<Axis>(typeflow::exp(x - m)));
  return l + typeflow::reshape_like(m, l); // the one maximum, its kept axis dropped
}

/// l2_loss(x) = sum(x^2) / 2, as TensorFlow's.
template <expression X>
consteval auto l2_loss(X x) {
  return typeflow::sum(typeflow::square(x)) * constant<0.5>;
}

/// dropout<seed>(x, keep_prob): keeps each element with probability keep_prob, scaled by
/// 1/keep_prob; keep_prob is a scalar expression (feed or variable), so feeding 1 turns it off
/// at inference. The mask is drawn afresh on every run from (seed, run count, element index):
/// give each dropout layer its own seed, or two layers of one shape drop the same elements.
template <std::uint64_t Seed, expression X, expression Keep>
consteval auto dropout(X x, Keep) {
  return x * make_node<ops::dropout_mask<Seed>, X, Keep>();
}

} // namespace typeflow
