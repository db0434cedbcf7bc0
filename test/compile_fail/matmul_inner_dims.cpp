// expect: matmul: inner dimensions differ: \[\?,784\] x \[100,10\]
// matmul of [?,784] by [100,10]: the inner extents 784 and 100 differ.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 784>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto W = ty::variable<"W", float, ty::shape<100, 10>>;
#else
constexpr auto W = ty::variable<"W", float, ty::shape<784, 10>>;
#endif

int main() {
  [[maybe_unused]] constexpr auto y = ty::matmul(x, W);
}
