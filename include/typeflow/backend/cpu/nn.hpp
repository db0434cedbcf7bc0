// CPU kernels of the neural-network ops. conv2d is im2col + GEMM, image by image (NHWC patches
// times the HWIO filter seen as a [KH*KW*C, O] matrix gives NHWC directly), so one image's
// patches stay in cache between the two instead of a whole batch's making a round trip through
// memory; its input gradient is a GEMM then col2im, its filter gradient im2col then a GEMM
// accumulated per part. Filters of a few channels (a first layer) use direct vector loops.
// Pooling and the fused cross-entropy are direct loops, parallel over images or rows.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../common/dropout.hpp"
#include "../common/window.hpp"
#include "gemm.hpp"
#include "simd.hpp"
#include "thread_pool.hpp"

namespace typeflow::cpu_backend {

using backend::clipped_window;
using backend::window2d;

/// One output pixel's patch (zeros outside the input), as im2col writes it. With dilation 1 along
/// x, the in-bounds taps of one filter row are contiguous in both x and the patch, so each
/// filter row is one plain copy (no memmove call per tap: a first layer copies one channel per
/// tap, where a call per tap would cost more than the convolution).
template <class T>
void gather_patch(const T* xb, const window2d& g, std::int64_t oy, std::int64_t ox, T* dst) {
  const std::int64_t row = g.kw * g.c, ix0 = ox * g.sw - g.pw;
  for (std::int64_t ky = 0; ky < g.kh; ++ky, dst += row) {
    const std::int64_t iy = oy * g.sh - g.ph + ky * g.dh;
    if (iy < 0 || iy >= g.h) {
      std::fill_n(dst, row, T(0));
    } else if (g.dw == 1) {
      const std::int64_t k0 = std::clamp<std::int64_t>(-ix0, 0, g.kw),
                         k1 = std::clamp<std::int64_t>(g.w - ix0, k0, g.kw);
      const T* src = xb + (iy * g.w + ix0 + k0) * g.c;
      T* d = dst + k0 * g.c;
      for (std::int64_t i = 0; i < k0 * g.c; ++i)
        dst[i] = T(0);
      for (std::int64_t i = 0; i < (k1 - k0) * g.c; ++i)
        d[i] = src[i];
      for (std::int64_t i = k1 * g.c; i < row; ++i)
        dst[i] = T(0);
    } else {
      for (std::int64_t kx = 0; kx < g.kw; ++kx) {
        const std::int64_t ix = ix0 + kx * g.dw;
        const T* src = xb + (iy * g.w + ix) * g.c;
        const bool in = ix >= 0 && ix < g.w;
        for (std::int64_t ci = 0; ci < g.c; ++ci)
          dst[kx * g.c + ci] = in ? src[ci] : T(0);
      }
    }
  }
}

/// Image b's patches: col[(oy, ox), (ky, kx, ci)] = x[b, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw,
/// ci] (0 outside).
template <class T>
void im2col_image(const T* x, const window2d& g, std::int64_t b, T* col) {
  const T* xb = x + b * g.h * g.w * g.c;
  for (std::int64_t oy = 0; oy < g.oh; ++oy)
    for (std::int64_t ox = 0; ox < g.ow; ++ox)
      gather_patch(xb, g, oy, ox, col + (oy * g.ow + ox) * g.patch());
}

/// The adjoint of im2col_image: image b of dx = the sum of the patches' entries at their source
/// positions. As in gather_patch, with dilation 1 along x one filter row is one contiguous run
/// in both the patch and dx.
template <class T>
void col2im_image(const T* col, const window2d& g, std::int64_t b, T* dx) {
  T* xb = dx + b * g.h * g.w * g.c;
  std::fill_n(xb, g.h * g.w * g.c, T(0));
  const std::int64_t row = g.kw * g.c;
  for (std::int64_t oy = 0; oy < g.oh; ++oy)
    for (std::int64_t ox = 0; ox < g.ow; ++ox) {
      const T* src = col + (oy * g.ow + ox) * g.patch();
      const std::int64_t ix0 = ox * g.sw - g.pw;
      for (std::int64_t ky = 0; ky < g.kh; ++ky, src += row) {
        const std::int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h)
          continue;
        if (g.dw == 1) {
          const std::int64_t k0 = std::clamp<std::int64_t>(-ix0, 0, g.kw),
                             k1 = std::clamp<std::int64_t>(g.w - ix0, k0, g.kw);
          T* __restrict d = xb + (iy * g.w + ix0 + k0) * g.c;
          const T* __restrict s = src + k0 * g.c;
          for (std::int64_t i = 0; i < (k1 - k0) * g.c; ++i)
            d[i] += s[i];
          continue;
        }
        for (std::int64_t kx = 0; kx < g.kw; ++kx) {
          const std::int64_t ix = ix0 + kx * g.dw;
          if (ix < 0 || ix >= g.w)
            continue;
          T* d = xb + (iy * g.w + ix) * g.c;
          for (std::int64_t ci = 0; ci < g.c; ++ci)
            d[ci] += src[kx * g.c + ci];
        }
      }
    }
}

