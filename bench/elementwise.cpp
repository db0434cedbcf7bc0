// Elementwise throughput over N floats (N = 2^20, 2^22, 2^24), bench_threads() threads each:
//   triad/N           hand-written STREAM triad a = b + s*c on typeflow's pool (the memory
//                     bandwidth ceiling); bytes 3*N*4
//   typeflow_fma/N    a*b + c*d, one fused kernel run by a session; bytes 5*N*4
//   typeflow_sin/N    a*b + c*sin(d); bytes 5*N*4
//   eigen_fma/N, eigen_sin/N   the same with Eigen::TensorMap on a ThreadPoolDevice
// The whole session::run is timed; its fetch hands over the run's own output buffer (no copy),
// which goes back to the session's pool when the tensor dies, so steady-state runs allocate
// nothing. Eigen writes into a preallocated buffer.
#define TYPEFLOW_BENCH_EIGEN
#include "common.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

namespace {

constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn>>;
constexpr auto b = ty::placeholder<"b", float, ty::shape<ty::dyn>>;
constexpr auto c = ty::placeholder<"c", float, ty::shape<ty::dyn>>;
constexpr auto d = ty::placeholder<"d", float, ty::shape<ty::dyn>>;
constexpr auto fma_expr = a * b + c * d;
constexpr auto sin_expr = a * b + c * ty::sin(d);

/// Four random inputs in [-1, 1] and the double-precision references, made once per size.
struct inputs {
  std::int64_t n;
  ty::tensor<float> a, b, c, d, out;
  std::vector<double> ref_fma, ref_sin;
  explicit inputs(std::int64_t size)
      : n(size), a({n}), b({n}), c({n}), d({n}), out({n}), ref_fma(n), ref_sin(n) {
    fill_uniform(a, -1, 1, 1), fill_uniform(b, -1, 1, 2);
    fill_uniform(c, -1, 1, 3), fill_uniform(d, -1, 1, 4);
    for (std::int64_t i = 0; i < n; ++i) {
      const double ab = double(a[i]) * b[i];
      ref_fma[i] = ab + double(c[i]) * d[i];
      ref_sin[i] = ab + double(c[i]) * std::sin(double(d[i]));
    }
  }
  const std::vector<double>& ref(bool sin) const { return sin ? ref_sin : ref_fma; }
};

inputs& get(std::int64_t n) {
  static std::map<std::int64_t, std::unique_ptr<inputs>> cache;
  auto& p = cache[n];
  if (!p)
    p = std::make_unique<inputs>(n);
  return *p;
}

bool matches(const float* got, const std::vector<double>& ref) {
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (!within(got[i], ref[i], 1e-5, std::max(1.0, std::abs(ref[i]))))
      return false;
  return true;
}

void triad(benchmark::State& state) {
  inputs& in = get(state.range(0));
  float* out = in.out.data();
  const float *pb = in.b.data(), *pc = in.c.data(), s = 3.0f;
  auto& pool = bench_pool();
  const auto kernel = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      out[i] = pb[i] + s * pc[i];
  };
  for (auto _ : state) {
    pool.parallel_for(in.n, in.n / (4 * pool.size()), kernel);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * in.n * 4);
}

template <bool Sin>
void typeflow_elementwise(benchmark::State& state) {
  inputs& in = get(state.range(0));
  ty::session s(bench_options());
  const auto run = [&] {
    const auto feeds = [&](auto expr) {
      return s.run(ty::fetch(expr), ty::feed(a, in.a), ty::feed(b, in.b), ty::feed(c, in.c),
                   ty::feed(d, in.d));
    };
    if constexpr (Sin)
      return feeds(sin_expr);
    else
      return feeds(fma_expr);
  };
  if (!matches(std::get<0>(run()).data(), in.ref(Sin)))
    return state.SkipWithError("typeflow result differs from the double reference");
  for (auto _ : state) {
    auto [r] = run();
    benchmark::DoNotOptimize(r.data());
  }
  state.SetBytesProcessed(state.iterations() * 5 * in.n * 4);
}

template <bool Sin>
void eigen_elementwise(benchmark::State& state) {
  inputs& in = get(state.range(0));
  using map = Eigen::TensorMap<const Eigen::Tensor<float, 1>, Eigen::Aligned64>;
  const map ea(in.a.data(), in.n), eb(in.b.data(), in.n), ec(in.c.data(), in.n),
      ed(in.d.data(), in.n);
  Eigen::TensorMap<Eigen::Tensor<float, 1>, Eigen::Aligned64> out(in.out.data(), in.n);
  auto& dev = eigen_device();
  const auto run = [&] {
    if constexpr (Sin)
      out.device(dev) = ea * eb + ec * ed.unaryExpr(Eigen::internal::scalar_sin_op<float>());
    else
      out.device(dev) = ea * eb + ec * ed;
  };
  run();
  if (!matches(out.data(), in.ref(Sin)))
    return state.SkipWithError("Eigen result differs from the double reference");
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 5 * in.n * 4);
}

// Real time: the work runs on several threads.
void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(1 << 20)->Arg(1 << 22)->Arg(1 << 24)->UseRealTime();
}
BENCHMARK(triad)->Apply(sizes);
BENCHMARK(typeflow_elementwise<false>)->Name("typeflow_fma")->Apply(sizes);
BENCHMARK(typeflow_elementwise<true>)->Name("typeflow_sin")->Apply(sizes);
BENCHMARK(eigen_elementwise<false>)->Name("eigen_fma")->Apply(sizes);
BENCHMARK(eigen_elementwise<true>)->Name("eigen_sin")->Apply(sizes);

} // namespace
