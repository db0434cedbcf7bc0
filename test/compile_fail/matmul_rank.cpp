// expect: matmul: operands must have rank 2 or more: \[3\] x \[3,2\]
// matmul of a vector: both operands need rank 2 or more.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto v = ty::placeholder<"v", float, ty::shape<3>>;
constexpr auto W = ty::variable<"W", float, ty::shape<3, 2>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::matmul(v, W);
#else
  [[maybe_unused]] constexpr auto y = ty::matmul(ty::reshape<1, 3>(v), W);
#endif
}
