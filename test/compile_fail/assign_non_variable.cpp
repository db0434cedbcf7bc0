// expect: assign: the target must be a variable: float32, float32
// assign's target is a placeholder, not a variable.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<3>>;
constexpr auto v = ty::variable<"v", float, ty::shape<3>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::assign(x, v);
#else
  [[maybe_unused]] constexpr auto y = ty::assign(v, x);
#endif
}
