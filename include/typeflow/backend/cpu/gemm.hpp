// GEMM: cblas_sgemm / cblas_dgemm when BLAS is found (TYPEFLOW_HAS_CBLAS), with a correct
// portable fallback (and for integer dtypes).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "thread_pool.hpp"

#if defined(TYPEFLOW_HAS_CBLAS)
#include <cblas.h>
#endif

namespace typeflow::cpu_backend {

/// Whether float and double GEMM go to a BLAS library.
inline constexpr bool has_blas =
#if defined(TYPEFLOW_HAS_CBLAS)
    true;
#else
    false;
#endif

/// Sets the BLAS library's own thread count (OpenBLAS), so that it and the pool do not
/// oversubscribe the cores.
inline void set_blas_threads([[maybe_unused]] int n) {
#if defined(TYPEFLOW_HAS_CBLAS) && defined(OPENBLAS_VERSION)
  openblas_set_num_threads(n);
#endif
}

/// Row-major C[m,n] = op(A) * op(B); op(A) is [m,k] (A stored [k,m] when ta), op(B) is [k,n].
template <class T>
void gemm(thread_pool& pool, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
          const T* a, const T* b, T* c) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::fill_n(c, m * n, T(0));
    return;
  }
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
#if defined(TYPEFLOW_HAS_CBLAS)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, TA, TB, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                  0.0f, c, static_cast<int>(n));
    else
      cblas_dgemm(CblasRowMajor, TA, TB, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0,
                  c, static_cast<int>(n));
    return;
  }
#endif
  // Portable fallback: rows of C in parallel, i-p-j order so the inner loop is contiguous.
  pool.parallel_for(m, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, n * k / 64)),
                    [&](std::int64_t i0, std::int64_t i1) {
                      for (std::int64_t i = i0; i < i1; ++i) {
                        T* ci = c + i * n;
                        std::fill_n(ci, n, T(0));
                        for (std::int64_t p = 0; p < k; ++p) {
                          const T aip = ta ? a[p * lda + i] : a[i * lda + p];
                          if (tb)
                            for (std::int64_t j = 0; j < n; ++j)
                              ci[j] += aip * b[j * ldb + p];
                          else
                            for (std::int64_t j = 0; j < n; ++j)
                              ci[j] += aip * b[p * ldb + j];
                        }
                      }
                    });
}

} // namespace typeflow::cpu_backend
