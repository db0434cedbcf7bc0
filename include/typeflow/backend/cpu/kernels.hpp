// The CPU backend's kernels, one file per op family under kernels/. Each is an overload of
// `cpu_backend::kernel<I>(context&, Op*, T*, rt_value* values, region, operands...)`.
#pragma once
#include <algorithm>
#include <concepts>

#include "../../graph/flat.hpp"
#include "context.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/layout.hpp"
#include "kernels/matmul.hpp"
#include "kernels/nn.hpp"
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

} // namespace typeflow::cpu_backend
