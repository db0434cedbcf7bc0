// CPU kernels of the normalization ops. layer_norm and its input gradient take one row at a
// time (two passes over a row that stays in cache: its statistics, then its output), rows
// split across the pool, and write their rows with non-temporal stores where their arrays
// together exceed the last-level cache (as the fused loops do); gamma's gradient sums g * xhat over
// blocks of rows into per-block partial rows, then adds the blocks in order, so its result does not
// depend on the thread count. Arithmetic in the dtype (float sums in vector lanes: about sqrt(D)
// ulps); gamma's partial sums in double. batch norm's channel sums (its moments, its gradient's
// sums) run over a fixed number of row blocks (at most 256, set by the row count alone, so the
// result does not depend on the thread count), each block's sums in double (float32's in float
// lanes over spans of 32 rows first), then added in order; its normalization and input gradient are
// one elementwise pass over rows with per-channel coefficients.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "../../../graph/flat.hpp"
#include "../../../ops/norm.hpp"
#include "../../common/norm.hpp"
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

/// A row's mean and 1 / sqrt(biased variance + eps), two passes over the row.
template <class T>
std::pair<T, T> row_moments(const T* x, std::int64_t d, double eps) {
  const T mean = row_sum<T>(
                     d, [&](std::int64_t i) { return simd::lane_load(x + i); },
                     [&](std::int64_t i) { return x[i]; }) /
                 static_cast<T>(d > 0 ? d : 1);
  const T sq = row_sum<T>(
      d,
      [&](std::int64_t i) {
        const auto c = simd::lane_load(x + i) - mean;
        return c * c;
      },
      [&](std::int64_t i) { return (x[i] - mean) * (x[i] - mean); });
  const T var = sq / static_cast<T>(d > 0 ? d : 1);
  return {mean, static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + eps))};
}
/// Over j in [0, d), with c = x[j] - mean and h = u[j] gamma[j]: the sums of c^2, h and h c,
/// in one pass (vector lanes where xsimd is available, as row_sum).
template <class T>
std::array<T, 3> row_sums3(const T* x, const T* u, const T* gamma, T mean, std::int64_t d) {
  std::int64_t j = 0;
  std::array<T, 3> s{T(0), T(0), T(0)};
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using V = simd::vec<T>;
    constexpr std::int64_t w = static_cast<std::int64_t>(V::size);
    const V vm(mean);
    V a[2][3];
    for (auto& k : a)
      k[0] = k[1] = k[2] = V(T(0));
    // two sets of accumulators: each sum's chain of additions is half as long
    for (; j + 2 * w <= d; j += 2 * w)
      for (int k = 0; k < 2; ++k) {
        const V c = V::load_unaligned(x + j + k * w) - vm;
        const V h = V::load_unaligned(u + j + k * w) * V::load_unaligned(gamma + j + k * w);
        a[k][0] = xsimd::fma(c, c, a[k][0]);
        a[k][1] += h;
        a[k][2] = xsimd::fma(h, c, a[k][2]);
      }
    s = {xsimd::hadd(a[0][0] + a[1][0]), xsimd::hadd(a[0][1] + a[1][1]),
         xsimd::hadd(a[0][2] + a[1][2])};
  }
#endif
  for (; j < d; ++j) {
    const T c = x[j] - mean, h = u[j] * gamma[j];
    s[0] += c * c;
    s[1] += h;
    s[2] += h * c;
  }
  return s;
}
/// Asks for the d elements of row p ahead of their use: a row's passes run on the row in L1,
/// where the hardware's prefetcher, which follows the current pass's loads, has nothing to fetch
/// ahead of the next row; a request issued two rows earlier overlaps that row's memory latency
/// with this row's arithmetic (layer_norm's forward; its gradient, which reads two rows per row,
/// ran slower with it: bench/README.md).
template <class T>
inline void prefetch_row([[maybe_unused]] const T* p, [[maybe_unused]] std::int64_t d) {
#if defined(__GNUC__)
  const char* b = reinterpret_cast<const char*>(p);
  const std::int64_t bytes = d * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t o = 0; o < bytes; o += 64)
    __builtin_prefetch(b + o);
