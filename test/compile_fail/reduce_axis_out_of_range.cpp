// expect: sum: axis out of range: \[\?,4\] \(axes 2\)
// sum over axis 2 of a rank-2 tensor.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::sum<2>(x);
#else
  [[maybe_unused]] constexpr auto y = ty::sum<1>(x);
#endif
}
