// CUDA kernels of the normalization ops: layer_norm and its input gradient with one warp per
// row (each lane strides over the row, sums by warp shuffles, statistics in double), and
// gamma's gradient as one thread per column over all rows, from per-row statistics that a
// first warp-per-row kernel stores (no atomics: the sums are deterministic). Batch norm's
// channel sums (its moments, its gradient's) take one thread per channel over all rows, in
// double; its normalization and input gradient one thread per element. (Correct, not yet fast
// for few channels: a tiled reduction is issue t3-D's work.)
#pragma once
#include <cstdint>
#include <type_traits>

#include "../../ops/norm.hpp"
#include "../common/norm.hpp"
#include "context.cuh"
#include "nn.cuh"
#include "runtime.hpp"

namespace typeflow::cuda_backend {

__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// The row's mean and 1 / sqrt(var + eps), in every lane of the warp.
template <class T>
__device__ void warp_row_moments(const T* x, std::int64_t d, double eps, int lane, double& mean,
                                 double& rstd) {
  double s = 0;
  for (std::int64_t j = lane; j < d; j += 32)
    s += static_cast<double>(x[j]);
  mean = warp_sum(s) / static_cast<double>(d);
  double q = 0;
  for (std::int64_t j = lane; j < d; j += 32) {
    const double c = static_cast<double>(x[j]) - mean;
    q += c * c;
  }
  rstd = ::rsqrt(warp_sum(q) / static_cast<double>(d) + eps);
}

#define TYPEFLOW_WARP_ROWS(r, rows)                                                                \
  const int lane = static_cast<int>(threadIdx.x) & 31;                                             \
  for (std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;   \
       r < (rows); r += static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32)

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* gamma, const T* beta, std::int64_t rows,
                                  std::int64_t d, double eps, T* y) {
  TYPEFLOW_WARP_ROWS(r, rows) {
    double mean, rstd;
    warp_row_moments(x + r * d, d, eps, lane, mean, rstd);
    for (std::int64_t j = lane; j < d; j += 32)
      y[r * d + j] = static_cast<T>((static_cast<double>(x[r * d + j]) - mean) * rstd *
                                        static_cast<double>(gamma[j]) +
                                    static_cast<double>(beta[j]));
  }
}

template <class T>
__global__ void layer_norm_grad_kernel(const T* x, const T* gamma, const T* up, std::int64_t rows,
                                       std::int64_t d, double eps, T* dx) {
  TYPEFLOW_WARP_ROWS(r, rows) {
    double mean, rstd;
    warp_row_moments(x + r * d, d, eps, lane, mean, rstd);
    double sh = 0, shx = 0;
    for (std::int64_t j = lane; j < d; j += 32) {
      const double h = static_cast<double>(up[r * d + j]) * static_cast<double>(gamma[j]);
      sh += h;
      shx += h * (static_cast<double>(x[r * d + j]) - mean) * rstd;
    }
    const double mh = warp_sum(sh) / static_cast<double>(d);
    const double mhx = warp_sum(shx) / static_cast<double>(d);
    for (std::int64_t j = lane; j < d; j += 32) {
      const double h = static_cast<double>(up[r * d + j]) * static_cast<double>(gamma[j]);
      const double xhat = (static_cast<double>(x[r * d + j]) - mean) * rstd;
      dx[r * d + j] = static_cast<T>(rstd * (h - mh - xhat * mhx));
    }
  }
}

