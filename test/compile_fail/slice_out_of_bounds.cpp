// expect: slice: slice out of bounds: \[3,4\] \(begin 1 0, size 3 -1\)
// rows 1..3 of a 3-row tensor: one past the end.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<3, 4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::slice<ty::ints<1, 0>, ty::ints<3, -1>>(x);
#else
  [[maybe_unused]] constexpr auto y = ty::slice<ty::ints<1, 0>, ty::ints<2, -1>>(x);
#endif
}
