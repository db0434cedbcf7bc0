// What both deep models (deep_model.cpp, repeat_model.cpp) do once built: train with 2 threads
// for 60 steps on a fixed regression problem (y = half the sum of x's first 4 features, batch
// 32) and fail unless the loss halves. `check(session)` runs after initialization and may fail
// the run first (returns false). Call it qualified (`::train_and_check`): an unqualified call
// would look its node-type arguments up by ADL, which clang does without remembering what it has
// seen, exponential in the depth of a gradient.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <typeflow/typeflow.hpp>

template <class Loss, class Train, class X, class Y, class Check>
int train_and_check(const char* what, Loss loss, Train train, X x, Y y, Check&& check) {
  namespace ty = typeflow;
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
  if (!check(s))
    return 1;
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, xs), ty::feed(y, ys));
    last = l.item();
    if (step == 0)
      first = last;
  }
  std::printf("%s: loss %.4f -> %.4f after 60 steps\n", what, static_cast<double>(first),
              static_cast<double>(last));
  if (!std::isfinite(last) || !(last < 0.5f * first)) {
    std::printf("FAIL: the loss did not halve\n");
    return 1;
  }
  return 0;
}
