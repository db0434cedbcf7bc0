// expect: repeat: the body assigns a variable
// repeat's body updates a variable: a body computes a value only (the optimizer updates the
// stacked variables after the whole loop).
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto counter = ty::variable<"counter", float, ty::shape<4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto h = ty::repeat<2, "block">(
      [](auto h) { return ty::group(ty::assign_add(counter, ty::constant<1>), h); }, x);
#else
  [[maybe_unused]] constexpr auto h = ty::repeat<2, "block">([](auto h) { return h + counter; }, x);
#endif
}
