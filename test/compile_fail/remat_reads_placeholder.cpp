// expect: remat: the body reads a placeholder other than its argument
// remat's body reads a placeholder of the enclosing graph: the recomputation in the gradient
// would have nothing to feed it with.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 8>>;
constexpr auto scale = ty::placeholder<"scale", float, ty::shape<>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto h =
      ty::remat([](auto h) { return h + ty::dense<"dense", 8>(h) * scale; }, x);
#else
  [[maybe_unused]] constexpr auto h =
      ty::remat([](auto h) { return h + ty::dense<"dense", 8>(h); }, x) * scale;
#endif
}