template <class T>
__global__ void row_moments_kernel(const T* x, std::int64_t rows, std::int64_t d, double eps,
                                   double* mean, double* rstd) {
  TYPEFLOW_WARP_ROWS(r, rows) {
    double m, s;
    warp_row_moments(x + r * d, d, eps, lane, m, s);
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

template <class T>
__global__ void layer_norm_grad_gamma_kernel(const T* x, const T* up, const double* mean,
                                             const double* rstd, std::int64_t rows, std::int64_t d,
                                             T* dg) {
  TYPEFLOW_GRID_STRIDE(j, d) {
    double s = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      s += static_cast<double>(up[r * d + j]) * (static_cast<double>(x[r * d + j]) - mean[r]) *
           rstd[r];
    dg[j] = static_cast<T>(s);
  }
}
#undef TYPEFLOW_WARP_ROWS

inline int warp_rows_grid(std::int64_t rows) {
  return grid_for(rows * 32);
}

template <std::size_t I, std::uint64_t E, class T, class X, class G, class B>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::layer_norm<E>*, T*, value* vals,
                                                void*, X*, G*, B*) {
  const auto& xd = vals[X::index].dims;
  const std::int64_t d = xd.d[xd.rank - 1], rows = d == 0 ? 0 : xd.numel() / d;
  T* y = ctx.output<T>(vals[I]);
  if (rows == 0)
    return;
  layer_norm_kernel<T><<<warp_rows_grid(rows), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[X::index].data), static_cast<const T*>(vals[G::index].data),
      static_cast<const T*>(vals[B::index].data), rows, d, ops::layer_norm<E>::eps, y);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::uint64_t E, class T, class X, class G, class U>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::layer_norm_grad<E>*, T*,
                                                value* vals, void*, X*, G*, U*) {
  const auto& xd = vals[X::index].dims;
  const std::int64_t d = xd.d[xd.rank - 1], rows = d == 0 ? 0 : xd.numel() / d;
  T* dx = ctx.output<T>(vals[I]);
  if (rows == 0)
    return;
  layer_norm_grad_kernel<T><<<warp_rows_grid(rows), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[X::index].data), static_cast<const T*>(vals[G::index].data),
      static_cast<const T*>(vals[U::index].data), rows, d, ops::layer_norm<E>::eps, dx);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::uint64_t E, class T, class X, class U>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::layer_norm_grad_gamma<E>*, T*,
                                                value* vals, void*, X*, U*) {
  const auto& xd = vals[X::index].dims;
  const std::int64_t d = xd.d[xd.rank - 1], rows = d == 0 ? 0 : xd.numel() / d;
  T* dg = ctx.output<T>(vals[I]);
  if (d == 0)
    return;
  if (rows == 0) {
    TYPEFLOW_CUDA_CHECK(
        cudaMemsetAsync(dg, 0, sizeof(T) * static_cast<std::size_t>(d), ctx.stream()));
    return;
  }
  backend::rt_value stats; // the rows' means and rstds, freed when this step's work is queued
  double* mean = ctx.scratch<double>(stats, 2 * rows);
  const T* x = static_cast<const T*>(vals[X::index].data);
  row_moments_kernel<T><<<warp_rows_grid(rows), 256, 0, ctx.stream()>>>(
      x, rows, d, ops::layer_norm_grad_gamma<E>::eps, mean, mean + rows);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  layer_norm_grad_gamma_kernel<T><<<grid_for(d), 256, 0, ctx.stream()>>>(
      x, static_cast<const T*>(vals[U::index].data), mean, mean + rows, rows, d, dg);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

// ---- batch norm ------------------------------------------------------------------------------
template <class T>
__global__ void batch_moments_kernel(const T* x, std::int64_t rows, std::int64_t c, T* out) {
  TYPEFLOW_GRID_STRIDE(j, c) {
    // sums of x - k and (x - k)^2 with k the first row: no cancellation when |mean| >> std
    const double k = static_cast<double>(x[j]);
    double s1 = 0, s2 = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double d = static_cast<double>(x[r * c + j]) - k;
      s1 += d;
      s2 += d * d;
    }
    const double n = static_cast<double>(rows);
    const double m2 = fmax(0.0, s2 - s1 * s1 / n);
    out[j] = static_cast<T>(k + s1 / n);
    out[c + j] = static_cast<T>(m2 / n);
    out[2 * c + j] = static_cast<T>(m2 / (n - 1));
  }
}

/// Channel j's mean and 1 / sqrt(biased variance + eps), from moments [3, c].
template <class T>
__device__ void channel_moments(const T* m, std::int64_t c, std::int64_t j, double eps,
                                double& mean, double& rstd) {
  mean = static_cast<double>(m[j]);
  rstd = ::rsqrt(static_cast<double>(m[c + j]) + eps);
}

