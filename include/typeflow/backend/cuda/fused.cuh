// The CUDA fused elementwise kernel: one kernel per region, instantiated from the region's
// flat types (graph/flat.hpp) and the ops' scalar functors, the same ones the CPU loop runs.
// Grid-stride loops; inputs mapped into the output's index space by broadcasting strides (index
// arithmetic over the coalesced axes); when every input is either contiguous like the output or
// a scalar and all pointers are 16-byte aligned, each thread moves 16 bytes per load and store.
// The kernel takes a plain standard-layout parameter struct: nothing of Hana or of the node
// types reaches device code.
#pragma once
#include <array>
#include <bit>
#include <cstdint>

#include "../../core/pack.hpp"
#include "../../graph/flat.hpp"
#include "../common/broadcast.hpp"
#include "../common/element_eval.hpp"
#include "context.cuh"
#include "runtime.hpp"

namespace typeflow::cuda_backend {

/// What a fused kernel needs at run time: pointers, coalesced extents and strides.
template <std::size_t NIn>
struct fused_params {
  void* out = nullptr;
  const void* in[NIn > 0 ? NIn : 1] = {};
  std::int64_t total = 0;
  int groups = 0;
  std::int64_t dims[max_rank] = {};
  std::int64_t strides[NIn > 0 ? NIn : 1][max_rank] = {};
  bool vector = false; // every input contiguous or scalar, all pointers 16-byte aligned
  bool scalar[NIn > 0 ? NIn : 1] = {};
};

template <class Out, class Ins, class Members>
struct fused_device;

template <class Out, class... Ins, class... Ms>
struct fused_device<Out, type_list<Ins...>, type_list<Ms...>> {
  static constexpr std::size_t n_in = sizeof...(Ins);
  using in_tuple = pack<Ins...>;

  /// The root's value at one element (the CPU loop's evaluator).
  __host__ __device__ static Out eval(Ins... x) {
    return backend::element_eval<Out, type_list<Ins...>, type_list<Ms...>>::eval(x...);
  }

  /// Input k's value at output element i (broadcasting by index arithmetic).
  template <std::size_t K>
  __device__ static auto load(const fused_params<n_in>& p, std::int64_t i) {
    using T = pack_element_t<K, in_tuple>;
    const T* base = static_cast<const T*>(p.in[K]);
    std::int64_t off = 0;
    for (int g = p.groups - 1; g >= 0; --g) {
      off += (i % p.dims[g]) * p.strides[K][g];
      i /= p.dims[g];
    }
    return base[off];
  }
  template <std::size_t... K>
  __device__ static Out at(const fused_params<n_in>& p, std::int64_t i, std::index_sequence<K...>) {
    return eval(load<K>(p, i)...);
  }
  /// 16 bytes of output per thread: inputs are contiguous like the output, or scalars.
  template <std::size_t K>
  __device__ static auto load_flat(const fused_params<n_in>& p, std::int64_t i) {
    using T = pack_element_t<K, in_tuple>;
    return static_cast<const T*>(p.in[K])[p.scalar[K] ? 0 : i];
  }
  template <std::size_t... K>
  __device__ static Out at_flat(const fused_params<n_in>& p, std::int64_t i,
                                std::index_sequence<K...>) {
    return eval(load_flat<K>(p, i)...);
  }
};

template <class F, std::size_t NIn, class Out>
__global__ void fused_elementwise(fused_params<NIn> p) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  Out* out = static_cast<Out*>(p.out);
  constexpr std::int64_t per = 16 / sizeof(Out) > 0 ? 16 / sizeof(Out) : 1;
  if (p.vector) {
    struct alignas(16) chunk {
      Out v[per];
    };
    const std::int64_t chunks = p.total / per;
    for (std::int64_t c = t; c < chunks; c += stride) {
      chunk r;
      for (std::int64_t j = 0; j < per; ++j)
        r.v[j] = F::at_flat(p, c * per + j, std::make_index_sequence<NIn>{});
      reinterpret_cast<chunk*>(out)[c] = r;
    }
    for (std::int64_t i = chunks * per + t; i < p.total; i += stride)
      out[i] = F::at_flat(p, i, std::make_index_sequence<NIn>{});
  } else {
    for (std::int64_t i = t; i < p.total; i += stride)
      out[i] = F::at(p, i, std::make_index_sequence<NIn>{});
  }
}

/// Runs region (Out, Ins, Members) on `stream`: out (dims od, device memory) from the inputs'
/// device buffers and run-time dims.
template <class Out, class Ins, class Members>
struct fused_kernel;
template <class Out, class... Ins, class Members>
struct fused_kernel<Out, type_list<Ins...>, Members> {
  using F = fused_device<Out, type_list<Ins...>, Members>;
  static constexpr std::size_t n_in = sizeof...(Ins);

  static fused_params<n_in> params(Out* out, const backend::rt_dims& od,
                                   const std::array<const backend::rt_value*, n_in>& in) {
    fused_params<n_in> p;
    p.out = out;
    p.total = od.numel();
    std::array<const backend::rt_dims*, n_in> in_dims{};
    for (std::size_t k = 0; k < n_in; ++k)
      in_dims[k] = &in[k]->dims;
    const backend::loop_geometry<n_in> geo(od, in_dims);
    p.groups = static_cast<int>(geo.groups);
    bool vec = (reinterpret_cast<std::uintptr_t>(out) % 16) == 0;
    for (std::size_t g = 0; g < geo.groups; ++g)
      p.dims[g] = geo.dims[g];
    for (std::size_t k = 0; k < n_in; ++k) {
      p.in[k] = in[k]->data;
      bool contiguous = true, scalar = true;
      std::int64_t expect = 1;
      for (std::size_t g = geo.groups; g-- > 0;) {
        p.strides[k][g] = geo.strides[k][g];
        contiguous = contiguous && geo.strides[k][g] == expect;
        scalar = scalar && geo.strides[k][g] == 0;
        expect *= geo.dims[g];
      }
      p.scalar[k] = scalar;
      vec = vec &&
            (scalar || (contiguous && reinterpret_cast<std::uintptr_t>(in[k]->data) % 16 == 0));
    }
    p.vector = vec;
    return p;
  }

  static void run(cudaStream_t stream, Out* out, const backend::rt_dims& od,
                  const std::array<const backend::rt_value*, n_in>& in) {
    const fused_params<n_in> p = params(out, od, in);
    if (p.total == 0)
      return;
    const int threads = 256;
    const std::int64_t want = (p.total + threads - 1) / threads;
    const int blocks = static_cast<int>(want < 65536 ? want : 65536);
    fused_elementwise<F, n_in, Out><<<blocks, threads, 0, stream>>>(p);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }
};

/// A fused elementwise region: one kernel.
template <std::size_t I, class Op, class T, class Out, class Ins, class Members, class IdxSeq,
          class... Refs>
requires fusable_on_gpu<Op>
void kernel(context& ctx, Op*, T*, value* vals, graph::flat_region<Out, Ins, Members, IdxSeq>*,
            Refs*...) {
  constexpr auto idx = graph::index_array<IdxSeq>::value;
  std::array<const value*, idx.size()> inputs{};
  for (std::size_t k = 0; k < idx.size(); ++k)
    inputs[k] = &vals[idx[k]];
  T* out = ctx.output<T>(vals[I]);
  fused_kernel<Out, Ins, Members>::run(ctx.stream(), out, vals[I].dims, inputs);
  ctx.session.stats.fused_nodes += Members::size - 1;
}

} // namespace typeflow::cuda_backend
