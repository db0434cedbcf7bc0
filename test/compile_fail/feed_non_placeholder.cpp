// expect: feed: only placeholders can be fed, not W \[1,3\]
// A variable is not fed; write it with session::write.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto W = ty::variable<"W", float, ty::shape<1, 3>>;

int main() {
  ty::session s;
  ty::tensor<float> t({1, 3}, {1, 2, 3});
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  auto [r] = s.run(ty::fetch(ty::exp(W)), ty::feed(W, t));
#else
  s.write(W, t);
  auto [r] = s.run(ty::fetch(ty::exp(W)));
#endif
  return static_cast<int>(r.size());
}
