// expect: matmul: operands must have rank 2 or more: \[1024\] x \[1024,64\]
// frames: 2 (the user's body lambda, and repeat's call of it)
// A rank mistake inside a ty::repeat body (a dense layer fed a rank-1 tensor), the repeat then
// minimised and run: one error naming matmul and both shapes, and no false follow-on ("the body
// assigns a variable", "the body reads a placeholder other than its argument").
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<16, 64>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<16, 64>>;
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto h = ty::repeat<4, "block">(
    [](auto a) { return a + ty::relu(ty::dense<"dense", 64>(ty::reshape<1024>(a))); }, x);
#else
constexpr auto h =
    ty::repeat<4, "block">([](auto a) { return a + ty::relu(ty::dense<"dense", 64>(a)); }, x);
#endif
constexpr auto loss = ty::mean(ty::square(h - y));
constexpr auto train = ty::adam(ty::constant<1e-3>).minimize(loss);

int main() {
  ty::session s;
  s.initialize(train);
  ty::tensor<float> in({16, 64}), out({16, 64});
  auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, in), ty::feed(y, out));
  return l.item() >= 0 ? 0 : 1;
}
