// The CPU backend's kernels, one file per op family under kernels/. Each is an overload of
// `cpu_backend::kernel<I>(context&, Op*, T*, rt_value* values, region, operands...)`.
#pragma once
#include <algorithm>
#include <concepts>

#include "../../graph/flat.hpp"
#include "context.hpp"
#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/index.hpp"
#include "kernels/layout.hpp"
#include "kernels/matmul.hpp"
#include "kernels/nn.hpp"
#include "kernels/norm.hpp"
#include "kernels/recurrent.hpp"
#include "kernels/reduce.hpp"

namespace typeflow::cpu_backend {

/// Whether the CPU backend has a kernel for step I (op Op, dtype T, fused region Region,
/// operands Refs...): derived from the kernels' existence, the same in every translation unit.
template <std::size_t I, class Op, class T, class Region, class... Refs>
concept has_kernel = requires(context& c, value* v) {
  kernel<I>(c, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), v,
            static_cast<Region*>(nullptr), static_cast<Refs*>(nullptr)...);
};

/// Whether the CPU backend has a kernel for op Op reading its input region through prologue
/// Pro (graph::prologue).
template <std::size_t I, class Op, class T, class Pro, class... Refs>
concept has_prologue_kernel = requires(context& c, value* v, const Pro& p) {
  kernel<I>(c, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), v, p,
            static_cast<Refs*>(nullptr)...);
};

/// Whether the CPU backend's kernel for op Op can hand its output to a sink in pieces
/// (graph::chained): a `kernel_pieces` overload in the op's kernel file.
/// (The sink is a named type, not a lambda: nvcc's front end rejects a lambda here.)
template <class T>
struct any_sink {
  void operator()(std::int64_t, std::int64_t, const T*) const {}
};
template <std::size_t I, class Op, class T, class... Refs>
concept has_pieces_kernel = requires(context& c, value* v, const any_sink<T>& sink) {
  kernel_pieces<I>(c, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), v, sink,
                   static_cast<Refs*>(nullptr)...);
};

/// Whether the CPU backend folds epilogue E (graph::epilogue) into the kernel of op Op itself.
/// Such a kernel returns whether it did (false: it left everything to the fallback below).
template <std::size_t I, class Op, class T, class E, class... Refs>
concept has_epilogue_kernel = requires(context& c, value* v, const E& e) {
  {
    kernel<I>(c, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), v, e,
              static_cast<Refs*>(nullptr)...)
    } -> std::same_as<bool>;
};

/// y[r, c] = relu?(y[r, c] + b[c]) in place over rows of `c` elements, on the pool: the same
/// arithmetic as the bias_add and relu loop it replaces.
template <bool Relu, class T>
void bias_epilogue(thread_pool& pool, T* y, const T* b, std::int64_t rows, std::int64_t c) {
  pool.parallel_for(rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(c, 1)),
                    [&](std::int64_t r0, std::int64_t r1) {
                      for (std::int64_t r = r0; r < r1; ++r) {
                        T* row = y + r * c;
                        for (std::int64_t i = 0; i < c; ++i) {
                          const T v = static_cast<T>(row[i] + b[i]);
                          row[i] = Relu && v < T(0) ? T(0) : v;
                        }
                      }
                    });
}

/// An `epilogue` step (graph::epilogue): the producer's kernel writes step I's output with the
/// bias added and relu applied, through the producer's own epilogue kernel where the backend has
/// one (oneDNN post-ops for float32), else its plain kernel and one pass over the output.
template <std::size_t I, graph::step_kind K, class Op, class T, std::size_t R, class... Refs,
          class B, bool Relu>
void epilogue_kernel(context& ctx, value* vals,
                     graph::epilogue<graph::flat_node<K, Op, T, R, Refs...>, B, Relu>*) {
  using E = graph::epilogue<graph::flat_node<K, Op, T, R, Refs...>, B, Relu>;
  static_assert(std::is_same_v<typename B::value_type, T>, "epilogue: the bias's dtype differs");
  if constexpr (has_epilogue_kernel<I, Op, T, E, Refs...>)
    if (kernel<I>(ctx, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), vals, E{},
                  static_cast<Refs*>(nullptr)...))
      return;
  kernel<I>(ctx, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), vals, nullptr,
            static_cast<Refs*>(nullptr)...);
  const value& y = vals[I];
  const std::int64_t c = y.dims.rank ? y.dims.d[y.dims.rank - 1] : 1;
  if (c > 0)
    bias_epilogue<Relu>(ctx.pool, static_cast<T*>(y.data),
                        static_cast<const T*>(vals[B::index].data), y.dims.numel() / c, c);
}

