// CUDA kernels of the index ops: gather (one thread per output element), its gradient (zeros,
// then one atomicAdd per upstream element: float32 and float64; the order of the additions into
// a repeated row is not fixed, so those sums may differ in the last bits between runs), and
// one_hot, the bands and iota. An index out of range sets a flag that the run reads after all its
// work (gpu_context::end_run): the step never waits for the host.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "../../ops/index.hpp"
#include "../common/index.hpp"
#include "context.cuh"
#include "nn.cuh"
#include "runtime.hpp"

namespace typeflow::cuda_backend {

template <class T, class Ix>
__global__ void gather_rows_kernel(const T* params, const Ix* ix, std::int64_t rows,
                                   std::int64_t row, std::int64_t total, T* out, int* bad) {
  TYPEFLOW_GRID_STRIDE(e, total) {
    const std::int64_t i = e / row;
    const auto r = static_cast<std::int64_t>(ix[i]);
    if (r < 0 || r >= rows) {
      *bad = 1;
      out[e] = T{};
      continue;
    }
    out[e] = params[r * row + (e - i * row)];
  }
}

template <class T, class Ix>
__global__ void scatter_add_rows_kernel(const T* up, const Ix* ix, std::int64_t rows,
                                        std::int64_t row, std::int64_t total, T* out, int* bad) {
  TYPEFLOW_GRID_STRIDE(e, total) {
    const std::int64_t i = e / row;
    const auto r = static_cast<std::int64_t>(ix[i]);
    if (r < 0 || r >= rows) {
      *bad = 1;
      continue;
    }
    atomicAdd(out + r * row + (e - i * row), up[e]);
  }
}

template <class T, class Ix>
__global__ void one_hot_kernel(const Ix* ix, std::int64_t depth, std::int64_t total, T* out) {
  TYPEFLOW_GRID_STRIDE(e, total) {
    const std::int64_t i = e / depth;
    out[e] = static_cast<std::int64_t>(ix[i]) == e - i * depth ? T(1) : T(0);
  }
}

template <class Band, class T>
__global__ void band_kernel(const T* in, std::int64_t rows, std::int64_t cols, std::int64_t total,
                            T fill, T* out) {
  TYPEFLOW_GRID_STRIDE(e, total) {
    const std::int64_t r = e / cols;
    out[e] = Band::keeps(r % rows, e - r * cols) ? in[e] : fill;
  }
}

template <class T>
__global__ void iota_kernel(backend::iota_geometry g, T* out) {
  TYPEFLOW_GRID_STRIDE(e, g.size) {
    out[e] = static_cast<T>(g.coordinate(e));
  }
}

template <std::size_t I, class T, class P, class Ix>
void kernel(context& ctx, ops::gather*, T*, value* vals, void*, P*, Ix*) {
  const auto g = backend::gather_geometry::of(vals[P::index].dims, vals[Ix::index].dims);
  T* out = ctx.output<T>(vals[I]);
  const std::int64_t total = g.n * g.row;
  if (total == 0)
    return;
  int* bad = ctx.gpu.check_flag("gather: an index is outside [0, " + std::to_string(g.rows) + ")");
  gather_rows_kernel<T><<<grid_for(total), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[P::index].data),
      static_cast<const typename Ix::value_type*>(vals[Ix::index].data), g.rows, g.row, total, out,
      bad);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, class T, class P, class Ix, class G>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context& ctx, ops::gather_grad*, T*, value* vals,
                                                void*, P*, Ix*, G*) {
  const auto g = backend::gather_geometry::of(vals[I].dims, vals[Ix::index].dims);
  T* out = ctx.output<T>(vals[I]);
  TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(
      out, 0, sizeof(T) * static_cast<std::size_t>(vals[I].dims.numel()), ctx.stream()));
  const std::int64_t total = g.n * g.row;
  if (total == 0)
    return;
  int* bad =
      ctx.gpu.check_flag("gather_grad: an index is outside [0, " + std::to_string(g.rows) + ")");
  scatter_add_rows_kernel<T><<<grid_for(total), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[G::index].data),
      static_cast<const typename Ix::value_type*>(vals[Ix::index].data), g.rows, g.row, total, out,
      bad);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::int64_t Depth, dtype U, class T, class Ix>
requires std::is_arithmetic_v<T>
void kernel(context& ctx, ops::one_hot<Depth, U>*, T*, value* vals, void*, Ix*) {
  const std::int64_t total = vals[I].dims.numel();
  T* out = ctx.output<T>(vals[I]);
  if (total == 0)
    return;
  one_hot_kernel<T><<<grid_for(total), 256, 0, ctx.stream()>>>(
      static_cast<const typename Ix::value_type*>(vals[Ix::index].data), Depth, total, out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::int64_t L, std::int64_t U, ops::band_fill F, class T, class X>
requires std::is_arithmetic_v<T>
void kernel(context& ctx, ops::band<L, U, F>*, T*, value* vals, void*, X*) {
  const auto& d = vals[X::index].dims;
  const std::int64_t total = d.numel();
  T* out = ctx.output<T>(vals[I]);
  if (total == 0)
    return;
  const T fill =
      F == ops::band_fill::zero ? T(0) : static_cast<T>(-std::numeric_limits<double>::infinity());
  band_kernel<ops::band<L, U, F>, T><<<grid_for(total), 256, 0, ctx.stream()>>>(
      static_cast<const T*>(vals[X::index].data), d.d[d.rank - 2], d.d[d.rank - 1], total, fill,
      out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, dtype U, class Shape, std::size_t Axis, class T>
requires std::is_arithmetic_v<T>
void kernel(context& ctx, ops::iota<U, Shape, Axis>*, T*, value* vals, void*) {
  constexpr backend::iota_geometry g = backend::iota_geometry::of<Shape, Axis>();
  T* out = ctx.output<T>(vals[I]);
  if (g.size == 0)
    return;
  iota_kernel<T><<<grid_for(g.size), 256, 0, ctx.stream()>>>(g, out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

} // namespace typeflow::cuda_backend
