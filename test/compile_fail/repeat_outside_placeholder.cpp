// expect: repeat: the body reads a placeholder other than its argument
// repeat's body reads a placeholder of the enclosing graph: each layer's plan is fed only the
// carried value and its layer of the stacked variables.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 8>>;
[[maybe_unused]] constexpr auto scale = ty::placeholder<"scale", float, ty::shape<>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto h =
      ty::repeat<4, "block">([](auto h) { return h + ty::dense<"dense", 8>(h) * scale; }, x);
#else
  [[maybe_unused]] constexpr auto h = ty::repeat<4, "block">(
      [](auto h) { return h + ty::dense<"dense", 8>(h) * ty::constant<0.5>; }, x);
#endif
}
