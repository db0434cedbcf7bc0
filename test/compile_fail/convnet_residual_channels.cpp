// expect: add: shapes are not broadcastable: \[\?,14,14,32\] x \[\?,14,14,64\]
// Inside a 10-layer convolutional net with residual additions, trained with Momentum and run in a
// session: the last block's skip connection adds a 32-channel tensor to a 64-channel one. One
// error, naming add and both shapes, and nothing after it.
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

constexpr auto images = ty::placeholder<"images", float, ty::shape<ty::dyn, 28, 28, 1>>;
constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn>>;

template <ty::fixed_string Name, std::int64_t C, class X>
consteval auto conv(X x) {
  return ty::relu(ty::conv2d_layer<Name, 3, 3, C>(x));
}

constexpr auto c1 = conv<"c1", 32>(images);
constexpr auto c2 = conv<"c2", 32>(c1);
constexpr auto c3 = c1 + conv<"c3", 32>(c2);
constexpr auto p1 = ty::max_pool<ty::padding::same, 2>(c3);
constexpr auto c4 = conv<"c4", 32>(p1);
constexpr auto c5 = p1 + conv<"c5", 32>(c4);
constexpr auto c6 = conv<"c6", 64>(c5);
constexpr auto c7 = conv<"c7", 64>(c6);
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
constexpr auto c8 = c5 + conv<"c8", 64>(c7); // the skip should start at c6
#else
constexpr auto c8 = c6 + conv<"c8", 64>(c7);
#endif
constexpr auto c9 = conv<"c9", 64>(ty::max_pool<ty::padding::same, 2>(c8));
constexpr auto c10 = conv<"c10", 64>(c9);
constexpr auto logits = ty::dense<"fc", 10>(ty::reshape<-1, 7 * 7 * 64>(c10));
constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, labels));
constexpr auto train = ty::momentum(ty::constant<0.01>, ty::constant<0.9>).minimize(loss);

int main() {
  ty::session s;
  s.initialize(train);
  ty::tensor<float> in({8, 28, 28, 1});
  ty::tensor<std::int32_t> y({8});
  auto [l] = s.run(ty::fetch(loss, train), ty::feed(images, in), ty::feed(labels, y));
  return l.item() >= 0 ? 0 : 1;
}
