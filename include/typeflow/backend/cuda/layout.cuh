// CUDA kernels of the layout ops and of the small ops around reductions and dropout:
// transpose, slice, slice_like (one strided gather over the output, its axes coalesced on the
// host), pad_like (a gather that writes zeros outside the block), concat (one row copy per
// operand), argmax (a thread per output, or a warp per output when the reduced axis is the
// contiguous one), element_count (one scalar written on the device), sum_to_like (the CUDA sum
// over the broadcast axes) and dropout_mask (the CPU's hash, shared, so the masks are
// bit-identical). Every kernel is a grid-stride loop with int64 indices over a plain parameter
// struct; the per-element index arithmetic is in __host__ __device__ functions, which the host
// tests run against the CPU kernels.
//
// The kernels of the session's steps for these ops, and for the views (reshape, expand_dims,
// reshape_like, replica_mean: the output shares the input's buffer), close the file.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../../core/error.hpp"
#include "../../device/device.hpp"
#include "../../ops/layout.hpp"
#include "../../ops/nn.hpp"
#include "../../ops/reduce.hpp"
#include "../common/dropout.hpp"
#include "../common/layout.hpp"
#include "../common/value.hpp"
#include "../common/window.hpp"
#include "context.cuh"
#include "nn.cuh"
#include "reduce.cuh"
#include "runtime.hpp"

