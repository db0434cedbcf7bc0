// CUDA reductions (sum, mean, max, min over any set of axes). When the innermost axis is reduced
// ("rows"), a thread block per output strides over its reduced elements, combined with
// cub::BlockReduce; when it is kept ("columns"), a thread per output walks its reduced elements,
// so that a warp reads consecutive addresses. Too few outputs to fill the GPU (a full sum, a
// bias gradient over a batch): the reduced range is split across blocks and a second kernel
// combines the partial results in a fixed order (deterministic). Floats accumulate in double, as
// on the CPU; NaN propagates through max and min; the mean of an empty axis is NaN.
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
  // Adjacent axes of one kind merge into one (row-major: the outer's stride is the inner's
  // times its extent), so that a full reduction or one over trailing axes walks one axis with
  // stride 1, without index divisions.
  int last = -1; // kind of axis a - 1: 1 reduced, 0 kept
  for (std::size_t a = 0; a < Rank; ++a) {
    const int kind = mask[a] ? 1 : 0;
    std::int64_t* dims = kind ? p.red_dims : p.kept_dims;
    std::int64_t* str = kind ? p.red_strides : p.kept_strides;
    int& rank = kind ? p.red_rank : p.kept_rank;
    (kind ? p.red_n : p.out_n) *= d.d[a];
    if (kind == last) {
      dims[rank - 1] *= d.d[a];
      str[rank - 1] = strides[a];
    } else {
      dims[rank] = d.d[a];
      str[rank++] = strides[a];
    }
    last = kind;
  }
  return p;
}

/// How a reduction is laid out on the GPU. Rows: the input's innermost axis is reduced, a block
/// per output strides over the reduced elements (coalesced along the row). Columns: the
/// innermost axis is kept, a thread per output walks the reduced elements (consecutive threads
/// read consecutive addresses). Either way, when there are too few outputs to fill the GPU, the
/// reduced range is split in `splits` chunks (blockIdx.y) whose partial results a second kernel
/// combines, in chunk order (deterministic).
struct reduce_plan {
  bool columns = false;
  std::int64_t splits = 1;
  std::int64_t chunk = 0; ///< reduced elements per split
};

template <class R>
using reduce_base =
    std::conditional_t<std::is_same_v<R, ops::reducers::mean>, ops::reducers::sum, R>;

/// The offset of element i of a row-major walk over `rank` axes of extents `dims` whose strides
/// in memory are `strides` (index arithmetic, the innermost axis last).
TYPEFLOW_HD inline std::int64_t strided_offset(int rank, const std::int64_t* dims,
                                               const std::int64_t* strides, std::int64_t i) {
  std::int64_t off = 0;
  for (int a = rank - 1; a >= 0; --a) {
    off += (i % dims[a]) * strides[a];
    i /= dims[a];
  }
  return off;
}
/// The offset of reduced element r, of output o.
__device__ inline std::int64_t reduced_offset(const reduce_params& p, std::int64_t r) {
  if (p.red_rank == 1) // the common case, without 64-bit divisions
    return r * p.red_strides[0];
  return strided_offset(p.red_rank, p.red_dims, p.red_strides, r);
}
__device__ inline std::int64_t kept_offset(const reduce_params& p, std::int64_t o) {
  return strided_offset(p.kept_rank, p.kept_dims, p.kept_strides, o);
}

/// The final value of output o from its accumulated total (the mean divides; an empty mean is
/// NaN).
template <class R, class Out, class A>
__device__ Out finish(A total, std::int64_t n) {
  if constexpr (std::is_same_v<R, ops::reducers::mean>) {
    if (n == 0)
      return std::numeric_limits<Out>::has_quiet_NaN ? std::numeric_limits<Out>::quiet_NaN()
                                                     : Out(0);
    return static_cast<Out>(total / static_cast<A>(n));
  } else {
    return static_cast<Out>(total);
  }
}

