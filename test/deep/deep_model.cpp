// A deep model built the way a user with the strictest warnings builds it: a residual MLP,
// `h = h + relu(dense<64>(h))` written out DEPTH times, its gradient and a float32 Adam update,
// compiled with -Wall -Wextra -Wpedantic -Werror (test/CMakeLists.txt). It then trains on a
// fixed regression problem and fails unless the loss falls.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

namespace {

using init = ty::uniform<-0.05, 0.05>;
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 64>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;
constexpr auto h0 = x;
#define TYPEFLOW_BLOCK(i, prev)                                                                    \
  constexpr auto h##i = prev + ty::relu(ty::dense<"block" #i, 64, init>(prev));
TYPEFLOW_BLOCK(1, h0)
TYPEFLOW_BLOCK(2, h1)
TYPEFLOW_BLOCK(3, h2)
TYPEFLOW_BLOCK(4, h3)
TYPEFLOW_BLOCK(5, h4)
TYPEFLOW_BLOCK(6, h5)
TYPEFLOW_BLOCK(7, h6)
TYPEFLOW_BLOCK(8, h7)
TYPEFLOW_BLOCK(9, h8)
TYPEFLOW_BLOCK(10, h9)
TYPEFLOW_BLOCK(11, h10)
TYPEFLOW_BLOCK(12, h11)
#undef TYPEFLOW_BLOCK
constexpr auto prediction = ty::dense<"head", 1, init>(h12);
constexpr auto loss = ty::mean(ty::square(prediction - y));
constexpr auto train = ty::adam(ty::constant<0.003>).minimize(loss);
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
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, xs), ty::feed(y, ys));
    last = l.item();
    if (step == 0)
      first = last;
  }
  std::printf("residual MLP, depth 12, float32 Adam: loss %.4f -> %.4f after 60 steps\n",
              static_cast<double>(first), static_cast<double>(last));
  if (!std::isfinite(last) || !(last < 0.5f * first)) {
    std::printf("FAIL: the loss did not halve\n");
    return 1;
  }
  return 0;
}
