// expect: repeat: the body must return its argument.*s dtype and shape: float32 \[\?,8\] in
// repeat's body narrows the carried value: the next layer could not take it.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 8>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto h =
      ty::repeat<4, "block">([](auto h) { return ty::dense<"dense", 4>(h); }, x);
#else
  [[maybe_unused]] constexpr auto h =
      ty::repeat<4, "block">([](auto h) { return ty::dense<"dense", 8>(h); }, x);
#endif
}
