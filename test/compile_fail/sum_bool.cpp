// expect: sum: cannot reduce a bool tensor: bool
// Reductions of bool are rejected; cast first.
#include <typeflow/typeflow.hpp> // first: the precompiled header covers a first include

#include <cstdint>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto positive = x > ty::constant<0>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto n = ty::sum(positive);
#else
  [[maybe_unused]] constexpr auto n = ty::sum(ty::cast<std::int64_t>(positive));
#endif
}
