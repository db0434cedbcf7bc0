// CPU kernels of the attention op, FlashAttention's algorithm in tiles of 64 queries by 64 keys:
// the forward pass keeps a running maximum, sum and output per query row (an online softmax),
// so memory is O(64 * (64 + Dv)) per thread and the [T, S] scores are never stored; it keeps
// each row's log-sum-exp L beside its output (rt_value::aux, FlashAttention-2's way). The
// gradients recompute each tile's scores from L and D = dO . O (the attention_stats op, once for
// the three, which reads the forward's L where the output it is given carries it and otherwise
// recomputes it): attention_grads all three in one pass per batch
// entry; attention_grad q's tile row by tile row, k's and v's tile column by tile column (no
// atomics; each task owns its output rows). Arithmetic in the operands' dtype; products on the
// BLAS.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "../../../graph/flat.hpp"
#include "../../../ops/attention.hpp"
#include "../../common/attention.hpp"
#include "../../common/dropout.hpp"
#include "../context.hpp"
#include "../gemm.hpp"
#include "../simd.hpp"

namespace typeflow::cpu_backend {

namespace detail {

/// The tile: 64 queries by 64 keys. Each task owns a tile row of queries (or, for k's and v's
/// gradients, a tile column of keys) and walks the other side in tiles: the scores of a tile
/// are one GEMM (gemm_serial: single-threaded BLAS), the softmax runs over the tile in
/// registers, and the product with v (or the gradients' products) is a second GEMM.
inline constexpr std::int64_t att_tile = 64;
/// Keys per block: a tile is att_tile queries by att_keys keys, and att_keys is each score
/// buffer's row stride. A multiple of att_tile (the causal loops skip whole query tiles).
inline constexpr std::int64_t att_keys = 128;
static_assert(att_keys % att_tile == 0);

/// x[c] = exp(x[c] - shift) for c < n, in vectors where xsimd is found (exp(-inf) = 0); returns
/// the sum of the results when Sum.
template <bool Sum, class T>
T att_exp(T* x, std::int64_t n, T shift) {
  T sum = 0;
  std::int64_t c = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  using V = simd::vec<T>;
  constexpr auto lanes = static_cast<std::int64_t>(V::size);
  const V sv(shift);
  V acc(T(0));
  for (; c + lanes <= n; c += lanes) {
    const V e = xsimd::exp(V::load_unaligned(x + c) - sv);
    e.store_unaligned(x + c);
    if constexpr (Sum)
      acc += e;
  }
  if constexpr (Sum)
    sum = xsimd::hadd(acc);
#endif
  for (; c < n; ++c) {
    x[c] = std::exp(x[c] - shift);
    if constexpr (Sum)
      sum += x[c];
  }
  return sum;
}

/// An attention op's dropout in one run (ops::attention_dropout): probability (row, key) is
/// kept with probability keep and scaled by 1 / keep, row = b * T + i for query i of batch entry
/// b; the draw is element row * S + key of the dropout hash (backend/common/dropout.hpp).
template <class T>
struct att_drop {
  std::uint64_t base = 0;
  std::uint64_t below = 0; ///< backend::dropout_below(keep)
  T scale = 1;
  std::int64_t s = 0;
  /// z[c] = the factor of (row, j0 + c) for c < n: 1 / keep where kept, else 0.
  void factors(std::int64_t row, std::int64_t j0, std::int64_t n, T* z) const {
    const auto first = static_cast<std::uint64_t>(row * s + j0);
    for (std::int64_t c = 0; c < n; ++c)
      z[c] =
          backend::dropout_kept(base, first + static_cast<std::uint64_t>(c), below) ? scale : T(0);
  }
};
/// The dropout of attention op Drop in the current run, or none (keep = 1).
template <attention_dropout Drop, class T>
std::optional<att_drop<T>> att_drop_of(const context& ctx, const backend::attention_geometry& g) {
  if constexpr (Drop.keep < 1.0)
    return att_drop<T>{backend::dropout_base(Drop.seed, ctx.run), backend::dropout_below(Drop.keep),
                       static_cast<T>(1.0 / Drop.keep), g.s};
  else
    return std::nullopt;
}

/// The attention's operands of one batch entry (one head of one sequence): entry b, and its
/// dropout (null: none).
template <class T>
struct att_slice {
  const T *q, *k, *v;
  std::int64_t b = 0;
  const att_drop<T>* drop = nullptr;
};

/// S[nq, nk] = scale * q[i0 .. i0 + nq) k[j0 .. j0 + nk)^T, with -inf above the diagonal when
/// causal: the scores of one tile.
template <bool Causal, class T>
void att_scores(const att_slice<T>& a, const backend::attention_geometry& g, std::int64_t i0,
                std::int64_t nq, std::int64_t j0, std::int64_t nk, T* sc) {
  gemm_serial<T>(false, true, nq, nk, g.d, a.q + i0 * g.d, g.d, a.k + j0 * g.d, g.d, sc, att_keys);
  const T scale = static_cast<T>(g.scale);
  for (std::int64_t r = 0; r < nq; ++r)
    for (std::int64_t c = 0; c < nk; ++c) {
      T& e = sc[r * att_keys + c];
      e = Causal && j0 + c > i0 + r ? -std::numeric_limits<T>::infinity() : e * scale;
    }
}

/// The online softmax over the keys of query rows [i0, i0 + nq): each row's log-sum-exp in
/// lse, and (o not null) its output rows, [nq, Dv].
template <bool Causal, class T>
void att_rows(const att_slice<T>& a, const backend::attention_geometry& g, std::int64_t i0,
              std::int64_t nq, T* sc, T* lse, T* o) {
  T m[att_tile], l[att_tile];
  std::fill(m, m + nq, -std::numeric_limits<T>::infinity());
  std::fill(l, l + nq, T(0));
  if (o)
    std::fill(o, o + nq * g.dv, T(0));
  const std::int64_t end = Causal ? std::min(g.s, i0 + nq) : g.s;
  for (std::int64_t j0 = 0; j0 < end; j0 += att_keys) {
    const std::int64_t nk = std::min(att_keys, end - j0);
    att_scores<Causal>(a, g, i0, nq, j0, nk, sc);
    for (std::int64_t r = 0; r < nq; ++r) {
      T* row = sc + r * att_keys;
      T bm = m[r];
      for (std::int64_t c = 0; c < nk; ++c)
        bm = row[c] > bm ? row[c] : bm;
      if (bm == -std::numeric_limits<T>::infinity()) { // every key of the tile is masked
        std::fill(row, row + nk, T(0));
        continue;
      }
      const T alpha = std::exp(m[r] - bm); // 0 while m is -inf
      const T sum = att_exp<true>(row, nk, bm);
      l[r] = l[r] * alpha + sum; // the softmax's sum, before dropout
      m[r] = bm;
      if (o && a.drop) {
        T z[att_keys];
        a.drop->factors(a.b * g.t + i0 + r, j0, nk, z);
        for (std::int64_t c = 0; c < nk; ++c)
          row[c] *= z[c];
      }
      if (o && alpha != T(1))
        for (std::int64_t c = 0; c < g.dv; ++c)
          o[r * g.dv + c] *= alpha;
    }
    if (o) // o += P v[j0 .. j0 + nk)
      gemm_serial<T>(false, false, nq, g.dv, nk, sc, att_keys, a.v + j0 * g.dv, g.dv, o, g.dv,
                     true);
  }
  for (std::int64_t r = 0; r < nq; ++r) {
    lse[r] = m[r] + std::log(l[r]);
    if (o) {
      const T inv = l[r] > T(0) ? T(1) / l[r] : T(0);
      for (std::int64_t c = 0; c < g.dv; ++c)
        o[r * g.dv + c] *= inv;
    }
  }
}

/// P = exp(S - L) and dS = P (dO v^T - D) for the tile of query rows [i0, i0 + nq) and keys
/// [j0, j0 + nk), L and D read from attention_stats' [rows, 2] (st); leaves P in p and dS in ds.
/// With dropout (mask M, scaled by 1 / keep): P M in p, dS = P ((dO v^T) M - D).
template <bool Causal, class T>
void att_grad_tile(const att_slice<T>& a, const T* up, const T* st,
                   const backend::attention_geometry& g, std::int64_t i0, std::int64_t nq,
                   std::int64_t j0, std::int64_t nk, T* p, T* ds) {
  att_scores<Causal>(a, g, i0, nq, j0, nk, p);
  gemm_serial<T>(false, true, nq, nk, g.dv, up + i0 * g.dv, g.dv, a.v + j0 * g.dv, g.dv, ds,
                 att_keys);
  for (std::int64_t r = 0; r < nq; ++r) {
    T* pr = p + r * att_keys;
    T* dr = ds + r * att_keys;
    att_exp<false>(pr, nk, st[2 * (i0 + r)]); // exp(-inf) = 0 where masked
    const T d = st[2 * (i0 + r) + 1];
    if (a.drop) {
      T z[att_keys];
      a.drop->factors(a.b * g.t + i0 + r, j0, nk, z);
      for (std::int64_t c = 0; c < nk; ++c) {
        dr[c] = pr[c] * (dr[c] * z[c] - d);
        pr[c] *= z[c];
      }
    } else {
      for (std::int64_t c = 0; c < nk; ++c)
        dr[c] = pr[c] * (dr[c] - d);
    }
  }
}

inline std::int64_t att_tiles(std::int64_t n, std::int64_t tile = att_tile) {
  return (n + tile - 1) / tile;
}

/// What the forward keeps beside its output: each query row's log-sum-exp, [batch * T].
template <class T, bool Causal>
struct att_saved : backend::aux_header {
  static constexpr char kind = 0; ///< its address is the tag
  std::int64_t rows = 0;
  std::unique_ptr<T[]> lse;
};
/// The log-sum-exp that the forward kept beside `out` for `rows` query rows, or null.
template <class T, bool Causal>
const T* att_saved_lse(const value& out, std::int64_t rows) {
  if (!out.aux || out.aux->tag != &att_saved<T, Causal>::kind)
    return nullptr;
  const auto& s = static_cast<const att_saved<T, Causal>&>(*out.aux);
  return s.rows == rows ? s.lse.get() : nullptr;
}

} // namespace detail

template <std::size_t I, bool C, attention_dropout D, class T, class Q, class K, class V>
void kernel(context& ctx, ops::attention<C, D>*, T*, value* vals, void*, Q*, K*, V*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  T* out = ctx.allocate<T>(vals[I]);
  auto saved = std::make_shared<detail::att_saved<T, C>>();
  saved->tag = &detail::att_saved<T, C>::kind;
  saved->rows = g.batch * g.t;
  saved->lse.reset(new T[static_cast<std::size_t>(std::max<std::int64_t>(saved->rows, 1))]);
  T* lse = saved->lse.get();
  const auto drop = detail::att_drop_of<D, T>(ctx, g);
  const std::int64_t tiles = detail::att_tiles(g.t);
  ctx.pool.parallel_for(g.batch * tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<T> sc(static_cast<std::size_t>(detail::att_tile * detail::att_keys));
    for (std::int64_t task = t0; task < t1; ++task) {
      const std::int64_t b = task / tiles, i0 = (task % tiles) * detail::att_tile;
      const detail::att_slice<T> a{q + b * g.t * g.d, k + b * g.s * g.d, v + b * g.s * g.dv, b,
                                   drop ? &*drop : nullptr};
      detail::att_rows<C>(a, g, i0, std::min(detail::att_tile, g.t - i0), sc.data(),
                          lse + b * g.t + i0, out + (b * g.t + i0) * g.dv);
    }
  });
  vals[I].aux = std::move(saved);
}