#endif
}
/// out[j] = f(j) for j in [0, d): vf(j) the lanes [j, j + width), sf(j) one element. With
/// stream (a pass whose operands and result exceed the last-level cache, as fused loops decide),
/// the aligned lanes go out by non-temporal stores, which skip reading each line before writing
/// it; otherwise the compiler vectorizes the element loop. A streaming caller fences before its
/// rows are published (simd::stream_fence).
template <class T, class VF, class SF>
void row_store(T* out, std::int64_t d, [[maybe_unused]] bool stream, [[maybe_unused]] VF vf,
               SF sf) {
  std::int64_t j = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (simd::has_stream_store<T>) {
    if (stream) {
      using V = simd::vec<T>;
      constexpr std::int64_t w = static_cast<std::int64_t>(V::size);
      for (; j < d && reinterpret_cast<std::uintptr_t>(out + j) % sizeof(V) != 0; ++j)
        out[j] = sf(j);
      for (; j + w <= d; j += w)
        simd::stream_store(out + j, vf(j));
    }
  }
#endif
  for (; j < d; ++j)
    out[j] = sf(j);
}
/// Whether a row pass over `arrays` arrays of n elements of T streams its result (row_store).
template <class T>
bool streams([[maybe_unused]] std::int64_t n, [[maybe_unused]] std::int64_t arrays) {
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (simd::has_stream_store<T>)
    return static_cast<std::size_t>(n * arrays) * sizeof(T) > simd::last_level_cache_bytes();
#endif
  return false;
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
  const bool stream = detail::streams<T>(rows * d, 2); // x read, y written
  ctx.pool.parallel_for(rows, detail::row_grain(d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * d;
      if (r + 2 < r1)
        detail::prefetch_row(xr + 2 * d, d);
      const auto [mean, rstd] = detail::row_moments(xr, d, ops::layer_norm<E>::eps);
      detail::row_store(
          y + r * d, d, stream,
          [&](auto j) { // the lanes of the element loop's arithmetic, in its order
            return (simd::lane_load(xr + j) - mean) * rstd * simd::lane_load(gamma + j) +
                   simd::lane_load(beta + j);
          },
          [&](std::int64_t j) { return (xr[j] - mean) * rstd * gamma[j] + beta[j]; });
    }
#if defined(TYPEFLOW_HAS_XSIMD)
    if (stream)
      simd::stream_fence(); // before the join publishes the rows to other threads
#endif
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
  const bool stream = detail::streams<T>(rows * d, 3); // x and u read, dx written
  ctx.pool.parallel_for(rows, detail::row_grain(d), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * d;
      const T* ur = up + r * d;
      // the row's mean; then in one pass its variance and the means of h = g * gamma and of
      // h * xhat (five passes over the row before, one sum each)
      const T mean = detail::row_sum<T>(
                         d, [&](std::int64_t j) { return simd::lane_load(xr + j); },
                         [&](std::int64_t j) { return xr[j]; }) /
                     static_cast<T>(d);
      const auto [sq, sh, shx] = detail::row_sums3<T>(xr, ur, gamma, mean, d);
      const T rstd = static_cast<T>(
          1.0 / std::sqrt(static_cast<double>(sq / static_cast<T>(d)) + ops::layer_norm<E>::eps));
      const T mh = sh / static_cast<T>(d);
      const T mhx = shx * rstd / static_cast<T>(d);
      detail::row_store(
          dx + r * d, d, stream,
          [&](auto j) {
            return rstd * (simd::lane_load(ur + j) * simd::lane_load(gamma + j) - mh -
                           (simd::lane_load(xr + j) - mean) * rstd * mhx);
          },
          [&](std::int64_t j) {
            return rstd * (ur[j] * gamma[j] - mh - (xr[j] - mean) * rstd * mhx);
          });
    }
#if defined(TYPEFLOW_HAS_XSIMD)
    if (stream)
      simd::stream_fence(); // before the join publishes the rows to other threads
#endif
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

namespace detail {
/// Per-channel sums over all rows of x [rows, c]: add(acc, r0, r1) adds rows [r0, r1) into the
/// `Sums` arrays of c doubles at acc (acc[k * c + j]); blocks of rows in a fixed order.
template <std::size_t Sums, class Add>
std::vector<double> channel_sums(context& ctx, std::int64_t rows, std::int64_t c, Add add) {
  const std::int64_t blocks = std::min<std::int64_t>(256, (rows + 63) / 64);
  const std::int64_t per = blocks == 0 ? 0 : (rows + blocks - 1) / blocks;
  const std::size_t width = Sums * static_cast<std::size_t>(c);
  std::vector<double> partial(static_cast<std::size_t>(blocks) * width, 0.0);
  ctx.pool.parallel_for(blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b)
      add(partial.data() + static_cast<std::size_t>(b) * width, b * per,
          std::min(rows, (b + 1) * per));
  });
  std::vector<double> total(width, 0.0);
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::size_t k = 0; k < width; ++k)
      total[k] += partial[static_cast<std::size_t>(b) * width + k];
  return total;
}
/// acc[j] += the sum over rows [r0, r1) of a(r, j), and acc[c + j] += that of a(r, j) b(r, j),
/// with a = p[r, j] - kp[j] and b = q[r, j] - kq[j] (b = a where Same: q = p and kq = kp), for
/// x [rows, c] rows. float32 with xsimd: groups of up to four vectors of channels, their sums in
/// float lanes over spans of 32 rows, each span's added to acc in double (a double accumulator
/// per element, read and written for every row, held this pass far below the read bandwidth:
/// bench/README.md, *Batch norm's passes*). Other dtypes and the channels past the last whole
/// vector: double throughout.
template <bool Same, class T>
void channel_sums2(const T* p, const T* kp, const T* q, const T* kq, std::int64_t r0,
                   std::int64_t r1, std::int64_t c, double* acc) {
  std::int64_t j0 = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_same_v<T, float>) {
    using V = simd::vec<float>;
    constexpr std::int64_t w = static_cast<std::int64_t>(V::size), span = 32;
    const auto group = [&]<int G>(std::integral_constant<int, G>) {
      V ka[G], kb[G];
      for (int g = 0; g < G; ++g) {
        ka[g] = V::load_unaligned(kp + j0 + g * w);
        kb[g] = Same ? ka[g] : V::load_unaligned(kq + j0 + g * w);
      }
      alignas(V::arch_type::alignment()) float t1[G * w], t2[G * w];
      for (std::int64_t r = r0; r < r1;) {
        const std::int64_t end = std::min(r1, r + span);
        V s1[G], s2[G];
        for (int g = 0; g < G; ++g)
          s1[g] = s2[g] = V(0.0f);
        for (; r < end; ++r)
          for (int g = 0; g < G; ++g) {
            const V a = V::load_unaligned(p + r * c + j0 + g * w) - ka[g];
            const V b = Same ? a : V::load_unaligned(q + r * c + j0 + g * w) - kb[g];
            s1[g] += a;
            s2[g] = xsimd::fma(a, b, s2[g]);
          }
        for (int g = 0; g < G; ++g) {
          s1[g].store_aligned(t1 + g * w);
          s2[g].store_aligned(t2 + g * w);
        }
        for (std::int64_t k = 0; k < G * w; ++k) {
          acc[j0 + k] += static_cast<double>(t1[k]);
          acc[c + j0 + k] += static_cast<double>(t2[k]);
        }
      }
      j0 += G * w;
    };
    while (j0 + 4 * w <= c)
      group(std::integral_constant<int, 4>{});
    while (j0 + w <= c)
      group(std::integral_constant<int, 1>{});
  }
