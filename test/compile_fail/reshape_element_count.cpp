// expect: reshape: element counts differ: \[3,4\] into \[5,2\]
// reshape of 12 elements into 10.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<3, 4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::reshape<5, 2>(x);
#else
  [[maybe_unused]] constexpr auto y = ty::reshape<6, 2>(x);
#endif
}