/// Rows: block (o, s) reduces chunk s of output o's reduced elements; with one split it writes
/// the output, else partials[s * out_n + o].
template <class R, class T, class Out, int Threads>
__global__ void reduce_rows_kernel(reduce_params p, reduce_plan plan, accum_t<T>* partials) {
  using base = reduce_base<R>;
  using acc_t = accum_t<T>;
  using block_reduce = cub::BlockReduce<acc_t, Threads>;
  __shared__ typename block_reduce::TempStorage tmp;
  const T* in = static_cast<const T*>(p.in);
  const std::int64_t s = blockIdx.y;
  const std::int64_t begin = s * plan.chunk;
  const std::int64_t end = begin + plan.chunk < p.red_n ? begin + plan.chunk : p.red_n;
  for (std::int64_t o = blockIdx.x; o < p.out_n; o += gridDim.x) {
    const std::int64_t base_off = kept_offset(p, o);
    acc_t acc = base::template identity<acc_t>();
    std::int64_t r = begin + threadIdx.x;
    if (p.red_rank == 1 && p.red_strides[0] == 1) {
      // A contiguous row: four independent loads in flight per thread.
      const T* row = in + base_off;
      acc_t a1 = acc, a2 = acc, a3 = acc;
      for (; r + 3 * Threads < end; r += 4 * Threads) {
        acc = combiner<base>{}(acc, static_cast<acc_t>(row[r]));
        a1 = combiner<base>{}(a1, static_cast<acc_t>(row[r + Threads]));
        a2 = combiner<base>{}(a2, static_cast<acc_t>(row[r + 2 * Threads]));
        a3 = combiner<base>{}(a3, static_cast<acc_t>(row[r + 3 * Threads]));
      }
      for (; r < end; r += Threads)
        acc = combiner<base>{}(acc, static_cast<acc_t>(row[r]));
      acc = combiner<base>{}(combiner<base>{}(acc, a1), combiner<base>{}(a2, a3));
    } else {
      for (; r < end; r += Threads)
        acc = combiner<base>{}(acc, static_cast<acc_t>(in[base_off + reduced_offset(p, r)]));
    }
    const acc_t total = block_reduce(tmp).Reduce(acc, combiner<base>{});
    if (threadIdx.x == 0) {
      if (plan.splits == 1)
        static_cast<Out*>(p.out)[o] = finish<R, Out>(total, p.red_n);
      else
        partials[s * p.out_n + o] = total;
    }
    __syncthreads(); // tmp is reused by the next output
  }
}

/// Columns: thread o of split s walks chunk s of output o's reduced elements.
template <class R, class T, class Out>
__global__ void reduce_columns_kernel(reduce_params p, reduce_plan plan, accum_t<T>* partials) {
  using base = reduce_base<R>;
  using acc_t = accum_t<T>;
  const T* in = static_cast<const T*>(p.in);
  const std::int64_t s = blockIdx.y;
  const std::int64_t begin = s * plan.chunk;
  const std::int64_t end = begin + plan.chunk < p.red_n ? begin + plan.chunk : p.red_n;
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       o < p.out_n; o += stride) {
    const std::int64_t base_off = kept_offset(p, o);
    acc_t acc = base::template identity<acc_t>();
    for (std::int64_t r = begin; r < end; ++r)
      acc = combiner<base>{}(acc, static_cast<acc_t>(in[base_off + reduced_offset(p, r)]));
    if (plan.splits == 1)
      static_cast<Out*>(p.out)[o] = finish<R, Out>(acc, p.red_n);
    else
      partials[s * p.out_n + o] = acc;
  }
}

/// The splits' partials of each output combined: a block per output, thread t taking splits t,
/// t + Threads, ... and cub::BlockReduce the threads (a fixed order: deterministic).
template <class R, class T, class Out, int Threads>
__global__ void reduce_partials_kernel(reduce_params p, reduce_plan plan,
                                       const accum_t<T>* partials) {
  using base = reduce_base<R>;
  using acc_t = accum_t<T>;
  using block_reduce = cub::BlockReduce<acc_t, Threads>;
  __shared__ typename block_reduce::TempStorage tmp;
  for (std::int64_t o = blockIdx.x; o < p.out_n; o += gridDim.x) {
    acc_t acc = base::template identity<acc_t>();
    for (std::int64_t s = threadIdx.x; s < plan.splits; s += Threads)
      acc = combiner<base>{}(acc, partials[s * p.out_n + o]);
    const acc_t total = block_reduce(tmp).Reduce(acc, combiner<base>{});
    if (threadIdx.x == 0)
      static_cast<Out*>(p.out)[o] = finish<R, Out>(total, p.red_n);
    __syncthreads(); // tmp is reused by the next output
  }
}

