// CPU kernels of the attention op. The forward pass takes one query row at a time (rows split
// across the pool) with an online softmax over blocks of 64 keys: a running maximum, sum and
// output row, so memory is O(D) per thread and the [T, S] scores are never stored. The
// gradients recompute the scores: q's row by row; k's and v's key by key, after each query
// row's log-sum-exp L and D = dO . O are computed once. Sums in double.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../../../graph/flat.hpp"
#include "../../../ops/attention.hpp"
#include "../../common/attention.hpp"
#include "../context.hpp"

namespace typeflow::cpu_backend {

namespace detail {
template <class T>
double dot(const T* a, const T* b, std::int64_t n) {
  double s = 0;
  for (std::int64_t c = 0; c < n; ++c)
    s += static_cast<double>(a[c]) * static_cast<double>(b[c]);
  return s;
}

/// Query row qi's online softmax over its keys: its log-sum-exp, and (when acc is not null)
/// the unnormalized output sum_j exp(s_j - m) v_j in acc with the sum l: out = acc / l.
template <class T>
double attention_row(const T* qi, const T* k, const T* v, std::int64_t keys,
                     const backend::attention_geometry& g, double* acc) {
  constexpr std::int64_t block = 64;
  double sc[block];
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  if (acc)
    std::fill(acc, acc + g.dv, 0.0);
  for (std::int64_t j0 = 0; j0 < keys; j0 += block) {
    const std::int64_t n = std::min(block, keys - j0);
    double bm = -std::numeric_limits<double>::infinity();
    for (std::int64_t jj = 0; jj < n; ++jj) {
      sc[jj] = dot(qi, k + (j0 + jj) * g.d, g.d) * g.scale;
      bm = std::max(bm, sc[jj]);
    }
    const double m_new = std::max(m, bm);
    const double alpha = std::exp(m - m_new); // 0 on the first block (m = -inf)
    l *= alpha;
    if (acc)
      for (std::int64_t c = 0; c < g.dv; ++c)
        acc[c] *= alpha;
    for (std::int64_t jj = 0; jj < n; ++jj) {
      const double p = std::exp(sc[jj] - m_new);
      l += p;
      if (acc) {
        const T* vj = v + (j0 + jj) * g.dv;
        for (std::int64_t c = 0; c < g.dv; ++c)
          acc[c] += p * static_cast<double>(vj[c]);
      }
    }
    m = m_new;
  }
  if (acc)
    for (std::int64_t c = 0; c < g.dv; ++c)
      acc[c] = l > 0 ? acc[c] / l : 0.0;
  return m + std::log(l);
}

inline std::int64_t attention_grain(const backend::attention_geometry& g) {
  return std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(g.s * (g.d + g.dv), 1));
}
} // namespace detail

template <std::size_t I, bool C, class T, class Q, class K, class V>
void kernel(context& ctx, ops::attention<C>*, T*, value* vals, void*, Q*, K*, V*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  T* out = ctx.allocate<T>(vals[I]);
  ctx.pool.parallel_for(g.batch * g.t, detail::attention_grain(g),
                        [&](std::int64_t r0, std::int64_t r1) {
                          std::vector<double> acc(static_cast<std::size_t>(g.dv));
                          for (std::int64_t r = r0; r < r1; ++r) {
                            const std::int64_t b = r / g.t, i = r % g.t;
                            detail::attention_row(q + r * g.d, k + b * g.s * g.d,
                                                  v + b * g.s * g.dv, g.keys(C, i), g, acc.data());
                            for (std::int64_t c = 0; c < g.dv; ++c)
                              out[r * g.dv + c] = static_cast<T>(acc[static_cast<std::size_t>(c)]);
                          }
                        });
}