/// The batch is cut into this many parts (a fixed number, so results do not depend on the
/// thread count); each part works through its images one at a time, with one image's patches
/// in its own scratch, small enough to stay in cache between im2col and the GEMM that reads it.
inline constexpr std::int64_t conv_parts = 8;

namespace detail {
/// dw = the conv_parts partial sums of n elements each, added in order.
template <class T>
void sum_parts(const T* partial, std::int64_t n, T* dw) {
  std::copy_n(partial, n, dw);
  for (std::int64_t q = 1; q < conv_parts; ++q)
    for (std::int64_t i = 0; i < n; ++i)
      dw[i] += partial[q * n + i];
}
} // namespace detail

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

#if defined(TYPEFLOW_HAS_XSIMD)
namespace detail {
/// NP output pixels (patches in `buf`, `patch` apart) times the W columns of w at `oc`: NP
/// accumulators in registers, one broadcast and one FMA per pixel per filter row.
template <int NP, class T>
inline void conv_small_tile(const T* buf, std::int64_t patch, const T* w, std::int64_t o,
                            std::int64_t oc, T* y) {
  using B = simd::vec<T>;
  std::array<B, NP> acc;
  acc.fill(B(T(0)));
  for (std::int64_t p = 0; p < patch; ++p) {
    const B wv = B::load_unaligned(w + p * o + oc);
    for (int i = 0; i < NP; ++i)
      acc[i] = xsimd::fma(B(buf[i * patch + p]), wv, acc[i]);
  }
  for (int i = 0; i < NP; ++i)
    acc[i].store_unaligned(y + i * o + oc);
}

/// PB rows of dw at p (columns oc..oc+W) += the patches' entries times dy, over n pixels.
template <int PB, class T>
inline void conv_small_filter_tile(const T* pbuf, std::int64_t patch, const T* dy, std::int64_t o,
                                   std::int64_t n, std::int64_t p, std::int64_t oc, T* acc_mem) {
  using B = simd::vec<T>;
  std::array<B, PB> acc;
  for (int i = 0; i < PB; ++i)
    acc[i] = B::load_unaligned(acc_mem + (p + i) * o + oc);
  for (std::int64_t k = 0; k < n; ++k) {
    const B d = B::load_unaligned(dy + k * o + oc);
    for (int i = 0; i < PB; ++i)
      acc[i] = xsimd::fma(B(pbuf[k * patch + p + i]), d, acc[i]);
  }
  for (int i = 0; i < PB; ++i)
    acc[i].store_unaligned(acc_mem + (p + i) * o + oc);
}
} // namespace detail
#endif

/// Small filters, forward: each output pixel is its patch times w [patch, o], o innermost.
/// Vectorized (xsimd) when o is a multiple of the vector width: 8 pixels at a time.
template <class T>
void conv2d_forward_small(thread_pool& pool, const T* x, const T* w, const window2d& g, T* y) {
  const std::int64_t patch = g.patch(), o = g.o;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_floating_point_v<T>) {
    constexpr std::int64_t W = simd::vec<T>::size, NP = 8;
    if (o % W == 0) {
      pool.parallel_for(g.n * g.oh, 4, [&](std::int64_t r0, std::int64_t r1) {
        T buf[NP * 256];
        for (std::int64_t r = r0; r < r1; ++r) {
          const T* xb = x + (r / g.oh) * g.h * g.w * g.c;
          for (std::int64_t ox0 = 0; ox0 < g.ow; ox0 += NP) {
            const std::int64_t np = std::min(NP, g.ow - ox0);
            for (std::int64_t i = 0; i < np; ++i)
              gather_patch(xb, g, r % g.oh, ox0 + i, buf + i * patch);
            T* out = y + (r * g.ow + ox0) * o;
            for (std::int64_t oc = 0; oc < o; oc += W) {
              if (np == NP)
                detail::conv_small_tile<NP>(buf, patch, w, o, oc, out);
              else
                for (std::int64_t i = 0; i < np; ++i)
                  detail::conv_small_tile<1>(buf + i * patch, patch, w, o, oc, out + i * o);
            }
          }
        }
      });
      return;
    }
  }