#endif
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t j = j0; j < c; ++j) {
      const double a = static_cast<double>(p[r * c + j]) - static_cast<double>(kp[j]);
      const double b = Same ? a : static_cast<double>(q[r * c + j]) - static_cast<double>(kq[j]);
      acc[j] += a;
      acc[c + j] += a * b;
    }
}

/// Each channel's mean and 1 / sqrt(biased variance + eps) from moments [3, c].
template <class T>
void channel_scale(const T* m, std::int64_t c, double eps, std::vector<double>& mean,
                   std::vector<double>& rstd) {
  mean.resize(static_cast<std::size_t>(c));
  rstd.resize(static_cast<std::size_t>(c));
  for (std::int64_t j = 0; j < c; ++j) {
    mean[static_cast<std::size_t>(j)] = static_cast<double>(m[j]);
    rstd[static_cast<std::size_t>(j)] = 1.0 / std::sqrt(static_cast<double>(m[c + j]) + eps);
  }
}
/// Per-channel coefficients of an affine pass: out = (x - center) a + b (+ u e).
template <class T>
struct channel_coefs {
  std::vector<T> center, a, b, e;
  explicit channel_coefs(std::int64_t c)
      : center(static_cast<std::size_t>(c)), a(center.size()), b(center.size()), e(center.size()) {}
};
/// out[r, j] = (x[r, j] - center[j]) a[j] + b[j], plus u[r, j] e[j] where u is given; rows
/// split across the pool, in T. Centring first keeps the result accurate when |mean| >> std.
template <class T>
void channel_affine(context& ctx, const T* x, const T* u, std::int64_t rows, std::int64_t c,
                    const channel_coefs<T>& k, T* out) {
  const T* m = k.center.data();
  const T* a = k.a.data();
  const T* b = k.b.data();
  const T* e = k.e.data();
  ctx.pool.parallel_for(rows, row_grain(c), [&](std::int64_t r0, std::int64_t r1) {
    std::int64_t j0 = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
    // float32: groups of up to four vectors of channels, their coefficients held in registers
    // across the rows (a loop per row of c elements paid its set-up in every row).
    if constexpr (std::is_same_v<T, float>) {
      using V = simd::vec<float>;
      constexpr std::int64_t w = static_cast<std::int64_t>(V::size);
      const auto group = [&]<int G>(std::integral_constant<int, G>) {
        V vm[G], va[G], vb[G], ve[G];
        for (int g = 0; g < G; ++g) {
          vm[g] = V::load_unaligned(m + j0 + g * w);
          va[g] = V::load_unaligned(a + j0 + g * w);
          vb[g] = V::load_unaligned(b + j0 + g * w);
          ve[g] = V::load_unaligned(e + j0 + g * w);
        }
        for (std::int64_t r = r0; r < r1; ++r)
          for (int g = 0; g < G; ++g) {
            const std::int64_t i = r * c + j0 + g * w;
            V y = xsimd::fma(V::load_unaligned(x + i) - vm[g], va[g], vb[g]);
            if (u != nullptr)
              y = xsimd::fma(V::load_unaligned(u + i), ve[g], y);
            y.store_unaligned(out + i);
          }
        j0 += G * w;
      };
      while (j0 + 4 * w <= c)
        group(std::integral_constant<int, 4>{});
      while (j0 + w <= c)
        group(std::integral_constant<int, 1>{});
      if (j0 == c)
        return;
    }
#endif
    for (std::int64_t r = r0; r < r1; ++r) {
      // restrict: the output overlaps no input, so the compiler vectorizes without a runtime
      // overlap check per row
      const T* __restrict__ xr = x + r * c;
      T* __restrict__ o = out + r * c;
      if (u == nullptr) {
        for (std::int64_t j = j0; j < c; ++j)
          o[j] = (xr[j] - m[j]) * a[j] + b[j];
      } else {
        const T* __restrict__ ur = u + r * c;
        for (std::int64_t j = j0; j < c; ++j)
          o[j] = ur[j] * e[j] + (xr[j] - m[j]) * a[j] + b[j];
      }
    }
  });
}
} // namespace detail

