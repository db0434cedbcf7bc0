// expect: reshape: element count does not divide: \[3,4\] into \[-1,5\]
// reshape<-1, 5> of 12 elements: 12 is not a multiple of 5.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<3, 4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::reshape<-1, 5>(x);
#else
  [[maybe_unused]] constexpr auto y = ty::reshape<-1, 6>(x);
#endif
}