#endif
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
  constexpr std::int64_t parts = conv_parts;
  const std::int64_t patch = g.patch(), o = g.o, rows = g.n * g.oh;
  // Part q's pixels, scalar: each patch times its dy row, added to q's accumulator.
  auto scalar_part = [&](std::int64_t q, T* acc) {
    T buf[256];
    for (std::int64_t r = rows * q / parts; r < rows * (q + 1) / parts; ++r) {
      const T* xb = x + (r / g.oh) * g.h * g.w * g.c;
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        gather_patch(xb, g, r % g.oh, ox, buf);
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
  };
  pool.parallel_for(parts, 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q) {
      T* acc = partial + q * patch * o;
      std::fill_n(acc, patch * o, T(0));
#if defined(TYPEFLOW_HAS_XSIMD)
      // Vectorized when o is a multiple of the vector width: the patches of 64 pixels are
      // gathered, then 8 rows of the part's dw stay in registers while those pixels stream past.
      if constexpr (std::is_floating_point_v<T>) {
        constexpr std::int64_t W = simd::vec<T>::size, chunk = 64, PB = 8;
        if (o % W == 0) {
          T pbuf[chunk * 256];
          const std::int64_t px0 = rows * q / parts * g.ow, px1 = rows * (q + 1) / parts * g.ow;
          for (std::int64_t c0 = px0; c0 < px1; c0 += chunk) {
            const std::int64_t n = std::min(chunk, px1 - c0);
            for (std::int64_t k = 0; k < n; ++k) {
              const std::int64_t px = c0 + k, r = px / g.ow;
              gather_patch(x + (r / g.oh) * g.h * g.w * g.c, g, r % g.oh, px % g.ow,
                           pbuf + k * patch);
            }
            for (std::int64_t oc = 0; oc < o; oc += W) {
              std::int64_t p = 0;
              for (; p + PB <= patch; p += PB)
                detail::conv_small_filter_tile<PB>(pbuf, patch, dy + c0 * o, o, n, p, oc, acc);
              for (; p < patch; ++p)
                detail::conv_small_filter_tile<1>(pbuf, patch, dy + c0 * o, o, n, p, oc, acc);
            }
          }
          continue;
        }
      }
#endif
      scalar_part(q, acc);
    }
  });
  detail::sum_parts(partial, patch * o, dw);
}

/// Scratch elements the convolutions need for geometry g: per part, one image's patches and a
/// filter-gradient accumulator.
inline std::int64_t conv_scratch(const window2d& g) {
  return conv_is_pointwise(g) ? 0 : conv_parts * (g.oh * g.ow * g.patch() + g.patch() * g.o);
}

namespace detail {
/// fn(q, b, col) for each image b of each part q, parts in parallel; col is part q's patches.
template <class T, class Fn>
void for_each_image(thread_pool& pool, const window2d& g, T* scratch, Fn&& fn) {
  pool.parallel_for(conv_parts, 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q)
      for (std::int64_t b = g.n * q / conv_parts; b < g.n * (q + 1) / conv_parts; ++b)
        fn(q, b, scratch + q * g.oh * g.ow * g.patch());
  });
}
} // namespace detail