template <std::size_t I, class T, class X>
void kernel(context& ctx, ops::batch_moments*, T*, value* vals, void*, X*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  g.check_batch("batch_moments");
  const T* x = static_cast<const T*>(vals[X::index].data);
  const std::int64_t c = g.c;
  T* out = ctx.allocate<T>(vals[I]);
  if (c == 0)
    return;
  // sums of x - k and (x - k)^2 with k the first row: no cancellation when |mean| >> std
  const auto s =
      detail::channel_sums<2>(ctx, g.rows, c, [&](double* acc, std::int64_t r0, std::int64_t r1) {
        detail::channel_sums2<true>(x, x, x, x, r0, r1, c, acc);
      });
  const double n = static_cast<double>(g.rows);
  for (std::int64_t j = 0; j < c; ++j) {
    const double s1 = s[static_cast<std::size_t>(j)], s2 = s[static_cast<std::size_t>(c + j)];
    const double m2 = std::max(0.0, s2 - s1 * s1 / n); // sum of squared deviations
    out[j] = static_cast<T>(static_cast<double>(x[j]) + s1 / n);
    out[c + j] = static_cast<T>(m2 / n);
    out[2 * c + j] = static_cast<T>(m2 / (n - 1));
  }
}

template <std::size_t I, std::uint64_t E, std::uint64_t D, class T, class X, class M, class G,
          class B, class MM, class MV>
