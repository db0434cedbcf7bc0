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

/// Makes the BLAS library (OpenBLAS) single-threaded: typeflow's pool owns the cores, and
/// `gemm` splits each product across the pool's threads itself. With both spawning threads,
/// OpenBLAS's workers spin (sched_yield) between calls and steal the cores the pool's kernels
/// run on; this way a session's `threads` is the process's thread count, BLAS included.
inline void set_blas_single_threaded() {
#if defined(TYPEFLOW_HAS_CBLAS) && defined(OPENBLAS_VERSION)
  openblas_set_num_threads(1);
#endif
}

/// C[m,n] (+)= op(A) op(B) on the calling thread: op(A) is [m,k] (A stored [k,m] when ta),
/// op(B) is [k,n]; lda/ldb/ldc are the stored matrices' row strides. With `accumulate` the
/// product is added to C, else C is overwritten. One single-threaded BLAS call for float and
/// double when BLAS is found, else (and for integer dtypes) a portable loop.
template <class T>
void gemm_serial(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                 std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                 bool accumulate = false) {
  if (m == 0 || n == 0)
    return;
#if defined(TYPEFLOW_HAS_CBLAS)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (k > 0) {
      const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
      const auto M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
      const T beta = accumulate ? T(1) : T(0);
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, a, static_cast<int>(lda), b,
                    static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
      else
        cblas_dgemm(CblasRowMajor, TA, TB, M, N, K, 1.0, a, static_cast<int>(lda), b,
                    static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
      return;
    }
  }
#endif
  // i-p-j order, so the inner loop is contiguous.
  for (std::int64_t i = 0; i < m; ++i) {
    T* ci = c + i * ldc;
    if (!accumulate)
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
}

/// The most slabs gemm_split cuts C into. A constant, not the thread count: where C is cut is
/// then fixed by the shape alone, and a pool of any size runs the same calls. (With the cut
/// following the thread count, bits depended on it wherever the BLAS kernel rounds an element
/// differently by where it sits in the call: OpenBLAS 0.3.21's Haswell sgemm, which it picks on
/// AMD Zen 5, changes rows near a cut at 592 of 1176, its SkylakeX kernel none.)
inline constexpr std::int64_t gemm_max_parts = 4;

/// Row-major C[m,n] = op(A) * op(B) (dense operands), on the pool's threads: one `serial` call
/// (a single-threaded GEMM: BLAS, oneDNN or the portable loop) per slab of C, rows when
/// m is the larger side, else columns (each call packs its slab of one operand and all of the
/// other, so the smaller operand is the one packed again). Every slab is at least 128 wide and a
/// product of at least 2^21 m*n*k: BLAS libraries pick kernels by size (OpenBLAS's small-matrix
/// kernel, below 100^3, rounds differently from its blocked one), and with every slab on the
/// blocked kernel, few kernels round an element differently by how C is cut; the cut itself
/// does not depend on the thread count (gemm_max_parts). Slabs are multiples of 16. A and B may
/// be of another type than C (bfloat16 operands of a float32 product).
template <class T, class U, class Serial>
void gemm_split(thread_pool& pool, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                const T* a, const T* b, U* c, Serial&& serial) {
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
  const bool by_rows = m >= n;
  const std::int64_t side = by_rows ? m : n, unit = 16;
  const std::int64_t parts =
      std::min<std::int64_t>({gemm_max_parts, side / 128, m * n * k / (std::int64_t{1} << 21)});
  if (parts <= 1) {
    serial(ta, tb, m, n, k, a, lda, b, ldb, c, n);
    return;
  }
  const std::int64_t slab = ((side + unit - 1) / unit + parts - 1) / parts * unit;
  pool.parallel_for(parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t lo = p * slab, hi = std::min(side, lo + slab);
      if (lo >= hi)
        continue;
      if (by_rows)
        serial(ta, tb, hi - lo, n, k, ta ? a + lo : a + lo * lda, lda, b, ldb, c + lo * n, n);
      else
        serial(ta, tb, m, hi - lo, k, a, lda, tb ? b + lo * ldb : b + lo, ldb, c + lo, n);
    }
  });
}

/// gemm_split with one BLAS (or portable) call per slab.
template <class T>
void gemm(thread_pool& pool, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
          const T* a, const T* b, T* c) {
  gemm_split(pool, ta, tb, m, n, k, a, b, c,
             [](bool ta_, bool tb_, std::int64_t m_, std::int64_t n_, std::int64_t k_, const T* a_,
                std::int64_t lda, const T* b_, std::int64_t ldb, T* c_, std::int64_t ldc) {
               gemm_serial(ta_, tb_, m_, n_, k_, a_, lda, b_, ldb, c_, ldc);
             });
}

} // namespace typeflow::cpu_backend