/// y [rows, o] = im2col(x) [rows, patch] * w [patch, o], image by image; `col` has
/// conv_scratch(g) elements.
template <class T>
void conv2d_forward(thread_pool& pool, const T* x, const T* w, const window2d& g, T* col, T* y) {
  if (conv_is_small(g)) {
    conv2d_forward_small(pool, x, w, g, y);
    return;
  }
  if (conv_is_pointwise(g)) {
    gemm<T>(pool, false, false, g.rows(), g.o, g.patch(), x, w, y);
    return;
  }
  const std::int64_t pixels = g.oh * g.ow, patch = g.patch();
  detail::for_each_image(pool, g, col, [&](std::int64_t, std::int64_t b, T* c) {
    im2col_image(x, g, b, c);
    gemm_serial(false, false, pixels, g.o, patch, c, patch, w, g.o, y + b * pixels * g.o, g.o);
  });
}

/// dx = col2im(dy [rows, o] * w^T [o, patch]), image by image.
template <class T>
void conv2d_backprop_input(thread_pool& pool, const T* dy, const T* w, const window2d& g, T* col,
                           T* dx) {
  if (conv_is_pointwise(g)) {
    gemm<T>(pool, false, true, g.rows(), g.patch(), g.o, dy, w, dx);
    return;
  }
  const std::int64_t pixels = g.oh * g.ow, patch = g.patch();
  detail::for_each_image(pool, g, col, [&](std::int64_t, std::int64_t b, T* c) {
    gemm_serial(false, true, pixels, patch, g.o, dy + b * pixels * g.o, g.o, w, g.o, c, patch);
    col2im_image(c, g, b, dx);
  });
}

/// dw [patch, o] = im2col(x)^T [patch, rows] * dy [rows, o]: each part accumulates its images'
/// products, then the parts are added in order.
template <class T>
void conv2d_backprop_filter(thread_pool& pool, const T* x, const T* dy, const window2d& g, T* col,
                            T* dw) {
  const std::int64_t patch = g.patch(), o = g.o;
  if (conv_is_pointwise(g)) {
    gemm<T>(pool, true, false, patch, o, g.rows(), x, dy, dw);
    return;
  }
  T* partial = col + conv_parts * g.oh * g.ow * patch;
  if (conv_is_small(g)) {
    conv2d_backprop_filter_small(pool, x, dy, g, partial, dw);
    return;
  }
  const std::int64_t pixels = g.oh * g.ow;
  for (std::int64_t q = 0; q < conv_parts; ++q)
    std::fill_n(partial + q * patch * o, patch * o, T(0));
  detail::for_each_image(pool, g, col, [&](std::int64_t q, std::int64_t b, T* c) {
    im2col_image(x, g, b, c);
    gemm_serial(true, false, patch, o, pixels, c, patch, dy + b * pixels * o, o,
                partial + q * patch * o, o, true);
  });
  detail::sum_parts(partial, patch * o, dw);
}

namespace detail {
/// Fetches ahead the rows of the window one output row below `w` that `w` does not cover
/// (image xb, NHWC): the pooling kernels' loads of a window wait on memory otherwise
/// (bench/README.md, *Figures moved from code comments*). Always inlined: g++ kept it out of
/// max_pool_grad's loop, which undid most of the gain.
template <class T>
[[gnu::always_inline]] inline void prefetch_window_below(const T* xb, const window2d& g,
                                                         const clipped_window& w) {
  const std::int64_t py0 = std::max(w.y1, w.y0 + g.sh), py1 = std::min(g.h, w.y1 + g.sh);
  for (std::int64_t iy = py0; iy < py1; ++iy)
    for (std::int64_t ix = w.x0; ix < w.x1; ++ix)
      for (std::int64_t c0 = 0; c0 < g.c; c0 += 64 / std::int64_t{sizeof(T)})
        __builtin_prefetch(xb + (iy * g.w + ix) * g.c + c0);
}
} // namespace detail

