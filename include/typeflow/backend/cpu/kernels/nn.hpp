// CPU kernels of the nn ops. Neural-network kernels: convolutions (oneDNN for float32, else im2col
// + GEMM), pooling, sparse softmax cross-entropy, dropout masks.
#pragma once
#include "../../../graph/flat.hpp"
#include "../../../ops/nn.hpp"
#include "../context.hpp"
#include "../nn.hpp"
#include "../onednn.hpp"

namespace typeflow::cpu_backend {

using backend::conv_window;
using backend::pool_window;

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class W>
void kernel(context& ctx, ops::conv2d<P, SH, SW, DH, DW>*, T*, value* vals, void*, X*, W*) {
  const auto g =
      conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims, vals[W::index].dims);
  T* out = ctx.allocate<T>(vals[I]);
#if defined(TYPEFLOW_HAS_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_runs(g)) {
      onednn_conv2d_forward(ctx.dnnl, ctx.pool, static_cast<const T*>(vals[X::index].data),
                            static_cast<const T*>(vals[W::index].data), g, out);
      return;
    }
  }
#endif
  auto col = ctx.scratch<T>(conv_scratch(g));
  conv2d_forward(ctx.pool, static_cast<const T*>(vals[X::index].data),
                 static_cast<const T*>(vals[W::index].data), g, static_cast<T*>(col.get()), out);
}

#if defined(TYPEFLOW_HAS_ONEDNN)
/// conv2d with its epilogue (bias, relu) as oneDNN post-ops, float32.
template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class F, class B, bool Relu, class X, class W>
bool kernel(context& ctx, ops::conv2d<P, SH, SW, DH, DW>*, float*, value* vals,
            const graph::epilogue<F, B, Relu>&, X*, W*) {
  const auto g =
      conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims, vals[W::index].dims);
  if (!onednn_runs(g))
    return false;
  onednn_conv2d_forward(ctx.dnnl, ctx.pool, static_cast<const float*>(vals[X::index].data),
                        static_cast<const float*>(vals[W::index].data), g,
                        ctx.allocate<float>(vals[I]),
                        static_cast<const float*>(vals[B::index].data),
                        Relu ? onednn::epilogue::bias_relu : onednn::epilogue::bias);
  return true;
}
#endif

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class G, class W, class X>
void kernel(context& ctx, ops::conv2d_backprop_input<P, SH, SW, DH, DW>*, T*, value* vals, void*,
            G*, W*, X*) {
  const auto g =
      conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims, vals[W::index].dims);
  T* out = ctx.allocate<T>(vals[I]);
#if defined(TYPEFLOW_HAS_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_runs(g)) {
      onednn_conv2d_backprop_input(ctx.dnnl, ctx.pool, static_cast<const T*>(vals[G::index].data),
                                   static_cast<const T*>(vals[W::index].data), g, out);
      return;
    }
  }
#endif
  auto col = ctx.scratch<T>(conv_scratch(g));
  conv2d_backprop_input(ctx.pool, static_cast<const T*>(vals[G::index].data),
                        static_cast<const T*>(vals[W::index].data), g, static_cast<T*>(col.get()),
                        out);
}

template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class G, class W>
void kernel(context& ctx, ops::conv2d_backprop_filter<P, SH, SW, DH, DW>*, T*, value* vals, void*,
            X*, G*, W*) {
  const auto g =
      conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims, vals[W::index].dims);
  T* out = ctx.allocate<T>(vals[I]);
#if defined(TYPEFLOW_HAS_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_runs(g)) {
      auto partial = ctx.scratch<T>(conv_parts * g.patch() * g.o);
      onednn_conv2d_backprop_filter(ctx.dnnl, ctx.pool, static_cast<const T*>(vals[X::index].data),
                                    static_cast<const T*>(vals[G::index].data), g,
                                    static_cast<T*>(partial.get()), out);
      return;
    }
  }
#endif
  auto col = ctx.scratch<T>(conv_scratch(g));
  conv2d_backprop_filter(ctx.pool, static_cast<const T*>(vals[X::index].data),
                         static_cast<const T*>(vals[G::index].data), g, static_cast<T*>(col.get()),
                         out);
}

template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X>
void kernel(context& ctx, ops::pool<K, P, KH, KW, SH, SW>*, T*, value* vals, void*, X*) {
  const auto g = pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
  pool_forward<K == ops::pool_kind::max>(ctx.pool, static_cast<const T*>(vals[X::index].data), g,
                                         ctx.allocate<T>(vals[I]));
}

template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X, class G>
void kernel(context& ctx, ops::pool_grad<K, P, KH, KW, SH, SW>*, T*, value* vals, void*, X*, G*) {
  const auto g = pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
  pool_backward<K == ops::pool_kind::max>(
      ctx.pool, static_cast<const typename X::value_type*>(vals[X::index].data),
      static_cast<const T*>(vals[G::index].data), g, ctx.allocate<T>(vals[I]));
}
/// The same, handing each image's gradient to `sink` (graph::chained) instead of storing it.
template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class Sink, class X, class G>
void kernel_pieces(context& ctx, ops::pool_grad<K, P, KH, KW, SH, SW>*, T*, value* vals,
                   const Sink& sink, X*, G*) {
  const auto g = pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
  pool_backward<K == ops::pool_kind::max>(
      ctx.pool, static_cast<const typename X::value_type*>(vals[X::index].data),
      static_cast<const T*>(vals[G::index].data), g, static_cast<T*>(nullptr), sink);
}

template <std::size_t I, class T, class L, class Y>
void kernel(context& ctx, ops::sparse_softmax_xent*, T*, value* vals, void*, L*, Y*) {
  const auto& ld = vals[L::index].dims;
  sparse_xent<false>(ctx.pool, static_cast<const T*>(vals[L::index].data),
                     static_cast<const typename Y::value_type*>(vals[Y::index].data), ld.d[0],
                     ld.d[1], ctx.allocate<T>(vals[I]));
}

template <std::size_t I, class T, class L, class Y>
void kernel(context& ctx, ops::sparse_softmax_xent_grad*, T*, value* vals, void*, L*, Y*) {
  const auto& ld = vals[L::index].dims;
  sparse_xent<true>(ctx.pool, static_cast<const T*>(vals[L::index].data),
                    static_cast<const typename Y::value_type*>(vals[Y::index].data), ld.d[0],
                    ld.d[1], ctx.allocate<T>(vals[I]));
}

template <std::size_t I, std::uint64_t Seed, class T, class X, class K>
void kernel(context& ctx, ops::dropout_mask<Seed>*, T*, value* vals, void*, X*, K*) {
  using KT = typename K::value_type;
  if (!vals[K::index].data)
    throw error("dropout: keep_prob has no value");
  const double keep = static_cast<double>(*static_cast<const KT*>(vals[K::index].data));
  dropout_mask(ctx.pool, Seed, ctx.run, keep, vals[I].dims.numel(), ctx.allocate<T>(vals[I]));
}

} // namespace typeflow::cpu_backend
