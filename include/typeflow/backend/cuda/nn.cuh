// CUDA kernels of the neural-network ops: conv2d forward and backward as im2col + cuBLAS (the
// adjoint col2im gathers, so no atomics and deterministic sums), max/avg pooling and their
// gradients (gathering too: each input element sums the windows that read it), and the fused
// sparse softmax cross-entropy (one thread per row; a bad label sets a flag the host checks).
// The window geometry is the CPU backend's plain struct.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "../cpu/nn.hpp"
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

} // namespace typeflow::cuda_backend
