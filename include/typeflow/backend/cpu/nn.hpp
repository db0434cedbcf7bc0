// CPU kernels of the neural-network ops. conv2d is im2col + one GEMM over the whole batch (NHWC
// patches times the HWIO filter seen as a [KH*KW*C, O] matrix gives NHWC directly); its input
// gradient is a GEMM then col2im, its filter gradient im2col then a GEMM. Pooling and the fused
// cross-entropy are direct loops, parallel over images or rows.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "gemm.hpp"
#include "thread_pool.hpp"

namespace typeflow::cpu_backend {

/// Geometry of a 2-D window op over NHWC data.
struct window2d {
  std::int64_t n, h, w, c;     // input
  std::int64_t kh, kw, o;      // window (and output channels of a convolution)
  std::int64_t oh, ow;         // output
  std::int64_t sh, sw, dh, dw; // strides, dilations
  std::int64_t ph, pw;         // padding before
  std::int64_t patch() const { return kh * kw * c; }
  std::int64_t rows() const { return n * oh * ow; }
};

/// One output pixel's patch (zeros outside the input), as im2col writes it.
template <class T>
void gather_patch(const T* xb, const window2d& g, std::int64_t oy, std::int64_t ox, T* dst) {
  for (std::int64_t ky = 0; ky < g.kh; ++ky) {
    const std::int64_t iy = oy * g.sh - g.ph + ky * g.dh;
    for (std::int64_t kx = 0; kx < g.kw; ++kx, dst += g.c) {
      const std::int64_t ix = ox * g.sw - g.pw + kx * g.dw;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
        std::fill_n(dst, g.c, T(0));
      else
        std::copy_n(xb + (iy * g.w + ix) * g.c, g.c, dst);
    }
  }
}

/// col[(b, oy, ox), (ky, kx, ci)] = x[b, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw, ci] (0 outside).
template <class T>
void im2col(thread_pool& pool, const T* x, const window2d& g, T* col) {
  const std::int64_t patch = g.patch();
  pool.parallel_for(g.n * g.oh, 8, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xb = x + (r / g.oh) * g.h * g.w * g.c;
      for (std::int64_t ox = 0; ox < g.ow; ++ox)
        gather_patch(xb, g, r % g.oh, ox, col + (r * g.ow + ox) * patch);
    }
  });
}

/// The adjoint of im2col: dx = sum of the patches' entries at their source positions.
template <class T>
void col2im(thread_pool& pool, const T* col, const window2d& g, T* dx) {
  const std::int64_t patch = g.patch();
  pool.parallel_for(g.n, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      T* xb = dx + b * g.h * g.w * g.c;
      std::fill_n(xb, g.h * g.w * g.c, T(0));
      for (std::int64_t oy = 0; oy < g.oh; ++oy)
        for (std::int64_t ox = 0; ox < g.ow; ++ox) {
          const T* src = col + ((b * g.oh + oy) * g.ow + ox) * patch;
          for (std::int64_t ky = 0; ky < g.kh; ++ky) {
            const std::int64_t iy = oy * g.sh - g.ph + ky * g.dh;
            for (std::int64_t kx = 0; kx < g.kw; ++kx, src += g.c) {
              const std::int64_t ix = ox * g.sw - g.pw + kx * g.dw;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                continue;
              T* d = xb + (iy * g.w + ix) * g.c;
              for (std::int64_t ci = 0; ci < g.c; ++ci)
                d[ci] += src[ci];
            }
          }
        }
    }
  });
}

