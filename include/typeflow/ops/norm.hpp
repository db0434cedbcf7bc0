// Normalization ops: layer_norm over the last axis as one fused op (one pass over each row
// forward, one backward), with its gradients as two ops of their own: layer_norm_grad (the
// input's) and layer_norm_grad_gamma (the scale's); the shift's is a sum over the rows.
// Kernels: backend/cpu/kernels/norm.hpp and backend/cuda/norm.cuh.
#pragma once
#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>

#include "nn.hpp"

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

} // namespace ops

/// layer_norm(x, gamma, beta) over the last axis, eps = 1e-5 (torch's default; TF 1.x's
/// layer_norm used 1e-12, layer_norm<1e-12>(...)): one fused op forward and backward.
template <auto Eps = 1e-5, expression X, expression G, expression B>
consteval auto layer_norm(X, G, B) {
  return make_node<ops::layer_norm<detail::bits<Eps>>, X, G, B>();
}

} // namespace typeflow
