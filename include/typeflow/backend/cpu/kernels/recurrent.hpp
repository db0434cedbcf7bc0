// CPU kernels of the lstm op (ops/recurrent.hpp), cuDNN's and oneDNN's algorithm for a layer:
//
// - forward: every step's input projection x W_x as one product over all B T rows before the
//   loop; then per step, per block of 32 units (one task each), the product of the previous h
//   with the block's columns of W_h (packed once per run: packed_gemm) added in place and the
//   gates' arithmetic on them, in vector lanes, the block's c and h written. The weights are first
//   permuted so that a block's four gates are adjacent columns (one product per block, not four).
//   The gates' activations and the cell states stay beside the output (rt_value::aux) for the
//   gradient.
// - gradient: the loop backward, per step and block: the block's h gradient (the upstream's
//   plus the next step's gate gradients times the block's rows of W_h), then the gates' and the
//   carried c's gradients; after the loop the weights' gradient as two products over all steps
//   (x^T dG and h_prev^T dG), the input's as one (dG W_x^T), the biases' as column sums.
//
// Blocks are fixed by the unit count alone and each is computed the same way on any thread, so
// results do not depend on the thread count. The loop's products on packed_gemm, the others on the
// BLAS split over the pool; arithmetic in the operands' dtype.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "../../../graph/flat.hpp"
#include "../../../ops/recurrent.hpp"
#include "../context.hpp"
#include "../gemm.hpp"
#include "../simd.hpp"

