// CUDA kernels of the neural-network ops: conv2d forward and backward as im2col + cuBLAS (the
// adjoint col2im gathers, so no atomics and deterministic sums), max/avg pooling and their
// gradients (gathering too: each input element sums the windows that read it), and the fused
// sparse softmax cross-entropy (one thread per row; a bad label sets a flag the host checks).
// The window geometry is backend/common/window.hpp's, shared with the CPU.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../../core/error.hpp"
#include "../../ops/nn.hpp"
#include "../common/window.hpp"
#include "context.cuh"
#include "matmul.cuh"
#include "runtime.hpp"

namespace typeflow::cuda_backend {

using backend::window2d;

inline int grid_for(std::int64_t n, int threads = 256) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}
#define TYPEFLOW_GRID_STRIDE(i, n)                                                                 \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

template <class T>
__global__ void im2col_kernel(const T* x, window2d g, T* col) {
  const std::int64_t patch = g.kh * g.kw * g.c;
  TYPEFLOW_GRID_STRIDE(idx, g.n * g.oh * g.ow * patch) {
    const std::int64_t p = idx % patch, r = idx / patch;
    const std::int64_t ci = p % g.c, kx = (p / g.c) % g.kw, ky = p / (g.c * g.kw);
    const std::int64_t ox = r % g.ow, oy = (r / g.ow) % g.oh, b = r / (g.ow * g.oh);
    const std::int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
    col[idx] = (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                   ? T(0)
                   : x[((b * g.h + iy) * g.w + ix) * g.c + ci];
  }
}

/// dx[b, iy, ix, ci] = sum of the patch entries that im2col copied from there.
template <class T>
__global__ void col2im_kernel(const T* col, window2d g, T* dx) {
  const std::int64_t patch = g.kh * g.kw * g.c;
  TYPEFLOW_GRID_STRIDE(idx, g.n * g.h * g.w * g.c) {
    const std::int64_t ci = idx % g.c, ix = (idx / g.c) % g.w, iy = (idx / (g.c * g.w)) % g.h,
                       b = idx / (g.c * g.w * g.h);
    T acc = 0;
    for (std::int64_t ky = 0; ky < g.kh; ++ky) {
      const std::int64_t ty = iy + g.ph - ky * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh)
        continue;
      for (std::int64_t kx = 0; kx < g.kw; ++kx) {
        const std::int64_t tx = ix + g.pw - kx * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow)
          continue;
        acc +=
            col[((b * g.oh + ty / g.sh) * g.ow + tx / g.sw) * patch + (ky * g.kw + kx) * g.c + ci];
      }
    }
    dx[idx] = acc;
  }
}

template <bool Max, class T>
__global__ void pool_forward_kernel(const T* x, window2d g, T* y) {
  TYPEFLOW_GRID_STRIDE(idx, g.n * g.oh * g.ow * g.c) {
    const std::int64_t ci = idx % g.c, ox = (idx / g.c) % g.ow, oy = (idx / (g.c * g.ow)) % g.oh,
                       b = idx / (g.c * g.ow * g.oh);
    const std::int64_t y0 = std::max(oy * g.sh - g.ph, std::int64_t{0}),
                       y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
    const std::int64_t x0 = std::max(ox * g.sw - g.pw, std::int64_t{0}),
                       x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
    T acc = Max ? -std::numeric_limits<T>::infinity() : T(0);
    for (std::int64_t iy = y0; iy < y1; ++iy)
      for (std::int64_t ix = x0; ix < x1; ++ix) {
        const T v = x[((b * g.h + iy) * g.w + ix) * g.c + ci];
        acc = Max ? (v > acc ? v : acc) : acc + v;
      }
    if (!Max) {
      const std::int64_t n = (y1 - y0) * (x1 - x0);
      acc = acc / static_cast<T>(n > 0 ? n : 1);
    }
    y[idx] = acc;
  }
}

