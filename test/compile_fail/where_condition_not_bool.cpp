// expect: where: condition must be bool: float32, float32, float32
// where's condition must be a bool tensor.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto z = ty::full<0, float, ty::shape<3>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::where(x, x, z);
#else
  [[maybe_unused]] constexpr auto y = ty::where(x > z, x, z);
#endif
}
