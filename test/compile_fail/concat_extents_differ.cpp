// expect: concat: extents differ off the concatenation axis: \[\?,3\] x \[2,4\] \(axis 0\)
// concat along axis 0 needs equal extents on axis 1: 3 and 4 differ.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn, 3>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto b = ty::placeholder<"b", float, ty::shape<2, 4>>;
#else
constexpr auto b = ty::placeholder<"b", float, ty::shape<2, 3>>;
#endif

int main() {
  [[maybe_unused]] constexpr auto y = ty::concat<0>(a, b);
}
