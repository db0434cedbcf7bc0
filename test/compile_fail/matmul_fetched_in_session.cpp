// expect: matmul: inner dimensions differ: \[\?,784\] x \[100,10\]
// As a user meets it: the mistaken product is used (relu of it), its variables initialized, and
// it is fed, fetched and run in a session. One error, naming matmul and both shapes; nothing
// after it (no "no matching function for call to fetch(invalid_expr)").
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 784>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto W = ty::variable<"W", float, ty::shape<100, 10>>;
#else
constexpr auto W = ty::variable<"W", float, ty::shape<784, 10>>;
#endif
constexpr auto y = ty::relu(ty::matmul(x, W));

int main() {
  ty::session s;
  s.initialize(y);
  ty::tensor<float> in({2, 784});
  auto [out] = s.run(ty::fetch(y), ty::feed(x, in));
  return out.size() > 0 ? 0 : 1;
}