/// Each input element gathers the gradient of every window that reads it: for max, only from
/// windows whose first maximum (row-major) it is.
template <bool Max, class T>
__global__ void pool_backward_kernel(const T* x, const T* dy, window2d g, T* dx) {
  TYPEFLOW_GRID_STRIDE(idx, g.n * g.h * g.w * g.c) {
    const std::int64_t ci = idx % g.c, ix = (idx / g.c) % g.w, iy = (idx / (g.c * g.w)) % g.h,
                       b = idx / (g.c * g.w * g.h);
    T acc = 0;
    // Windows oy with oy*sh - ph <= iy < oy*sh - ph + kh.
    for (std::int64_t oy = 0; oy < g.oh; ++oy) {
      const std::int64_t wy = oy * g.sh - g.ph;
      if (iy < wy || iy >= wy + g.kh)
        continue;
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        const std::int64_t wx = ox * g.sw - g.pw;
        if (ix < wx || ix >= wx + g.kw)
          continue;
        const std::int64_t y0 = std::max(wy, std::int64_t{0}), y1 = std::min(wy + g.kh, g.h);
        const std::int64_t x0 = std::max(wx, std::int64_t{0}), x1 = std::min(wx + g.kw, g.w);
        const T grad = dy[((b * g.oh + oy) * g.ow + ox) * g.c + ci];
        if (Max) {
          std::int64_t best_y = y0, best_x = x0;
          T best = x[((b * g.h + y0) * g.w + x0) * g.c + ci];
          for (std::int64_t yy = y0; yy < y1; ++yy)
            for (std::int64_t xx = x0; xx < x1; ++xx) {
              const T v = x[((b * g.h + yy) * g.w + xx) * g.c + ci];
              if (v > best) {
                best = v;
                best_y = yy;
                best_x = xx;
              }
            }
          if (best_y == iy && best_x == ix)
            acc += grad;
        } else {
          acc += grad / static_cast<T>((y1 - y0) * (x1 - x0));
        }
      }
    }
    dx[idx] = acc;
  }
}

/// Grad: softmax - onehot per row; else the loss per row. A label outside [0, k) sets *bad.
template <bool Grad, class T, class L>
__global__ void sparse_xent_kernel(const T* logits, const L* labels, std::int64_t n, std::int64_t k,
                                   T* out, int* bad) {
  TYPEFLOW_GRID_STRIDE(i, n) {
    const T* row = logits + i * k;
    const std::int64_t label = static_cast<std::int64_t>(labels[i]);
    if (label < 0 || label >= k) {
      *bad = 1;
      continue;
    }
    T m = -std::numeric_limits<T>::infinity();
    for (std::int64_t j = 0; j < k; ++j)
      m = row[j] > m ? row[j] : m;
    double s = 0;
    for (std::int64_t j = 0; j < k; ++j)
      s += std::exp(static_cast<double>(row[j] - m));
    if (Grad) {
      for (std::int64_t j = 0; j < k; ++j)
        out[i * k + j] = static_cast<T>(std::exp(static_cast<double>(row[j] - m)) / s) -
                         (j == label ? T(1) : T(0));
    } else {
      out[i] =
          static_cast<T>(static_cast<double>(m) + std::log(s) - static_cast<double>(row[label]));
    }
  }
}

// ---- the kernels of the session's steps ----------------------------------------------------