namespace typeflow::cpu_backend {

namespace detail {

/// Units per block of a step's work.
inline constexpr std::int64_t lstm_block = 32;

/// An lstm's extents: x [batch, steps, in], units U, 4 U gate columns.
struct lstm_geometry {
  std::int64_t batch = 0, steps = 0, in = 0, units = 0;
  std::int64_t gates() const { return 4 * units; }
  std::int64_t blocks() const { return (units + lstm_block - 1) / lstm_block; }
  std::int64_t block_size(std::int64_t k) const {
    return std::min(lstm_block, units - k * lstm_block);
  }
  /// The first of block k's 4 * block_size(k) adjacent gate columns (i, f, g, o of its units).
  static std::int64_t block_column(std::int64_t k) { return 4 * k * lstm_block; }
  /// The permuted column of gate q (0 i, 1 f, 2 g, 3 o) of unit u.
  std::int64_t column(std::int64_t q, std::int64_t u) const {
    const std::int64_t k = u / lstm_block;
    return block_column(k) + q * block_size(k) + u % lstm_block;
  }
  std::int64_t rows() const { return batch * steps; }
  static lstm_geometry of(const backend::rt_dims& x, const backend::rt_dims& w) {
    return {x.d[0], x.d[1], x.d[2], w.d[1] / 4};
  }
};

/// f(j, V{}) for j in [0, n) by vector lanes, then f(j, T{}) for the tail.
template <class T, class F>
void for_lanes(std::int64_t n, F f) {
  std::int64_t j = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  using V = simd::vec<T>;
  constexpr std::int64_t w = static_cast<std::int64_t>(V::size);
  for (; j + w <= n; j += w)
    f(j, V(T(0)));
#endif
  for (; j < n; ++j)
    f(j, T(0));
}
/// The loop's products, C[m, n] += A[m, k] B[k, n], with B packed once per run into panels of
/// `panel_width` columns (zero-padded) that every step reads as they are: a BLAS call packs its
/// operands again on every call, which for a step's [32, 256] x [256, 128] block cost about as
/// much as a fifth of the product. The kernel keeps a tile of up to 6 rows by one panel in
/// vector registers (two vectors a row) and adds A's broadcast elements times the panel's rows
/// into it, as BLAS kernels do. The loops over the tile's rows are unrolled (g++ -O2 does not
/// unroll them by itself and then keeps the tile in memory, at a quarter of the speed).
template <class T>
inline constexpr std::int64_t panel_width =
#if defined(TYPEFLOW_HAS_XSIMD)
    2 * static_cast<std::int64_t>(simd::vec<T>::size);
#else
    8;
#endif

inline std::int64_t panel_count(std::int64_t n, std::int64_t w) {
  return (n + w - 1) / w;
}
/// The elements that pack_panels writes for a [k, n] operand.
template <class T>
std::int64_t packed_size(std::int64_t k, std::int64_t n) {
  return panel_count(n, panel_width<T>) * k * panel_width<T>;
}
/// B [k, n], B(kk, c) = get(kk, c), into panels: B(kk, p w + c) at (p k + kk) w + c.
template <class T, class Get>
void pack_panels(std::int64_t k, std::int64_t n, Get get, T* out) {
  constexpr std::int64_t w = panel_width<T>;
  for (std::int64_t p = 0; p < panel_count(n, w); ++p)
    for (std::int64_t kk = 0; kk < k; ++kk) {
      T* row = out + (p * k + kk) * w;
      for (std::int64_t c = 0; c < w; ++c)
        row[c] = p * w + c < n ? get(kk, p * w + c) : T(0);
    }
}
/// Rows [0, R) of C's panel columns [0, nc) += A B_panel, over k.
template <int R, class T>
void packed_tile(std::int64_t k, const T* a, std::int64_t lda, const T* b, T* c, std::int64_t ldc,
                 std::int64_t nc) {
  constexpr std::int64_t w = panel_width<T>;
#if defined(TYPEFLOW_HAS_XSIMD)
  using V = simd::vec<T>;
  constexpr std::int64_t vw = static_cast<std::int64_t>(V::size);
  V acc[R][2];
  T edge[R][w];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    if (nc == w) {
      acc[r][0] = V::load_unaligned(c + r * ldc);
      acc[r][1] = V::load_unaligned(c + r * ldc + vw);
    } else {
      std::fill_n(edge[r], w, T(0));
      std::copy_n(c + r * ldc, nc, edge[r]);
      acc[r][0] = V::load_unaligned(edge[r]);
      acc[r][1] = V::load_unaligned(edge[r] + vw);
    }
  }
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const V b0 = V::load_unaligned(b + kk * w), b1 = V::load_unaligned(b + kk * w + vw);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const V av(a[r * lda + kk]);
      acc[r][0] = xsimd::fma(av, b0, acc[r][0]);
      acc[r][1] = xsimd::fma(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    if (nc == w) {
      acc[r][0].store_unaligned(c + r * ldc);
      acc[r][1].store_unaligned(c + r * ldc + vw);
    } else {
      acc[r][0].store_unaligned(edge[r]);
      acc[r][1].store_unaligned(edge[r] + vw);
      std::copy_n(edge[r], nc, c + r * ldc);
    }
  }
#else
  for (int r = 0; r < R; ++r)
    for (std::int64_t j = 0; j < nc; ++j) {
      T s = c[r * ldc + j];
      for (std::int64_t kk = 0; kk < k; ++kk)
        s += a[r * lda + kk] * b[kk * w + j];
      c[r * ldc + j] = s;
    }
#endif
}
/// C[m, n] += A[m, k] B[k, n], B packed by pack_panels; A's and C's rows lda and ldc apart.
template <class T>
void packed_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t lda,
                 const T* bp, T* c, std::int64_t ldc) {
  constexpr std::int64_t w = panel_width<T>;
  for (std::int64_t p = 0; p < panel_count(n, w); ++p) {
    const T* b = bp + p * k * w;
    const std::int64_t c0 = p * w, nc = std::min(w, n - c0);
    std::int64_t i = 0;
    for (; i + 6 <= m; i += 6)
      packed_tile<6>(k, a + i * lda, lda, b, c + i * ldc + c0, ldc, nc);
    // the last 1 to 5 rows
    using tile_fn =
        void (*)(std::int64_t, const T*, std::int64_t, const T*, T*, std::int64_t, std::int64_t);
    static constexpr tile_fn rest[] = {nullptr,
                                       &packed_tile<1, T>,
                                       &packed_tile<2, T>,
                                       &packed_tile<3, T>,
                                       &packed_tile<4, T>,
                                       &packed_tile<5, T>};
    if (m > i)
      rest[m - i](k, a + i * lda, lda, b, c + i * ldc + c0, ldc, nc);
  }
}

/// Each operand column's permuted column: q U + u -> lstm_geometry::column(q, u).
inline std::unique_ptr<std::int64_t[]> lstm_columns(const lstm_geometry& g) {
  std::unique_ptr<std::int64_t[]> col(new std::int64_t[static_cast<std::size_t>(g.gates() + 1)]);
  for (std::int64_t q = 0; q < 4; ++q)
    for (std::int64_t u = 0; u < g.units; ++u)
      col[static_cast<std::size_t>(q * g.units + u)] = g.column(q, u);
  return col;
}