/// A `chained` step (graph::chained): the producer's kernel hands each piece of its output to
/// the region, which is evaluated on it at once (in cache) into step I's output; the producer's
/// output is never stored. Where the producer's output is broadcast in the region (its dims are
/// not the output's), it is stored and the region runs as a plain fused loop.
template <std::size_t I, graph::step_kind K, class Op, class T, std::size_t R, class... Refs,
          class Region, std::size_t In>
void chained_kernel(context& ctx, value* vals,
                    graph::chained<graph::flat_node<K, Op, T, R, Refs...>, Region, In>*) {
  using Out = typename Region::out_type;
  using fused = fused_kernel<Out, typename Region::inputs, typename Region::members>;
  static_assert(!fused::lacks_a_vector_form, // the session names the op before it gets here
                "fused CPU loop: an elementwise op has no vector form");
  constexpr auto Idx = Region::input_indices;
  constexpr std::size_t N = Idx.size();
  static_assert(In < N && has_pieces_kernel<Idx[In], Op, T, Refs...>,
                "a chained step's producer needs a CPU kernel_pieces overload");
  std::array<const value*, N> inputs{};
  std::array<const backend::rt_dims*, N> in_dims{};
  for (std::size_t k = 0; k < N; ++k) {
    inputs[k] = &vals[Idx[k]];
    in_dims[k] = &inputs[k]->dims;
  }
  const backend::rt_dims& od = vals[I].dims;
  value& produced = vals[Idx[In]];
  // In place over an input that dies with the step: the producer reads its operands only
  // within the piece it hands over, before handing it (graph/node.hpp's writes_in_pieces).
  // Candidates: the region's inputs, then the producer's operands (layout.dying's order).
  constexpr std::size_t NR = sizeof...(Refs);
  std::array<value*, N + NR> in{};
  std::array<bool, N + NR> same{};
  for (std::size_t k = 0; k < N; ++k) {
    in[k] = &vals[Idx[k]];
    same[k] = k != In && detail::same_types<Out, typename Region::inputs>::value[k];
  }
  constexpr std::array<std::size_t, NR + 1> at{Refs::index..., 0};
  constexpr std::array<bool, NR + 1> same_ref{std::is_same_v<typename Refs::value_type, Out>...,
                                              false};
  for (std::size_t q = 0; q < NR; ++q) {
    in[N + q] = &vals[at[q]];
    same[N + q] = same_ref[q];
  }
  std::uint64_t taken = 0;
  Out* out = ctx.allocate_in_place<Out>(vals[I], in, same, taken);
  ctx.stats.fused_nodes += Region::members::size - 1;
  if (!(produced.dims == od)) {
    kernel<Idx[In]>(ctx, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), vals, nullptr,
                    static_cast<Refs*>(nullptr)...);
    fused::run(ctx.pool, out, od, inputs);
    produced = value{};
    return;
  }
  const backend::loop_geometry<N> geo(od, in_dims);
  bool stream = false;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (fused::vectorized && simd::has_stream_store<Out>) {
    // As fused_kernel::run decides: the output and the stored inputs exceed the cache.
    std::size_t bytes = static_cast<std::size_t>(od.numel()) * sizeof(Out);
    for (std::size_t k = 0; k < N; ++k)
      if (k != In)
        bytes += static_cast<std::size_t>(in_dims[k]->numel()) * sizeof(Out);
    stream = bytes > simd::last_level_cache_bytes();
  }
#endif
  kernel_pieces<Idx[In]>(
      ctx, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), vals,
      [&](std::int64_t begin, std::int64_t end, const T* piece) {
        fused::run_range(out + begin, od, inputs, geo, begin, end,
                         typename fused::piece_input{In, piece, begin}, stream);
#if defined(TYPEFLOW_HAS_XSIMD)
        if (stream)
          simd::stream_fence(); // before the join publishes the result to other threads
#endif
      },
      static_cast<Refs*>(nullptr)...);
}

} // namespace typeflow::cpu_backend