void kernel(context& ctx, ops::batch_norm<E, D>*, T*, value* vals, void*, X*, M*, G*, B*, MM*,
            MV*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  const T* gamma = static_cast<const T*>(vals[G::index].data);
  const T* beta = static_cast<const T*>(vals[B::index].data);
  std::vector<double> mean, rstd;
  detail::channel_scale(static_cast<const T*>(vals[M::index].data), g.c, ops::batch_norm<E, D>::eps,
                        mean, rstd);
  // y = (x - mean) a + beta with a = gamma rstd
  detail::channel_coefs<T> k(g.c);
  for (std::size_t j = 0; j < k.a.size(); ++j) {
    k.center[j] = static_cast<T>(mean[j]);
    k.a[j] = static_cast<T>(static_cast<double>(gamma[j]) * rstd[j]);
    k.b[j] = beta[j];
  }
  detail::channel_affine<T>(ctx, static_cast<const T*>(vals[X::index].data), nullptr, g.rows, g.c,
                            k, ctx.allocate<T>(vals[I]));
}

template <std::size_t I, std::uint64_t E, class T, class X, class M, class U>
void kernel(context& ctx, ops::batch_norm_grad_stats<E>*, T*, value* vals, void*, X*, M*, U*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  const T* x = static_cast<const T*>(vals[X::index].data);
  const T* up = static_cast<const T*>(vals[U::index].data);
  const std::int64_t c = g.c;
  std::vector<double> mean, rstd;
  detail::channel_scale(static_cast<const T*>(vals[M::index].data), c,
                        ops::batch_norm_grad_stats<E>::eps, mean, rstd);
  T* out = ctx.allocate<T>(vals[I]);
  // sums of u and u (x - mean), the mean in T (the centring of the forward pass's output too)
  std::vector<T> zero(static_cast<std::size_t>(c), T(0)), center(zero.size());
  for (std::size_t j = 0; j < center.size(); ++j)
    center[j] = static_cast<T>(mean[j]);
  const auto s =
      detail::channel_sums<2>(ctx, g.rows, c, [&](double* acc, std::int64_t r0, std::int64_t r1) {
        detail::channel_sums2<false>(up, zero.data(), x, center.data(), r0, r1, c, acc);
      });
  for (std::int64_t j = 0; j < c; ++j) {
    const auto k = static_cast<std::size_t>(j);
    out[j] = static_cast<T>(s[k]);
    out[c + j] = static_cast<T>(s[static_cast<std::size_t>(c) + k] * rstd[k]);
  }
}

template <std::size_t I, std::uint64_t E, class T, class X, class M, class G, class U, class S>
void kernel(context& ctx, ops::batch_norm_grad<E>*, T*, value* vals, void*, X*, M*, G*, U*, S*) {
  const auto g = backend::channel_geometry::of(vals[X::index].dims);
  const T* gamma = static_cast<const T*>(vals[G::index].data);
  const T* sums = static_cast<const T*>(vals[S::index].data);
  std::vector<double> mean, rstd;
  detail::channel_scale(static_cast<const T*>(vals[M::index].data), g.c,
                        ops::batch_norm_grad<E>::eps, mean, rstd);
  // dx = gamma rstd (u - sum(u) / n - xhat sum(u xhat) / n) = u e + (x - mean) a + b with
  // e = gamma rstd, a = -e rstd sum(u xhat) / n, b = -e sum(u) / n
  const double n = static_cast<double>(g.rows > 0 ? g.rows : 1);
  const auto c = static_cast<std::size_t>(g.c);
  detail::channel_coefs<T> k(g.c);
  for (std::size_t j = 0; j < c; ++j) {
    const double ej = static_cast<double>(gamma[j]) * rstd[j];
    k.center[j] = static_cast<T>(mean[j]);
    k.e[j] = static_cast<T>(ej);
    k.a[j] = static_cast<T>(-ej * rstd[j] * static_cast<double>(sums[c + j]) / n);
    k.b[j] = static_cast<T>(-ej * static_cast<double>(sums[j]) / n);
  }
  detail::channel_affine<T>(ctx, static_cast<const T*>(vals[X::index].data),
                            static_cast<const T*>(vals[U::index].data), g.rows, g.c, k,
                            ctx.allocate<T>(vals[I]));
}

} // namespace typeflow::cpu_backend
