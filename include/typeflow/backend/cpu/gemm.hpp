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
/// other, so the smaller operand is the one packed again), or a 2x2 grid (below). The slab count is
/// 1, 2 or 4 (gemm_max_parts), never 3: a pool of 2 or 4 threads (the common sizes) then runs every
/// slab in one round (three slabs on two threads leave one idle for a round: bench/README.md,
/// *Figures moved from code comments*). Every slab is at least 96 wide and a product of at least
/// 2^22 m*n*k: BLAS libraries pick kernels by size (OpenBLAS's small-matrix kernel, below 100^3,
/// rounds differently from its blocked one), and with every slab on the blocked kernel, few kernels
/// round an element differently by how C is cut; smaller products lose more to the call and
/// the repacking than a second thread gains. The cut itself does not depend on the thread
/// count (gemm_max_parts). Slabs are multiples of 16. A and B may be of another type than C
/// (bfloat16 operands of a float32 product).
template <class T, class U, class Serial>
void gemm_split(thread_pool& pool, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                const T* a, const T* b, U* c, Serial&& serial) {
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
  const bool by_rows = m >= n;
  const std::int64_t side = by_rows ? m : n, unit = 16;
  const std::int64_t most =
      std::min<std::int64_t>({gemm_max_parts, side / 96, m * n * k / (std::int64_t{1} << 22)});
  std::int64_t parts = 1;
  while (parts * 2 <= most)
    parts *= 2;
  if (parts <= 1) {
    serial(ta, tb, m, n, k, a, lda, b, ldb, c, n);
    return;
  }
  // Four slabs of a nearly square C whose other operand is large (4 MB of float32 or more)
  // are a 2x2 grid: each call packs half of each operand (2A + 2B in all) instead of a
  // quarter of one and all of the other (A + 4B), which at 2048^3 is 16 MB packed again per
  // call. Below that size the packed operand stays in cache and slabs of one side run faster
  // (both measured: bench/README.md, *Figures moved from code comments*).
  const bool grid = parts == 4 && std::min(m, n) >= 192 && 2 * std::min(m, n) > side &&
                    (by_rows ? k * n : m * k) >= (std::int64_t{1} << 20);
  const std::int64_t row_parts = grid ? 2 : by_rows ? parts : 1;
  const std::int64_t col_parts = grid ? 2 : by_rows ? 1 : parts;
  const auto slab_of = [&](std::int64_t extent, std::int64_t cut) {
    return ((extent + unit - 1) / unit + cut - 1) / cut * unit;
  };
  const std::int64_t rows = slab_of(m, row_parts), cols = slab_of(n, col_parts);
  pool.parallel_for(parts, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t r0 = p / col_parts * rows, r1 = std::min(m, r0 + rows);
      const std::int64_t c0 = p % col_parts * cols, c1 = std::min(n, c0 + cols);
      if (r0 >= r1 || c0 >= c1)
        continue;
      serial(ta, tb, r1 - r0, c1 - c0, k, ta ? a + r0 : a + r0 * lda, lda,
             tb ? b + c0 * ldb : b + c0, ldb, c + r0 * n + c0, n);
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