namespace typeflow {
namespace cuda_backend {

// ---- strided gather: transpose, slice, slice_like ------------------------------------------

/// out[i] = in[gather_offset(p, i)] for i < total: the output's axes (coalesced where the input
/// walks them contiguously, extent-1 axes dropped) with the input stride of each.
struct gather_params {
  std::int64_t total = 0;
  int rank = 0;
  std::int64_t dims[max_rank] = {};
  std::int64_t in_strides[max_rank] = {};
};

TYPEFLOW_HD inline std::int64_t gather_offset(const gather_params& p, std::int64_t i) {
  return strided_offset(p.rank, p.dims, p.in_strides, i);
}

using backend::row_major_strides;

/// The gather of an output of dims `od` whose axis i steps through the input by in_stride[i].
inline gather_params make_gather_params(const backend::rt_dims& od,
                                        const std::array<std::int64_t, max_rank>& in_stride) {
  gather_params p;
  p.total = od.numel();
  for (std::size_t a = 0; a < od.rank; ++a) {
    if (od.d[a] == 1)
      continue;
    if (p.rank > 0 && p.in_strides[p.rank - 1] == in_stride[a] * od.d[a]) {
      p.dims[p.rank - 1] *= od.d[a]; // the outer axis continues this one
      p.in_strides[p.rank - 1] = in_stride[a];
    } else {
      p.dims[p.rank] = od.d[a];
      p.in_strides[p.rank] = in_stride[a];
      ++p.rank;
    }
  }
  return p;
}

/// transpose: output axis i is input axis perm[i].
template <std::size_t R>
gather_params make_transpose_params(const backend::rt_dims& id,
                                    const std::array<std::int64_t, R>& perm,
                                    const backend::rt_dims& od) {
  const auto s = row_major_strides(id);
  std::array<std::int64_t, max_rank> in_stride{};
  for (std::size_t i = 0; i < R; ++i)
    in_stride[i] = s[static_cast<std::size_t>(perm[i])];
  return make_gather_params(od, in_stride);
}

/// slice: the block of `id` at `begin` with dims `od`; `offset` is where it starts in the input.
template <std::size_t R>
gather_params make_slice_params(const backend::rt_dims& id,
                                const std::array<std::int64_t, R>& begin,
                                const backend::rt_dims& od, std::int64_t& offset) {
  const auto s = row_major_strides(id);
  offset = 0;
  for (std::size_t i = 0; i < R; ++i)
    offset += begin[i] * s[i];
  return make_gather_params(od, s);
}

template <class T>
__global__ void gather_kernel(const T* in, gather_params p, T* out) {
  TYPEFLOW_GRID_STRIDE(i, p.total) {
    out[i] = in[gather_offset(p, i)];
  }
}

template <class T>
void gather(cudaStream_t stream, const T* in, const gather_params& p, T* out) {
  if (p.total == 0)
    return;
  gather_kernel<T><<<grid_for(p.total), 256, 0, stream>>>(in, p, out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

// ---- pad_like --------------------------------------------------------------------------------

/// out (dims `dims`) is zero except for the block in (dims `in_dims`) at `begin`.
struct pad_params {
  std::int64_t total = 0;
  int rank = 0;
  std::int64_t dims[max_rank] = {};
  std::int64_t begin[max_rank] = {};
  std::int64_t in_dims[max_rank] = {};
  std::int64_t in_strides[max_rank] = {};
};

/// The input offset that output element i copies, or -1 where it is padding.
TYPEFLOW_HD inline std::int64_t pad_source(const pad_params& p, std::int64_t i) {
  std::int64_t off = 0;
  for (int a = p.rank - 1; a >= 0; --a) {
    const std::int64_t k = i % p.dims[a] - p.begin[a];
    i /= p.dims[a];
    if (k < 0 || k >= p.in_dims[a])
      return -1;
    off += k * p.in_strides[a];
  }
  return off;
}

template <std::size_t R>
pad_params make_pad_params(const backend::rt_dims& id, const std::array<std::int64_t, R>& begin,
                           const backend::rt_dims& od) {
  pad_params p;
  p.total = od.numel();
  p.rank = static_cast<int>(R);
  const auto s = row_major_strides(id);
  for (std::size_t a = 0; a < R; ++a) {
    p.dims[a] = od.d[a];
    p.begin[a] = begin[a];
    p.in_dims[a] = id.d[a];
    p.in_strides[a] = s[a];
  }
  return p;
}

template <class T>
__global__ void pad_kernel(const T* in, pad_params p, T* out) {
  TYPEFLOW_GRID_STRIDE(i, p.total) {
    const std::int64_t src = pad_source(p, i);
    out[i] = src < 0 ? T(0) : in[src];
  }
}

// ---- concat ----------------------------------------------------------------------------------

/// One operand of a concatenation: `outer` rows of `row` elements, written `out_row` apart.
template <class T>
__global__ void copy_rows_kernel(const T* in, std::int64_t row, std::int64_t outer,
                                 std::int64_t out_row, T* out) {
  TYPEFLOW_GRID_STRIDE(i, row * outer) {
    out[(i / row) * out_row + i % row] = in[i];
  }
}

// ---- argmax ----------------------------------------------------------------------------------

template <class T>
TYPEFLOW_HD inline bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

/// The CPU's argmax of n elements `stride` apart: the first NaN if there is one, else the
/// first maximum.
template <class T>
TYPEFLOW_HD inline std::int64_t argmax_scan(const T* p, std::int64_t n, std::int64_t stride) {
  T best = p[0];
  std::int64_t arg = 0;
  for (std::int64_t r = 1; r < n; ++r) {
    const T v = p[r * stride];
    if (v > best || (is_nan_value(v) && !is_nan_value(best))) {
      best = v;
      arg = r;
    }
  }
  return arg;
}

/// Whether candidate (a, ia) precedes (b, ib) in the order whose first element argmax_scan
/// returns: NaNs first (by index), then larger values, then smaller indices. A total order, so
/// partial results may be combined in any grouping. An index < 0 is no candidate.
template <class T>
TYPEFLOW_HD inline bool argmax_precedes(T a, std::int64_t ia, T b, std::int64_t ib) {
  if (ib < 0)
    return ia >= 0;
  if (ia < 0)
    return false;
  const bool na = is_nan_value(a), nb = is_nan_value(b);
  if (na != nb)
    return na;
  if (!na && a != b)
    return a > b;
  return ia < ib;
}

/// Lane `lane` of `lanes`: the first candidate, in argmax_precedes' order, among elements
/// lane, lane + lanes, ... of n contiguous ones (index -1 when it has none).
template <class T>
TYPEFLOW_HD inline void argmax_lane(const T* p, std::int64_t n, int lane, int lanes, T& best,
                                    std::int64_t& arg) {
  arg = -1;
  best = T{};
  for (std::int64_t r = lane; r < n; r += lanes) {
    const T v = p[r];
    if (arg < 0 || v > best || (is_nan_value(v) && !is_nan_value(best))) {
      best = v;
      arg = r;
    }
  }
}

/// [k1, rn, k2] -> [k1, k2], a thread per output.
template <class T>
__global__ void argmax_kernel(const T* in, std::int64_t k1, std::int64_t rn, std::int64_t k2,
                              std::int64_t* out) {
  TYPEFLOW_GRID_STRIDE(o, k1 * k2) {
    const std::int64_t a = o / k2, c = o % k2;
    out[o] = argmax_scan(in + a * rn * k2 + c, rn, k2);
  }
}

/// [rows, rn] -> [rows], a warp per row (its lanes stride the row, then combine by shuffles).
template <class T>
__global__ void argmax_rows_kernel(const T* in, std::int64_t rows, std::int64_t rn,
                                   std::int64_t* out) {
  constexpr unsigned full = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t first =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  for (std::int64_t row = first; row < rows; row += step) { // the same rows for a whole warp
    T best;
    std::int64_t arg;
    argmax_lane(in + row * rn, rn, lane, 32, best, arg);
    for (int d = 16; d > 0; d /= 2) {
      const T other = __shfl_down_sync(full, best, d);
      const std::int64_t other_arg = __shfl_down_sync(full, arg, d);
      if (argmax_precedes(other, other_arg, best, arg)) {
        best = other;
        arg = other_arg;
      }
    }
    if (lane == 0)
      out[row] = arg;
  }
}

/// The [k1, rn, k2] view of argmax over the axis in `mask`.
struct argmax_shape {
  std::int64_t k1 = 1, rn = 1, k2 = 1;
};
template <std::size_t R>
argmax_shape argmax_view(const backend::rt_dims& d, const std::array<bool, R>& mask) {
  argmax_shape v;
  bool past = false;
  for (std::size_t a = 0; a < R; ++a) {
    if (mask[a]) {
      v.rn = d.d[a];
      past = true;
    } else {
      (past ? v.k2 : v.k1) *= d.d[a];
    }
  }
  return v;
}

/// Whether argmax uses a warp per output: the reduced axis is contiguous and long enough.
inline bool argmax_by_warps(const argmax_shape& v) {
  return v.k2 == 1 && v.rn >= 64;
}

template <class T>
void argmax(cudaStream_t stream, const T* in, const argmax_shape& v, std::int64_t* out) {
  const std::int64_t outputs = v.k1 * v.k2;
  if (argmax_by_warps(v))
    argmax_rows_kernel<T><<<grid_for(outputs * 32), 256, 0, stream>>>(in, v.k1, v.rn, out);
  else
    argmax_kernel<T><<<grid_for(outputs), 256, 0, stream>>>(in, v.k1, v.rn, v.k2, out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

// ---- element_count, dropout_mask -------------------------------------------------------------

template <class T>
__global__ void fill_kernel(T* out, std::int64_t n, T v) {
  TYPEFLOW_GRID_STRIDE(i, n) {
    out[i] = v;
  }
}

template <class T>
__global__ void dropout_mask_kernel(T* out, std::int64_t n, std::uint64_t base, double keep,
                                    T scale) {
  TYPEFLOW_GRID_STRIDE(i, n) {
    out[i] = backend::dropout_uniform(base, i) < keep ? scale : T(0);
  }
}

/// A scalar's value on the host, wherever it lives: device (or managed) memory is copied back
/// after the work queued on `stream`; host memory (a constant, which has no transfer) is read.
template <class T>
T read_scalar(cudaStream_t stream, const void* p) {
  cudaPointerAttributes attr{};
  TYPEFLOW_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return *static_cast<const T*>(p);
  T v{};
  TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(&v, p, sizeof(T), cudaMemcpyDeviceToHost, stream));
  TYPEFLOW_CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

// ---- the session steps -----------------------------------------------------------------------

template <std::size_t I, std::int64_t... Perm, class T, class A>
void kernel(context& ctx, ops::transpose<Perm...>*, T*, value* vals, void*, A*) {
  const value& in = vals[A::index];
  T* out = ctx.output<T>(vals[I]);
  gather(ctx.stream(), static_cast<const T*>(in.data),
         make_transpose_params(in.dims, ops::transpose<Perm...>::perm, vals[I].dims), out);
}

template <std::size_t I, class B, class S, class T, class A>
void kernel(context& ctx, ops::slice<B, S>*, T*, value* vals, void*, A*) {
  const value& in = vals[A::index];
  T* out = ctx.output<T>(vals[I]);
  std::int64_t offset = 0;
  const gather_params p = make_slice_params(in.dims, B::values, vals[I].dims, offset);
  gather(ctx.stream(), static_cast<const T*>(in.data) + offset, p, out);
}

template <std::size_t I, class B, class T, class G, class A>
void kernel(context& ctx, ops::slice_like<B>*, T*, value* vals, void*, G*, A*) {
  const value& in = vals[G::index];
  backend::check_slice_like(B::values, vals[I].dims, in.dims);
  T* out = ctx.output<T>(vals[I]);
  std::int64_t offset = 0;
  const gather_params p = make_slice_params(in.dims, B::values, vals[I].dims, offset);
  gather(ctx.stream(), static_cast<const T*>(in.data) + offset, p, out);
}

template <std::size_t I, class B, class T, class A, class X>
void kernel(context& ctx, ops::pad_like<B>*, T*, value* vals, void*, A*, X*) {
  const value& in = vals[A::index];
  backend::check_pad_like(B::values, in.dims, vals[I].dims);
  T* out = ctx.output<T>(vals[I]);
  const pad_params p = make_pad_params(in.dims, B::values, vals[I].dims);
  if (p.total == 0)
    return;
  pad_kernel<T>
      <<<grid_for(p.total), 256, 0, ctx.stream()>>>(static_cast<const T*>(in.data), p, out);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, std::int64_t Axis, class T, class... Cs>
void kernel(context& ctx, ops::concat<Axis>*, T*, value* vals, void*, Cs*...) {
  const backend::rt_dims& od = vals[I].dims;
  T* out = ctx.output<T>(vals[I]);
  const std::size_t axis =
      static_cast<std::size_t>(Axis < 0 ? Axis + static_cast<std::int64_t>(od.rank) : Axis);
  std::int64_t outer = 1, out_row = 1;
  for (std::size_t i = 0; i < od.rank; ++i)
    (i < axis ? outer : out_row) *= od.d[i];
  const T* parts[] = {static_cast<const T*>(vals[Cs::index].data)...};
  const backend::rt_dims* dims[] = {&vals[Cs::index].dims...};
  const cudaStream_t stream = ctx.stream();
  std::int64_t col = 0;
  for (std::size_t k = 0; k < sizeof...(Cs); ++k) {
    std::int64_t row = 1;
    for (std::size_t i = axis; i < dims[k]->rank; ++i)
      row *= dims[k]->d[i];
    if (row * outer > 0) {
      copy_rows_kernel<T>
          <<<grid_for(row * outer), 256, 0, stream>>>(parts[k], row, outer, out_row, out + col);
      TYPEFLOW_CUDA_CHECK(cudaGetLastError());
    }
    col += row;
  }
}

template <std::size_t I, bool K, std::int64_t... Ax, class T, class A>
void kernel(context& ctx, ops::reduce<ops::reducers::argmax, K, Ax...>*, T*, value* vals, void*,
            A*) {
  static_assert(std::is_same_v<T, std::int64_t>, "argmax: int64 output");
  const value& in = vals[A::index];
  T* out = ctx.output<T>(vals[I]);
  const argmax_shape v =
      argmax_view(in.dims, ops::reduce<ops::reducers::argmax, K, Ax...>::template mask<A::rank>());
  if (v.k1 * v.k2 == 0)
    return;
  if (v.rn == 0)
    throw error("argmax: reduction over an empty axis: " + in.dims.str());
  argmax(ctx.stream(), static_cast<const typename A::value_type*>(in.data), v, out);
}

template <std::size_t I, std::int64_t... Ax, class T, class A>
void kernel(context& ctx, ops::element_count<Ax...>*, T*, value* vals, void*, A*) {
  const auto mask = ops::element_count<Ax...>::template mask<A::rank>();
  std::int64_t n = 1;
  for (std::size_t i = 0; i < A::rank; ++i)
    if (mask[i])
      n *= vals[A::index].dims.d[i];
  T* out = ctx.output<T>(vals[I]);
  fill_kernel<T><<<1, 32, 0, ctx.stream()>>>(out, 1, static_cast<T>(n));
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

template <std::size_t I, class T, class C, class X>
void kernel(context& ctx, ops::sum_to_like*, T*, value* vals, void*, C*, X*) {
  const value& in = vals[C::index];
  const auto mask = backend::sum_to_mask<C::rank>(in.dims, vals[I].dims);
  T* out = ctx.output<T>(vals[I]);
  cuda_backend::reduce<ops::reducers::sum>(ctx, static_cast<const T*>(in.data), in.dims, mask, out);
}

template <std::size_t I, std::uint64_t Seed, class T, class X, class K>
void kernel(context& ctx, ops::dropout_mask<Seed>*, T*, value* vals, void*, X*, K*) {
  if (!vals[K::index].data)
    throw error("dropout: keep_prob has no value");
  const cudaStream_t stream = ctx.stream();
  const double keep =
      static_cast<double>(read_scalar<typename K::value_type>(stream, vals[K::index].data));
  backend::check_keep_prob(keep);
  const std::uint64_t base = backend::dropout_base(Seed, ctx.run());
  const std::int64_t n = vals[I].dims.numel();
  T* out = ctx.output<T>(vals[I]);
  if (n == 0)
    return;
  dropout_mask_kernel<T>
      <<<grid_for(n), 256, 0, stream>>>(out, n, base, keep, static_cast<T>(1.0 / keep));
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

// ---- views: the output shares the input's device buffer -----------------------------------
template <std::size_t I, std::int64_t... D, class T, class A>
void kernel(context&, ops::reshape<D...>*, T*, value* vals, void*, A*) {
  vals[I].owner = vals[A::index].owner;
  vals[I].data = vals[A::index].data;
}
template <std::size_t I, std::int64_t... Ax, class T, class A>
void kernel(context&, ops::expand_dims<Ax...>*, T*, value* vals, void*, A*) {
  vals[I].owner = vals[A::index].owner;
  vals[I].data = vals[A::index].data;
}
template <std::size_t I, class T, class A>
void kernel(context&, ops::replica_mean*, T*, value* vals, void*, A*) {
  vals[I].owner = vals[A::index].owner;
  vals[I].data = vals[A::index].data;
}
template <std::size_t I, class T, class A, class X>
void kernel(context&, ops::reshape_like*, T*, value* vals, void*, A*, X*) {
  if (vals[A::index].dims.numel() != vals[I].dims.numel())
    throw error("reshape_like: element counts differ: " + vals[A::index].dims.str() + " x " +
                vals[I].dims.str());
  vals[I].owner = vals[A::index].owner;
  vals[I].data = vals[A::index].data;
}

} // namespace cuda_backend

} // namespace typeflow