template <std::size_t I, bool C, class T, class Q, class K, class V, class O, class G>
void kernel(context& ctx, ops::attention_stats<C>*, T*, value* vals, void*, Q*, K*, V*, O*, G*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  const T* o = static_cast<const T*>(vals[O::index].data);
  const T* up = static_cast<const T*>(vals[G::index].data);
  T* st = ctx.allocate<T>(vals[I]); // [rows, 2]: L, D
  const auto dot_row = [&](std::int64_t r) {
    T s = 0;
    for (std::int64_t c = 0; c < g.dv; ++c)
      s += up[r * g.dv + c] * o[r * g.dv + c];
    return s;
  };
  if (const T* kept = detail::att_saved_lse<T, C>(vals[O::index], g.batch * g.t)) {
    ctx.pool.parallel_for(g.batch * g.t, std::max<std::int64_t>(1, 16384 / g.dv),
                          [&](std::int64_t r0, std::int64_t r1) {
                            for (std::int64_t r = r0; r < r1; ++r) {
                              st[2 * r] = kept[r];
                              st[2 * r + 1] = dot_row(r);
                            }
                          });
    return;
  }
  constexpr std::int64_t tile = detail::att_tile, keys = detail::att_keys;
  const std::int64_t qtiles = detail::att_tiles(g.t);
  ctx.pool.parallel_for(g.batch * qtiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<T> sc(static_cast<std::size_t>(tile * keys));
    T lse[tile];
    for (std::int64_t task = t0; task < t1; ++task) {
      const std::int64_t b = task / qtiles, i0 = (task % qtiles) * tile;
      const std::int64_t nq = std::min(tile, g.t - i0);
      const detail::att_slice<T> a{q + b * g.t * g.d, k + b * g.s * g.d, v + b * g.s * g.dv};
      detail::att_rows<C>(a, g, i0, nq, sc.data(), lse, static_cast<T*>(nullptr));
      for (std::int64_t r0 = 0; r0 < nq; ++r0) {
        const std::int64_t r = b * g.t + i0 + r0;
        st[2 * r] = lse[r0];
        st[2 * r + 1] = dot_row(r);
      }
    }
  });
}

