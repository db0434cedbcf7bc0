// expect: conv2d: input channels differ from the filter.*\[\?,28,28,3\] x \[5,5,1,32\] \(SAME
// The filter expects 1 input channel, the images have 3.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 28, 28, 3>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto w = ty::variable<"w", float, ty::shape<5, 5, 1, 32>>;
#else
constexpr auto w = ty::variable<"w", float, ty::shape<5, 5, 3, 32>>;
#endif

int main() {
  [[maybe_unused]] constexpr auto y = ty::conv2d<ty::padding::same>(x, w);
}
