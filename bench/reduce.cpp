// Reductions of 64M floats held as [8192, 8192], bench_threads() threads each; bytes = input:
//   read_bw/0                      hand-written vectorizable sum (64 independent accumulators)
//                                  on typeflow's pool: the read-bandwidth ceiling
//   typeflow_{sum,max}_all         ty::sum(x), ty::max(x) run by a session
//   typeflow_{sum,max}_axis0       ty::sum<0>(x), ty::max<0>(x): over rows -> [8192]
//   typeflow_{sum,max}_axis1       ty::sum<1>(x), ty::max<1>(x): over columns -> [8192]
//   eigen_...                      the same six with a row-major Eigen::TensorMap's .sum() and
//                                  .maximum() on a ThreadPoolDevice
// The input is uniform in [0, 1) so that the 1e-4 relative check against a double-precision
// loop is meaningful for sums. typeflow returns a new (small) tensor per run.
#define TYPEFLOW_BENCH_EIGEN
#include "common.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

namespace {

constexpr std::int64_t rows = 8192, cols = 8192, total = rows * cols;
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, ty::dyn>>;

enum op { sum, max };
constexpr int all = -1;

const ty::tensor<float>& input() {
  static const ty::tensor<float> t = [] {
    ty::tensor<float> r({rows, cols});
    fill_uniform(r, 0, 1);
    return r;
  }();
  return t;
}

/// The double-precision reference of a reduction over `axis` (all: one value).
std::vector<double> reference(op o, int axis) {
  const float* p = input().data();
  const double init = o == sum ? 0.0 : -std::numeric_limits<double>::infinity();
  std::vector<double> r(axis == all ? 1 : (axis == 0 ? cols : rows), init);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      double& acc = r[axis == all ? 0 : (axis == 0 ? j : i)];
      acc = o == sum ? acc + p[i * cols + j] : std::max<double>(acc, p[i * cols + j]);
    }
  return r;
}

bool matches(const float* got, op o, int axis) {
  const auto ref = reference(o, axis);
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (!within(got[i], ref[i], o == sum ? 1e-4 : 0.0, std::abs(ref[i])))
      return false;
  return true;
}

void read_bw(benchmark::State& state) {
  const float* p = input().data();
  auto& pool = bench_pool();
  constexpr std::int64_t parts = 256, part = total / parts, lanes = 64;
  std::vector<double> partial(parts);
  const auto kernel = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t k = begin; k < end; ++k) {
      float acc[lanes] = {};
      const float* q = p + k * part;
      for (std::int64_t i = 0; i < part; i += lanes)
        for (std::int64_t l = 0; l < lanes; ++l)
          acc[l] += q[i + l];
      partial[k] = std::accumulate(acc, acc + lanes, 0.0);
    }
  };
  kernel(0, parts);
  const double got = std::accumulate(partial.begin(), partial.end(), 0.0);
  if (!within(got, reference(sum, all)[0], 1e-4, got))
    return state.SkipWithError("read_bw sum differs from the double reference");
  for (auto _ : state) {
    pool.parallel_for(parts, 1, kernel);
    benchmark::DoNotOptimize(partial.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * total * 4);
}

template <op O, int Axis>
void typeflow_reduce(benchmark::State& state) {
  ty::session s(bench_options());
  const auto run = [&] {
    const auto f = ty::feed(x, input());
    if constexpr (O == sum && Axis == all)
      return s.run(ty::fetch(ty::sum(x)), f);
    else if constexpr (O == sum)
      return s.run(ty::fetch(ty::sum<Axis>(x)), f);
    else if constexpr (Axis == all)
      return s.run(ty::fetch(ty::max(x)), f);
    else
      return s.run(ty::fetch(ty::max<Axis>(x)), f);
  };
  if (!matches(std::get<0>(run()).data(), O, Axis))
    return state.SkipWithError("typeflow result differs from the double reference");
  for (auto _ : state) {
    auto [r] = run();
    benchmark::DoNotOptimize(r.data());
  }
  state.SetBytesProcessed(state.iterations() * total * 4);
}

template <op O, int Axis>
void eigen_reduce(benchmark::State& state) {
  using matrix = Eigen::TensorMap<const Eigen::Tensor<float, 2, Eigen::RowMajor>, Eigen::Aligned64>;
  const matrix in(input().data(), rows, cols);
  std::vector<float> out(Axis == all ? 1 : (Axis == 0 ? cols : rows));
  auto& dev = eigen_device();
  const auto run = [&] {
    if constexpr (Axis == all) {
      Eigen::TensorMap<Eigen::Tensor<float, 0, Eigen::RowMajor>> r(out.data());
      if constexpr (O == sum)
        r.device(dev) = in.sum();
      else
        r.device(dev) = in.maximum();
    } else {
      Eigen::TensorMap<Eigen::Tensor<float, 1, Eigen::RowMajor>> r(
          out.data(), static_cast<Eigen::Index>(out.size()));
      const Eigen::array<Eigen::Index, 1> axes{Axis};
      if constexpr (O == sum)
        r.device(dev) = in.sum(axes);
      else
        r.device(dev) = in.maximum(axes);
    }
  };
  run();
  if (!matches(out.data(), O, Axis))
    return state.SkipWithError("Eigen result differs from the double reference");
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * total * 4);
}

// Real time: the work runs on several threads.
BENCHMARK(read_bw)->Arg(0)->UseRealTime();
#define REDUCTIONS(LIB)                                                                            \
  BENCHMARK(LIB##_reduce<sum, all>)->Name(#LIB "_sum_all")->UseRealTime();                         \
  BENCHMARK(LIB##_reduce<max, all>)->Name(#LIB "_max_all")->UseRealTime();                         \
  BENCHMARK(LIB##_reduce<sum, 0>)->Name(#LIB "_sum_axis0")->UseRealTime();                         \
  BENCHMARK(LIB##_reduce<sum, 1>)->Name(#LIB "_sum_axis1")->UseRealTime();                         \
  BENCHMARK(LIB##_reduce<max, 0>)->Name(#LIB "_max_axis0")->UseRealTime();                         \
  BENCHMARK(LIB##_reduce<max, 1>)->Name(#LIB "_max_axis1")->UseRealTime();
REDUCTIONS(typeflow)
REDUCTIONS(eigen)

} // namespace
