// expect: sum: no kernel takes bfloat16 or float16 yet: bfloat16 \(cast<float> first\)
// A reduction of a bfloat16 tensor: the 16-bit types are storage types so far.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto s = ty::sum(ty::cast<ty::bfloat16>(x));
#else
  [[maybe_unused]] constexpr auto s = ty::sum(ty::cast<float>(ty::cast<ty::bfloat16>(x)));
#endif
}
