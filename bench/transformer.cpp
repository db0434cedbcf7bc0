// The transformer's fused ops against their baselines, bench_threads() threads each:
//   copy_bw                     a parallel memcpy of [8192, 768] floats on typeflow's pool:
//                               the bandwidth ceiling (bytes = read + written)
//   layer_norm_fwd              ty::layer_norm over [8192, 768] run by a session (bytes = x read,
//                               y written)
//   layer_norm_bwd              its input gradient, the layer_norm_grad op fed its upstream
//                               gradient (bytes = x and g read, dx written)
//   attention_fwd/T             ty::attention<true> on q, k, v [1, 8, T, 64] (items = FLOPs of
//                               the causal scores and products, 2 * 2 * T * T * 64 * 8 / 2)
//   attention_fwd_bwd/T         the forward output and the three gradients (GFLOP/s counts the
//                               forward's FLOPs only)
//   attention_dropout_fwd_bwd/T the same with dropout on the probabilities (keep 0.9): the cost
//                               of drawing the mask, in the forward and again in the gradient
//   written_out_fwd/T           softmax(causal_mask(q k^T / 8)) v written with matmul: the same
//                               work, with the [T, T] scores stored (the baseline the fused op
//                               replaces)
// Each checks its result against a double-precision loop (layer norm) or the written-out form
// (attention) once, before timing. Figures, with the CPU they ran on: bench/README.md.
#include "common.hpp"

#include <cstring>
#include <vector>