/// Max or average pooling; padded positions are skipped (never a max, not counted).
template <bool Max, class T>
void pool_forward(thread_pool& pool, const T* x, const window2d& g, T* y) {
#if defined(TYPEFLOW_HAS_XSIMD)
  // Max pooling with whole vectors of channels: each output vector starts at -inf and takes a
  // window element where it is strictly greater (the scalar loop's rule, so NaN is never taken
  // and the bits are the same), kept in a register over the window and stored once.
  if constexpr (Max && std::is_floating_point_v<T>) {
    using B = simd::vec<T>;
    constexpr std::int64_t W = B::size;
    if (g.c % W == 0) {
      pool.parallel_for(g.n * g.oh, 4, [&](std::int64_t r0, std::int64_t r1) {
        const B lowest(-std::numeric_limits<T>::infinity());
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t b = r / g.oh, oy = r % g.oh;
          const T* xb = x + b * g.h * g.w * g.c;
          for (std::int64_t ox = 0; ox < g.ow; ++ox) {
            const clipped_window win(g, oy, ox);
            const auto [y0, y1, x0, x1] = win;
            T* out = y + (r * g.ow + ox) * g.c;
            detail::prefetch_window_below(xb, g, win);
            for (std::int64_t c0 = 0; c0 < g.c; c0 += W) {
              B best = lowest;
              for (std::int64_t iy = y0; iy < y1; ++iy)
                for (std::int64_t ix = x0; ix < x1; ++ix) {
                  const B v = B::load_unaligned(xb + (iy * g.w + ix) * g.c + c0);
                  best = xsimd::select(v > best, v, best);
                }
              best.store_unaligned(out + c0);
            }
          }
        }
      });
      return;
    }
  }
#endif
  pool.parallel_for(g.n * g.oh, 4, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t b = r / g.oh, oy = r % g.oh;
      const T* xb = x + b * g.h * g.w * g.c;
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        const clipped_window win(g, oy, ox);
        const auto [y0, y1, x0, x1] = win;
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
          const T inv = T(1) / static_cast<T>(std::max<std::int64_t>(win.size(), 1));
          for (std::int64_t ci = 0; ci < g.c; ++ci)
            out[ci] *= inv;
        }
      }
    }
  });
}

/// Hands a kernel's output to its reader in pieces (graph::chained): none, the kernel writes
/// its whole output; else the kernel writes each piece into a buffer of its own and calls
/// `sink(begin, end, piece)` with the piece's range of the row-major output (from any pool
/// thread, each range once).
struct no_sink {};

