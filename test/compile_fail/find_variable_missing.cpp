// expect: find_variable: no variable .*fc/weight.* in this graph
// The layer's variable is "fc/weights" (plural).
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto h = ty::dense<"fc", 3>(x);

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto w = ty::find_variable<"fc/weight">(h);
#else
  [[maybe_unused]] constexpr auto w = ty::find_variable<"fc/weights">(h);
#endif
}
