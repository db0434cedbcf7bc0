// expect: run: placeholder \\?"x\\?" is needed by the fetches but not fed
// A replicated session checks the plan as a plain one does: one error, no cascade from the
// towers.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 3>>;

int main() {
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> s;
  ty::tensor<float> t({2, 3}, {1, 2, 3, 4, 5, 6});
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  auto [r] = s.run(ty::fetch(x + y), ty::feed(y, t));
#else
  auto [r] = s.run(ty::fetch(x + y), ty::feed(x, t), ty::feed(y, t));
#endif
  return static_cast<int>(r.size());
}
