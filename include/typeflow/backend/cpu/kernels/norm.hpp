// CPU kernels of the normalization ops. layer_norm and its input gradient take one row at a
// time (two passes over a row that stays in cache: its statistics, then its output), rows
// split across the pool; gamma's gradient sums g * xhat over blocks of rows into per-block
// partial rows, then adds the blocks in order, so its result does not depend on the thread
// count. Arithmetic in the dtype (float sums in vector lanes: about sqrt(D) ulps); gamma's
// partial sums in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../../graph/flat.hpp"
#include "../../../ops/norm.hpp"
#include "../context.hpp"
#include "../simd.hpp"

namespace typeflow::cpu_backend {

namespace detail {

/// sum over i in [0, n) of f(i): vf(i) gives a vector of lanes [i, i + width) where xsimd is
/// available (float and double), sf(i) one element; two vector accumulators, then the tail.
template <class T, class VF, class SF>
T row_sum([[maybe_unused]] std::int64_t n, [[maybe_unused]] VF vf, SF sf) {
  std::int64_t i = 0;
  T s = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using V = simd::vec<T>;
    constexpr std::int64_t w = static_cast<std::int64_t>(V::size);
    V a0(T(0)), a1(T(0));
    for (; i + 2 * w <= n; i += 2 * w) {
      a0 += vf(i);
      a1 += vf(i + w);
    }
    s = xsimd::hadd(a0 + a1);
  }
#endif
  for (; i < n; ++i)
    s += sf(i);
  return s;
}

template <class T>
auto load(const T* p) {
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    return simd::vec<T>::load_unaligned(p);
  else
    return *p;
#else
  return *p;
#endif
}

/// A row's mean and 1 / sqrt(biased variance + eps), two passes over the row.
template <class T>
std::pair<T, T> row_moments(const T* x, std::int64_t d, double eps) {
  const T mean =
      row_sum<T>(
          d, [&](std::int64_t i) { return load(x + i); }, [&](std::int64_t i) { return x[i]; }) /
      static_cast<T>(d > 0 ? d : 1);
  const T sq = row_sum<T>(
      d,
      [&](std::int64_t i) {
        const auto c = load(x + i) - mean;
        return c * c;
      },
      [&](std::int64_t i) { return (x[i] - mean) * (x[i] - mean); });
  const T var = sq / static_cast<T>(d > 0 ? d : 1);
  return {mean, static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps))};
}
inline std::int64_t row_grain(std::int64_t d) {
  return std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(d, 1));
}
} // namespace detail

template <std::size_t I, std::uint64_t E, class T, class X, class G, class B>
void kernel(context& ctx, ops::layer_norm<E>*, T*, value* vals, void*, X*, G*, B*) {
  const auto& xd = vals[X::index].dims;
  const std::int64_t d = xd.d[xd.rank - 1], rows = d == 0 ? 0 : xd.numel() / d;
  const T* x = static_cast<const T*>(vals[X::index].data);
  const T* gamma = static_cast<const T*>(vals[G::index].data);
  const T* beta = static_cast<const T*>(vals[B::index].data);
  T* y = ctx.allocate<T>(vals[I]);
  ctx.pool.parallel_for(rows, detail::row_grain(d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * d;
      T* yr = y + r * d;
      const auto [mean, rstd] = detail::row_moments(xr, d, ops::layer_norm<E>::eps);
      for (std::int64_t j = 0; j < d; ++j) // vectorized by the compiler: no reduction
        yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
    }
  });
}

template <std::size_t I, std::uint64_t E, class T, class X, class G, class U>
void kernel(context& ctx, ops::layer_norm_grad<E>*, T*, value* vals, void*, X*, G*, U*) {
  const auto& xd = vals[X::index].dims;
  const std::int64_t d = xd.d[xd.rank - 1], rows = d == 0 ? 0 : xd.numel() / d;
  const T* x = static_cast<const T*>(vals[X::index].data);
  const T* gamma = static_cast<const T*>(vals[G::index].data);
  const T* up = static_cast<const T*>(vals[U::index].data);
  T* dx = ctx.allocate<T>(vals[I]);
  ctx.pool.parallel_for(rows, detail::row_grain(d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * d;
      const T* ur = up + r * d;
      const auto [mean, rstd] = detail::row_moments(xr, d, ops::layer_norm<E>::eps);
      // the means of h = g * gamma and of h * xhat
      const T mh =
          detail::row_sum<T>(
              d, [&](std::int64_t j) { return detail::load(ur + j) * detail::load(gamma + j); },
              [&](std::int64_t j) { return ur[j] * gamma[j]; }) /
          static_cast<T>(d);
      const T mhx = detail::row_sum<T>(
                        d,
                        [&](std::int64_t j) {
                          return detail::load(ur + j) * detail::load(gamma + j) *
                                 (detail::load(xr + j) - mean);
                        },
                        [&](std::int64_t j) { return ur[j] * gamma[j] * (xr[j] - mean); }) *
                    rstd / static_cast<T>(d);
      T* out = dx + r * d;
      for (std::int64_t j = 0; j < d; ++j) // vectorized by the compiler: no reduction
        out[j] = rstd * (ur[j] * gamma[j] - mh - (xr[j] - mean) * rstd * mhx);
    }
  });
}

template <std::size_t I, std::uint64_t E, class T, class X, class U>
void kernel(context& ctx, ops::layer_norm_grad_gamma<E>*, T*, value* vals, void*, X*, U*) {
  const auto& xd = vals[X::index].dims;
  const std::int64_t d = xd.d[xd.rank - 1], rows = d == 0 ? 0 : xd.numel() / d;
  const T* x = static_cast<const T*>(vals[X::index].data);
  const T* up = static_cast<const T*>(vals[U::index].data);
  T* dg = ctx.allocate<T>(vals[I]);
  constexpr std::int64_t block = 64; // rows per partial sum
  const std::int64_t blocks = (rows + block - 1) / block;
  std::vector<double> partial(static_cast<std::size_t>(blocks * d), 0.0);
  ctx.pool.parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      double* acc = partial.data() + b * d;
      for (std::int64_t r = b * block; r < std::min(rows, (b + 1) * block); ++r) {
        const T* xr = x + r * d;
        const T* ur = up + r * d;
        const auto [mean, rstd] = detail::row_moments(xr, d, ops::layer_norm<E>::eps);
        for (std::int64_t j = 0; j < d; ++j)
          acc[j] += static_cast<double>(ur[j]) * (static_cast<double>(xr[j]) - mean) * rstd;
      }
    }
  });
  for (std::int64_t j = 0; j < d; ++j) {
    double s = 0;
    for (std::int64_t b = 0; b < blocks; ++b)
      s += partial[static_cast<std::size_t>(b * d + j)];
    dg[j] = static_cast<T>(s);
  }
}

} // namespace typeflow::cpu_backend