/// The gradient of a pool: max sends dy to the first maximum of each window (row-major window
/// order); avg spreads dy evenly over the window's valid positions (x is not read). x may be
/// 16-bit (TX: a saved copy), compared widened to T one image at a time. With a sink, one image
/// at a time goes to it instead of into dx (see no_sink).
template <bool Max, class TX, class T, class Sink = no_sink>
void pool_backward(thread_pool& pool, const TX* x, const T* dy, const window2d& g, T* dx,
                   const Sink& sink = {}) {
  constexpr bool pieces = !std::is_same_v<Sink, no_sink>;
  const std::int64_t image = g.h * g.w * g.c;
  // Image b of x as T: x itself, or widened into the thread's buffer (kept from call to call).
  const auto source = [&](std::int64_t b) -> const T* {
    if constexpr (!Max) {
      (void)b;
      return nullptr;
    } else if constexpr (std::is_same_v<TX, T>) {
      return x + b * image;
    } else {
      thread_local std::vector<T> wide;
      if (wide.size() < static_cast<std::size_t>(image))
        wide.resize(static_cast<std::size_t>(image));
      const TX* xb = x + b * image;
      for (std::int64_t i = 0; i < image; ++i)
        wide[static_cast<std::size_t>(i)] = static_cast<T>(xb[i]);
      return wide.data();
    }
  };
  // Image b's gradient: into dx, or into the thread's piece buffer (kept from call to call,
  // one image's size per thread: not allocated per image).
  const auto target = [&](std::int64_t b) {
    if constexpr (pieces) {
      thread_local std::vector<T> piece;
      if (piece.size() < static_cast<std::size_t>(image))
        piece.resize(static_cast<std::size_t>(image));
      return piece.data();
    } else {
      return dx + b * image;
    }
  };
  // Elements [lo, hi) of image b are final.
  const auto done = [&](std::int64_t b, const T* db, std::int64_t lo, std::int64_t hi) {
    if constexpr (pieces)
      sink(b * image + lo, b * image + hi, db + lo);
    else
      (void)b, (void)db, (void)lo, (void)hi;
  };
#if defined(TYPEFLOW_HAS_XSIMD)
  // Max pooling with whole vectors of channels: per window, the first maximum's value and its
  // position in the window (as a float lane, exact for small counts) per channel; then each
  // window pixel gets dy where it was the maximum and 0 elsewhere, stored directly when the
  // windows tile the input (stride = window, no padding before, all pixels covered), else
  // added to a zero-filled dx. No per-channel scatter.
  if constexpr (Max && std::is_floating_point_v<T>) {
    using B = simd::vec<T>;
    constexpr std::int64_t W = B::size;
    if (g.c % W == 0 && g.kh * g.kw < (1 << 20)) {
      const bool tiled = g.sh == g.kh && g.sw == g.kw && g.ph == 0 && g.pw == 0 &&
                         g.oh * g.sh >= g.h && g.ow * g.sw >= g.w;
      pool.parallel_for(g.n, 1, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t b = b0; b < b1; ++b) {
          const T* xb = source(b);
          T* db = target(b);
          if (!tiled)
            std::fill_n(db, g.h * g.w * g.c, T(0));
          for (std::int64_t oy = 0; oy < g.oh; ++oy) {
            for (std::int64_t ox = 0; ox < g.ow; ++ox) {
              const clipped_window win(g, oy, ox);
              const auto [y0, y1, x0, x1] = win;
              if (win.empty())
                continue;
              const T* gy = dy + ((b * g.oh + oy) * g.ow + ox) * g.c;
              detail::prefetch_window_below(xb, g, win);
              for (std::int64_t c0 = 0; c0 < g.c; c0 += W) {
                B best = B::load_unaligned(xb + (y0 * g.w + x0) * g.c + c0), where(T(0));
                T k = 0;
                for (std::int64_t iy = y0; iy < y1; ++iy)
                  for (std::int64_t ix = x0; ix < x1; ++ix, k += 1) {
                    const B v = B::load_unaligned(xb + (iy * g.w + ix) * g.c + c0);
                    const auto more = v > best;
                    best = xsimd::select(more, v, best);
                    where = xsimd::select(more, B(k), where);
                  }
                const B grad = B::load_unaligned(gy + c0), zero(T(0));
                k = 0;
                for (std::int64_t iy = y0; iy < y1; ++iy)
                  for (std::int64_t ix = x0; ix < x1; ++ix, k += 1) {
                    T* d = db + (iy * g.w + ix) * g.c + c0;
                    const B mine = xsimd::select(where == B(k), grad, zero);
                    (tiled ? mine : B::load_unaligned(d) + mine).store_unaligned(d);
                  }
              }
            }
            // Tiled windows: the rows of this row of windows are final (smaller pieces keep
            // the sink's stores interleaved with the loads).
            if (tiled)
              done(b, db, oy * g.sh * g.w * g.c, std::min(g.h, (oy + 1) * g.sh) * g.w * g.c);
          }
          if (!tiled)
            done(b, db, 0, image);
        }
      });
      return;
    }
  }
