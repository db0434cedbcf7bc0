// expect: variable \\?"W\\?" is declared twice with different dtype, shape or initializer
// Two variables named "W" with shapes [3,2] and [2,3] in one run.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto W1 = ty::variable<"W", float, ty::shape<3, 2>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto W2 = ty::variable<"W", float, ty::shape<2, 3>>;
#else
constexpr auto W2 = ty::variable<"W2", float, ty::shape<2, 3>>;
#endif

int main() {
  ty::session s;
  auto [r] = s.run(ty::fetch(ty::sum(W1) + ty::sum(W2)));
  return static_cast<int>(r.size());
}