namespace {

constexpr std::int64_t ln_rows = 8192, ln_d = 768, ln_n = ln_rows * ln_d;
constexpr auto lx = ty::placeholder<"lx", float, ty::shape<ty::dyn, ln_d>>;
constexpr auto lg = ty::placeholder<"lg", float, ty::shape<ln_d>>;
constexpr auto lb = ty::placeholder<"lb", float, ty::shape<ln_d>>;
constexpr auto lu = ty::placeholder<"lu", float, ty::shape<ty::dyn, ln_d>>;

struct ln_inputs {
  ty::tensor<float> x{std::vector<std::int64_t>{ln_rows, ln_d}},
      u{std::vector<std::int64_t>{ln_rows, ln_d}};
  ty::tensor<float> g{std::vector<std::int64_t>{ln_d}}, b{std::vector<std::int64_t>{ln_d}};
  ln_inputs() {
    fill_uniform(x, -2, 2, 1);
    fill_uniform(u, -1, 1, 2);
    fill_uniform(g, 0.5, 1.5, 3);
    fill_uniform(b, -0.5, 0.5, 4);
  }
};
const ln_inputs& ln() {
  static const ln_inputs in;
  return in;
}

void copy_bw(benchmark::State& state) {
  auto& pool = bench_pool();
  std::vector<float> dst(static_cast<std::size_t>(ln_n));
  const float* src = ln().x.data();
  const auto kernel = [&](std::int64_t r0, std::int64_t r1) {
    std::memcpy(dst.data() + r0 * ln_d, src + r0 * ln_d,
                static_cast<std::size_t>((r1 - r0) * ln_d) * sizeof(float));
  };
  for (auto _ : state) {
    pool.parallel_for(ln_rows, 64, kernel);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * ln_n * 4 * 2);
}

/// Row 7 of layer_norm by a double loop, against the result.
bool ln_row_matches(const float* y) {
  const float* x = ln().x.data() + 7 * ln_d;
  double mean = 0, var = 0;
  for (std::int64_t j = 0; j < ln_d; ++j)
    mean += x[j];
  mean /= ln_d;
  for (std::int64_t j = 0; j < ln_d; ++j)
    var += (x[j] - mean) * (x[j] - mean);
  const double rstd = 1 / std::sqrt(var / ln_d + 1e-5);
  for (std::int64_t j = 0; j < ln_d; ++j)
    if (!within(y[7 * ln_d + j], (x[j] - mean) * rstd * ln().g[j] + ln().b[j], 1e-5, 1))
      return false;
  return true;
}

void layer_norm_fwd(benchmark::State& state) {
  ty::session s(bench_options());
  const auto& in = ln();
  const auto run = [&] {
    return s.run(ty::fetch(ty::layer_norm(lx, lg, lb)), ty::feed(lx, in.x), ty::feed(lg, in.g),
                 ty::feed(lb, in.b));
  };
  if (!ln_row_matches(std::get<0>(run()).data()))
    return state.SkipWithError("layer_norm differs from the double reference");
  for (auto _ : state) {
    auto [y] = run();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * ln_n * 4 * 2);
}

void layer_norm_bwd(benchmark::State& state) {
  ty::session s(bench_options());
  const auto& in = ln();
  // the gradient op itself, fed its upstream gradient (grad(sum(y * u), x) would add the
  // elementwise pass that forms u * 1)
  constexpr auto dx =
      ty::make_node<ty::ops::layer_norm_grad<ty::detail::bits<1e-5>>,
                    std::remove_cvref_t<decltype(lx)>, std::remove_cvref_t<decltype(lg)>,
                    std::remove_cvref_t<decltype(lu)>>();
  for (auto _ : state) {
    auto [r] = s.run(ty::fetch(dx), ty::feed(lx, in.x), ty::feed(lg, in.g), ty::feed(lb, in.b),
                     ty::feed(lu, in.u));
    benchmark::DoNotOptimize(r.data());
  }
  state.SetBytesProcessed(state.iterations() * ln_n * 4 * 3);
}

constexpr std::int64_t heads = 8, head_d = 64;
constexpr auto aq = ty::placeholder<"aq", float, ty::shape<1, heads, ty::dyn, head_d>>;
constexpr auto ak = ty::placeholder<"ak", float, ty::shape<1, heads, ty::dyn, head_d>>;
constexpr auto av = ty::placeholder<"av", float, ty::shape<1, heads, ty::dyn, head_d>>;
constexpr auto au = ty::placeholder<"au", float, ty::shape<1, heads, ty::dyn, head_d>>;
constexpr auto fused = ty::attention<true>(aq, ak, av);
constexpr auto dropped =
    ty::attention<true, ty::attention_dropout{.keep = 0.9, .seed = 1}>(aq, ak, av);
constexpr auto written = ty::matmul(
    ty::softmax(ty::causal_mask(ty::matmul<false, true>(aq, ak) * ty::constant<0.125>)), av);

struct att_inputs {
  ty::tensor<float> q, k, v, u;
  explicit att_inputs(std::int64_t t)
      : q({1, heads, t, head_d}), k({1, heads, t, head_d}), v({1, heads, t, head_d}),
        u({1, heads, t, head_d}) {
    fill_uniform(q, -1, 1, 1);
    fill_uniform(k, -1, 1, 2);
    fill_uniform(v, -1, 1, 3);
    fill_uniform(u, -1, 1, 4);
  }
};

double att_flops(std::int64_t t) {
  return 2.0 * 2.0 * static_cast<double>(t * t * head_d * heads) / 2;
}

// 0: fused forward, 1: fused forward and backward, 2: written-out forward, 3: 1 with dropout
template <int Mode>
void attention_bench(benchmark::State& state) {
  const std::int64_t t = state.range(0);
  const att_inputs in(t);
  ty::session s(bench_options());
  const auto feeds = [&](auto... fetches) {
    return s.run(ty::fetch(fetches...), ty::feed(aq, in.q), ty::feed(ak, in.k), ty::feed(av, in.v),
                 ty::feed(au, in.u));
  };
  auto [a, b] = feeds(fused, written);
  for (std::int64_t i = 0; i < a.size(); ++i)
    if (!within(a[i], b[i], 1e-4, 1))
      return state.SkipWithError("the attention op differs from its written-out form");
  constexpr auto loss = ty::sum(fused * au);
  constexpr auto loss_dropped = ty::sum(dropped * au);
  for (auto _ : state) {
    if constexpr (Mode == 0) {
      auto [y] = feeds(fused);
      benchmark::DoNotOptimize(y.data());
    } else if constexpr (Mode == 1) {
      auto [y, dq, dk, dv] =
          feeds(fused, ty::grad(loss, aq), ty::grad(loss, ak), ty::grad(loss, av));
      benchmark::DoNotOptimize(dv.data());
    } else if constexpr (Mode == 3) {
      auto [y, dq, dk, dv] = feeds(dropped, ty::grad(loss_dropped, aq), ty::grad(loss_dropped, ak),
                                   ty::grad(loss_dropped, av));
      benchmark::DoNotOptimize(dv.data());
    } else {
      auto [y] = feeds(written);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      att_flops(t) * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

} // namespace

BENCHMARK(copy_bw)->UseRealTime();
BENCHMARK(layer_norm_fwd)->UseRealTime();
BENCHMARK(layer_norm_bwd)->UseRealTime();
BENCHMARK(attention_bench<0>)->Name("attention_fwd")->Arg(64)->Arg(512)->Arg(1024)->UseRealTime();
BENCHMARK(attention_bench<2>)->Name("written_out_fwd")->Arg(64)->Arg(512)->Arg(1024)->UseRealTime();
BENCHMARK(attention_bench<1>)
    ->Name("attention_fwd_bwd")
    ->Arg(64)
    ->Arg(512)
    ->Arg(1024)
    ->UseRealTime();
BENCHMARK(attention_bench<3>)
    ->Name("attention_dropout_fwd_bwd")
    ->Arg(64)
    ->Arg(512)
    ->Arg(1024)
    ->UseRealTime();
