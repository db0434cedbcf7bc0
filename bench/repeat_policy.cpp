// repeat's activation policies (issue t3-E, item 3): one training step (loss, gradient, Adam) of
// a residual MLP 12 blocks deep (h + dense(relu(dense(h))), float32) through ty::repeat,
// bench_threads() threads, in two shapes:
//   .../weights       width 256, hidden 512, batch 256: the stacked weights and their gradients
//                     outweigh the carries (13 carries of 256 KB)
//   .../activations   width 64, hidden 64, batch 8192: the carries outweigh the weights (13
//                     carries of 2 MB against 0.4 MB of weights)
// and three policies:
//   repeat_recompute   ty::recompute (the default): the gradient recomputes the layers' inputs
//                      and holds all of them
//   repeat_store       ty::store: the forward keeps them ([13, batch, width]) for the gradient
//   repeat_checkpoint  ty::checkpoint_every<4>: the gradient holds inputs 4 and 8 and one
//                      segment's 3 (5 carries instead of 11), recomputing 6 layers more
// beside the same 12 blocks written out (written_out: 12 dense pairs of their own, no loop),
// which issue t3-E's "stored within 5 % of written out" compares against.
// Counter peak_MB: the run's peak of live intermediate buffers (session::stats().peak_bytes).
// Each checks once, before timing, that the policies give the same loss and first update.
// Figures, with the CPU they ran on: bench/README.md.
#include "common.hpp"

#include <cmath>
#include <vector>

namespace {

constexpr std::int64_t rp_depth = 12;

template <std::int64_t Width, std::int64_t Hidden, std::int64_t Batch>
struct shape_of {
  static constexpr std::int64_t width = Width, hidden = Hidden, batch = Batch;
  static constexpr auto x = ty::placeholder<"rx", float, ty::shape<ty::dyn, Width>>;
  static constexpr auto y = ty::placeholder<"ry", float, ty::shape<ty::dyn, Width>>;
  ty::tensor<float> xv{std::vector<std::int64_t>{Batch, Width}},
      yv{std::vector<std::int64_t>{Batch, Width}};
  shape_of() {
    fill_uniform(xv, -1, 1, 5);
    fill_uniform(yv, -1, 1, 6);
  }
  static const shape_of& inputs() {
    static const shape_of in;
    return in;
  }
};
using weights_heavy = shape_of<256, 512, 256>;
using activations_heavy = shape_of<64, 64, 8192>;

template <class Shape, class Policy>
struct mlp {
  static constexpr auto h = ty::repeat<rp_depth, "blk", Policy>(
      [](auto h) {
        return h + ty::dense<"out", Shape::width, ty::normal<0.0, 0.02>>(
                       ty::relu(ty::dense<"in", Shape::hidden>(h)));
      },
      Shape::x);
  static constexpr auto loss = ty::mean(ty::square(h - Shape::y));
  static constexpr auto train = ty::adam(ty::constant<1e-3>).minimize(loss);
};

/// Times training steps of model M (loss, train) on Shape's inputs; counter peak_MB.
template <class M, class Shape>
void timed_steps(benchmark::State& state) {
  const auto& in = Shape::inputs();
  ty::session s(bench_options());
  for (auto _ : state) {
    auto [l] =
        s.run(ty::fetch(M::loss, M::train), ty::feed(Shape::x, in.xv), ty::feed(Shape::y, in.yv));
    benchmark::DoNotOptimize(l.data());
  }
  state.counters["peak_MB"] = static_cast<double>(s.stats().peak_bytes) / 1e6;
}

/// Block I's name, "b00" to "b99".
template <std::int64_t I>
constexpr ty::fixed_string<3> block_name = [] {
  ty::fixed_string<3> s;
  s.data[0] = 'b';
  s.data[1] = static_cast<char>('0' + I / 10);
  s.data[2] = static_cast<char>('0' + I % 10);
  return s;
}();
/// The blocks written out from block I on.
template <class Shape, std::int64_t I, class H>
consteval auto blocks_from(H h) {
  if constexpr (I == rp_depth) {
    return h;
  } else {
    auto next =
        h +
        ty::dense<block_name<I> + ty::fixed_string("/out"), Shape::width, ty::normal<0.0, 0.02>>(
            ty::relu(ty::dense<block_name<I> + ty::fixed_string("/in"), Shape::hidden>(h)));
    return blocks_from<Shape, I + 1>(next);
  }
}
template <class Shape>
struct written {
  static constexpr auto h = blocks_from<Shape, 0>(Shape::x);
  static constexpr auto loss = ty::mean(ty::square(h - Shape::y));
  static constexpr auto train = ty::adam(ty::constant<1e-3>).minimize(loss);
};
template <class Shape>
void written_out(benchmark::State& state) {
  timed_steps<written<Shape>, Shape>(state);
}

/// The loss of one step and a weight after it, under Policy, from the same seed.
template <class Shape, class Policy>
std::pair<float, float> first_step() {
  using M = mlp<Shape, Policy>;
  const auto& in = Shape::inputs();
  ty::session s(bench_options());
  auto [l] =
      s.run(ty::fetch(M::loss, M::train), ty::feed(Shape::x, in.xv), ty::feed(Shape::y, in.yv));
  return {l[0], s.read(ty::find_variable<"blk/in/weights">(M::h))[7]};
}

template <class Shape, class Policy>
void step(benchmark::State& state) {
  const auto a = first_step<Shape, ty::recompute>();
  if (!std::isfinite(a.first) || a != first_step<Shape, ty::store>() ||
      a != first_step<Shape, ty::checkpoint_every<4>>())
    return state.SkipWithError("the policies' first steps differ");
  timed_steps<mlp<Shape, Policy>, Shape>(state);
}

} // namespace

BENCHMARK(step<weights_heavy, ty::recompute>)
    ->Name("repeat_recompute/weights")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(step<weights_heavy, ty::store>)
    ->Name("repeat_store/weights")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(step<weights_heavy, ty::checkpoint_every<4>>)
    ->Name("repeat_checkpoint/weights")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(step<activations_heavy, ty::recompute>)
    ->Name("repeat_recompute/activations")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(step<activations_heavy, ty::store>)
    ->Name("repeat_store/activations")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(step<activations_heavy, ty::checkpoint_every<4>>)
    ->Name("repeat_checkpoint/activations")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(written_out<weights_heavy>)
    ->Name("written_out/weights")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(written_out<activations_heavy>)
    ->Name("written_out/activations")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
