// expect: matmul: inner dimensions differ: \[16,64\] x \[32,16\]
// frames: 1 (block<"b1">, the user's own template)
// Inside a two-block pre-norm transformer minimised by Adam and run in a session: the second
// block's keys are projected to 32 features while its queries have 64, so the attention scores
// q k^T cannot be formed. One error, naming matmul and both shapes, and nothing after it.
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

template <ty::fixed_string Name, std::int64_t KeyWidth, class X>
consteval auto block(X h) {
  auto n = layer_norm(h);
  auto q = ty::dense<Name + ty::fixed_string("/q"), 64>(n);
  auto k = ty::dense<Name + ty::fixed_string("/k"), KeyWidth>(n);
  auto v = ty::dense<Name + ty::fixed_string("/v"), 64>(n);
  auto att = ty::softmax(ty::matmul(q, ty::transpose<1, 0>(k)) * ty::constant<0.125>);
  auto h1 = h + ty::dense<Name + ty::fixed_string("/o"), 64>(ty::matmul(att, v));
  auto m = ty::relu(ty::dense<Name + ty::fixed_string("/fc"), 256>(layer_norm(h1)));
  return h1 + ty::dense<Name + ty::fixed_string("/proj"), 64>(m);
}

#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr std::int64_t key_width = 32; // should be the queries' 64
#else
constexpr std::int64_t key_width = 64;
#endif
constexpr auto logits = ty::dense<"head", 10>(block<"b1", key_width>(block<"b0", 64>(x)));
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