#endif
  pool.parallel_for(g.n, 1, [&](std::int64_t b0, std::int64_t b1) {
    std::vector<T> best_v(Max ? static_cast<std::size_t>(g.c) : 0);
    std::vector<std::int64_t> best_at(best_v.size());
    for (std::int64_t b = b0; b < b1; ++b) {
      const T* xb = source(b);
      T* db = target(b);
      std::fill_n(db, image, T(0));
      for (std::int64_t oy = 0; oy < g.oh; ++oy) {
        for (std::int64_t ox = 0; ox < g.ow; ++ox) {
          const clipped_window win(g, oy, ox);
          const auto [y0, y1, x0, x1] = win;
          const T* gy = dy + ((b * g.oh + oy) * g.ow + ox) * g.c;
          if (win.empty())
            continue;
          if constexpr (Max) {
            // All channels at once (contiguous, so the compare-and-select vectorizes): the
            // first maximum's value and pixel offset per channel, then the scatter.
            const std::int64_t first = y0 * g.w + x0;
            std::copy_n(xb + first * g.c, g.c, best_v.data());
            std::fill_n(best_at.data(), g.c, first);
            for (std::int64_t iy = y0; iy < y1; ++iy)
              for (std::int64_t ix = x0; ix < x1; ++ix) {
                const std::int64_t at = iy * g.w + ix;
                const T* src = xb + at * g.c;
                for (std::int64_t ci = 0; ci < g.c; ++ci) {
                  const bool more = src[ci] > best_v[ci];
                  best_v[ci] = more ? src[ci] : best_v[ci];
                  best_at[ci] = more ? at : best_at[ci];
                }
              }
            for (std::int64_t ci = 0; ci < g.c; ++ci)
              db[best_at[ci] * g.c + ci] += gy[ci];
          } else {
            const T inv = T(1) / static_cast<T>(win.size());
            for (std::int64_t iy = y0; iy < y1; ++iy)
              for (std::int64_t ix = x0; ix < x1; ++ix) {
                T* d = db + (iy * g.w + ix) * g.c;
                for (std::int64_t ci = 0; ci < g.c; ++ci)
                  d[ci] += gy[ci] * inv;
              }
          }
        }
      }
      done(b, db, 0, image);
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

#if defined(TYPEFLOW_HAS_XSIMD)
/// One float32 row of sparse_xent in vector lanes: its maximum, exp(z - max) by xsimd (written
/// to the gradient's row d where Grad, so that each is computed once), their sum in float lanes
/// then in double; the loss m + log(sum) - z[label] in double. (Scalar double exp, twice per
/// element for the gradient, was a visible share of examples/gpt's step: bench/README.md.)
template <bool Grad>
void xent_row(const float* row, std::int64_t k, std::int64_t label, float* d, float* loss) {
  using V = simd::vec<float>;
  constexpr std::int64_t w = static_cast<std::int64_t>(V::size);
  float m = -std::numeric_limits<float>::infinity();
  std::int64_t j = 0;
  if (k >= w) {
    V vm = V::load_unaligned(row);
    for (j = w; j + w <= k; j += w)
      vm = xsimd::max(vm, V::load_unaligned(row + j));
    alignas(V::arch_type::alignment()) float lanes[w];
    vm.store_aligned(lanes);
    for (float v : lanes)
      m = v > m ? v : m;
  }
  for (; j < k; ++j)
    m = row[j] > m ? row[j] : m;
  const V vmax(m);
  V vs(0.0f);
  for (j = 0; j + w <= k; j += w) {
    const V e = xsimd::exp(V::load_unaligned(row + j) - vmax);
    if constexpr (Grad)
      e.store_unaligned(d + j);
    vs += e;
  }
  double s = static_cast<double>(xsimd::hadd(vs));
  for (; j < k; ++j) {
    const float e = std::exp(row[j] - m);
    if constexpr (Grad)
      d[j] = e;
    s += static_cast<double>(e);
  }
  if constexpr (Grad) {
    const V inv(static_cast<float>(1.0 / s));
    for (j = 0; j + w <= k; j += w)
      (V::load_unaligned(d + j) * inv).store_unaligned(d + j);
    for (; j < k; ++j)
      d[j] = static_cast<float>(static_cast<double>(d[j]) / s);
    d[label] -= 1.0f;
  } else {
    *loss =
        static_cast<float>(static_cast<double>(m) + std::log(s) - static_cast<double>(row[label]));
  }
}
#endif

/// loss[i] = logsumexp(logits[i]) - logits[i, labels[i]] (Grad: dl = softmax - onehot instead).
template <bool Grad, class T, class L>
void sparse_xent(thread_pool& pool, const T* logits, const L* labels, std::int64_t n,
                 std::int64_t k, T* out) {
  for (std::int64_t i = 0; i < n; ++i)
    check_label(labels[i], k, i);
  pool.parallel_for(n, 16, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const T* row = logits + i * k;
#if defined(TYPEFLOW_HAS_XSIMD)
      if constexpr (std::is_same_v<T, float>) {
        const auto label = static_cast<std::int64_t>(labels[i]);
        if constexpr (Grad)
          xent_row<true>(row, k, label, out + i * k, nullptr);
        else
          xent_row<false>(row, k, label, nullptr, out + i);
        continue;
      }
#endif
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

/// Dropout mask: element i keeps (1/keep) when a hash of (seed, run, i) falls below keep.
template <class T>
void dropout_mask(thread_pool& pool, std::uint64_t seed, std::uint64_t run, double keep,
                  std::int64_t n, T* out) {
  backend::check_keep_prob(keep);
  const std::uint64_t base = backend::dropout_base(seed, run);
  const T scale = static_cast<T>(1.0 / keep);
  pool.parallel_for(n, 4096, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      out[i] = backend::dropout_uniform(base, i) < keep ? scale : T(0);
  });
}

} // namespace typeflow::cpu_backend
