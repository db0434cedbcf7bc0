// Device tags and placement policies. A placement policy is any type with a member alias template
// `device<Node>` naming the device tag on which `Node` runs. The core provides `on<D>`; the devices
// issue adds GPU tags' backends and richer policies on this same interface.
#pragma once
#include <concepts>
#include <string>

namespace typeflow {

/// The CPU device `/cpu:I`.
template <int I = 0>
struct cpu {
  static constexpr int index = I;
  static constexpr bool is_cpu = true;
  static std::string name() {
    return "/job:localhost/replica:0/task:0/device:CPU:" + std::to_string(I);
  }
};

/// The CUDA device `/gpu:I` (its backend arrives with the devices issue).
template <int I = 0>
struct gpu {
  static constexpr int index = I;
  static constexpr bool is_cpu = false;
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

/// Placement policy: every node on device D.
template <device_tag D>
struct on {
  template <class Node>
  using device = D;
};

/// A placement policy maps every node type to a device tag.
template <class P, class Node>
concept placement_policy_for = device_tag<typename P::template device<Node>>;

} // namespace typeflow
