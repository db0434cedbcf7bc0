// with_device scopes as an op: `with_device<D>(e)` (device/device.hpp) wraps e in a node of
// ops::device_scope<D>, an identity whose device the placement pass reads (compile/place.hpp) and
// whose gradient passes through.
#pragma once
#include <string>
#include <string_view>

#include "elementwise.hpp"
#include "fold.hpp"

namespace typeflow {
namespace ops {
/// with_device<D>(e): e, whose non-leaf nodes run on D (a scoped override of the policy). D is a
/// device tag (device/device.hpp).
template <class D>
struct device_scope : identity_base {
  static constexpr std::string_view name = "with_device";
  using device = D;
  static std::string attrs() { return D::name(); }
};
} // namespace ops

template <class D>
struct grad_rule<ops::device_scope<D>> : pass_through_gradient {};

} // namespace typeflow
