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
//   typeflow_local3/P   the three products of the seed model's local3 layer at batch 128
//                       (P = 0: forward [128,3136] x [3136,1024]; 1: input gradient
//                       [128,1024] x [3136,1024]^T; 2: weight gradient [3136,128]^T x
//                       [128,1024]), run by a session; items = 2*m*n*k FLOPs
//   dnnl_sgemm_local3/P the same products by dnnl_sgemm directly, as dnnl_sgemm/N: where
//                       typeflow's training step loses to the FMA peak in these products,
//                       this says whether oneDNN itself does better at their shapes
//   cblas_sgemm_local3/P the same products by OpenBLAS (bench_threads() threads of its own)
//   typeflow_lstm/P, dnnl_sgemm_lstm/P, cblas_sgemm_lstm/P   examples/lstm's products at batch
//                       32 (P = 0: a step's cell [32,288] x [288,1024]; 1: its input gradient
//                       [32,1024] x [288,1024]^T; 2: the stacked weight gradient
//                       [2048,288]^T x [2048,1024]): small-m products, where the libraries differ
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

// The seed model's local3 products: {transpose_a, transpose_b, m, n, k}.
struct product_shape {
  bool ta, tb;
  std::int64_t m, n, k;
};
constexpr product_shape local3[] = {{false, false, 128, 1024, 3136},
                                    {false, true, 128, 3136, 1024},
                                    {true, false, 3136, 1024, 128}};
// examples/lstm's products at batch 32 (64 steps, 256 units, embedding 32): a step's cell
// [32, 288] x [288, 1024], its input gradient [32, 1024] x [288, 1024]^T, and the weight gradient
// of the 64 steps stacked, [2048, 288]^T x [2048, 1024].
constexpr product_shape lstm_products[] = {
    {false, false, 32, 1024, 288}, {false, true, 32, 288, 1024}, {true, false, 288, 1024, 2048}};

/// A product of one shape: A stored [k,m] when ta, B stored [n,k] when tb.
struct product {
  product_shape p;
  ty::tensor<float> a, b, c;
  explicit product(product_shape shape)
      : p(shape),
        a(shape.ta ? std::vector<std::int64_t>{p.k, p.m} : std::vector<std::int64_t>{p.m, p.k}),
        b(shape.tb ? std::vector<std::int64_t>{p.n, p.k} : std::vector<std::int64_t>{p.k, p.n}),
        c({p.m, p.n}) {
    fill_uniform(a, -1, 1, 3), fill_uniform(b, -1, 1, 4);
  }
  float at_a(std::int64_t i, std::int64_t q) const {
    return p.ta ? a[q * p.m + i] : a[i * p.k + q];
  }
  float at_b(std::int64_t q, std::int64_t j) const {
    return p.tb ? b[j * p.k + q] : b[q * p.n + j];
  }
  bool check(const float* out) const {
    for (std::int64_t s = 0; s < 16; ++s) {
      const std::int64_t i = (s * 7919) % p.m, j = (s * 104729 + 13) % p.n;
      double ref = 0, scale = 0;
      for (std::int64_t q = 0; q < p.k; ++q) {
        ref += double(at_a(i, q)) * at_b(q, j);
        scale += std::abs(double(at_a(i, q)) * at_b(q, j));
      }
      if (!within(out[i * p.n + j], ref, 1e-5, scale))
        return false;
    }
    return true;
  }
  std::int64_t flops() const { return 2 * p.m * p.n * p.k; }
};

/// Product P of a table (local3, lstm_products) as a graph of two static placeholders.
template <const product_shape* Table, std::size_t P, class Session>
auto product_run(Session& s, const product& op) {
  constexpr product_shape p = Table[P];
  constexpr auto pa = ty::placeholder<"a", float, ty::shape<p.ta ? p.k : p.m, p.ta ? p.m : p.k>>;
  constexpr auto pb = ty::placeholder<"b", float, ty::shape<p.tb ? p.n : p.k, p.tb ? p.k : p.n>>;
  return s.run(ty::fetch(ty::matmul<p.ta, p.tb>(pa, pb)), ty::feed(pa, op.a), ty::feed(pb, op.b));
}

