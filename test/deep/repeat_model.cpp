// Issue 15's deep model with the layer-repeat combinator: the residual MLP
// `h = h + relu(dense<64>(h))` 50 blocks deep as one ty::repeat (its variables stacked, e.g.
// `block/dense/weights` [50, 64, 64]), a one-unit head, the gradient and a float32 Adam update,
// built as the strictest user builds it (-Wall -Wextra -Wpedantic -Werror, test/CMakeLists.txt;
// clang 19 checks the same source). It then trains on a fixed regression problem and fails
// unless the loss halves.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

namespace {

constexpr std::int64_t depth = 50;
using init = ty::uniform<-0.02, 0.02>;
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 64>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;
constexpr auto h = ty::repeat<depth, "block">(
    [](auto h) { return h + ty::relu(ty::dense<"dense", 64, init>(h)); }, x);
constexpr auto prediction = ty::dense<"head", 1, ty::uniform<-0.05, 0.05>>(h);
constexpr auto loss = ty::mean(ty::square(prediction - y));
constexpr auto train = ty::adam(ty::constant<0.002>).minimize(loss);
static_assert(std::is_same_v<decltype(loss)::value_type, float>);

} // namespace

int main() {
  constexpr std::int64_t batch = 32;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  ty::tensor<float> xs({batch, 64}), ys({batch, 1});
  for (std::int64_t i = 0; i < batch; ++i) {
    float t = 0;
    for (std::int64_t j = 0; j < 64; ++j) {
      xs.data()[i * 64 + j] = normal(rng);
      t += j < 4 ? 0.5f * xs.data()[i * 64 + j] : 0.f;
    }
    ys.data()[i] = t;
  }
  ty::session s(ty::session_options{.threads = 2, .seed = 1});
  s.initialize(train);
  const auto w = s.read(ty::find_variable<"block/dense/weights">(h));
  if (w.shape() != std::vector<std::int64_t>{depth, 64, 64}) {
    std::printf("FAIL: block/dense/weights is not [50, 64, 64]\n");
    return 1;
  }
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, xs), ty::feed(y, ys));
    last = l.item();
    if (step == 0)
      first = last;
  }
  std::printf("residual MLP, ty::repeat of depth 50, float32 Adam: loss %.4f -> %.4f after 60 "
              "steps\n",
              static_cast<double>(first), static_cast<double>(last));
  if (!std::isfinite(last) || !(last < 0.5f * first)) {
    std::printf("FAIL: the loss did not halve\n");
    return 1;
  }
  return 0;
}
