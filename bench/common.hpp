// Shared by the side-by-side benchmarks: the thread count, a pool for the hand-written
// baselines, random fills, and (with TYPEFLOW_BENCH_EIGEN defined first) Eigen's thread pool.
#pragma once
#ifdef TYPEFLOW_BENCH_EIGEN
// g++ 12's AVX-512 intrinsics (_mm512_undefined_*) trip -Wuninitialized inside Eigen's packet
// math (GCC PR 105593): silenced for the headers included here, which must come first.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>
#pragma GCC diagnostic pop
#endif
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>

#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

/// The threads of every benchmark: $TYPEFLOW_BENCH_THREADS, else 2.
inline int bench_threads() {
  static const int n = [] {
    const char* s = std::getenv("TYPEFLOW_BENCH_THREADS");
    const int v = s ? std::atoi(s) : 0;
    return v > 0 ? v : 2;
  }();
  return n;
}

/// The options of every typeflow session (a session makes OpenBLAS single-threaded and splits
/// each GEMM over its own pool).
inline ty::session_options bench_options() {
  return {.threads = bench_threads(), .seed = 1};
}

/// bench_threads() threads for the hand-written baselines: typeflow's own fork-join pool, so
/// that they pay what its kernels pay to start and join.
inline ty::cpu_backend::thread_pool& bench_pool() {
  static ty::cpu_backend::thread_pool pool(bench_threads());
  return pool;
}

/// Uniform values in [lo, hi) from a fixed seed.
template <class T>
void fill_uniform(ty::tensor<T>& t, double lo, double hi, std::uint64_t seed = 42) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (T& v : t)
    v = static_cast<T>(u(rng));
}

/// |got - ref| <= rel * scale (scale: the magnitude the error is relative to).
inline bool within(double got, double ref, double rel, double scale) {
  return std::abs(got - ref) <= rel * scale;
}

#ifdef TYPEFLOW_BENCH_EIGEN
/// Eigen's device on bench_threads() threads.
inline Eigen::ThreadPoolDevice& eigen_device() {
  static Eigen::ThreadPool pool(bench_threads());
  static Eigen::ThreadPoolDevice device(&pool, bench_threads());
  return device;
}
#endif
