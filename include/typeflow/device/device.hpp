// Devices and placement policies.
//
// A device tag (`cpu<I>`, `gpu<I>`) names a device and prints in TensorFlow's form. A placement
// policy is any type with a member alias template `device<Node>` naming the device tag on which
// node type `Node` runs (the concept `placement_policy_for`): the seed's device function
// (variables on /cpu:0, compute on /gpu:i) is `variables_on<cpu<0>, compute_on<gpu<0>>>`.
// The compiler (compile/place.hpp) applies the policy, then `with_device<D>(e)` scopes, then soft
// placement (an op without a kernel on its device falls back to cpu<0>; `strict<Policy>` makes
// that a compile error), and puts a transfer on every edge that crosses devices.
#pragma once
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "../ops/elementwise.hpp"
#include "../ops/scope.hpp"

namespace typeflow {

/// The CPU device `/cpu:I`.
template <int I = 0>
struct cpu {
  static constexpr int index = I;
  static constexpr bool is_cpu = true;
  static constexpr std::string_view type = "CPU"; ///< TensorFlow's device type
  static std::string name() {
    return "/job:localhost/replica:0/task:0/device:CPU:" + std::to_string(I);
  }
};

/// The CUDA device `/gpu:I`.
template <int I = 0>
struct gpu {
  static constexpr int index = I;
  static constexpr bool is_cpu = false;
  static constexpr std::string_view type = "GPU"; ///< TensorFlow's device type
  static std::string name() {
    return "/job:localhost/replica:0/task:0/device:GPU:" + std::to_string(I);
  }
};

template <class D>
concept device_tag = requires {
  { D::index } -> std::convertible_to<int>;
  { D::is_cpu } -> std::convertible_to<bool>;
  { D::name() } -> std::convertible_to<std::string>;
};

/// A device as a constexpr value (what the plan's tables hold).
struct device_id {
  bool is_cpu = true;
  int index = 0;
  constexpr bool operator==(const device_id&) const = default;
  std::string name() const {
    return std::string("/job:localhost/replica:0/task:0/device:") + (is_cpu ? "CPU:" : "GPU:") +
           std::to_string(index);
  }
};
template <device_tag D>
inline constexpr device_id id_of = {D::is_cpu, D::index};
/// Whether two devices share one memory: every CPU of a process has the host's.
constexpr bool shares_memory(device_id a, device_id b) {
  return (a.is_cpu && b.is_cpu) || a == b;
}

/// The device tag of (is_cpu, index).
template <bool IsCpu, int Index>
using device_of = std::conditional_t<IsCpu, cpu<Index>, gpu<Index>>;

/// Placement policy: every node on device D.
template <device_tag D>
struct on {
  template <class Node>
  using device = D;
};

/// The compute part of variables_on: every node that is not a variable runs on D.
template <device_tag D>
struct compute_on {
  template <class Node>
  using device = D;
};

namespace detail {
template <class Node>
constexpr bool is_variable_node() {
  return op_traits<typename Node::op>::variable;
}
} // namespace detail

/// The seed's device function: variables on Dv, everything else where Compute puts it
/// (`variables_on<cpu<0>, compute_on<gpu<0>>>`). Assignments run where their variable is.
template <device_tag Dv, class Compute>
struct variables_on {
  template <class Node>
  using device = std::conditional_t<detail::is_variable_node<Node>(), Dv,
                                    typename Compute::template device<Node>>;
};

/// One entry of by_op: nodes of kind K run on D.
template <node_kind K, device_tag D>
struct kind_on {
  static constexpr node_kind kind = K;
  using device = D;
};

namespace detail {
template <class Node, class Default, class... Rules>
struct first_rule {
  using type = Default;
};
template <class Node, class Default, class R, class... Rules>
struct first_rule<Node, Default, R, Rules...> {
  using type = std::conditional_t<Node::op::kind == R::kind, typename R::device,
                                  typename first_rule<Node, Default, Rules...>::type>;
};
} // namespace detail

/// A map from op kinds to devices, the first matching rule winning, else Default:
/// `by_op<cpu<0>, kind_on<node_kind::matmul, gpu<0>>, kind_on<node_kind::nn, gpu<0>>>`.
template <device_tag Default, class... Rules>
struct by_op {
  template <class Node>
  using device = typename detail::first_rule<Node, Default, Rules...>::type;
};

/// Placement as Policy, but an op without a kernel on its device is a compile error instead of
/// falling back to the CPU (TensorFlow's allow_soft_placement=False).
template <class Policy>
struct strict {
  template <class Node>
  using device = typename Policy::template device<Node>;
  static constexpr bool soft = false;
};

/// A placement policy maps every node type to a device tag.
template <class P, class Node>
concept placement_policy_for = device_tag<typename P::template device<Node>>;

/// Whether the policy allows soft placement (the default, as the seed's session config).
template <class P>
constexpr bool soft_placement() {
  if constexpr (requires { P::soft; })
    return P::soft;
  else
    return true;
}

/// with_device<D>(e): the nodes of e's subgraph that are not leaves run on D, whatever the
/// placement policy says (TensorFlow's `with tf.device(...)` around their construction). Where
/// scopes nest, the innermost wins; a node reached from two scopes takes the first consumer's
/// in reverse topological order.
template <device_tag D, expression E>
consteval auto with_device(E) {
  return make_node<ops::device_scope<D>, E>();
}

} // namespace typeflow
