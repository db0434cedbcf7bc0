// expect: assign_add: value shape does not match the variable: \[3,2\] x \[2,3\]
// assign_add of a [2,3] delta to a [3,2] variable.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto W = ty::variable<"W", float, ty::shape<3, 2>>;
constexpr auto d = ty::placeholder<"d", float, ty::shape<2, 3>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::assign_add(W, d);
#else
  [[maybe_unused]] constexpr auto y = ty::assign_add(W, ty::transpose(d));
#endif
}
