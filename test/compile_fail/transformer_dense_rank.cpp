// expect: matmul: operands must have rank 2 or more: \[1024\] x \[1024,64\]
// frames: 1 (block<"b1">, the user's own template)
// Inside a model of realistic size, then trained in a session: a two-block pre-norm transformer
// (layer norm from mean and rsqrt, attention as a softmax over matmuls, residual additions, an
// MLP), its loss minimised by Adam and run. The second block's query projection is fed a rank-1
// tensor (its [16, 64] flattened): one error, naming matmul and both shapes, and nothing after it.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto x = ty::placeholder<"x", float, ty::shape<16, 64>>;
constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<16>>;

template <class X>
consteval auto layer_norm(X h) {
  auto mu = ty::mean<1>(h, ty::keepdims);
  auto c = h - mu;
  return c * ty::rsqrt(ty::mean<1>(ty::square(c), ty::keepdims) + ty::constant<1e-5>);
}

template <ty::fixed_string Name, class X>
consteval auto block(X h) {
  auto n = layer_norm(h);
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
  auto wrong = ty::reshape<1024>(n);
  auto q = ty::dense<Name + ty::fixed_string("/q"), 64>(
      std::conditional_t<Name == ty::fixed_string("b1"), decltype(wrong), decltype(n)>{});
#else
  auto q = ty::dense<Name + ty::fixed_string("/q"), 64>(n);
#endif
  auto k = ty::dense<Name + ty::fixed_string("/k"), 64>(n);
  auto v = ty::dense<Name + ty::fixed_string("/v"), 64>(n);
  auto att = ty::softmax(ty::matmul(q, ty::transpose<1, 0>(k)) * ty::constant<0.125>);
  auto h1 = h + ty::dense<Name + ty::fixed_string("/o"), 64>(ty::matmul(att, v));
  auto m = ty::relu(ty::dense<Name + ty::fixed_string("/fc"), 256>(layer_norm(h1)));
  return h1 + ty::dense<Name + ty::fixed_string("/proj"), 64>(m);
}

constexpr auto logits = ty::dense<"head", 10>(block<"b1">(block<"b0">(x)));
constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));
constexpr auto train = ty::adam(ty::constant<1e-3>).minimize(loss);

int main() {
  ty::session s;
  s.initialize(train);
  ty::tensor<float> in({16, 64});
  ty::tensor<std::int32_t> labels({16});
  auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, in), ty::feed(y, labels));
  return l.item() >= 0 ? 0 : 1;
}
