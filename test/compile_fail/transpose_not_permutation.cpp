// expect: transpose: not a permutation: \[2,3,4\] \(perm 0 2 2\)
// transpose<0, 2, 2>: axis 2 twice, axis 1 missing.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<2, 3, 4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto y = ty::transpose<0, 2, 2>(x);
#else
  [[maybe_unused]] constexpr auto y = ty::transpose<0, 2, 1>(x);
#endif
}
