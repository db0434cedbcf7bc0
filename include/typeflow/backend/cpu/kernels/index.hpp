// CPU kernels of the index ops: gather copies rows, its gradient adds rows into zeros (each
// thread owns a range of output rows and scans the indices in order, so the sums are
// deterministic and need no atomics), one_hot writes ones into zeros, a band copies or fills,
// iota writes each element's coordinate along its axis.
#pragma once
#include <algorithm>
#include <cstring>
#include <limits>

#include "../../../graph/flat.hpp"
#include "../../../ops/index.hpp"
#include "../../common/index.hpp"
#include "../context.hpp"

namespace typeflow::cpu_backend {

template <std::size_t I, class T, class P, class Ix>
void kernel(context& ctx, ops::gather*, T*, value* vals, void*, P*, Ix*) {
  using IT = typename Ix::value_type;
  const auto g = backend::gather_geometry::of(vals[P::index].dims, vals[Ix::index].dims);
  const T* params = static_cast<const T*>(vals[P::index].data);
  const IT* ix = static_cast<const IT*>(vals[Ix::index].data);
  backend::check_indices("gather", ix, g.n, g.rows);
  T* out = ctx.allocate<T>(vals[I]);
  const std::int64_t row = g.row;
  ctx.pool.parallel_for(g.n, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(row, 1)),
                        [&](std::int64_t i0, std::int64_t i1) {
                          for (std::int64_t i = i0; i < i1; ++i)
                            std::copy_n(params + static_cast<std::int64_t>(ix[i]) * row, row,
                                        out + i * row);
                        });
}

template <std::size_t I, class T, class P, class Ix, class G>
void kernel(context& ctx, ops::gather_grad*, T*, value* vals, void*, P*, Ix*, G*) {
  using IT = typename Ix::value_type;
  using C = compute_of<T>;
  const auto g = backend::gather_geometry::of(vals[I].dims, vals[Ix::index].dims);
  const T* up = static_cast<const T*>(vals[G::index].data);
  const IT* ix = static_cast<const IT*>(vals[Ix::index].data);
  backend::check_indices("gather_grad", ix, g.n, g.rows);
  T* out = ctx.allocate<T>(vals[I]);
  const std::int64_t row = g.row;
  ctx.pool.parallel_for(g.rows, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(row, 1)),
                        [&](std::int64_t r0, std::int64_t r1) {
                          std::fill(out + r0 * row, out + r1 * row, T(0));
                          for (std::int64_t i = 0; i < g.n; ++i) {
                            const auto r = static_cast<std::int64_t>(ix[i]);
                            if (r < r0 || r >= r1)
                              continue;
                            T* dst = out + r * row;
                            const T* src = up + i * row;
                            for (std::int64_t c = 0; c < row; ++c)
                              dst[c] =
                                  static_cast<T>(static_cast<C>(dst[c]) + static_cast<C>(src[c]));
                          }
                        });
}

template <std::size_t I, std::int64_t Depth, dtype U, class T, class Ix>
void kernel(context& ctx, ops::one_hot<Depth, U>*, T*, value* vals, void*, Ix*) {
  using IT = typename Ix::value_type;
  const std::int64_t n = vals[Ix::index].dims.numel();
  const IT* ix = static_cast<const IT*>(vals[Ix::index].data);
  T* out = ctx.allocate<T>(vals[I]);
  ctx.pool.parallel_for(n, std::max<std::int64_t>(1, 16384 / Depth),
                        [&](std::int64_t i0, std::int64_t i1) {
                          std::fill(out + i0 * Depth, out + i1 * Depth, T(0));
                          for (std::int64_t i = i0; i < i1; ++i) {
                            const auto k = static_cast<std::int64_t>(ix[i]);
                            if (k >= 0 && k < Depth)
                              out[i * Depth + k] = T(1);
                          }
                        });
}

template <std::size_t I, std::int64_t L, std::int64_t U, ops::band_fill F, class T, class X>
void kernel(context& ctx, ops::band<L, U, F>*, T*, value* vals, void*, X*) {
  const auto& d = vals[X::index].dims;
  const std::int64_t rows = d.d[d.rank - 2], cols = d.d[d.rank - 1];
  const std::int64_t all_rows = rows == 0 ? 0 : d.numel() / cols;
  const T* in = static_cast<const T*>(vals[X::index].data);
  T* out = ctx.allocate<T>(vals[I]);
  const T fill =
      F == ops::band_fill::zero ? T(0) : static_cast<T>(-std::numeric_limits<double>::infinity());
  ctx.pool.parallel_for(
      all_rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(cols, 1)),
      [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t i = r % rows;
          for (std::int64_t j = 0; j < cols; ++j)
            out[r * cols + j] = ops::band<L, U, F>::keeps(i, j) ? in[r * cols + j] : fill;
        }
      });
}

template <std::size_t I, dtype U, class Shape, std::size_t Axis, class T>
void kernel(context& ctx, ops::iota<U, Shape, Axis>*, T*, value* vals, void*) {
  const backend::iota_geometry g = backend::iota_geometry::of<Shape, Axis>();
  T* out = ctx.allocate<T>(vals[I]);
  ctx.pool.parallel_for(g.size, 16384, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      out[i] = static_cast<T>(g.coordinate(i));
  });
}

} // namespace typeflow::cpu_backend
