// CUDA kernels of the attention op: the same algorithm as the CPU's (an online softmax per query
// row, the scores recomputed in the backward pass), in its simplest form: one thread per query
// row (the forward pass, q's gradient, and attention_stats: each row's log-sum-exp and dO . O)
// or per key row (k's and v's gradients), accumulating in the output row. Correct, not yet fast:
// the tiled kernel (FlashAttention's blocks in shared memory) is issue t3-D's work. Dropout
// (ops::attention_dropout) draws the CPU's mask: the same hash of (seed, run, row * S + key),
// so a GPU session and a CPU session draw the same masks in the same run.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../ops/attention.hpp"
#include "../common/attention.hpp"
#include "../common/dropout.hpp"
#include "context.cuh"
#include "nn.cuh"
#include "runtime.hpp"

namespace typeflow::cuda_backend {

template <class T>
__device__ double attention_dot(const T* a, const T* b, std::int64_t n) {
  double s = 0;
  for (std::int64_t c = 0; c < n; ++c)
    s += static_cast<double>(a[c]) * static_cast<double>(b[c]);
  return s;
}

/// An attention op's dropout in one run, as the CPU kernels draw it (kernels/attention.hpp,
/// att_drop): probability (row r = b * T + i, key j) is kept where draw r * S + j is
/// (backend::dropout_kept), and then scaled by 1 / keep (rounded to T, as the CPU's factor is).
/// `on` false: no dropout, every factor 1.
struct attention_drop_dev {
  std::uint64_t base = 0, below = 0;
  double scale = 1;
  std::int64_t s = 0;
  bool on = false;
  __device__ double factor(std::int64_t r, std::int64_t j) const {
    if (!on)
      return 1.0;
    return backend::dropout_kept(base, static_cast<std::uint64_t>(r * s + j), below) ? scale : 0.0;
  }
};
/// The dropout of attention op D in the current run (`on` false where keep is 1).
template <attention_dropout D, class T>
attention_drop_dev attention_drop_of(const context& ctx, const backend::attention_geometry& g) {
  if constexpr (D.keep < 1.0)
    return {backend::dropout_base(D.seed, ctx.run()), backend::dropout_below(D.keep),
            static_cast<double>(static_cast<T>(1.0 / D.keep)), g.s, true};
  else
    return {};
}

/// Query row r's online softmax: its log-sum-exp, and (out not null) its output row, each
/// probability times its dropout factor in the output (the sum l is over the probabilities
/// before dropout).
template <bool C, class T>
__device__ double attention_row_dev(const T* q, const T* k, const T* v,
                                    backend::attention_geometry g, std::int64_t r, T* out,
                                    attention_drop_dev drop = {}) {
  const std::int64_t b = r / g.t, i = r % g.t;
  const T* qi = q + r * g.d;
  const T* kb = k + b * g.s * g.d;
  const T* vb = v + b * g.s * g.dv;
  const std::int64_t keys = C ? (i + 1 < g.s ? i + 1 : g.s) : g.s;
  double m = -INFINITY, l = 0;
  if (out)
    for (std::int64_t c = 0; c < g.dv; ++c)
      out[c] = T(0);
  for (std::int64_t j = 0; j < keys; ++j) {
    const double s = attention_dot(qi, kb + j * g.d, g.d) * g.scale;
    const double m_new = s > m ? s : m;
    const double alpha = ::exp(m - m_new), p = ::exp(s - m_new);
    l = l * alpha + p;
    if (out) {
      const double pd = p * drop.factor(r, j);
      for (std::int64_t c = 0; c < g.dv; ++c)
        out[c] = static_cast<T>(static_cast<double>(out[c]) * alpha +
                                pd * static_cast<double>(vb[j * g.dv + c]));
    }
    m = m_new;
  }
  if (out && l > 0)
    for (std::int64_t c = 0; c < g.dv; ++c)
      out[c] = static_cast<T>(static_cast<double>(out[c]) / l);
  return m + ::log(l);
}

template <bool C, class T>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v,
                                         backend::attention_geometry g, T* out,
                                         attention_drop_dev drop) {
  TYPEFLOW_GRID_STRIDE(r, g.batch * g.t) {
    attention_row_dev<C>(q, k, v, g, r, out + r * g.dv, drop);
  }
}

