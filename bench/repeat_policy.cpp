// repeat's activation policies (issue t3-E, item 3): one training step (loss, gradient, Adam) of
// a residual MLP 12 blocks deep (h + dense(relu(dense(h))), width 256, hidden 512, batch 256,
// float32) through ty::repeat, bench_threads() threads:
//   repeat_recompute   ty::recompute (the default): the gradient recomputes the layers' inputs
//   repeat_store       ty::store: the forward keeps them ([13, 256, 256]) for the gradient
// Counter peak_MB: the run's peak of live intermediate buffers (session::stats().peak_bytes).
// Each checks once, before timing, that the two policies give the same loss and first update.
// Figures, with the CPU they ran on: bench/README.md.
#include "common.hpp"

#include <cmath>
#include <vector>

namespace {

constexpr std::int64_t rp_width = 256, rp_hidden = 512, rp_batch = 256;
constexpr auto rx = ty::placeholder<"rx", float, ty::shape<ty::dyn, rp_width>>;
constexpr auto ry = ty::placeholder<"ry", float, ty::shape<ty::dyn, rp_width>>;

template <class Policy>
struct mlp {
  static constexpr auto h = ty::repeat<12, "blk", Policy>(
      [](auto h) {
        return h + ty::dense<"out", rp_width, ty::normal<0.0, 0.02>>(
                       ty::relu(ty::dense<"in", rp_hidden>(h)));
      },
      rx);
  static constexpr auto loss = ty::mean(ty::square(h - ry));
  static constexpr auto train = ty::adam(ty::constant<1e-3>).minimize(loss);
};

struct rp_inputs {
  ty::tensor<float> x{std::vector<std::int64_t>{rp_batch, rp_width}},
      y{std::vector<std::int64_t>{rp_batch, rp_width}};
  rp_inputs() {
    fill_uniform(x, -1, 1, 5);
    fill_uniform(y, -1, 1, 6);
  }
};
const rp_inputs& rp() {
  static const rp_inputs in;
  return in;
}

/// The loss of one step and a weight after it, under Policy, from the same seed.
template <class Policy>
std::pair<float, float> first_step() {
  ty::session s(bench_options());
  auto [l] = s.run(ty::fetch(mlp<Policy>::loss, mlp<Policy>::train), ty::feed(rx, rp().x),
                   ty::feed(ry, rp().y));
  return {l[0], s.read(ty::find_variable<"blk/in/weights">(mlp<Policy>::h))[7]};
}

template <class Policy>
void step(benchmark::State& state) {
  const auto a = first_step<ty::recompute>(), b = first_step<ty::store>();
  if (!std::isfinite(a.first) || a != b)
    return state.SkipWithError("the policies' first steps differ");
  ty::session s(bench_options());
  using M = mlp<Policy>;
  for (auto _ : state) {
    auto [l] = s.run(ty::fetch(M::loss, M::train), ty::feed(rx, rp().x), ty::feed(ry, rp().y));
    benchmark::DoNotOptimize(l.data());
  }
  state.counters["peak_MB"] = static_cast<double>(s.stats().peak_bytes) / 1e6;
}

void repeat_recompute(benchmark::State& state) {
  step<ty::recompute>(state);
}
void repeat_store(benchmark::State& state) {
  step<ty::store>(state);
}

} // namespace

BENCHMARK(repeat_recompute)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(repeat_store)->UseRealTime()->Unit(benchmark::kMillisecond);
