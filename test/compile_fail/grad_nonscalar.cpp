// expect: grad: y is not a scalar: \[3\]; pass its upstream gradient: grad\(y, x\.\.\., seed\)
// A vector-Jacobian product needs the upstream gradient of a non-scalar y.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", double, ty::shape<3>>;
constexpr auto y = ty::sin(x);

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto g = ty::grad(y, x);
#else
  [[maybe_unused]] constexpr auto g = ty::grad(y, x, ty::seed(ty::cos(x)));
#endif
}
