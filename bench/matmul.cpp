// Square float matmul C = A B for N = 256, 512, 1024, 2048 on bench_threads() threads;
// items = FLOPs = 2*N^3:
//   typeflow_matmul/N   ty::matmul of two fed [N, N] placeholders, run by a session: OpenBLAS
//                       single-threaded, one call per pool thread on a slab of C; the whole
//                       run is timed (the fetch hands over the run's pooled buffer)
//   cblas_sgemm/N       cblas_sgemm called directly into a preallocated C, OpenBLAS set to
//                       bench_threads() threads of its own before the loop
//   dnnl_sgemm/N        oneDNN's own sgemm called directly (its OpenMP threads, bench_threads()
//                       of them): the target's baseline, as typeflow's float32 matmul runs on
//                       oneDNN
// All are checked once against a double-precision product on sampled entries.
#include "common.hpp"

#ifdef TYPEFLOW_HAS_CBLAS // typeflow found a CBLAS: compare with it
#include <cblas.h>
#endif
#ifdef TYPEFLOW_HAS_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn, ty::dyn>>;
constexpr auto b = ty::placeholder<"b", float, ty::shape<ty::dyn, ty::dyn>>;

struct operands {
  std::int64_t n;
  ty::tensor<float> a, b, c;
  explicit operands(std::int64_t size) : n(size), a({n, n}), b({n, n}), c({n, n}) {
    fill_uniform(a, -1, 1, 1), fill_uniform(b, -1, 1, 2);
  }
  /// |c - a b| / sum_k |a_ik b_kj| at a few sampled entries is below 1e-5.
  bool check(const float* c) const {
    for (std::int64_t s = 0; s < 16; ++s) {
      const std::int64_t i = (s * 7919) % n, j = (s * 104729 + 13) % n;
      double ref = 0, scale = 0;
      for (std::int64_t k = 0; k < n; ++k) {
        ref += double(a[i * n + k]) * b[k * n + j];
        scale += std::abs(double(a[i * n + k]) * b[k * n + j]);
      }
      if (!within(c[i * n + j], ref, 1e-5, scale))
        return false;
    }
    return true;
  }
};

void typeflow_matmul(benchmark::State& state) {
  const operands op(state.range(0));
  ty::session s(bench_options());
  const auto run = [&] {
    return s.run(ty::fetch(ty::matmul(a, b)), ty::feed(a, op.a), ty::feed(b, op.b));
  };
  if (!op.check(std::get<0>(run()).data()))
    return state.SkipWithError("typeflow result differs from the double reference");
  for (auto _ : state) {
    auto [c] = run();
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * 2 * op.n * op.n * op.n);
}
// Real time: the work runs on several threads.
BENCHMARK(typeflow_matmul)->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();

#ifdef TYPEFLOW_HAS_CBLAS
void cblas(benchmark::State& state) {
  operands op(state.range(0));
  const int n = static_cast<int>(op.n);
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(bench_threads());
#endif
  const auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, op.a.data(), n,
                op.b.data(), n, 0.0f, op.c.data(), n);
  };
  run();
  if (!op.check(op.c.data()))
    return state.SkipWithError("cblas_sgemm result differs from the double reference");
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 2 * op.n * op.n * op.n);
}
BENCHMARK(cblas)->Name("cblas_sgemm")->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();
#endif

#ifdef TYPEFLOW_HAS_ONEDNN
void onednn_sgemm(benchmark::State& state) {
  operands op(state.range(0));
  const auto n = static_cast<dnnl_dim_t>(op.n);
  omp_set_num_threads(bench_threads());
  const auto run = [&] {
    return dnnl_sgemm('N', 'N', n, n, n, 1.0f, op.a.data(), n, op.b.data(), n, 0.0f, op.c.data(),
                      n);
  };
  if (run() != dnnl_success || !op.check(op.c.data()))
    return state.SkipWithError("dnnl_sgemm result differs from the double reference");
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 2 * op.n * op.n * op.n);
}
BENCHMARK(onednn_sgemm)->Name("dnnl_sgemm")->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();
#endif
} // namespace
