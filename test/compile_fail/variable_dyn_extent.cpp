// expect: variable \\?"v\\?": every extent of a variable must be static: \[\?,3\]
// A variable's storage is allocated once: no dyn extents.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto v = ty::variable<"v", float, ty::shape<ty::dyn, 3>>;
#else
constexpr auto v = ty::variable<"v", float, ty::shape<4, 3>>;
#endif

int main() {
  ty::session s;
  auto [r] = s.run(ty::fetch(ty::sum(v)));
  return static_cast<int>(r.size());
}