/// w [E + U, 4 U] with its columns permuted (lstm_geometry::column), and b with the forget bias
/// added to its f columns.
template <class T>
void lstm_permute(context& ctx, const lstm_geometry& g, const T* w, const T* b, double forget_bias,
                  T* wp, T* bp) {
  const std::int64_t n = g.gates();
  const auto col = lstm_columns(g);
  ctx.pool.parallel_for(g.in + g.units, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t j = 0; j < n; ++j)
        wp[r * n + col[static_cast<std::size_t>(j)]] = w[r * n + j];
  });
  for (std::int64_t j = 0; j < n; ++j)
    bp[col[static_cast<std::size_t>(j)]] =
        b[j] + (j / g.units == 1 ? static_cast<T>(forget_bias) : T(0));
}

/// A scratch array of n T from the session's buffer pool (reused from run to run).
template <class T>
struct lstm_buffer {
  std::shared_ptr<void> own;
  lstm_buffer() = default;
  lstm_buffer(context& ctx, std::int64_t n) : own(ctx.scratch<T>(n)) {}
  T* get() const { return static_cast<T*>(own.get()); }
  T& operator[](std::size_t i) const { return get()[i]; }
};

/// The forward pass: y [B, T, U], the gates' activations [B, T, 4 U] (permuted columns) and the
/// cell states [B, T, U], from x and the permuted weights and biases.
template <class T>
void lstm_forward(context& ctx, const lstm_geometry& g, const T* x, const T* wp, const T* bp, T* y,
                  T* gates, T* cells) {
  const std::int64_t n = g.gates(), u = g.units, steps = g.steps;
  if (g.rows() == 0 || u == 0)
    return;
  gemm<T>(ctx.pool, false, false, g.rows(), n, g.in, x, wp, gates); // every step's x W_x
  const T* wh = wp + g.in * n;
  // each block's columns of W_h, packed for the steps' products
  const std::int64_t per_block = packed_size<T>(u, 4 * lstm_block);
  const lstm_buffer<T> panels(ctx, per_block * g.blocks());
  ctx.pool.parallel_for(g.blocks(), 1, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      const std::int64_t c0 = lstm_geometry::block_column(k);
      pack_panels<T>(
          u, 4 * g.block_size(k),
          [&](std::int64_t kk, std::int64_t c) { return wh[kk * n + c0 + c]; },
          panels.get() + k * per_block);
    }
  });
  for (std::int64_t t = 0; t < steps; ++t)
    ctx.pool.parallel_for(g.blocks(), 1, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t k = k0; k < k1; ++k) {
        const std::int64_t bs = g.block_size(k), c0 = lstm_geometry::block_column(k),
                           u0 = k * lstm_block;
        if (t > 0) // + h_{t-1} W_h on the block's columns
          packed_gemm<T>(g.batch, 4 * bs, u, y + (t - 1) * u, steps * u,
                         panels.get() + k * per_block, gates + t * n + c0, steps * n);
        for (std::int64_t b = 0; b < g.batch; ++b) {
          T* z = gates + (b * steps + t) * n + c0;
          const T* bias = bp + c0;
          T* c = cells + (b * steps + t) * u + u0;
          const T* cp = t > 0 ? c - u : nullptr;
          T* h = y + (b * steps + t) * u + u0;
          detail::for_lanes<T>(bs, [&](std::int64_t j, auto lane) {
            using V = decltype(lane);
            const V i = simd::lane_apply<ops::sigmoid>(simd::lane_load<V>(z + j) +
                                                       simd::lane_load<V>(bias + j));
            const V f = simd::lane_apply<ops::sigmoid>(simd::lane_load<V>(z + bs + j) +
                                                       simd::lane_load<V>(bias + bs + j));
            const V gg = simd::lane_apply<ops::tanh>(simd::lane_load<V>(z + 2 * bs + j) +
                                                     simd::lane_load<V>(bias + 2 * bs + j));
            const V o = simd::lane_apply<ops::sigmoid>(simd::lane_load<V>(z + 3 * bs + j) +
                                                       simd::lane_load<V>(bias + 3 * bs + j));
            const V cn = cp ? f * simd::lane_load<V>(cp + j) + i * gg : i * gg;
            simd::lane_store(z + j, i);
            simd::lane_store(z + bs + j, f);
            simd::lane_store(z + 2 * bs + j, gg);
            simd::lane_store(z + 3 * bs + j, o);
            simd::lane_store(c + j, cn);
            simd::lane_store(h + j, o * simd::lane_apply<ops::tanh>(cn));
          });
        }
      }
    });
}

