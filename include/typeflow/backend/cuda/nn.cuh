// CUDA kernels of the neural-network ops: conv2d forward and backward on cuDNN where it takes
// them (cudnn.cuh: float32, symmetric padding), else as im2col + cuBLAS (bfloat16 or float16
// patches on the tensor cores under a 16-bit session precision; the adjoint col2im
// gathers, so no atomics and deterministic sums), max/avg pooling and their
// gradients (gathering too: each input element sums the windows that read it), and the fused
// sparse softmax cross-entropy (one thread per row; a bad label sets a flag the host checks).
// The window geometry is backend/common/window.hpp's, shared with the CPU.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../../core/error.hpp"
#include "../../ops/nn.hpp"
#include "../common/window.hpp"
#include "context.cuh"
#include "cudnn.cuh"
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

// ---- the window kernels' index arithmetic ----------------------------------------------------
//
// Each kernel is a grid-stride loop over its output elements whose body is a __host__ __device__
// function of the element's index (the host tests run them against the CPU kernels: unit.
// cuda_runtime). Splitting a flat NHWC index takes several divisions per element: with 64-bit
// operands they dominated these kernels (im2col of conv2 at batch 128: 259 us on an H200). Below
// 2^31 elements they use 32-bit indices and a multiply-and-shift per division (fast_divider).

/// Division by a divisor fixed at launch, as a multiply-high, an add and a shift (Granlund and
/// Montgomery's method, the form of PyTorch's IntDivider): exact for dividends and divisors below
/// 2^31.
struct fast_divider {
  std::uint32_t d = 1, magic = 1, shift = 0;
  fast_divider() = default;
  explicit fast_divider(std::int64_t divisor)
      : d(static_cast<std::uint32_t>(divisor > 0 ? divisor : 1)) {
    while (shift < 32 && (std::uint64_t{1} << shift) < d)
      ++shift;
    const std::uint64_t one = 1;
    magic = static_cast<std::uint32_t>(((one << 32) * ((one << shift) - d)) / d + 1);
  }
  __host__ __device__ std::uint32_t div(std::uint32_t n) const {
#ifdef __CUDA_ARCH__
    const std::uint32_t t = __umulhi(n, magic);
#else
    const auto t = static_cast<std::uint32_t>((std::uint64_t{n} * magic) >> 32);
#endif
    return (t + n) >> shift;
  }
};
/// Plain 64-bit division, for tensors of 2^31 elements or more.
struct plain_divider {
  std::int64_t d = 1;
  plain_divider() = default;
  explicit plain_divider(std::int64_t divisor) : d(divisor > 0 ? divisor : 1) {}
  __host__ __device__ std::int64_t div(std::int64_t n) const { return n / d; }
};

/// The divisors of a window op's index arithmetic; I is the index type (std::uint32_t: fast
/// division, std::int64_t: plain).
template <class I>
struct window_dividers {
  using divider = std::conditional_t<std::is_same_v<I, std::uint32_t>, fast_divider, plain_divider>;
  divider c, w, h, ow, oh, kw, patch, sh, sw;
  explicit window_dividers(const window2d& g)
      : c(g.c), w(g.w), h(g.h), ow(g.ow), oh(g.oh), kw(g.kw), patch(g.kh * g.kw * g.c), sh(g.sh),
        sw(g.sw) {}
};

/// q = n / d and the remainder, with d's own division.
template <class I, class D>
__host__ __device__ inline I split(I n, const D& d, I& rem) {
  const I q = static_cast<I>(d.div(n));
  rem = n - q * static_cast<I>(d.d);
  return q;
}

