// Reductions of 64M floats held as [8192, 8192], bench_threads() threads each; bytes = input:
//   read_bw/0                      hand-written vectorizable sum (64 independent accumulators)
//                                  on typeflow's pool: the read-bandwidth ceiling
//   typeflow_{sum,max}_all         ty::sum(x), ty::max(x) run by a session
//   typeflow_{sum,max}_axis0       ty::sum<0>(x), ty::max<0>(x): over rows -> [8192]
//   typeflow_{sum,max}_axis1       ty::sum<1>(x), ty::max<1>(x): over columns -> [8192]
//   typeflow_sum_narrow0           ty::sum<0>(x) of the same floats as [2097152, 32]: a bias
//                                  gradient's shape (rows of 128 bytes) -> [32]
//   eigen_...                      the same seven with a row-major Eigen::TensorMap's .sum() and
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
constexpr int all = -1, narrow0 = -2; // narrow0: over axis 0 of [total / 32, 32]
constexpr std::int64_t narrow_cols = 32;
// Every dyn extent of one run is the same (the batch), so the narrow view has its own placeholder.
constexpr auto xn = ty::placeholder<"xn", float, ty::shape<ty::dyn, narrow_cols>>;

/// The input's shape as a reduction over `axis` reads it.
std::int64_t rows_of(int axis) {
  return axis == narrow0 ? total / narrow_cols : rows;
}
std::int64_t cols_of(int axis) {
  return axis == narrow0 ? narrow_cols : cols;
}

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
  const std::int64_t nr = rows_of(axis), nc = cols_of(axis);
  const bool over_rows = axis == 0 || axis == narrow0;
  std::vector<double> r(axis == all ? 1 : (over_rows ? nc : nr), init);
  for (std::int64_t i = 0; i < nr; ++i)
    for (std::int64_t j = 0; j < nc; ++j) {
      double& acc = r[axis == all ? 0 : (over_rows ? j : i)];
      acc = o == sum ? acc + p[i * nc + j] : std::max<double>(acc, p[i * nc + j]);
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
  // The input, viewed as [rows_of(Axis), cols_of(Axis)] (no copy).
  const ty::tensor<float> in({rows_of(Axis), cols_of(Axis)}, std::shared_ptr<void>{},
                             const_cast<float*>(input().data()));
  const auto run = [&] {
    if constexpr (Axis == narrow0)
      return s.run(ty::fetch(ty::sum<0>(xn)), ty::feed(xn, in));
    else if constexpr (O == sum && Axis == all)
      return s.run(ty::fetch(ty::sum(x)), ty::feed(x, in));
    else if constexpr (O == sum)
      return s.run(ty::fetch(ty::sum<Axis>(x)), ty::feed(x, in));
    else if constexpr (Axis == all)
      return s.run(ty::fetch(ty::max(x)), ty::feed(x, in));
    else
      return s.run(ty::fetch(ty::max<Axis>(x)), ty::feed(x, in));
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
  const matrix in(input().data(), rows_of(Axis), cols_of(Axis));
  std::vector<float> out(Axis == all ? 1
                                     : (Axis == 0 ? cols : (Axis == narrow0 ? narrow_cols : rows)));
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
      const Eigen::array<Eigen::Index, 1> axes{Axis == narrow0 ? 0 : Axis};
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
  BENCHMARK(LIB##_reduce<max, 1>)->Name(#LIB "_max_axis1")->UseRealTime();                         \
  BENCHMARK(LIB##_reduce<sum, narrow0>)->Name(#LIB "_sum_narrow0")->UseRealTime();
REDUCTIONS(typeflow)
REDUCTIONS(eigen)

} // namespace