/// Whether a convolution is a plain GEMM on x itself (1x1, stride 1, no padding).
inline bool conv_is_pointwise(const window2d& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

/// Whether a convolution's filter is small enough ([patch, o] of a few thousand entries, as a
/// first layer on one or three channels) that direct loops beat a GEMM: the GEMM would have an
/// inner or outer dimension of a few dozen, where BLAS runs far below its peak.
inline bool conv_is_small(const window2d& g) {
  return g.patch() * g.o <= 4096 && g.patch() <= 256;
}

/// Small filters, forward: each output pixel is its patch times w [patch, o], o innermost.
template <class T>
void conv2d_forward_small(thread_pool& pool, const T* x, const T* w, const window2d& g, T* y) {
  const std::int64_t patch = g.patch(), o = g.o;
  pool.parallel_for(g.n * g.oh, 4, [&](std::int64_t r0, std::int64_t r1) {
    T buf[256];
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t b = r / g.oh, oy = r % g.oh;
      const T* xb = x + b * g.h * g.w * g.c;
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        gather_patch(xb, g, oy, ox, buf);
        T* __restrict out = y + (r * g.ow + ox) * o;
        std::fill_n(out, o, T(0));
        for (std::int64_t p = 0; p < patch; ++p) {
          const T v = buf[p];
          if (v == T(0))
            continue;
          const T* __restrict wr = w + p * o;
          for (std::int64_t j = 0; j < o; ++j)
            out[j] += v * wr[j];
        }
      }
    }
  });
}

/// Small filters, filter gradient: dw = sum over output pixels of outer(patch, dy). The pixels
/// are split into a fixed number of parts (so results do not depend on the thread count), each
/// summed into its own accumulator, then the parts are added in order.
template <class T>
void conv2d_backprop_filter_small(thread_pool& pool, const T* x, const T* dy, const window2d& g,
                                  T* partial, T* dw) {
  constexpr std::int64_t parts = 8;
  const std::int64_t patch = g.patch(), o = g.o, rows = g.n * g.oh;
  pool.parallel_for(parts, 1, [&](std::int64_t q0, std::int64_t q1) {
    T buf[256];
    for (std::int64_t q = q0; q < q1; ++q) {
      T* acc = partial + q * patch * o;
      std::fill_n(acc, patch * o, T(0));
      for (std::int64_t r = rows * q / parts; r < rows * (q + 1) / parts; ++r) {
        const std::int64_t b = r / g.oh, oy = r % g.oh;
        const T* xb = x + b * g.h * g.w * g.c;
        for (std::int64_t ox = 0; ox < g.ow; ++ox) {
          gather_patch(xb, g, oy, ox, buf);
          const T* d = dy + (r * g.ow + ox) * o;
          for (std::int64_t p = 0; p < patch; ++p) {
            const T v = buf[p];
            if (v == T(0))
              continue;
            T* __restrict a = acc + p * o;
            for (std::int64_t j = 0; j < o; ++j)
              a[j] += v * d[j];
          }
        }
      }
    }
  });
  std::copy_n(partial, patch * o, dw);
  for (std::int64_t q = 1; q < parts; ++q)
    for (std::int64_t i = 0; i < patch * o; ++i)
      dw[i] += partial[q * patch * o + i];
}

/// Scratch elements conv2d_forward / conv2d_backprop_filter need for geometry g.
inline std::int64_t conv_scratch(const window2d& g) {
  if (conv_is_small(g))
    return 8 * g.patch() * g.o;
  return conv_is_pointwise(g) ? 0 : g.rows() * g.patch();
}

/// y [rows, o] = im2col(x) [rows, patch] * w [patch, o]; `col` has conv_scratch(g) elements.
template <class T>
void conv2d_forward(thread_pool& pool, const T* x, const T* w, const window2d& g, T* col, T* y) {
  if (conv_is_small(g)) {
    conv2d_forward_small(pool, x, w, g, y);
    return;
  }
  const T* a = x;
  if (!conv_is_pointwise(g)) {
    im2col(pool, x, g, col);
    a = col;
  }
  gemm<T>(pool, false, false, g.rows(), g.o, g.patch(), a, w, y);
}

/// dx = col2im(dy [rows, o] * w^T [o, patch]).
template <class T>
void conv2d_backprop_input(thread_pool& pool, const T* dy, const T* w, const window2d& g, T* col,
                           T* dx) {
  if (conv_is_pointwise(g)) {
    gemm<T>(pool, false, true, g.rows(), g.patch(), g.o, dy, w, dx);
    return;
  }
  gemm<T>(pool, false, true, g.rows(), g.patch(), g.o, dy, w, col);
  col2im(pool, col, g, dx);
}