/// What the forward pass keeps beside its output.
template <class T>
struct lstm_saved : backend::aux_header {
  static constexpr char kind = 0; ///< its address is the tag
  std::int64_t batch = 0, steps = 0, units = 0;
  lstm_buffer<T> gates, cells;
};

} // namespace detail

template <std::size_t I, double FB, class T, class X, class W, class B>
void kernel(context& ctx, ops::lstm<FB>*, T*, value* vals, void*, X*, W*, B*) {
  const auto g = detail::lstm_geometry::of(vals[X::index].dims, vals[W::index].dims);
  const T* x = static_cast<const T*>(vals[X::index].data);
  const detail::lstm_buffer<T> wp(ctx, (g.in + g.units) * g.gates());
  const detail::lstm_buffer<T> bp(ctx, g.gates());
  detail::lstm_permute(ctx, g, static_cast<const T*>(vals[W::index].data),
                       static_cast<const T*>(vals[B::index].data), FB, wp.get(), bp.get());
  T* y = ctx.allocate<T>(vals[I]);
  auto saved = std::make_shared<detail::lstm_saved<T>>();
  saved->tag = &detail::lstm_saved<T>::kind;
  saved->batch = g.batch;
  saved->steps = g.steps;
  saved->units = g.units;
  saved->gates = detail::lstm_buffer<T>(ctx, g.rows() * g.gates());
  saved->cells = detail::lstm_buffer<T>(ctx, g.rows() * g.units);
  detail::lstm_forward(ctx, g, x, wp.get(), bp.get(), y, saved->gates.get(), saved->cells.get());
  vals[I].aux = std::move(saved);
}

