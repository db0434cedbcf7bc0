// CPU kernels of the normalization ops. layer_norm and its input gradient take one row at a
// time (two passes over a row that stays in cache: its statistics, then its output), rows
// split across the pool; gamma's gradient sums g * xhat over blocks of rows into per-block
// partial rows, then adds the blocks in order, so its result does not depend on the thread
// count. Statistics accumulate in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../../graph/flat.hpp"
#include "../../../ops/norm.hpp"
#include "../context.hpp"

namespace typeflow::cpu_backend {

namespace detail {
/// A row's mean and 1 / sqrt(biased variance + eps).
template <class T>
std::pair<double, double> row_moments(const T* x, std::int64_t d, double eps) {
  double sum = 0;
  for (std::int64_t j = 0; j < d; ++j)
    sum += static_cast<double>(x[j]);
  const double mean = d > 0 ? sum / static_cast<double>(d) : 0.0;
  double sq = 0;
  for (std::int64_t j = 0; j < d; ++j) {
    const double c = static_cast<double>(x[j]) - mean;
    sq += c * c;
  }
  const double var = d > 0 ? sq / static_cast<double>(d) : 0.0;
  return {mean, 1.0 / std::sqrt(var + eps)};
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
      for (std::int64_t j = 0; j < d; ++j)
        yr[j] = static_cast<T>((static_cast<double>(xr[j]) - mean) * rstd *
                                   static_cast<double>(gamma[j]) +
                               static_cast<double>(beta[j]));
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
      double sh = 0, shx = 0; // sums of h = g * gamma and of h * xhat
      for (std::int64_t j = 0; j < d; ++j) {
        const double h = static_cast<double>(ur[j]) * static_cast<double>(gamma[j]);
        sh += h;
        shx += h * (static_cast<double>(xr[j]) - mean) * rstd;
      }
      const double mh = sh / static_cast<double>(d), mhx = shx / static_cast<double>(d);
      T* out = dx + r * d;
      for (std::int64_t j = 0; j < d; ++j) {
        const double h = static_cast<double>(ur[j]) * static_cast<double>(gamma[j]);
        const double xhat = (static_cast<double>(xr[j]) - mean) * rstd;
        out[j] = static_cast<T>(rstd * (h - mh - xhat * mhx));
      }
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