/// The layout of reducing `d` over `mask`: enough blocks in flight to fill a large GPU (about
/// 2048 rows-blocks or 512K column threads), chunks of at least 2048 elements per row-split and
/// 64 per column-split.
template <std::size_t Rank>
reduce_plan plan_reduce(const reduce_params& p, const std::array<bool, Rank>& mask) {
  reduce_plan plan;
  plan.columns = Rank > 0 && !mask[Rank - 1] && p.red_n > 1;
  const std::int64_t want = plan.columns ? (std::int64_t{1} << 19) : 2048; // threads / blocks
  const std::int64_t have = p.out_n;
  const std::int64_t min_chunk = plan.columns ? 64 : 2048;
  std::int64_t splits = have >= want ? 1 : (want + have - 1) / have;
  const std::int64_t most = (p.red_n + min_chunk - 1) / min_chunk;
  splits = std::max<std::int64_t>(1, std::min({splits, most, std::int64_t{65535}}));
  plan.chunk = (p.red_n + splits - 1) / std::max<std::int64_t>(splits, 1);
  plan.splits = plan.chunk > 0 ? (p.red_n + plan.chunk - 1) / plan.chunk : 1;
  if (plan.splits < 1)
    plan.splits = 1;
  return plan;
}

/// Elements of partial results a reduction of `d` over `mask` needs (0: none).
template <class T, std::size_t Rank>
std::int64_t reduce_partials(const backend::rt_dims& d, const std::array<bool, Rank>& mask) {
  const reduce_params p = make_reduce_params(nullptr, nullptr, d, mask);
  const reduce_plan plan = plan_reduce(p, mask);
  return plan.splits > 1 ? plan.splits * p.out_n : 0;
}

/// out = reduce(in) over the axes in `mask`, on `stream`; `partials` holds reduce_partials
/// elements.
template <class R, class T, class Out, std::size_t Rank>
void reduce(cudaStream_t stream, const T* in, const backend::rt_dims& d,
            const std::array<bool, Rank>& mask, Out* out, accum_t<T>* partials) {
  const reduce_params p = make_reduce_params(in, out, d, mask);
  if (p.out_n == 0)
    return;
  const reduce_plan plan = plan_reduce(p, mask);
  constexpr int threads = 256;
  const auto y = static_cast<unsigned>(plan.splits);
  if (plan.columns) {
    const std::int64_t blocks = std::min<std::int64_t>((p.out_n + threads - 1) / threads, 65535);
    reduce_columns_kernel<R, T, Out>
        <<<dim3(static_cast<unsigned>(blocks), y), threads, 0, stream>>>(p, plan, partials);
  } else {
    const std::int64_t blocks = std::min<std::int64_t>(p.out_n, 65535);
    reduce_rows_kernel<R, T, Out, threads>
        <<<dim3(static_cast<unsigned>(blocks), y), threads, 0, stream>>>(p, plan, partials);
  }
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  if (plan.splits > 1) {
    constexpr int combine = 128;
    const std::int64_t blocks = std::min<std::int64_t>(p.out_n, 65535);
    reduce_partials_kernel<R, T, Out, combine>
        <<<static_cast<unsigned>(blocks), combine, 0, stream>>>(p, plan, partials);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }
}

/// The same, its partials from the context's allocator.
template <class R, class T, class Out, std::size_t Rank>
void reduce(context& ctx, const T* in, const backend::rt_dims& d,
            const std::array<bool, Rank>& mask, Out* out) {
  value holder;
  const std::int64_t n = reduce_partials<T>(d, mask);
  accum_t<T>* partials = n ? ctx.scratch<accum_t<T>>(holder, n) : nullptr;
  reduce<R>(ctx.stream(), in, d, mask, out, partials);
}

/// sum, mean, max and min over any axes (argmax: layout.cuh).
template <std::size_t I, class Rd, bool K, std::int64_t... Ax, class T, class A>
requires(!std::is_same_v<Rd, ops::reducers::argmax>) void kernel(context& ctx,
                                                                 ops::reduce<Rd, K, Ax...>*, T*,
                                                                 value* vals, void*, A*) {
  const value& in = vals[A::index];
  T* out = ctx.output<T>(vals[I]);
  reduce<Rd>(ctx, static_cast<const typename A::value_type*>(in.data), in.dims,
             ops::reduce<Rd, K, Ax...>::template mask<A::rank>(), out);
}

} // namespace typeflow::cuda_backend