template <const product_shape* Table>
void typeflow_products(benchmark::State& state) {
  const product op(Table[state.range(0)]);
  ty::session s(bench_options());
  const auto run = [&] {
    switch (state.range(0)) {
    case 0:
      return product_run<Table, 0>(s, op);
    case 1:
      return product_run<Table, 1>(s, op);
    default:
      return product_run<Table, 2>(s, op);
    }
  };
  if (!op.check(std::get<0>(run()).data()))
    return state.SkipWithError("typeflow result differs from the double reference");
  for (auto _ : state) {
    auto [c] = run();
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * op.flops());
}
BENCHMARK(typeflow_products<local3>)->Name("typeflow_local3")->DenseRange(0, 2)->UseRealTime();
BENCHMARK(typeflow_products<lstm_products>)->Name("typeflow_lstm")->DenseRange(0, 2)->UseRealTime();

/// Times `run` (a library's call into op.c, true where it succeeded) after one checked call:
/// items = `flops` per call.
template <class Op, class Run>
void time_library_call(benchmark::State& state, const char* what, Op& op, Run run,
                       std::int64_t flops) {
  if (!run() || !op.check(op.c.data()))
    return state.SkipWithError(what);
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * flops);
}

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
    return true;
  };
  time_library_call(state, "cblas_sgemm result differs from the double reference", op, run,
                    2 * op.n * op.n * op.n);
}
BENCHMARK(cblas)->Name("cblas_sgemm")->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();
template <const product_shape* Table>
void cblas_products(benchmark::State& state) {
  product op(Table[state.range(0)]);
  const auto& p = op.p;
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(bench_threads());
#endif
  const auto run = [&] {
    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1.0f,
                op.a.data(), static_cast<int>(p.ta ? p.m : p.k), op.b.data(),
                static_cast<int>(p.tb ? p.k : p.n), 0.0f, op.c.data(), static_cast<int>(p.n));
    return true;
  };
  time_library_call(state, "cblas_sgemm result differs from the double reference", op, run,
                    op.flops());
}
BENCHMARK(cblas_products<local3>)->Name("cblas_sgemm_local3")->DenseRange(0, 2)->UseRealTime();
BENCHMARK(cblas_products<lstm_products>)->Name("cblas_sgemm_lstm")->DenseRange(0, 2)->UseRealTime();
#endif

#ifdef TYPEFLOW_HAS_ONEDNN
void onednn_sgemm(benchmark::State& state) {
  operands op(state.range(0));
  const auto n = static_cast<dnnl_dim_t>(op.n);
  omp_set_num_threads(bench_threads());
  const auto run = [&] {
    return dnnl_sgemm('N', 'N', n, n, n, 1.0f, op.a.data(), n, op.b.data(), n, 0.0f, op.c.data(),
                      n) == dnnl_success;
  };
  time_library_call(state, "dnnl_sgemm result differs from the double reference", op, run,
                    2 * op.n * op.n * op.n);
}
BENCHMARK(onednn_sgemm)->Name("dnnl_sgemm")->RangeMultiplier(2)->Range(256, 2048)->UseRealTime();
template <const product_shape* Table>
void onednn_products(benchmark::State& state) {
  product op(Table[state.range(0)]);
  const auto& p = op.p;
  omp_set_num_threads(bench_threads());
  const auto run = [&] {
    return dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.m, p.n, p.k, 1.0f, op.a.data(),
                      p.ta ? p.m : p.k, op.b.data(), p.tb ? p.k : p.n, 0.0f, op.c.data(),
                      p.n) == dnnl_success;
  };
  time_library_call(state, "dnnl_sgemm result differs from the double reference", op, run,
                    op.flops());
}
BENCHMARK(onednn_products<local3>)->Name("dnnl_sgemm_local3")->DenseRange(0, 2)->UseRealTime();
BENCHMARK(onednn_products<lstm_products>)->Name("dnnl_sgemm_lstm")->DenseRange(0, 2)->UseRealTime();
#endif
} // namespace