template <std::size_t I, double FB, class T, class X, class W, class B, class Y, class G>
void kernel(context& ctx, ops::lstm_grads<FB>*, T*, value* vals, void*, X*, W*, B*, Y*, G*) {
  const auto g = detail::lstm_geometry::of(vals[X::index].dims, vals[W::index].dims);
  const std::int64_t n = g.gates(), u = g.units, steps = g.steps, rows = g.rows();
  const std::int64_t wsize = (g.in + u) * n;
  const T* x = static_cast<const T*>(vals[X::index].data);
  const T* up = static_cast<const T*>(vals[G::index].data);
  const detail::lstm_buffer<T> wp(ctx, wsize);
  const detail::lstm_buffer<T> bp(ctx, n);
  detail::lstm_permute(ctx, g, static_cast<const T*>(vals[W::index].data),
                       static_cast<const T*>(vals[B::index].data), FB, wp.get(), bp.get());
  T* out = ctx.allocate<T>(vals[I]); // dW [E + U, 4 U], db [4 U], dx [B, T, E]
  // The forward's gates and cells: kept beside y, or computed again here.
  const value& yv = vals[Y::index];
  const T* y = static_cast<const T*>(yv.data);
  const T *acts = nullptr, *cells = nullptr;
  detail::lstm_buffer<T> own_gates, own_cells, own_y;
  if (yv.aux && yv.aux->tag == &detail::lstm_saved<T>::kind) {
    const auto& s = static_cast<const detail::lstm_saved<T>&>(*yv.aux);
    if (s.batch == g.batch && s.steps == steps && s.units == u) {
      acts = s.gates.get();
      cells = s.cells.get();
    }
  }
  if (!acts) {
    own_gates = detail::lstm_buffer<T>(ctx, rows * n);
    own_cells = detail::lstm_buffer<T>(ctx, rows * u);
    own_y = detail::lstm_buffer<T>(ctx, rows * u);
    detail::lstm_forward(ctx, g, x, wp.get(), bp.get(), own_y.get(), own_gates.get(),
                         own_cells.get());
    acts = own_gates.get();
    cells = own_cells.get();
    y = own_y.get();
  }
  const detail::lstm_buffer<T> dgates(ctx, rows * n); // dL/dz, permuted columns
  const detail::lstm_buffer<T> dh(ctx, g.batch * u);  // a step's h gradient
  const detail::lstm_buffer<T> dc(ctx, g.batch * u);  // c's gradient carried to the step before
  std::fill_n(dc.get(), g.batch * u, T(0));
  const T* wh = wp.get() + g.in * n;
  T* dz = dgates.get();
  // each block's rows of W_h, transposed and packed for the steps' products
  const std::int64_t per_block = detail::packed_size<T>(n, detail::lstm_block);
  const detail::lstm_buffer<T> panels(ctx, per_block * g.blocks());
  ctx.pool.parallel_for(g.blocks(), 1, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) {
      const T* rows_k = wh + k * detail::lstm_block * n;
      detail::pack_panels<T>(
          n, g.block_size(k), [&](std::int64_t kk, std::int64_t c) { return rows_k[c * n + kk]; },
          panels.get() + k * per_block);
    }
  });
  for (std::int64_t t = steps - 1; t >= 0 && rows > 0; --t)
    ctx.pool.parallel_for(g.blocks(), 1, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t k = k0; k < k1; ++k) {
        const std::int64_t bs = g.block_size(k), c0 = detail::lstm_geometry::block_column(k),
                           u0 = k * detail::lstm_block;
        // h's gradient: the upstream's, plus (but at the last step) the next step's gate
        // gradients through W_h, dz_{t+1} W_h[block]^T
        for (std::int64_t b = 0; b < g.batch; ++b)
          std::copy_n(up + (b * steps + t) * u + u0, bs, dh.get() + b * u + u0);
        if (t + 1 < steps)
          detail::packed_gemm<T>(g.batch, bs, n, dz + (t + 1) * n, steps * n,
                                 panels.get() + k * per_block, dh.get() + u0, u);
        for (std::int64_t b = 0; b < g.batch; ++b) {
          const std::int64_t row = b * steps + t;
          const T* a = acts + row * n + c0;
          const T* c = cells + row * u + u0;
          const T* cp = t > 0 ? c - u : nullptr;
          T* dhb = dh.get() + b * u + u0;
          T* dcb = dc.get() + b * u + u0;
          T* d = dz + row * n + c0;
          detail::for_lanes<T>(bs, [&](std::int64_t j, auto lane) {
            using V = decltype(lane);
            const V one(1);
            const V i = simd::lane_load<V>(a + j), f = simd::lane_load<V>(a + bs + j);
            const V gg = simd::lane_load<V>(a + 2 * bs + j);
            const V o = simd::lane_load<V>(a + 3 * bs + j);
            const V tc = simd::lane_apply<ops::tanh>(simd::lane_load<V>(c + j));
            const V h = simd::lane_load<V>(dhb + j);
            const V dcn = simd::lane_load<V>(dcb + j) + h * o * (one - tc * tc);
            const V cprev = cp ? simd::lane_load<V>(cp + j) : V(0);
            simd::lane_store(d + j, dcn * gg * i * (one - i));
            simd::lane_store(d + bs + j, dcn * cprev * f * (one - f));
            simd::lane_store(d + 2 * bs + j, dcn * i * (one - gg * gg));
            simd::lane_store(d + 3 * bs + j, h * tc * o * (one - o));
            simd::lane_store(dcb + j, dcn * f);
          });
        }
      }
    });
  // After the loop: dW_x = x^T dz, dW_h = h_prev^T dz, dx = dz W_x^T, db = the sums of dz.
  const detail::lstm_buffer<T> dwp(ctx, wsize);
  gemm<T>(ctx.pool, true, false, g.in, n, rows, x, dz, dwp.get());
  const detail::lstm_buffer<T> hprev(ctx, rows * u); // h_{t-1}, zero at t = 0
  ctx.pool.parallel_for(g.batch, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      T* hp = hprev.get() + b * steps * u;
      std::fill_n(hp, std::min<std::int64_t>(steps, 1) * u, T(0));
      if (steps > 1)
        std::copy_n(y + b * steps * u, (steps - 1) * u, hp + u);
    }
  });
  gemm<T>(ctx.pool, true, false, u, n, rows, hprev.get(), dz, dwp.get() + g.in * n);
  T* dx = out + wsize + n;
  gemm<T>(ctx.pool, false, true, rows, g.in, n, dz, wp.get(), dx);
  const detail::lstm_buffer<T> dbp(ctx, n);
  ctx.pool.parallel_for(n, 64, [&](std::int64_t j0, std::int64_t j1) {
    std::fill(dbp.get() + j0, dbp.get() + j1, T(0));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = j0; j < j1; ++j)
        dbp[static_cast<std::size_t>(j)] += dz[r * n + j];
  });
  // Back to the operands' column order.
  const auto col = detail::lstm_columns(g);
  T* dw = out;
  T* db = out + wsize;
  ctx.pool.parallel_for(g.in + u, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t j = 0; j < n; ++j)
        dw[r * n + j] = dwp[static_cast<std::size_t>(r * n + col[static_cast<std::size_t>(j)])];
  });
  for (std::int64_t j = 0; j < n; ++j)
    db[j] = dbp[static_cast<std::size_t>(col[static_cast<std::size_t>(j)])];
}

} // namespace typeflow::cpu_backend
