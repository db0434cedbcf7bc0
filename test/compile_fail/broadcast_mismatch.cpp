// expect: add: shapes are not broadcastable: \[3,4\] x \[5\]
// add of [3,4] and [5]: the trailing extents 4 and 5 cannot be broadcast.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto a = ty::placeholder<"a", float, ty::shape<3, 4>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto b = ty::placeholder<"b", float, ty::shape<5>>;
#else
constexpr auto b = ty::placeholder<"b", float, ty::shape<4>>;
#endif

int main() {
  [[maybe_unused]] constexpr auto y = a + b;
}