template <std::size_t I, bool C, int W, attention_dropout D, class T, class Q, class K, class V,
          class G, class St>
void kernel(context& ctx, ops::attention_grad<C, W, D>*, T*, value* vals, void*, Q*, K*, V*, G*,
            St*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  const T* up = static_cast<const T*>(vals[G::index].data);
  const T* st = static_cast<const T*>(vals[St::index].data);
  T* out = ctx.allocate<T>(vals[I]);
  const auto drop = detail::att_drop_of<D, T>(ctx, g);
  constexpr std::int64_t tile = detail::att_tile, keys = detail::att_keys;
  const std::int64_t qtiles = detail::att_tiles(g.t), ktiles = detail::att_tiles(g.s, keys);
  const T scale = static_cast<T>(g.scale);
  if constexpr (W == 0) { // dq = scale * dS k, tile row by tile row
    ctx.pool.parallel_for(g.batch * qtiles, 1, [&](std::int64_t t0, std::int64_t t1) {
      std::vector<T> p(static_cast<std::size_t>(tile * keys)), ds(p.size());
      for (std::int64_t task = t0; task < t1; ++task) {
        const std::int64_t b = task / qtiles, i0 = (task % qtiles) * tile;
        const std::int64_t nq = std::min(tile, g.t - i0);
        const detail::att_slice<T> a{q + b * g.t * g.d, k + b * g.s * g.d, v + b * g.s * g.dv, b,
                                     drop ? &*drop : nullptr};
        T* dq = out + (b * g.t + i0) * g.d;
        std::fill(dq, dq + nq * g.d, T(0));
        const std::int64_t end = C ? std::min(g.s, i0 + nq) : g.s;
        for (std::int64_t j0 = 0; j0 < end; j0 += keys) {
          const std::int64_t nk = std::min(keys, end - j0);
          detail::att_grad_tile<C>(a, up + b * g.t * g.dv, st + 2 * b * g.t, g, i0, nq, j0, nk,
                                   p.data(), ds.data());
          gemm_serial<T>(false, false, nq, g.d, nk, ds.data(), keys, a.k + j0 * g.d, g.d, dq, g.d,
                         true);
        }
        for (std::int64_t e = 0; e < nq * g.d; ++e)
          dq[e] *= scale;
      }
    });
  } else { // dv = P^T dO and dk = scale * dS^T q, tile column by tile column
    const std::int64_t width = W == 1 ? g.d : g.dv;
    ctx.pool.parallel_for(g.batch * ktiles, 1, [&](std::int64_t t0, std::int64_t t1) {
      std::vector<T> p(static_cast<std::size_t>(tile * keys)), ds(p.size());
      for (std::int64_t task = t0; task < t1; ++task) {
        const std::int64_t b = task / ktiles, j0 = (task % ktiles) * keys;
        const std::int64_t nk = std::min(keys, g.s - j0);
        const detail::att_slice<T> a{q + b * g.t * g.d, k + b * g.s * g.d, v + b * g.s * g.dv, b,
                                     drop ? &*drop : nullptr};
        T* dst = out + (b * g.s + j0) * width;
        std::fill(dst, dst + nk * width, T(0));
        for (std::int64_t i0 = C ? j0 / tile * tile : 0; i0 < g.t; i0 += tile) {
          const std::int64_t nq = std::min(tile, g.t - i0);
          detail::att_grad_tile<C>(a, up + b * g.t * g.dv, st + 2 * b * g.t, g, i0, nq, j0, nk,
                                   p.data(), ds.data());
          if constexpr (W == 2)
            gemm_serial<T>(true, false, nk, g.dv, nq, p.data(), keys, up + (b * g.t + i0) * g.dv,
                           g.dv, dst, g.dv, true);
          else
            gemm_serial<T>(true, false, nk, g.d, nq, ds.data(), keys, a.q + i0 * g.d, g.d, dst, g.d,
                           true);
        }
        if constexpr (W == 1)
          for (std::int64_t e = 0; e < nk * g.d; ++e)
            dst[e] *= scale;
      }
    });
  }
}

