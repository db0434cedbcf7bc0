// CUDA reductions (sum, mean, max, min over any set of axes): one thread block per output
// element (grid-stride over the outputs), its threads striding over the reduced elements by
// index arithmetic, combined with cub::BlockReduce. Floats accumulate in double, as on the CPU;
// NaN propagates through max and min; the mean of an empty axis is NaN.
#pragma once
#include <cub/block/block_reduce.cuh>

#include <cstdint>
#include <limits>

#include "../../ops/reduce.hpp"
#include "../common/reducers.hpp"
#include "../common/value.hpp"
#include "context.cuh"
#include "runtime.hpp"

namespace typeflow::cuda_backend {

/// A reduction's geometry: kept and reduced axes with their input strides.
struct reduce_params {
  const void* in = nullptr;
  void* out = nullptr;
  std::int64_t out_n = 0, red_n = 0;
  int kept_rank = 0, red_rank = 0;
  std::int64_t kept_dims[max_rank] = {}, kept_strides[max_rank] = {};
  std::int64_t red_dims[max_rank] = {}, red_strides[max_rank] = {};
};

template <class T>
using accum_t = std::conditional_t<std::is_same_v<T, float>, double,
                                   std::conditional_t<std::is_integral_v<T>, std::int64_t, T>>;

template <class R>
struct combiner {
  template <class A>
  __host__ __device__ A operator()(const A& acc, const A& v) const {
    return backend::combine<R>(acc, v); // the CPU's rule, NaN propagation included
  }
};

template <class R, class T, class Out, int Threads>
__global__ void reduce_kernel(reduce_params p) {
  constexpr bool is_mean = std::is_same_v<R, ops::reducers::mean>;
  using base = std::conditional_t<is_mean, ops::reducers::sum, R>;
  using acc_t = accum_t<T>;
  using block_reduce = cub::BlockReduce<acc_t, Threads>;
  __shared__ typename block_reduce::TempStorage tmp;
  const T* in = static_cast<const T*>(p.in);
  Out* out = static_cast<Out*>(p.out);
  for (std::int64_t o = blockIdx.x; o < p.out_n; o += gridDim.x) {
    std::int64_t base_off = 0, rem = o;
    for (int a = p.kept_rank - 1; a >= 0; --a) {
      base_off += (rem % p.kept_dims[a]) * p.kept_strides[a];
      rem /= p.kept_dims[a];
    }
    acc_t acc = base::template identity<acc_t>();
    for (std::int64_t r = threadIdx.x; r < p.red_n; r += Threads) {
      std::int64_t off = base_off, rr = r;
      for (int a = p.red_rank - 1; a >= 0; --a) {
        off += (rr % p.red_dims[a]) * p.red_strides[a];
        rr /= p.red_dims[a];
      }
      acc = combiner<base>{}(acc, static_cast<acc_t>(in[off]));
    }
    const acc_t total = block_reduce(tmp).Reduce(acc, combiner<base>{});
    if (threadIdx.x == 0) {
      if constexpr (is_mean) {
        if (p.red_n == 0)
          out[o] = std::numeric_limits<Out>::has_quiet_NaN ? std::numeric_limits<Out>::quiet_NaN()
                                                           : Out(0);
        else
          out[o] = static_cast<Out>(total / static_cast<acc_t>(p.red_n));
      } else {
        out[o] = static_cast<Out>(total);
      }
    }
    __syncthreads(); // tmp is reused by the next output
  }
}

/// The parameters of reducing `in` (dims `d`) over the axes in `mask`.
template <std::size_t Rank>
reduce_params make_reduce_params(const void* in, void* out, const backend::rt_dims& d,
                                 const std::array<bool, Rank>& mask) {
  reduce_params p;
  p.in = in;
  p.out = out;
  p.out_n = 1;
  p.red_n = 1;
  std::int64_t stride = 1;
  std::int64_t strides[max_rank] = {};
  for (std::size_t a = Rank; a-- > 0;) {
    strides[a] = stride;
    stride *= d.d[a];
  }
  for (std::size_t a = 0; a < Rank; ++a) {
    if (mask[a]) {
      p.red_dims[p.red_rank] = d.d[a];
      p.red_strides[p.red_rank++] = strides[a];
      p.red_n *= d.d[a];
    } else {
      p.kept_dims[p.kept_rank] = d.d[a];
      p.kept_strides[p.kept_rank++] = strides[a];
      p.out_n *= d.d[a];
    }
  }
  return p;
}

/// out = reduce(in) over the axes in `mask`, on `stream`.
template <class R, class T, class Out, std::size_t Rank>
void reduce(cudaStream_t stream, const T* in, const backend::rt_dims& d,
            const std::array<bool, Rank>& mask, Out* out) {
  const reduce_params p = make_reduce_params(in, out, d, mask);
  if (p.out_n == 0)
    return;
  constexpr int threads = 256;
  const int blocks = static_cast<int>(p.out_n < 65535 ? p.out_n : 65535);
  reduce_kernel<R, T, Out, threads><<<blocks, threads, 0, stream>>>(p);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

/// sum, mean, max and min over any axes (argmax: layout.cuh).
template <std::size_t I, class Rd, bool K, std::int64_t... Ax, class T, class A>
requires(!std::is_same_v<Rd, ops::reducers::argmax>) void kernel(context& ctx,
                                                                 ops::reduce<Rd, K, Ax...>*, T*,
                                                                 value* vals, void*, A*) {
  const value& in = vals[A::index];
  T* out = ctx.output<T>(vals[I]);
  reduce<Rd>(ctx.stream(), static_cast<const typename A::value_type*>(in.data), in.dims,
             ops::reduce<Rd, K, Ax...>::template mask<A::rank>(), out);
}

} // namespace typeflow::cuda_backend