/// The patches of x, in a scratch buffer that `holder` keeps alive.
template <class T>
const T* im2col(context& ctx, const T* x, const window2d& g, value& holder) {
  T* col = ctx.scratch<T>(holder, g.rows() * g.patch());
  im2col_kernel<<<grid_for(g.rows() * g.patch()), 256, 0, ctx.stream()>>>(x, g, col);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  return col;
}

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class W>
void kernel(context& ctx, ops::conv2d<P, SH, SW, DH, DW>*, T*, value* vals, void*, X*, W*) {
  const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                      vals[W::index].dims);
  T* y = ctx.scratch<T>(vals[I], g.rows() * g.o);
  value tmp;
  const T* col = im2col(ctx, static_cast<const T*>(vals[X::index].data), g, tmp);
  gemm_strided_batched<T>(ctx.blas(), false, false, g.rows(), g.o, g.patch(), col,
                          static_cast<const T*>(vals[W::index].data), y, 1);
}

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class G, class W, class X>
void kernel(context& ctx, ops::conv2d_backprop_input<P, SH, SW, DH, DW>*, T*, value* vals, void*,
            G*, W*, X*) {
  const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                      vals[W::index].dims);
  T* dx = ctx.scratch<T>(vals[I], g.n * g.h * g.w * g.c);
  value tmp;
  T* col = ctx.scratch<T>(tmp, g.rows() * g.patch());
  gemm_strided_batched<T>(ctx.blas(), false, true, g.rows(), g.patch(), g.o,
                          static_cast<const T*>(vals[G::index].data),
                          static_cast<const T*>(vals[W::index].data), col, 1);
  col2im_kernel<<<grid_for(g.n * g.h * g.w * g.c), 256, 0, ctx.stream()>>>(col, g, dx);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class G, class W>
void kernel(context& ctx, ops::conv2d_backprop_filter<P, SH, SW, DH, DW>*, T*, value* vals, void*,
            X*, G*, W*) {
  const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                      vals[W::index].dims);
  T* dw = ctx.scratch<T>(vals[I], g.patch() * g.o);
  value tmp;
  const T* col = im2col(ctx, static_cast<const T*>(vals[X::index].data), g, tmp);
  gemm_strided_batched<T>(ctx.blas(), true, false, g.patch(), g.o, g.rows(), col,
                          static_cast<const T*>(vals[G::index].data), dw, 1);
}

template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X>
void kernel(context& ctx, ops::pool<K, P, KH, KW, SH, SW>*, T*, value* vals, void*, X*) {
  const auto g = backend::pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
  const std::int64_t n = g.n * g.oh * g.ow * g.c;
  T* y = ctx.scratch<T>(vals[I], n);
  pool_forward_kernel<K == ops::pool_kind::max>
      <<<grid_for(n), 256, 0, ctx.stream()>>>(static_cast<const T*>(vals[X::index].data), g, y);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X, class G>
void kernel(context& ctx, ops::pool_grad<K, P, KH, KW, SH, SW>*, T*, value* vals, void*, X*, G*) {
  const auto g = backend::pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
  const std::int64_t n = g.n * g.h * g.w * g.c;
  T* dx = ctx.scratch<T>(vals[I], n);
  pool_backward_kernel<K == ops::pool_kind::max>
      <<<grid_for(n), 256, 0, ctx.stream()>>>(static_cast<const T*>(vals[X::index].data),
                                              static_cast<const T*>(vals[G::index].data), g, dx);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

/// The fused cross-entropy (Grad: its gradient); a bad label sets a device flag that the
/// run reads after all its work (gpu_context::end_run): the step never waits for the host.
template <bool Grad, class T, class L, class Y>
void xent(context& ctx, value* vals, std::size_t i) {
  const auto& ld = vals[L::index].dims;
  const std::int64_t n = ld.d[0], k = ld.d[1];
  T* out = ctx.scratch<T>(vals[i], Grad ? n * k : n);
  int* bad =
      ctx.gpu.check_flag("sparse_softmax_cross_entropy_with_logits: a label is outside [0, " +
                         std::to_string(k) + ")");
  sparse_xent_kernel<Grad><<<grid_for(n), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[L::index].data),
      static_cast<const typename Y::value_type*>(vals[Y::index].data), n, k, out, bad);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}
template <std::size_t I, class T, class L, class Y>
void kernel(context& ctx, ops::sparse_softmax_xent*, T*, value* vals, void*, L*, Y*) {
  xent<false, T, L, Y>(ctx, vals, I);
}
template <std::size_t I, class T, class L, class Y>
void kernel(context& ctx, ops::sparse_softmax_xent_grad*, T*, value* vals, void*, L*, Y*) {
  xent<true, T, L, Y>(ctx, vals, I);
}

} // namespace typeflow::cuda_backend
