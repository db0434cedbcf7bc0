// expect: max_pool: window larger than the input with VALID padding: \[\?,2,2,8\] \(VALID
// A 3x3 VALID window does not fit a 2x2 input.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 2, 2, 8>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::max_pool<ty::padding::valid, 3, 3, 1, 1>(x);
#else
  [[maybe_unused]] constexpr auto y = ty::max_pool<ty::padding::same, 3, 3, 1, 1>(x);
#endif
}
