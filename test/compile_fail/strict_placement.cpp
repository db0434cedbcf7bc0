// expect: placement: op probe has no kernel on device GPU:0 and soft placement is off
// A strict policy turns soft placement off: a probe (host only) has no GPU kernel.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<2, 2>>;
constexpr auto y = ty::debug::probe<"p">(x);

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  ty::session<ty::strict<ty::on<ty::gpu<0>>>> s;
#else
  ty::session<ty::strict<ty::on<ty::cpu<0>>>> s;
#endif
  ty::tensor<float> v({2, 2});
  auto [r] = s.run(ty::fetch(y), ty::feed(x, v));
  return r.size() == 4 ? 0 : 1;
}