/// Where col[idx] comes from: row r = (b, oy, ox) of the output, p = (ky, kx, ci) of the patch;
/// the offset of its input element in x, or -1 where the window lies in the padding. With
/// idx % V == 0 and c % V == 0, entries idx .. idx + V - 1 read the V elements from there on.
template <class I>
__host__ __device__ std::int64_t im2col_source(const window2d& g, const window_dividers<I>& dv,
                                               I idx) {
  I p, ci, kx, ox, oy;
  const I r = split(idx, dv.patch, p);
  const I ky = split(split(p, dv.c, ci), dv.kw, kx);
  const I b = split(split(r, dv.ow, ox), dv.oh, oy);
  const std::int64_t iy = static_cast<std::int64_t>(oy) * g.sh - g.ph +
                          static_cast<std::int64_t>(ky) * g.dh,
                     ix = static_cast<std::int64_t>(ox) * g.sw - g.pw +
                          static_cast<std::int64_t>(kx) * g.dw;
  return (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
             ? -1
             : ((static_cast<std::int64_t>(b) * g.h + iy) * g.w + ix) * g.c + ci;
}

/// col[r, p] (im2col_source).
template <class T, class I>
__host__ __device__ T im2col_at(const T* x, const window2d& g, const window_dividers<I>& dv,
                                I idx) {
  const std::int64_t s = im2col_source(g, dv, idx);
  return s < 0 ? T(0) : x[s];
}
/// col[idx .. idx + V) as Out, for idx % V == 0 and c % V == 0: one index computation and one
/// load for V entries (x aligned as lanes<T, V>).
template <int V, class Out, class T, class I>
__host__ __device__ lanes<Out, V> im2col_lanes_at(const T* x, const window2d& g,
                                                  const window_dividers<I>& dv, I idx) {
  const std::int64_t s = im2col_source(g, dv, idx);
  lanes<Out, V> out;
  if (s < 0) {
    for (int k = 0; k < V; ++k)
      out.v[k] = Out(0);
  } else {
    const lanes<T, V> in = load_lanes<V>(x + s);
    for (int k = 0; k < V; ++k)
      out.v[k] = Out(in.v[k]);
  }
  return out;
}

/// dx[b, iy, ix, ci .. ci + V) = the sums of the patch entries that im2col copied from there, in
/// (ky, kx) order, for idx % V == 0 and c % V == 0 (col aligned as lanes<T, V>); each lane sums
/// in the same order as V = 1.
template <int V, class T, class I>
__host__ __device__ lanes<T, V> col2im_lanes_at(const T* col, const window2d& g,
                                                const window_dividers<I>& dv, I idx) {
  I ci, ix, iy;
  const I b = split(split(split(idx, dv.c, ci), dv.w, ix), dv.h, iy);
  const std::int64_t patch = g.kh * g.kw * g.c;
  lanes<T, V> acc;
  for (int k = 0; k < V; ++k)
    acc.v[k] = T(0);
  for (std::int64_t ky = 0; ky < g.kh; ++ky) {
    const std::int64_t ty = static_cast<std::int64_t>(iy) + g.ph - ky * g.dh;
    if (ty < 0)
      continue;
    I ry;
    const I oy = split(static_cast<I>(ty), dv.sh, ry);
    if (ry != 0 || oy >= g.oh)
      continue;
    for (std::int64_t kx = 0; kx < g.kw; ++kx) {
      const std::int64_t tx = static_cast<std::int64_t>(ix) + g.pw - kx * g.dw;
      if (tx < 0)
        continue;
      I rx;
      const I ox = split(static_cast<I>(tx), dv.sw, rx);
      if (rx != 0 || ox >= g.ow)
        continue;
      const lanes<T, V> in =
          load_lanes<V>(col + ((static_cast<std::int64_t>(b) * g.oh + oy) * g.ow + ox) * patch +
                        (ky * g.kw + kx) * g.c + ci);
      for (int k = 0; k < V; ++k)
        acc.v[k] += in.v[k];
    }
  }
  return acc;
}
/// dx[b, iy, ix, ci] (col2im_lanes_at for one channel).
template <class T, class I>
__host__ __device__ T col2im_at(const T* col, const window2d& g, const window_dividers<I>& dv,
                                I idx) {
  return col2im_lanes_at<1>(col, g, dv, idx).v[0];
}

/// y[b, oy, ox, ci]: the maximum (Max) or the mean of its window clipped to the input.
template <bool Max, class T, class I>
__host__ __device__ T pool_forward_at(const T* x, const window2d& g, const window_dividers<I>& dv,
                                      I idx) {
  I ci, ox, oy;
  const I b = split(split(split(idx, dv.c, ci), dv.ow, ox), dv.oh, oy);
  const std::int64_t wy = static_cast<std::int64_t>(oy) * g.sh - g.ph,
                     wx = static_cast<std::int64_t>(ox) * g.sw - g.pw;
  const std::int64_t y0 = wy > 0 ? wy : 0, y1 = wy + g.kh < g.h ? wy + g.kh : g.h;
  const std::int64_t x0 = wx > 0 ? wx : 0, x1 = wx + g.kw < g.w ? wx + g.kw : g.w;
  T acc = Max ? -std::numeric_limits<T>::infinity() : T(0);
  for (std::int64_t iy = y0; iy < y1; ++iy)
    for (std::int64_t ix = x0; ix < x1; ++ix) {
      const T v = x[((static_cast<std::int64_t>(b) * g.h + iy) * g.w + ix) * g.c + ci];
      acc = Max ? (v > acc ? v : acc) : acc + v;
    }
  if (!Max) {
    const std::int64_t n = (y1 - y0) * (x1 - x0);
    acc = acc / static_cast<T>(n > 0 ? n : 1);
  }
  return acc;
}

/// dx[b, iy, ix, ci .. ci + V) gathers the gradient of every window that reads it (ascending
/// oy, then ox): for max, only from windows whose first maximum (row-major) it is, lane by lane.
/// Only the windows that can hold (iy, ix) are visited: oy in [(iy + ph - kh) / sh + 1,
/// (iy + ph) / sh]. For idx % V == 0 and c % V == 0 (x and dy aligned as their lanes); each
/// lane computes what V = 1 does.
template <int V, bool Max, class T, class TX, class I>
__host__ __device__ lanes<T, V> pool_backward_lanes_at(const TX* x, const T* dy, const window2d& g,
                                                       const window_dividers<I>& dv, I idx) {
  I ci, ixi, iyi;
  const I b = split(split(split(idx, dv.c, ci), dv.w, ixi), dv.h, iyi);
  const std::int64_t iy = iyi, ix = ixi, bb = b;
  const std::int64_t ly = iy + g.ph - g.kh, lx = ix + g.pw - g.kw;
  const std::int64_t oy0 =
      ly < 0 ? 0 : static_cast<std::int64_t>(dv.sh.div(static_cast<I>(ly))) + 1;
  const std::int64_t ox0 =
      lx < 0 ? 0 : static_cast<std::int64_t>(dv.sw.div(static_cast<I>(lx))) + 1;
  const std::int64_t hy = static_cast<std::int64_t>(dv.sh.div(static_cast<I>(iy + g.ph))),
                     hx = static_cast<std::int64_t>(dv.sw.div(static_cast<I>(ix + g.pw)));
  const std::int64_t oy1 = hy < g.oh - 1 ? hy : g.oh - 1, ox1 = hx < g.ow - 1 ? hx : g.ow - 1;
  lanes<T, V> acc;
  for (int k = 0; k < V; ++k)
    acc.v[k] = T(0);
  for (std::int64_t oy = oy0; oy <= oy1; ++oy) {
    const std::int64_t wy = oy * g.sh - g.ph;
    if (iy < wy || iy >= wy + g.kh)
      continue;
    for (std::int64_t ox = ox0; ox <= ox1; ++ox) {
      const std::int64_t wx = ox * g.sw - g.pw;
      if (ix < wx || ix >= wx + g.kw)
        continue;
      const std::int64_t y0 = wy > 0 ? wy : 0, y1 = wy + g.kh < g.h ? wy + g.kh : g.h;
      const std::int64_t x0 = wx > 0 ? wx : 0, x1 = wx + g.kw < g.w ? wx + g.kw : g.w;
      const lanes<T, V> grad = load_lanes<V>(dy + ((bb * g.oh + oy) * g.ow + ox) * g.c + ci);
      if (Max) {
        // Each lane's first maximum: whether it lies at (iy, ix).
        const lanes<TX, V> first = load_lanes<V>(x + ((bb * g.h + y0) * g.w + x0) * g.c + ci);
        T best[V];
        bool here[V];
        for (int k = 0; k < V; ++k) {
          best[k] = static_cast<T>(first.v[k]);
          here[k] = y0 == iy && x0 == ix;
        }
        for (std::int64_t yy = y0; yy < y1; ++yy)
          for (std::int64_t xx = x0; xx < x1; ++xx) {
            const lanes<TX, V> in = load_lanes<V>(x + ((bb * g.h + yy) * g.w + xx) * g.c + ci);
            for (int k = 0; k < V; ++k) {
              const T v = static_cast<T>(in.v[k]);
              if (v > best[k]) {
                best[k] = v;
                here[k] = yy == iy && xx == ix;
              }
            }
          }
        for (int k = 0; k < V; ++k)
          if (here[k])
            acc.v[k] += grad.v[k];
      } else {
        for (int k = 0; k < V; ++k)
          acc.v[k] += grad.v[k] / static_cast<T>((y1 - y0) * (x1 - x0));
      }
    }
  }
  return acc;
}
/// dx[b, iy, ix, ci] (pool_backward_lanes_at for one channel).
template <bool Max, class T, class TX, class I>
__host__ __device__ T pool_backward_at(const TX* x, const T* dy, const window2d& g,
                                       const window_dividers<I>& dv, I idx) {
  return pool_backward_lanes_at<1, Max, T>(x, dy, g, dv, idx).v[0];
}

/// Whether p is aligned as an L (a lanes<T, V>).
template <class L>
bool aligned_as(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(L) == 0;
}

/// The element functions above bound to their operands (im2col's patches rounded to Out: the
/// tensor-core products' operands).
template <class T, class Out = T>
struct im2col_fn {
  const T* x;
  window2d g;
  template <class I>
  __host__ __device__ Out operator()(const window_dividers<I>& dv, I i) const {
    return Out(im2col_at(x, g, dv, i));
  }
  template <int V, class I>
  __host__ __device__ lanes<Out, V> at_lanes(const window_dividers<I>& dv, I i) const {
    return im2col_lanes_at<V, Out>(x, g, dv, i);
  }
  template <int V>
  bool lanes_aligned() const {
    return aligned_as<lanes<T, V>>(x);
  }
};
template <class T>
struct col2im_fn {
  const T* col;
  window2d g;
  template <class I>
  __host__ __device__ T operator()(const window_dividers<I>& dv, I i) const {
    return col2im_at(col, g, dv, i);
  }
  template <int V, class I>
  __host__ __device__ lanes<T, V> at_lanes(const window_dividers<I>& dv, I i) const {
    return col2im_lanes_at<V>(col, g, dv, i);
  }
  template <int V>
  bool lanes_aligned() const {
    return aligned_as<lanes<T, V>>(col);
  }
};
template <bool Max, class T>
struct pool_forward_fn {
  const T* x;
  window2d g;
  template <class I>
  __host__ __device__ T operator()(const window_dividers<I>& dv, I i) const {
    return pool_forward_at<Max>(x, g, dv, i);
  }
};
template <bool Max, class T, class TX = T>
struct pool_backward_fn {
  const TX* x; // not read by avg
  const T* dy;
  window2d g;
  template <class I>
  __host__ __device__ T operator()(const window_dividers<I>& dv, I i) const {
    return pool_backward_at<Max, T>(x, dy, g, dv, i);
  }
  template <int V, class I>
  __host__ __device__ lanes<T, V> at_lanes(const window_dividers<I>& dv, I i) const {
    return pool_backward_lanes_at<V, Max, T>(x, dy, g, dv, i);
  }
  template <int V>
  bool lanes_aligned() const {
    return (!Max || aligned_as<lanes<TX, V>>(x)) && aligned_as<lanes<T, V>>(dy);
  }
};

/// out[i] = f(dividers, i) for every i < n.
template <class I, class T, class F>
__global__ void window_kernel(T* out, I n, window_dividers<I> dv, F f) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<I>(blockDim.x) * gridDim.x)
    out[i] = f(dv, i);
}
/// Launches window_kernel over n elements, with 32-bit indices below 2^31.
template <class T, class F>
void launch_window(context& ctx, const window2d& g, T* out, std::int64_t n, F f) {
  if (n <= 0)
    return;
  if (n < (std::int64_t{1} << 31))
    window_kernel<<<grid_for(n), 256, 0, ctx.stream()>>>(out, static_cast<std::uint32_t>(n),
                                                         window_dividers<std::uint32_t>(g), f);
  else
    window_kernel<<<grid_for(n), 256, 0, ctx.stream()>>>(out, n, window_dividers<std::int64_t>(g),
                                                         f);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

/// out[q * V .. q * V + V) = f.at_lanes<V>(dividers, q * V) for every q < groups: V channels per
/// thread, one 16-byte store.
template <int V, class T, class F>
__global__ void window_lanes_kernel(T* out, std::uint32_t groups, window_dividers<std::uint32_t> dv,
                                    F f) {
  for (std::uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < groups;
       q += blockDim.x * gridDim.x)
    reinterpret_cast<lanes<T, V>*>(out)[q] = f.template at_lanes<V>(dv, q * V);
}
/// launch_window for an element function that has V-channel lanes (im2col, col2im, the pool
/// gradient): V =
/// 16 bytes of T at a time where the channels are a multiple of V, the output 16-byte aligned
/// and the input aligned for its V values (one index computation and one wide load and store
/// per V elements: the index arithmetic is what these kernels spend their time on); else one
/// element at a time.
template <class T, class F>
void launch_window_lanes(context& ctx, const window2d& g, T* out, std::int64_t n, F f) {
  constexpr int V = 16 / sizeof(T);
  if constexpr (V > 1) {
    if (n > 0 && n < (std::int64_t{1} << 31) && g.c % V == 0 && aligned_as<lanes<T, V>>(out) &&
        f.template lanes_aligned<V>()) {
      const std::int64_t groups = n / V;
      window_lanes_kernel<V><<<grid_for(groups), 256, 0, ctx.stream()>>>(
          out, static_cast<std::uint32_t>(groups), window_dividers<std::uint32_t>(g), f);
      TYPEFLOW_CUDA_CHECK(cudaGetLastError());
      return;
    }
  }
  launch_window(ctx, g, out, n, f);
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

/// The patches of x, as Out, in a scratch buffer that `holder` keeps alive.
template <class T, class Out = T>
const Out* im2col(context& ctx, const T* x, const window2d& g, value& holder) {
  Out* col = ctx.scratch<Out>(holder, g.rows() * g.patch());
  launch_window_lanes(ctx, g, col, g.rows() * g.patch(), im2col_fn<T, Out>{x, g});
  return col;
}

/// A float32 convolution pass under a session precision of bfloat16 or float16 (half_products):
/// im2col writes the patches rounded to H, the other operand is rounded, and the GEMM runs on
/// the tensor cores with float32 sums (cuDNN's 16-bit convolutions write 16-bit outputs).
/// Pass: 0 forward, 1 input gradient, 2 filter gradient.
template <int Pass>
void convolve_half(context& ctx, const window2d& g, const float* a, const float* b, float* out) {
  with_half_type(ctx, [&]<class H>(H*) {
    value ta, tb, tc;
    if constexpr (Pass == 0) { // y = col(x) w
      gemm_half<H>(ctx.blas(), false, false, g.rows(), g.o, g.patch(),
                   im2col<float, H>(ctx, a, g, ta), rounded<H>(ctx, b, g.patch() * g.o, tb).first,
                   out, 1);
    } else if constexpr (Pass == 1) { // dx = col2im(dy w^T)
      float* col = ctx.scratch<float>(tc, g.rows() * g.patch());
      const auto [dy16, w16] = rounded<H>(ctx, a, g.rows() * g.o, ta, b, g.patch() * g.o, &tb);
      gemm_half<H>(ctx.blas(), false, true, g.rows(), g.patch(), g.o, dy16, w16, col, 1);
      launch_window_lanes(ctx, g, out, g.n * g.h * g.w * g.c, col2im_fn<float>{col, g});
    } else { // dw = col(x)^T dy
      gemm_half<H>(ctx.blas(), true, false, g.patch(), g.o, g.rows(),
                   im2col<float, H>(ctx, a, g, ta), rounded<H>(ctx, b, g.rows() * g.o, tb).first,
                   out, 1);
    }
  });
}

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class W>
void kernel(context& ctx, ops::conv2d<P, SH, SW, DH, DW>*, T*, value* vals, void*, X*, W*) {
  const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                      vals[W::index].dims);
  T* y = ctx.scratch<T>(vals[I], g.rows() * g.o);
  const T* x = static_cast<const T*>(vals[X::index].data);
  const T* w = static_cast<const T*>(vals[W::index].data);
  auto by_im2col = [&] {
    value tmp;
    const T* col = im2col(ctx, x, g, tmp);
    gemm_strided_batched<T>(ctx.blas(), false, false, g.rows(), g.o, g.patch(), col, w, y, 1);
  };
  if constexpr (std::is_same_v<T, float>) {
    if (half_products(ctx))
      convolve_half<0>(ctx, g, x, w, y);
    else
      convolve_forward(ctx, g, x, w, y, by_im2col);
  } else {
    by_im2col();
  }
}

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class G, class W, class X>
void kernel(context& ctx, ops::conv2d_backprop_input<P, SH, SW, DH, DW>*, T*, value* vals, void*,
            G*, W*, X*) {
  const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                      vals[W::index].dims);
  T* dx = ctx.scratch<T>(vals[I], g.n * g.h * g.w * g.c);
  const T* dy = static_cast<const T*>(vals[G::index].data);
  const T* w = static_cast<const T*>(vals[W::index].data);
  auto by_col2im = [&] {
    value tmp;
    T* col = ctx.scratch<T>(tmp, g.rows() * g.patch());
    gemm_strided_batched<T>(ctx.blas(), false, true, g.rows(), g.patch(), g.o, dy, w, col, 1);
    launch_window_lanes(ctx, g, dx, g.n * g.h * g.w * g.c, col2im_fn<T>{col, g});
  };
  if constexpr (std::is_same_v<T, float>) {
    if (half_products(ctx))
      convolve_half<1>(ctx, g, dy, w, dx);
    else
      convolve_backward_data(ctx, g, dy, w, dx, by_col2im);
  } else {
    by_col2im();
  }
}

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class G, class W>
void kernel(context& ctx, ops::conv2d_backprop_filter<P, SH, SW, DH, DW>*, T*, value* vals, void*,
            X*, G*, W*) {
  const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                      vals[W::index].dims);
  T* dw = ctx.scratch<T>(vals[I], g.patch() * g.o);
  const T* x = static_cast<const T*>(vals[X::index].data);
  const T* dy = static_cast<const T*>(vals[G::index].data);
  auto by_im2col = [&] {
    value tmp;
    const T* col = im2col(ctx, x, g, tmp);
    gemm_strided_batched<T>(ctx.blas(), true, false, g.patch(), g.o, g.rows(), col, dy, dw, 1);
  };
  if constexpr (std::is_same_v<T, float>) {
    if (half_products(ctx))
      convolve_half<2>(ctx, g, x, dy, dw);
    else
      convolve_backward_filter(ctx, g, x, dy, dw, by_im2col);
  } else {
    by_im2col();
  }
}

template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X>
void kernel(context& ctx, ops::pool<K, P, KH, KW, SH, SW>*, T*, value* vals, void*, X*) {
  const auto g = backend::pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
  const std::int64_t n = g.n * g.oh * g.ow * g.c;
  T* y = ctx.scratch<T>(vals[I], n);
  launch_window(
      ctx, g, y, n,
      pool_forward_fn<K == ops::pool_kind::max, T>{static_cast<const T*>(vals[X::index].data), g});
}

template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X, class G>
void kernel(context& ctx, ops::pool_grad<K, P, KH, KW, SH, SW>*, T*, value* vals, void*, X*, G*) {
  const auto g = backend::pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
  const std::int64_t n = g.n * g.h * g.w * g.c;
  T* dx = ctx.scratch<T>(vals[I], n);
  launch_window_lanes(ctx, g, dx, n,
                      pool_backward_fn<K == ops::pool_kind::max, T, typename X::value_type>{
                          static_cast<const typename X::value_type*>(vals[X::index].data),
                          static_cast<const T*>(vals[G::index].data), g});
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