template <bool C, class T>
__global__ void attention_stats_kernel(const T* q, const T* k, const T* v, const T* o, const T* up,
                                       backend::attention_geometry g, T* st) {
  TYPEFLOW_GRID_STRIDE(r, g.batch * g.t) {
    st[2 * r] = static_cast<T>(attention_row_dev<C>(q, k, v, g, r, static_cast<T*>(nullptr)));
    st[2 * r + 1] = static_cast<T>(attention_dot(up + r * g.dv, o + r * g.dv, g.dv));
  }
}

/// q's gradient, one thread per query row; with dropout dS = P ((dO v^T) M - D), M the mask
/// scaled by 1 / keep (the CPU's form).
template <bool C, class T>
__global__ void attention_grad_q_kernel(const T* q, const T* k, const T* v, const T* up,
                                        const T* st, backend::attention_geometry g, T* dq,
                                        attention_drop_dev drop) {
  TYPEFLOW_GRID_STRIDE(r, g.batch * g.t) {
    const std::int64_t b = r / g.t, i = r % g.t;
    const std::int64_t keys = C ? (i + 1 < g.s ? i + 1 : g.s) : g.s;
    for (std::int64_t c = 0; c < g.d; ++c)
      dq[r * g.d + c] = T(0);
    for (std::int64_t j = 0; j < keys; ++j) {
      const T* kj = k + (b * g.s + j) * g.d;
      const double p =
          ::exp(attention_dot(q + r * g.d, kj, g.d) * g.scale - static_cast<double>(st[2 * r]));
      const double ds =
          p *
          (attention_dot(up + r * g.dv, v + (b * g.s + j) * g.dv, g.dv) * drop.factor(r, j) -
           static_cast<double>(st[2 * r + 1])) *
          g.scale;
      for (std::int64_t c = 0; c < g.d; ++c)
        dq[r * g.d + c] =
            static_cast<T>(static_cast<double>(dq[r * g.d + c]) + ds * static_cast<double>(kj[c]));
    }
  }
}

/// k's (W 1) or v's (W 2) gradient, one thread per key row; with dropout dV = (P M)^T dO and
/// dK from the dS above.
template <bool C, int W, class T>
__global__ void attention_grad_kv_kernel(const T* q, const T* k, const T* v, const T* up,
                                         const T* st, backend::attention_geometry g, T* out,
                                         attention_drop_dev drop) {
  const std::int64_t width = W == 1 ? g.d : g.dv;
  TYPEFLOW_GRID_STRIDE(col, g.batch * g.s) {
    const std::int64_t b = col / g.s, j = col % g.s;
    for (std::int64_t c = 0; c < width; ++c)
      out[col * width + c] = T(0);
    for (std::int64_t i = C ? j : 0; i < g.t; ++i) {
      const std::int64_t r = b * g.t + i;
      const double p = ::exp(attention_dot(q + r * g.d, k + col * g.d, g.d) * g.scale -
                             static_cast<double>(st[2 * r]));
      const double f = drop.factor(r, j);
      if (W == 2) {
        for (std::int64_t c = 0; c < g.dv; ++c)
          out[col * width + c] = static_cast<T>(static_cast<double>(out[col * width + c]) +
                                                p * f * static_cast<double>(up[r * g.dv + c]));
      } else {
        const double ds = p *
                          (attention_dot(up + r * g.dv, v + col * g.dv, g.dv) * f -
                           static_cast<double>(st[2 * r + 1])) *
                          g.scale;
        for (std::int64_t c = 0; c < g.d; ++c)
          out[col * width + c] = static_cast<T>(static_cast<double>(out[col * width + c]) +
                                                ds * static_cast<double>(q[r * g.d + c]));
      }
    }
  }
}