/// The three gradients at once (attention_grads, q, k, v of one shape [..., T, D]): out holds
/// dq, dk and dv, each [batch, T, D]. Each tile of queries by keys forms P and dS once and adds
/// its share to all three (FlashAttention-2's backward: dv += P^T dO, dk += dS^T q, dq += dS k):
/// five products per tile, where three attention_grad ops take nine. A task owns a batch entry
/// (dq's rows gather from every key tile, so nothing else writes them); with fewer batch
/// entries than threads, k's and v's gradients run by key tile and q's by query tile instead,
/// seven products per tile, every thread busy.
template <std::size_t I, bool C, attention_dropout D, class T, class Q, class K, class V, class G,
          class St>
void kernel(context& ctx, ops::attention_grads<C, D>*, T*, value* vals, void*, Q*, K*, V*, G*,
            St*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  const T* up = static_cast<const T*>(vals[G::index].data);
  const T* st = static_cast<const T*>(vals[St::index].data);
  T* out = ctx.allocate<T>(vals[I]);
  const auto drop = detail::att_drop_of<D, T>(ctx, g);
  const std::int64_t n = g.batch * g.t * g.d; // each gradient's elements
  T *dq = out, *dk = out + n, *dv = out + 2 * n;
  constexpr std::int64_t tile = detail::att_tile, keys = detail::att_keys;
  const std::int64_t qtiles = detail::att_tiles(g.t), ktiles = detail::att_tiles(g.s, keys);
  const T scale = static_cast<T>(g.scale);
  const auto scaled = [scale](T* p, std::int64_t count) {
    for (std::int64_t e = 0; e < count; ++e)
      p[e] *= scale;
  };
  // One tile (queries [i0, i0 + nq), keys [j0, j0 + nk)) of batch entry b: P and dS, then
  // dv and dk of the keys (and, with `with_dq`, dq of the queries) accumulated; scale later.
  const auto tile_step = [&](std::int64_t b, std::int64_t i0, std::int64_t nq, std::int64_t j0,
                             std::int64_t nk, T* p, T* ds, bool with_kv, bool with_dq) {
    const detail::att_slice<T> a{q + b * g.t * g.d, k + b * g.s * g.d, v + b * g.s * g.dv, b,
                                 drop ? &*drop : nullptr};
    const T* dout = up + b * g.t * g.dv;
    detail::att_grad_tile<C>(a, dout, st + 2 * b * g.t, g, i0, nq, j0, nk, p, ds);
    if (with_kv) {
      gemm_serial<T>(true, false, nk, g.dv, nq, p, keys, dout + i0 * g.dv, g.dv,
                     dv + (b * g.s + j0) * g.dv, g.dv, true);
      gemm_serial<T>(true, false, nk, g.d, nq, ds, keys, a.q + i0 * g.d, g.d,
                     dk + (b * g.s + j0) * g.d, g.d, true);
    }
    if (with_dq)
      gemm_serial<T>(false, false, nq, g.d, nk, ds, keys, a.k + j0 * g.d, g.d,
                     dq + (b * g.t + i0) * g.d, g.d, true);
  };
  std::fill(out, out + 3 * n, T(0));
  if (g.batch >= ctx.pool.size()) {
    ctx.pool.parallel_for(g.batch, 1, [&](std::int64_t b0, std::int64_t b1) {
      std::vector<T> p(static_cast<std::size_t>(tile * keys)), ds(p.size());
      for (std::int64_t b = b0; b < b1; ++b) {
        for (std::int64_t j0 = 0; j0 < g.s; j0 += keys)
          for (std::int64_t i0 = C ? j0 : 0; i0 < g.t; i0 += tile)
            tile_step(b, i0, std::min(tile, g.t - i0), j0, std::min(keys, g.s - j0), p.data(),
                      ds.data(), true, true);
        scaled(dq + b * g.t * g.d, g.t * g.d);
        scaled(dk + b * g.s * g.d, g.s * g.d);
      }
    });
    return;
  }
  ctx.pool.parallel_for(g.batch * ktiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<T> p(static_cast<std::size_t>(tile * keys)), ds(p.size());
    for (std::int64_t task = t0; task < t1; ++task) { // k's and v's, by key block
      const std::int64_t b = task / ktiles, j0 = (task % ktiles) * keys;
      const std::int64_t nk = std::min(keys, g.s - j0);
      for (std::int64_t i0 = C ? j0 : 0; i0 < g.t; i0 += tile)
        tile_step(b, i0, std::min(tile, g.t - i0), j0, nk, p.data(), ds.data(), true, false);
      scaled(dk + (b * g.s + j0) * g.d, nk * g.d);
    }
  });
  ctx.pool.parallel_for(g.batch * qtiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<T> p(static_cast<std::size_t>(tile * keys)), ds(p.size());
    for (std::int64_t task = t0; task < t1; ++task) { // q's, by query tile
      const std::int64_t b = task / qtiles, i0 = (task % qtiles) * tile;
      const std::int64_t nq = std::min(tile, g.t - i0);
      const std::int64_t end = C ? std::min(g.s, i0 + nq) : g.s;
      for (std::int64_t j0 = 0; j0 < end; j0 += keys)
        tile_step(b, i0, nq, j0, std::min(keys, end - j0), p.data(), ds.data(), false, true);
      scaled(dq + (b * g.t + i0) * g.d, nq * g.d);
    }
  });
}

} // namespace typeflow::cpu_backend
