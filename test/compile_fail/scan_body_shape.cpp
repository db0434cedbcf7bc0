// expect: scan: the body must return its carry.*s dtype and shape: float32 \[\?,8\] in
// scan's body returns a value of another shape than its carry: the next step could not take it.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto xs = ty::placeholder<"xs", float, ty::shape<16, ty::dyn, 3>>;
constexpr auto h0 = ty::placeholder<"h0", float, ty::shape<ty::dyn, 8>>;

int main() {
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr auto hs = ty::scan<"rnn">(
      [](auto h, auto x) { return ty::tanh(ty::dense<"cell", 4>(ty::concat<-1>(x, h))); }, h0, xs);
#else
  [[maybe_unused]] constexpr auto hs = ty::scan<"rnn">(
      [](auto h, auto x) { return ty::tanh(ty::dense<"cell", 8>(ty::concat<-1>(x, h))); }, h0, xs);
#endif
}