template <std::size_t I, bool C, attention_dropout D, class T, class Q, class K, class V>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::attention<C, D>*, T*,
                                                value* vals, void*, Q*, K*, V*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  T* out = ctx.output<T>(vals[I]);
  if (g.batch * g.t == 0 || g.dv == 0)
    return;
  attention_forward_kernel<C, T><<<grid_for(g.batch * g.t), 128, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[Q::index].data), static_cast<const T*>(vals[K::index].data),
      static_cast<const T*>(vals[V::index].data), g, out, attention_drop_of<D, T>(ctx, g));
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, bool C, class T, class Q, class K, class V, class O, class G>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::attention_stats<C>*, T*,
                                                value* vals, void*, Q*, K*, V*, O*, G*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  T* st = ctx.output<T>(vals[I]);
  if (g.batch * g.t == 0)
    return;
  attention_stats_kernel<C, T><<<grid_for(g.batch * g.t), 128, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[Q::index].data), static_cast<const T*>(vals[K::index].data),
      static_cast<const T*>(vals[V::index].data), static_cast<const T*>(vals[O::index].data),
      static_cast<const T*>(vals[G::index].data), g, st);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, bool C, int W, attention_dropout D, class T, class Q, class K, class V,
          class G, class St>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::attention_grad<C, W, D>*, T*,
                                                value* vals, void*, Q*, K*, V*, G*, St*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  T* out = ctx.output<T>(vals[I]);
  if (vals[I].dims.numel() == 0)
    return;
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  const T* up = static_cast<const T*>(vals[G::index].data);
  const T* st = static_cast<const T*>(vals[St::index].data);
  const attention_drop_dev drop = attention_drop_of<D, T>(ctx, g);
  if constexpr (W == 0) {
    attention_grad_q_kernel<C, T>
        <<<grid_for(g.batch * g.t), 128, 0, ctx.stream()>>>(q, k, v, up, st, g, out, drop);
  } else {
    attention_grad_kv_kernel<C, W, T>
        <<<grid_for(g.batch * g.s), 128, 0, ctx.stream()>>>(q, k, v, up, st, g, out, drop);
  }
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

/// The three gradients of self-attention in one op (attention_grads: dq, dk, dv one after
/// another in out): the three kernels above, each writing its third.
template <std::size_t I, bool C, attention_dropout D, class T, class Q, class K, class V, class G,
          class St>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::attention_grads<C, D>*, T*,
                                                value* vals, void*, Q*, K*, V*, G*, St*) {
  const auto g = backend::attention_geometry::of(vals[Q::index].dims, vals[K::index].dims,
                                                 vals[V::index].dims);
  T* out = ctx.output<T>(vals[I]);
  if (vals[I].dims.numel() == 0)
    return;
  const T* q = static_cast<const T*>(vals[Q::index].data);
  const T* k = static_cast<const T*>(vals[K::index].data);
  const T* v = static_cast<const T*>(vals[V::index].data);
  const T* up = static_cast<const T*>(vals[G::index].data);
  const T* st = static_cast<const T*>(vals[St::index].data);
  const std::int64_t n = g.batch * g.t * g.d;
  const attention_drop_dev drop = attention_drop_of<D, T>(ctx, g);
  attention_grad_q_kernel<C, T>
      <<<grid_for(g.batch * g.t), 128, 0, ctx.stream()>>>(q, k, v, up, st, g, out, drop);
  attention_grad_kv_kernel<C, 1, T>
      <<<grid_for(g.batch * g.s), 128, 0, ctx.stream()>>>(q, k, v, up, st, g, out + n, drop);
  attention_grad_kv_kernel<C, 2, T>
      <<<grid_for(g.batch * g.s), 128, 0, ctx.stream()>>>(q, k, v, up, st, g, out + 2 * n, drop);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

} // namespace typeflow::cuda_backend
