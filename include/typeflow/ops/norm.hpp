// Normalization ops: layer_norm over the last axis as one fused op (one pass over each row
// forward, one backward), with its gradients as two ops of their own: layer_norm_grad (the
// input's) and layer_norm_grad_gamma (the scale's); the shift's is a sum over the rows.
// batch_norm over every axis but the last (the channels of NHWC): the batch's moments as one op
// (one pass), the normalization as another (one pass), its gradient as a pass for the channels'
// sums and a pass for the input's gradient; the moving averages of the moments are assignments
// that every training step reading it runs (has_updates, TF's UPDATE_OPS).
// Kernels: backend/cpu/kernels/norm.hpp and backend/cuda/norm.cuh.
#pragma once
#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>

#include "layout.hpp"
#include "nn.hpp"
#include "state.hpp"

namespace typeflow {

namespace detail {
template <class... X>
constexpr std::string_view norm_dtype_error() {
  if (!((std::is_same_v<typename X::value_type, float> ||
         std::is_same_v<typename X::value_type, double>)&&...))
    return "requires float32 or float64";
  if (!same_dtype<X...>())
    return "operand dtypes differ";
  return {};
}
/// "" when v [D] matches the last extent of x (rank >= 1), else what is wrong.
template <std::size_t RX, std::size_t RV>
constexpr std::string_view norm_param_error(const dims_t<RX>& x, const dims_t<RV>& v) {
  if constexpr (RX == 0 || RV != 1) {
    return "x needs rank 1 or more and gamma, beta rank 1";
  } else {
    if (v[0] != x[RX - 1] && v[0] != dyn && x[RX - 1] != dyn)
      return "gamma and beta must have x's last extent";
    return {};
  }
}
/// Whether u and x have one rank and agree on every extent known in both.
template <std::size_t RU, std::size_t RX>
constexpr bool same_extents(const dims_t<RU>& u, const dims_t<RX>& x) {
  if constexpr (RU != RX) {
    return false;
  } else {
    for (std::size_t i = 0; i < RX; ++i)
      if (u[i] != x[i] && u[i] != dyn && x[i] != dyn)
        return false;
    return true;
  }
}
} // namespace detail

namespace ops {

/// layer_norm(x [..., D], gamma [D], beta [D]) = (x - mean) / sqrt(var + eps) * gamma + beta,
/// mean and the biased variance over the last axis of each row (torch.nn.LayerNorm,
/// tf.contrib.layers.layer_norm over the last axis).
template <std::uint64_t EpsBits>
struct layer_norm : nn_base {
  static constexpr std::string_view name = "layer_norm";
  static constexpr double eps = std::bit_cast<double>(EpsBits);
  static std::string attrs() { return "eps " + detail::format_number(eps); }
  template <class X, class G, class B>
  using value_type = typename X::value_type;
  template <class X, class G, class B>
  static constexpr std::string_view dtype_error() {
    return detail::norm_dtype_error<X, G, B>();
  }
  template <std::size_t RX, std::size_t RG, std::size_t RB>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RG>& g,
                                        const dims_t<RB>& b) {
    rule_result<RX> r{detail::norm_param_error(x, g), x};
    if (r.error.empty())
      r.error = detail::norm_param_error(x, b);
    return r;
  }
};

/// The input's gradient of layer_norm from (x, gamma, upstream g): with xhat the normalized row
/// and h = g * gamma, rstd * (h - mean(h) - xhat * mean(h * xhat)); the row's statistics are
/// recomputed, not stored.
template <std::uint64_t EpsBits>
struct layer_norm_grad : layer_norm<EpsBits> {
  static constexpr std::string_view name = "layer_norm_grad";
  template <std::size_t RX, std::size_t RG, std::size_t RU>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RG>& g,
                                        const dims_t<RU>& u) {
    rule_result<RX> r{detail::norm_param_error(x, g), x};
    if (r.error.empty() && !detail::same_extents(u, x))
      r.error = "the upstream gradient's shape differs from x's";
    return r;
  }
};

/// gamma's gradient of layer_norm from (x, upstream g): the sum over the rows of g * xhat, [D].
template <std::uint64_t EpsBits>
struct layer_norm_grad_gamma : nn_base {
  static constexpr std::string_view name = "layer_norm_grad_gamma";
  static constexpr double eps = std::bit_cast<double>(EpsBits);
  static std::string attrs() { return "eps " + detail::format_number(eps); }
  template <class X, class U>
  using value_type = typename X::value_type;
  template <class X, class U>
  static constexpr std::string_view dtype_error() {
    return detail::norm_dtype_error<X, U>();
  }
  template <std::size_t RX, std::size_t RU>
  static constexpr rule_result<1> rule(const dims_t<RX>& x, const dims_t<RU>& u) {
    rule_result<1> r;
    if constexpr (RX == 0) {
      r.error = "x needs rank 1 or more";
    } else {
      r.dims = {x[RX - 1]};
      if (!detail::same_extents(u, x))
        r.error = "the upstream gradient's shape differs from x's";
    }
    return r;
  }
};

