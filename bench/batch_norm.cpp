// Batch norm (issue t3-E) against the copy bandwidth, bench_threads() threads each, on an NHWC
// activation [128, 28, 28, 32] (a Fashion-MNIST residual net's first stage, 12.8 MB in float32):
//   copy_bw          a parallel memcpy of the activation on typeflow's pool: the bandwidth
//                    ceiling (bytes = read + written)
//   batch_norm_fwd   ty::batch_norm in training mode run by a session: batch_moments (one pass
//                    over x) and the normalization (x read, y written); bytes = x read once and
//                    y written, the least any implementation moves
//   batch_norm_bwd   its input gradient fed its upstream gradient: batch_norm_grad_stats (x and
//                    g read) and batch_norm_grad (x and g read, dx written); bytes = x and g read
//                    once and dx written
//   moments_only     batch_moments alone (bytes = x read): the forward's first pass
//   composed_fwd     the same forward written with mean, square and rsqrt (what a user wrote
//                    before the op): the baseline the fused op replaces
// Each checks one channel against a double-precision loop once, before timing. Figures, with the
// CPU they ran on: bench/README.md.
#include "common.hpp"

#include <cstring>
#include <vector>

namespace {

constexpr std::int64_t bn_rows = 128 * 28 * 28, bn_c = 32, bn_n = bn_rows * bn_c;
constexpr auto bx = ty::placeholder<"bx", float, ty::shape<ty::dyn, 28, 28, bn_c>>;
constexpr auto bg = ty::placeholder<"bg", float, ty::shape<bn_c>>;
constexpr auto bb = ty::placeholder<"bb", float, ty::shape<bn_c>>;
constexpr auto bu = ty::placeholder<"bu", float, ty::shape<ty::dyn, 28, 28, bn_c>>;
// the moving averages are operands only (read by the training step's updates, not here)
constexpr auto bm = ty::placeholder<"bm", float, ty::shape<bn_c>>;
constexpr auto bv = ty::placeholder<"bv", float, ty::shape<bn_c>>;

struct bn_inputs {
  ty::tensor<float> x{std::vector<std::int64_t>{128, 28, 28, bn_c}},
      u{std::vector<std::int64_t>{128, 28, 28, bn_c}};
  ty::tensor<float> g{std::vector<std::int64_t>{bn_c}}, b{std::vector<std::int64_t>{bn_c}};
  bn_inputs() {
    fill_uniform(x, -1, 3, 1);
    fill_uniform(u, -1, 1, 2);
    fill_uniform(g, 0.5, 1.5, 3);
    fill_uniform(b, -0.5, 0.5, 4);
  }
};
const bn_inputs& bn() {
  static const bn_inputs in;
  return in;
}

/// Channel 5 of batch norm by a double loop, against the result.
bool bn_channel_matches(const float* y) {
  const float* x = bn().x.data();
  constexpr std::int64_t j = 5;
  double mean = 0, var = 0;
  for (std::int64_t r = 0; r < bn_rows; ++r)
    mean += x[r * bn_c + j];
  mean /= bn_rows;
  for (std::int64_t r = 0; r < bn_rows; ++r)
    var += (x[r * bn_c + j] - mean) * (x[r * bn_c + j] - mean);
  const double rstd = 1 / std::sqrt(var / bn_rows + 1e-5);
  for (std::int64_t r = 0; r < bn_rows; ++r)
    if (!within(y[r * bn_c + j], (x[r * bn_c + j] - mean) * rstd * bn().g[j] + bn().b[j], 1e-5, 1))
      return false;
  return true;
}

void copy_bw(benchmark::State& state) {
  auto& pool = bench_pool();
  std::vector<float> dst(static_cast<std::size_t>(bn_n));
  const float* src = bn().x.data();
  constexpr std::int64_t chunk = 1 << 14;
  const auto kernel = [&](std::int64_t c0, std::int64_t c1) {
    const std::int64_t end = std::min(bn_n, c1 * chunk);
    std::memcpy(dst.data() + c0 * chunk, src + c0 * chunk,
                static_cast<std::size_t>(end - c0 * chunk) * sizeof(float));
  };
  for (auto _ : state) {
    pool.parallel_for((bn_n + chunk - 1) / chunk, 4, kernel);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bn_n * 4 * 2);
}

template <class Y>
void forward(benchmark::State& state, Y y) {
  ty::session s(bench_options());
  const auto& in = bn();
  const auto run = [&] {
    return s.run(ty::fetch(y), ty::feed(bx, in.x), ty::feed(bg, in.g), ty::feed(bb, in.b),
                 ty::feed(bm, in.g), ty::feed(bv, in.g));
  };
  if (!bn_channel_matches(std::get<0>(run()).data()))
    return state.SkipWithError("batch_norm differs from the double reference");
  for (auto _ : state) {
    auto [r] = run();
    benchmark::DoNotOptimize(r.data());
  }
  state.SetBytesProcessed(state.iterations() * bn_n * 4 * 2);
}

void batch_norm_fwd(benchmark::State& state) {
  forward(state, ty::batch_norm(bx, bg, bb, bm, bv));
}

void moments_only(benchmark::State& state) {
  ty::session s(bench_options());
  const auto& in = bn();
  for (auto _ : state) {
    auto [r] = s.run(ty::fetch(ty::batch_moments(bx)), ty::feed(bx, in.x));
    benchmark::DoNotOptimize(r.data());
  }
  state.SetBytesProcessed(state.iterations() * bn_n * 4);
}

void composed_fwd(benchmark::State& state) {
  constexpr auto mean = ty::mean<0, 1, 2>(bx);
  constexpr auto var = ty::mean<0, 1, 2>(ty::square(bx - mean));
  forward(state, (bx - mean) * ty::rsqrt(var + ty::constant<1e-5>) * bg + bb);
}

void batch_norm_bwd(benchmark::State& state) {
  ty::session s(bench_options());
  const auto& in = bn();
  // the two gradient ops themselves, fed the upstream gradient (grad(sum(y * u), x) would add
  // the elementwise pass that forms u * 1); the moments are an input here, as in a training step
  constexpr auto fed = ty::placeholder<"fed_moments", float, ty::shape<3, bn_c>>;
  using X = std::remove_cvref_t<decltype(bx)>;
  using U = std::remove_cvref_t<decltype(bu)>;
  using M = std::remove_cvref_t<decltype(fed)>;
  using S =
      decltype(ty::make_node<ty::ops::batch_norm_grad_stats<ty::detail::bits<1e-5>>, X, M, U>());
  constexpr auto dx = ty::make_node<ty::ops::batch_norm_grad<ty::detail::bits<1e-5>>, X, M,
                                    std::remove_cvref_t<decltype(bg)>, U, S>();
  auto [mv] = s.run(ty::fetch(ty::batch_moments(bx)), ty::feed(bx, in.x));
  for (auto _ : state) {
    auto [r] = s.run(ty::fetch(dx), ty::feed(bx, in.x), ty::feed(fed, mv), ty::feed(bg, in.g),
                     ty::feed(bu, in.u));
    benchmark::DoNotOptimize(r.data());
  }
  state.SetBytesProcessed(state.iterations() * bn_n * 4 * 3);
}

} // namespace

BENCHMARK(copy_bw)->UseRealTime();
BENCHMARK(batch_norm_fwd)->UseRealTime();
BENCHMARK(moments_only)->UseRealTime();
BENCHMARK(composed_fwd)->UseRealTime();
BENCHMARK(batch_norm_bwd)->UseRealTime();