template <std::size_t I, bool C, int W, class T, class Q, class K, class V, class O, class G>
void kernel(context& ctx, ops::attention_grad<C, W>*, T*, value* vals, void*, Q*, K*, V*, O*, G*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  const T* o = static_cast<const T*>(vals[O::index].data);
  const T* up = static_cast<const T*>(vals[G::index].data);
  T* out = ctx.allocate<T>(vals[I]);
  // each query row's log-sum-exp L and D = dO . O
  const std::int64_t rows = g.batch * g.t;
  std::vector<double> lse(static_cast<std::size_t>(rows)), dd(static_cast<std::size_t>(rows));
  ctx.pool.parallel_for(rows, detail::attention_grain(g), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t b = r / g.t, i = r % g.t;
      lse[static_cast<std::size_t>(r)] = detail::attention_row(
          q + r * g.d, k + b * g.s * g.d, v + b * g.s * g.dv, g.keys(C, i), g, nullptr);
      dd[static_cast<std::size_t>(r)] = detail::dot(up + r * g.dv, o + r * g.dv, g.dv);
    }
  });
  if constexpr (W == 0) { // dq_i = scale * sum_j p_ij (dO_i . v_j - D_i) k_j
    ctx.pool.parallel_for(rows, detail::attention_grain(g), [&](std::int64_t r0, std::int64_t r1) {
      std::vector<double> acc(static_cast<std::size_t>(g.d));
      for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t b = r / g.t, i = r % g.t;
        const T* kb = k + b * g.s * g.d;
        const T* vb = v + b * g.s * g.dv;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j < g.keys(C, i); ++j) {
          const double p = std::exp(detail::dot(q + r * g.d, kb + j * g.d, g.d) * g.scale -
                                    lse[static_cast<std::size_t>(r)]);
          const double ds = p * (detail::dot(up + r * g.dv, vb + j * g.dv, g.dv) -
                                 dd[static_cast<std::size_t>(r)]);
          for (std::int64_t c = 0; c < g.d; ++c)
            acc[static_cast<std::size_t>(c)] += ds * static_cast<double>(kb[j * g.d + c]);
        }
        for (std::int64_t c = 0; c < g.d; ++c)
          out[r * g.d + c] = static_cast<T>(acc[static_cast<std::size_t>(c)] * g.scale);
      }
    });
  } else { // key by key: dv_j = sum_i p_ij dO_i; dk_j = scale * sum_i p_ij (dO_i . v_j - D_i) q_i
    const std::int64_t width = W == 1 ? g.d : g.dv;
    ctx.pool.parallel_for(
        g.batch * g.s, detail::attention_grain(g), [&](std::int64_t c0, std::int64_t c1) {
          std::vector<double> acc(static_cast<std::size_t>(width));
          for (std::int64_t col = c0; col < c1; ++col) {
            const std::int64_t b = col / g.s, j = col % g.s;
            const T* kj = k + col * g.d;
            const T* vj = v + col * g.dv;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (std::int64_t i = g.first_query(C, j); i < g.t; ++i) {
              const std::int64_t r = b * g.t + i;
              const double p = std::exp(detail::dot(q + r * g.d, kj, g.d) * g.scale -
                                        lse[static_cast<std::size_t>(r)]);
              if constexpr (W == 2) {
                for (std::int64_t c = 0; c < g.dv; ++c)
                  acc[static_cast<std::size_t>(c)] += p * static_cast<double>(up[r * g.dv + c]);
              } else {
                const double ds =
                    p * (detail::dot(up + r * g.dv, vj, g.dv) - dd[static_cast<std::size_t>(r)]);
                for (std::int64_t c = 0; c < g.d; ++c)
                  acc[static_cast<std::size_t>(c)] += ds * static_cast<double>(q[r * g.d + c]);
              }
            }
            const double f = W == 1 ? g.scale : 1.0;
            for (std::int64_t c = 0; c < width; ++c)
              out[col * width + c] = static_cast<T>(acc[static_cast<std::size_t>(c)] * f);
          }
        });
  }
}

} // namespace typeflow::cpu_backend
