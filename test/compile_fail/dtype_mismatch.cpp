// expect: add: operand dtypes differ: float32, float64
// float + double: no implicit promotion between strongly typed tensors.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto a = ty::placeholder<"a", float, ty::shape<3>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto b = ty::placeholder<"b", double, ty::shape<3>>;
#else
constexpr auto b = ty::placeholder<"b", float, ty::shape<3>>;
#endif

int main() {
  [[maybe_unused]] constexpr auto y = a + b;
}
