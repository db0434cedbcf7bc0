// expect: run: placeholder \\?"x\\?" is needed by the fetches but not fed
// The fetch needs x but only y is fed.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 3>>;

int main() {
  ty::session s;
  ty::tensor<float> t({1, 3}, {1, 2, 3});
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  auto [r] = s.run(ty::fetch(x + y), ty::feed(y, t));
#else
  auto [r] = s.run(ty::fetch(x + y), ty::feed(x, t), ty::feed(y, t));
#endif
  return static_cast<int>(r.size());
}