template <class T>
__global__ void batch_norm_kernel(const T* x, const T* m, const T* gamma, const T* beta,
                                  std::int64_t n, std::int64_t c, double eps, T* y) {
  TYPEFLOW_GRID_STRIDE(i, n) {
    const std::int64_t j = i % c;
    double mean, rstd;
    channel_moments(m, c, j, eps, mean, rstd);
    const T a = static_cast<T>(static_cast<double>(gamma[j]) * rstd);
    y[i] = (x[i] - static_cast<T>(mean)) * a + beta[j];
  }
}

template <class T>
__global__ void batch_norm_grad_stats_kernel(const T* x, const T* m, const T* up, std::int64_t rows,
                                             std::int64_t c, double eps, T* out) {
  TYPEFLOW_GRID_STRIDE(j, c) {
    double mean, rstd;
    channel_moments(m, c, j, eps, mean, rstd);
    double s1 = 0, s2 = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double u = static_cast<double>(up[r * c + j]);
      s1 += u;
      s2 += u * (static_cast<double>(x[r * c + j]) - mean);
    }
    out[j] = static_cast<T>(s1);
    out[c + j] = static_cast<T>(s2 * rstd);
  }
}

template <class T>
__global__ void batch_norm_grad_kernel(const T* x, const T* m, const T* gamma, const T* up,
                                       const T* sums, std::int64_t n, std::int64_t c, double rows,
                                       double eps, T* dx) {
  TYPEFLOW_GRID_STRIDE(i, n) {
    const std::int64_t j = i % c;
    double mean, rstd;
    channel_moments(m, c, j, eps, mean, rstd);
    // gamma rstd (u - sum(u) / n - xhat sum(u xhat) / n), as the CPU kernel's coefficients
    const double e = static_cast<double>(gamma[j]) * rstd;
    const T a = static_cast<T>(-e * rstd * static_cast<double>(sums[c + j]) / rows);
    const T b = static_cast<T>(-e * static_cast<double>(sums[j]) / rows);
    dx[i] = up[i] * static_cast<T>(e) + (x[i] - static_cast<T>(mean)) * a + b;
  }
}

template <std::size_t I, class T, class X>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::batch_moments*, T*, value* vals,
                                                void*, X*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  g.check_batch("batch_moments");
  T* out = ctx.output<T>(vals[I]);
  if (g.c == 0)
    return;
  batch_moments_kernel<T><<<grid_for(g.c), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[X::index].data), g.rows, g.c, out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::uint64_t E, std::uint64_t D, class T, class X, class M, class G,
          class B, class MM, class MV>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::batch_norm<E, D>*, T*,
                                                value* vals, void*, X*, M*, G*, B*, MM*, MV*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  T* y = ctx.output<T>(vals[I]);
  const std::int64_t n = g.rows * g.c;
  if (n == 0)
    return;
  batch_norm_kernel<T><<<grid_for(n), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[X::index].data), static_cast<const T*>(vals[M::index].data),
      static_cast<const T*>(vals[G::index].data), static_cast<const T*>(vals[B::index].data), n,
      g.c, ops::batch_norm<E, D>::eps, y);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::uint64_t E, class T, class X, class M, class U>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::batch_norm_grad_stats<E>*, T*,
                                                value* vals, void*, X*, M*, U*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  T* out = ctx.output<T>(vals[I]);
  if (g.c == 0)
    return;
  batch_norm_grad_stats_kernel<T><<<grid_for(g.c), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[X::index].data), static_cast<const T*>(vals[M::index].data),
      static_cast<const T*>(vals[U::index].data), g.rows, g.c, ops::batch_norm_grad_stats<E>::eps,
      out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::uint64_t E, class T, class X, class M, class G, class U, class S>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::batch_norm_grad<E>*, T*,
                                                value* vals, void*, X*, M*, G*, U*, S*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  T* dx = ctx.output<T>(vals[I]);
  const std::int64_t n = g.rows * g.c;
  if (n == 0)
    return;
  batch_norm_grad_kernel<T><<<grid_for(n), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[X::index].data), static_cast<const T*>(vals[M::index].data),
      static_cast<const T*>(vals[G::index].data), static_cast<const T*>(vals[U::index].data),
      static_cast<const T*>(vals[S::index].data), n, g.c, static_cast<double>(g.rows),
      ops::batch_norm_grad<E>::eps, dx);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

} // namespace typeflow::cuda_backend
