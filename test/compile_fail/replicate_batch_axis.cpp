// expect: replicate: placeholder \\?"x\\?" has a dyn extent that is not its first
// Towers split every fed batch along its first axis: a placeholder whose dyn extent is a later
// axis cannot be split.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto x = ty::placeholder<"x", float, ty::shape<4, ty::dyn>>;
#else
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
#endif

int main() {
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> s;
  ty::tensor<float> v({4, 4});
  s.run(ty::fetch(ty::sum(x)), ty::feed(x, v));
}