/// batch_moments(x [..., C]) = [3, C]: over every axis but the last, each channel's mean, its
/// biased variance (what the normalization divides by) and its unbiased variance (what the
/// moving average keeps, as torch.nn.BatchNorm2d and tf.nn.fused_batch_norm do). Computed in
/// double from sums shifted by the first row, in one pass; more than one row is required (a run
/// with one throws a typeflow::error). No gradient of its own: batch_norm's accounts for it.
struct batch_moments : nn_base {
  static constexpr std::string_view name = "batch_moments";
  template <class X>
  using value_type = typename X::value_type;
  template <class X>
  static constexpr std::string_view dtype_error() {
    return detail::norm_dtype_error<X>();
  }
  template <std::size_t RX>
  static constexpr rule_result<2> rule(const dims_t<RX>& x) {
    rule_result<2> r;
    if constexpr (RX < 2)
      r.error = "x needs rank 2 or more ([rows..., channels])";
    else
      r.dims = {3, x[RX - 1]};
    return r;
  }
};

} // namespace ops

namespace detail {
/// "" when m is [3, C] and every v is [C], with C x's last extent, else what is wrong.
template <std::size_t RX, std::size_t RM, std::size_t... RV>
constexpr std::string_view batch_norm_error(const dims_t<RX>& x, const dims_t<RM>& m,
                                            const dims_t<RV>&... v) {
  if constexpr (RX < 2 || RM != 2) {
    return "x needs rank 2 or more and the moments rank 2";
  } else {
    const std::int64_t c = x[RX - 1];
    if ((m[0] != 3 && m[0] != dyn) || (m[1] != c && m[1] != dyn && c != dyn))
      return "the moments must be [3, channels]";
    std::string_view e;
    ((e = e.empty() ? norm_param_error(x, v) : e), ...);
    return e.empty() ? e : "gamma, beta and the moving averages must be [channels]";
  }
}
/// Row K of a [R, C] value, as [C].
template <std::int64_t K, class M>
consteval auto take_row(M m) {
  return typeflow::reshape<-1>(typeflow::slice<ints<K, 0>, ints<1, -1>>(m));
}
} // namespace detail

namespace ops {

/// batch_norm(x [..., C], moments [3, C], gamma [C], beta [C], moving_mean [C],
/// moving_variance [C]) = (x - mean) / sqrt(var + eps) * gamma + beta, with the batch's
/// mean and biased variance from moments = batch_moments(x) (training mode; inference mode is
/// elementwise arithmetic on the moving averages, nn/layers.hpp). The moving averages are
/// operands only so that the training step finds them: updates() assigns them
/// decay * average + (1 - decay) * the batch's (the unbiased variance, as PyTorch and TF).
template <std::uint64_t EpsBits, std::uint64_t DecayBits>
struct batch_norm : nn_base {
  static constexpr std::string_view name = "batch_norm";
  static constexpr double eps = std::bit_cast<double>(EpsBits);
  static constexpr double decay = std::bit_cast<double>(DecayBits);
  static constexpr unsigned shape_only = 0x30; ///< the moving averages: not read
  static constexpr bool has_updates = true;
  /// Its gradient reads x and the moments exactly: moments rounded to 16 bits (mixed_precision's
  /// saved copies) would not be the ones the forward pass divided by.
  static constexpr bool keeps_float32 = true;
  static std::string attrs() {
    return "eps " + detail::format_number(eps) + ", decay " + detail::format_number(decay);
  }
  template <class... X>
  using value_type = typename pack_element_t<0, pack<X...>>::value_type;
  template <class... X>
  static constexpr std::string_view dtype_error() {
    return detail::norm_dtype_error<X...>();
  }
  template <std::size_t RX, std::size_t RM, std::size_t... RV>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RM>& m,
                                        const dims_t<RV>&... v) {
    rule_result<RX> r{{}, x};
    if constexpr (sizeof...(RV) != 4)
      r.error = "takes x, moments, gamma, beta, moving_mean and moving_variance";
    else
      r.error = detail::batch_norm_error(x, m, v...);
    return r;
  }
  /// The moving averages' assignments, run by every training step whose loss reads this node,
  /// from the towers' batch-weighted mean of the moments (replica_mean: the identity outside a
  /// replicated session; in one, the update runs once, after the all-reduce, as the optimizer's).
  template <class X, class M, class G, class B, class MM, class MV>
  static consteval auto updates(X, M m, G, B, MM, MV) {
    using D = expr<literal<detail::bits<decay>>>;
    const auto all = typeflow::replica_mean(m);
    return typeflow::group(make_node<moving_average, MM, decltype(detail::take_row<0>(all)), D>(),
                           make_node<moving_average, MV, decltype(detail::take_row<2>(all)), D>());
  }
};

