// expect: feed: placeholder \\?"x\\?" has dtype float32, fed float64
// A tensor<double> fed to a float placeholder.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;

int main() {
  ty::session s;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  ty::tensor<double> t({1, 3}, {1, 2, 3});
#else
  ty::tensor<float> t({1, 3}, {1, 2, 3});
#endif
  auto [r] = s.run(ty::fetch(ty::exp(x)), ty::feed(x, t));
  return static_cast<int>(r.size());
}
