// Ops that read by integer index: gather (an embedding lookup) with its gradient, a scatter-add,
// and one_hot. Their kernels are backend/cpu/kernels/index.hpp and backend/cuda/index.cuh.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "nn.hpp"

namespace typeflow {

namespace detail {
template <class X>
constexpr bool index_operand = std::is_same_v<typename X::value_type, std::int32_t> ||
                               std::is_same_v<typename X::value_type, std::int64_t>;
} // namespace detail

namespace ops {

/// gather(params [V, D...], indices [I...]) -> [I..., D...]: row indices[i] of params for each
/// index (TensorFlow's tf.gather at axis 0, tf.nn.embedding_lookup). An index outside [0, V)
/// is a run-time error naming it, its position and V.
struct gather : nn_base {
  static constexpr std::string_view name = "gather";
  template <class P, class Ix>
  using value_type = typename P::value_type;
  template <class P, class Ix>
  static constexpr std::string_view dtype_error() {
    if (!detail::index_operand<Ix>)
      return "indices need dtype int32 or int64";
    return {};
  }
  template <std::size_t RP, std::size_t RI>
  static constexpr rule_result<(RP == 0 ? RI : RI + RP - 1)> rule(const dims_t<RP>& p,
                                                                  const dims_t<RI>& ix) {
    rule_result<(RP == 0 ? RI : RI + RP - 1)> r;
    if constexpr (RP == 0) {
      r.error = "params must have rank >= 1";
    } else {
      for (std::size_t k = 0; k < RI; ++k)
        r.dims[k] = ix[k];
      for (std::size_t k = 1; k < RP; ++k)
        r.dims[RI + k - 1] = p[k];
    }
    return r;
  }
};

/// gather's gradient with respect to params: zeros shaped as params (operand 0, read for its
/// dims only) with each row g[i...] added into row indices[i...]; repeated indices add up.
struct gather_grad : nn_base {
  static constexpr std::string_view name = "gather_grad";
  static constexpr unsigned shape_only = 1u; // params: graph/node.hpp
  template <class P, class Ix, class G>
  using value_type = typename G::value_type;
  template <class P, class Ix, class G>
  static constexpr std::string_view dtype_error() {
    if (!detail::index_operand<Ix>)
      return "indices need dtype int32 or int64";
    if (!detail::floating_operand<G>)
      return "the gradient needs a floating-point dtype";
    return {};
  }
  template <std::size_t RP, std::size_t RI, std::size_t RG>
  static constexpr rule_result<RP> rule(const dims_t<RP>& p, const dims_t<RI>& ix,
                                        const dims_t<RG>& g) {
    rule_result<RP> r{{}, p};
    if (RP == 0 || RG + 1 != RI + RP) {
      r.error = "the gradient's rank is not indices' rank + params' rank - 1";
      return r;
    }
    const auto differ = [](std::int64_t a, std::int64_t b) {
      return a != b && a != dyn && b != dyn;
    };
    for (std::size_t k = 0; k < RI; ++k)
      if (differ(g[k], ix[k]))
        r.error = "the gradient's leading extents differ from the indices'";
    for (std::size_t k = 1; k < RP; ++k)
      if (differ(g[RI + k - 1], p[k]))
        r.error = "the gradient's row extents differ from params'";
    return r;
  }
};

/// one_hot<Depth, T>(indices [I...]) -> [I..., Depth] of dtype T: 1 where the last coordinate
/// equals the index, else 0. An index outside [0, Depth) gives a row of zeros, as TensorFlow's
/// tf.one_hot does (-1 marks padding).
template <std::int64_t Depth, dtype T>
struct one_hot : nn_base {
  static_assert(Depth >= 1, "one_hot: the depth must be at least 1");
  static constexpr std::string_view name = "one_hot";
  static constexpr std::int64_t depth = Depth;
  static std::string attrs() { return "depth " + std::to_string(Depth); }
  template <class Ix>
  using value_type = T;
  template <class Ix>
  static constexpr std::string_view dtype_error() {
    if (!detail::index_operand<Ix>)
      return "indices need dtype int32 or int64";
    return {};
  }
  template <std::size_t RI>
  static constexpr rule_result<RI + 1> rule(const dims_t<RI>& ix) {
    rule_result<RI + 1> r;
    for (std::size_t k = 0; k < RI; ++k)
      r.dims[k] = ix[k];
    r.dims[RI] = Depth;
    return r;
  }
};

} // namespace ops

/// gather(params, indices): rows of params [V, D...] picked by integer indices [I...], giving
/// [I..., D...]. Its gradient with respect to params is a scatter-add (repeated indices add up);
/// indices have none.
template <expression P, expression Ix>
consteval auto gather(P, Ix) {
  return make_node<ops::gather, P, Ix>();
}

/// one_hot<depth>(indices) (float) or one_hot<depth, T>(indices): [I...] -> [I..., depth].
template <std::int64_t Depth, dtype T = float, expression Ix>
consteval auto one_hot(Ix) {
  return make_node<ops::one_hot<Depth, T>, Ix>();
}

} // namespace typeflow