/// batch_norm's channel sums for its gradients, from (x, moments, upstream g): [2, C], row 0
/// the sum of g (beta's gradient), row 1 the sum of g * xhat (gamma's), in double, one pass.
template <std::uint64_t EpsBits>
struct batch_norm_grad_stats : nn_base {
  static constexpr std::string_view name = "batch_norm_grad_stats";
  static constexpr double eps = std::bit_cast<double>(EpsBits);
  static std::string attrs() { return "eps " + detail::format_number(eps); }
  template <class X, class M, class U>
  using value_type = typename X::value_type;
  template <class X, class M, class U>
  static constexpr std::string_view dtype_error() {
    return detail::norm_dtype_error<X, M, U>();
  }
  template <std::size_t RX, std::size_t RM, std::size_t RU>
  static constexpr rule_result<2> rule(const dims_t<RX>& x, const dims_t<RM>& m,
                                       const dims_t<RU>& u) {
    rule_result<2> r{detail::batch_norm_error(x, m), {}};
    if constexpr (RX >= 2)
      r.dims = {2, x[RX - 1]};
    if (r.error.empty() && !detail::same_extents(u, x))
      r.error = "the upstream gradient's shape differs from x's";
    return r;
  }
};

/// batch_norm's input gradient from (x, moments, gamma, upstream g, stats =
/// batch_norm_grad_stats): gamma rstd (g - sum(g) / n - xhat sum(g xhat) / n), the batch's
/// statistics' own dependence on x included.
template <std::uint64_t EpsBits>
struct batch_norm_grad : nn_base {
  static constexpr std::string_view name = "batch_norm_grad";
  static constexpr double eps = std::bit_cast<double>(EpsBits);
  static std::string attrs() { return "eps " + detail::format_number(eps); }
  template <class X, class M, class G, class U, class S>
  using value_type = typename X::value_type;
  template <class X, class M, class G, class U, class S>
  static constexpr std::string_view dtype_error() {
    return detail::norm_dtype_error<X, M, G, U, S>();
  }
  template <std::size_t RX, std::size_t RM, std::size_t RG, std::size_t RU, std::size_t RS>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RM>& m,
                                        const dims_t<RG>& g, const dims_t<RU>& u,
                                        const dims_t<RS>& s) {
    rule_result<RX> r{detail::batch_norm_error(x, m, g), x};
    if (r.error.empty() && !detail::same_extents(u, x))
      r.error = "the upstream gradient's shape differs from x's";
    if constexpr (RS != 2)
      r.error = "the channel sums must be [2, channels]";
    else if (s[0] != 2 && s[0] != dyn)
      r.error = "the channel sums must be [2, channels]";
    return r;
  }
};

} // namespace ops

/// layer_norm(x, gamma, beta) over the last axis, eps = 1e-5 (torch's default; TF 1.x's
/// layer_norm used 1e-12, layer_norm<1e-12>(...)): one fused op forward and backward.
template <auto Eps = 1e-5, expression X, expression G, expression B>
consteval auto layer_norm(X, G, B) {
  return make_node<ops::layer_norm<detail::bits<Eps>>, X, G, B>();
}

/// batch_moments(x): [3, C], each channel's mean, biased and unbiased variance over every axis
/// of x but the last (see ops::batch_moments).
template <expression X>
consteval auto batch_moments(X) {
  return make_node<ops::batch_moments, X>();
}

/// batch_norm<eps, decay>(x, gamma, beta, moving_mean, moving_variance) in training mode: x
/// normalized by its batch's moments over every axis but the last, scaled and shifted; every
/// training step that reads it also updates the moving averages (decay 0.9: PyTorch's momentum
/// 0.1; TF's layers used 0.99 and eps 1e-3). nn/layers.hpp's batch_norm_layer makes the variables
/// and the inference mode.
template <auto Eps = 1e-5, auto Decay = 0.9, expression X, expression G, expression B,
          expression MM, expression MV>
consteval auto batch_norm(X, G, B, MM, MV) {
  using M = decltype(make_node<ops::batch_moments, X>());
  return make_node<ops::batch_norm<detail::bits<Eps>, detail::bits<Decay>>, X, M, G, B, MM, MV>();
}

} // namespace typeflow