/// dw [patch, o] = im2col(x)^T [patch, rows] * dy [rows, o].
template <class T>
void conv2d_backprop_filter(thread_pool& pool, const T* x, const T* dy, const window2d& g, T* col,
                            T* dw) {
  if (conv_is_small(g)) {
    conv2d_backprop_filter_small(pool, x, dy, g, col, dw);
    return;
  }
  const T* a = x;
  if (!conv_is_pointwise(g)) {
    im2col(pool, x, g, col);
    a = col;
  }
  gemm<T>(pool, true, false, g.patch(), g.o, g.rows(), a, dy, dw);
}

/// Max or average pooling; padded positions are skipped (never a max, not counted).
template <bool Max, class T>
void pool_forward(thread_pool& pool, const T* x, const window2d& g, T* y) {
  pool.parallel_for(g.n * g.oh, 4, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t b = r / g.oh, oy = r % g.oh;
      const T* xb = x + b * g.h * g.w * g.c;
      const std::int64_t y0 = std::max<std::int64_t>(oy * g.sh - g.ph, 0),
                         y1 = std::min<std::int64_t>(oy * g.sh - g.ph + g.kh, g.h);
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        const std::int64_t x0 = std::max<std::int64_t>(ox * g.sw - g.pw, 0),
                           x1 = std::min<std::int64_t>(ox * g.sw - g.pw + g.kw, g.w);
        T* out = y + (r * g.ow + ox) * g.c;
        std::fill_n(out, g.c, Max ? -std::numeric_limits<T>::infinity() : T(0));
        for (std::int64_t iy = y0; iy < y1; ++iy)
          for (std::int64_t ix = x0; ix < x1; ++ix) {
            const T* src = xb + (iy * g.w + ix) * g.c;
            for (std::int64_t ci = 0; ci < g.c; ++ci) {
              if constexpr (Max)
                out[ci] = src[ci] > out[ci] ? src[ci] : out[ci];
              else
                out[ci] += src[ci];
            }
          }
        if constexpr (!Max) {
          const T inv = T(1) / static_cast<T>(std::max<std::int64_t>((y1 - y0) * (x1 - x0), 1));
          for (std::int64_t ci = 0; ci < g.c; ++ci)
            out[ci] *= inv;
        }
      }
    }
  });
}

/// The gradient of a pool: max sends dy to the first maximum of each window (row-major window
/// order); avg spreads dy evenly over the window's valid positions.
template <bool Max, class T>
void pool_backward(thread_pool& pool, const T* x, const T* dy, const window2d& g, T* dx) {
  pool.parallel_for(g.n, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const T* xb = x + b * g.h * g.w * g.c;
      T* db = dx + b * g.h * g.w * g.c;
      std::fill_n(db, g.h * g.w * g.c, T(0));
      for (std::int64_t oy = 0; oy < g.oh; ++oy) {
        const std::int64_t y0 = std::max<std::int64_t>(oy * g.sh - g.ph, 0),
                           y1 = std::min<std::int64_t>(oy * g.sh - g.ph + g.kh, g.h);
        for (std::int64_t ox = 0; ox < g.ow; ++ox) {
          const std::int64_t x0 = std::max<std::int64_t>(ox * g.sw - g.pw, 0),
                             x1 = std::min<std::int64_t>(ox * g.sw - g.pw + g.kw, g.w);
          const T* gy = dy + ((b * g.oh + oy) * g.ow + ox) * g.c;
          if (y1 <= y0 || x1 <= x0)
            continue;
          if constexpr (Max) {
            for (std::int64_t ci = 0; ci < g.c; ++ci) {
              std::int64_t best = (y0 * g.w + x0) * g.c + ci;
              for (std::int64_t iy = y0; iy < y1; ++iy)
                for (std::int64_t ix = x0; ix < x1; ++ix) {
                  const std::int64_t at = (iy * g.w + ix) * g.c + ci;
                  if (xb[at] > xb[best])
                    best = at;
                }
              db[best] += gy[ci];
            }
          } else {
            const T inv = T(1) / static_cast<T>((y1 - y0) * (x1 - x0));
            for (std::int64_t iy = y0; iy < y1; ++iy)
              for (std::int64_t ix = x0; ix < x1; ++ix) {
                T* d = db + (iy * g.w + ix) * g.c;
                for (std::int64_t ci = 0; ci < g.c; ++ci)
                  d[ci] += gy[ci] * inv;
              }
          }
        }
      }
    }
  });
}

