// expect: feed: placeholder \\?"x\\?" is fed twice
// x is fed twice in one run.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;

int main() {
  ty::session s;
  ty::tensor<float> t({1, 3}, {1, 2, 3});
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  auto [r] = s.run(ty::fetch(ty::exp(x)), ty::feed(x, t), ty::feed(x, t));
#else
  auto [r] = s.run(ty::fetch(ty::exp(x)), ty::feed(x, t));
#endif
  return static_cast<int>(r.size());
}
