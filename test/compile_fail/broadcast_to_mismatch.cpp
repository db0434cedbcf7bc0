// expect: broadcast_to: shape cannot be broadcast: \[3\] to \[4,2\]
// broadcast_to<[4,2]> of a [3] tensor.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto v = ty::placeholder<"v", float, ty::shape<3>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::broadcast_to<ty::shape<4, 2>>(v);
#else
  [[maybe_unused]] constexpr auto y = ty::broadcast_to<ty::shape<4, 3>>(v);
#endif
}