template <class L>
void check_label(L label, std::int64_t k, std::int64_t row) {
  if (label < 0 || static_cast<std::int64_t>(label) >= k)
    throw error("sparse_softmax_cross_entropy_with_logits: label " +
                std::to_string(static_cast<std::int64_t>(label)) + " at row " +
                std::to_string(row) + " is outside [0, " + std::to_string(k) + ")");
}

/// loss[i] = logsumexp(logits[i]) - logits[i, labels[i]] (Grad: dl = softmax - onehot instead).
template <bool Grad, class T, class L>
void sparse_xent(thread_pool& pool, const T* logits, const L* labels, std::int64_t n,
                 std::int64_t k, T* out) {
  for (std::int64_t i = 0; i < n; ++i)
    check_label(labels[i], k, i);
  pool.parallel_for(n, 16, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const T* row = logits + i * k;
      T m = -std::numeric_limits<T>::infinity();
      for (std::int64_t j = 0; j < k; ++j)
        m = row[j] > m ? row[j] : m;
      double s = 0;
      for (std::int64_t j = 0; j < k; ++j)
        s += std::exp(static_cast<double>(row[j] - m));
      const auto label = static_cast<std::int64_t>(labels[i]);
      if constexpr (Grad) {
        T* d = out + i * k;
        for (std::int64_t j = 0; j < k; ++j)
          d[j] = static_cast<T>(std::exp(static_cast<double>(row[j] - m)) / s);
        d[label] -= T(1);
      } else {
        out[i] =
            static_cast<T>(static_cast<double>(m) + std::log(s) - static_cast<double>(row[label]));
      }
    }
  });
}

/// The dropout hash, shared with the CUDA backend so that both draw the same masks: splitmix64's
/// finalizer, after adding its increment.
TYPEFLOW_HD inline std::uint64_t dropout_mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
/// The hash state of one run of one dropout layer.
TYPEFLOW_HD inline std::uint64_t dropout_base(std::uint64_t seed, std::uint64_t run) {
  return dropout_mix(dropout_mix(seed) ^ run);
}
/// Element i's draw, uniform in [0, 1) on a 2^-53 grid (exact in double on host and device).
TYPEFLOW_HD inline double dropout_uniform(std::uint64_t base, std::int64_t i) {
  return static_cast<double>(dropout_mix(base ^ static_cast<std::uint64_t>(i)) >> 11) * 0x1.0p-53;
}
/// keep_prob must be in (0, 1].
inline void check_keep_prob(double keep) {
  if (!(keep > 0.0 && keep <= 1.0))
    throw error("dropout: keep_prob must be in (0, 1], got " + std::to_string(keep));
}

/// Dropout mask: element i keeps (1/keep) when a hash of (seed, run, i) falls below keep.
template <class T>
void dropout_mask(thread_pool& pool, std::uint64_t seed, std::uint64_t run, double keep,
                  std::int64_t n, T* out) {
  check_keep_prob(keep);
  const std::uint64_t base = dropout_base(seed, run);
  const T scale = static_cast<T>(1.0 / keep);
  pool.parallel_for(n, 4096, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      out[i] = dropout_uniform(base, i) < keep ? scale : T(0);
  });
}

} // namespace typeflow::cpu_backend
