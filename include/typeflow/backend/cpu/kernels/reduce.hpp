// CPU kernels of the reduce ops. Reductions, and sum_to_like (a broadcast's gradient), on
// backend/cpu/reduce.hpp.
#pragma once
#include "../../../graph/flat.hpp"
#include "../../../ops/broadcast.hpp"
#include "../../../ops/reduce.hpp"
#include "../context.hpp"
#include "../fused.hpp"
#include "../reduce.hpp"

namespace typeflow::cpu_backend {

template <std::size_t I, class Rd, bool K, std::int64_t... Ax, class T, class A>
void kernel(context& ctx, ops::reduce<Rd, K, Ax...>*, T*, value* vals, void*, A*) {
  const value& in = vals[A::index];
  T* out = ctx.allocate<T>(vals[I]);
  reduce<Rd>(ctx.pool, static_cast<const typename A::value_type*>(in.data), in.dims,
             ops::reduce<Rd, K, Ax...>::template mask<A::rank>(), out);
}

namespace detail {
/// A fused region as a reduction's input (reduce_from): pieces evaluated on demand.
template <class Fused, class In, std::size_t N>
struct region_input {
  using value_type = In;
  static constexpr bool in_memory = false;
  context& ctx;
  const backend::rt_dims& dims;
  std::array<const value*, N> inputs;
  backend::loop_geometry<N> geo;
  const In* piece(std::int64_t off, std::int64_t n, In* buf) const {
    Fused::run_range(buf, dims, inputs, geo, off, off + n);
    return buf;
  }
  std::shared_ptr<void> materialize() const {
    auto b = ctx.scratch<In>(dims.numel());
    Fused::run(ctx.pool, static_cast<In*>(b.get()), dims, inputs);
    return b;
  }
};
} // namespace detail

/// A reduction of a fused region that only it reads (graph::prologue): the region is evaluated
/// in the pieces the reduction reads, never into a buffer of its own, where the reduction is
/// over trailing axes (sum(square(w)), mean(square(p - y))); other patterns evaluate it into a
/// scratch buffer first.
template <std::size_t I, class Rd, bool K, std::int64_t... Ax, class T, class Region, class A>
void kernel(context& ctx, ops::reduce<Rd, K, Ax...>*, T*, value* vals,
            const graph::prologue<Region>&, A*) {
  using fused =
      fused_kernel<typename Region::out_type, typename Region::inputs, typename Region::members>;
  using In = typename A::value_type;
  static_assert(std::is_same_v<In, typename Region::out_type>);
  constexpr auto Idx = Region::input_indices;
  constexpr std::size_t N = Idx.size();
  std::array<const value*, N> inputs{};
  std::array<const backend::rt_dims*, N> in_dims{};
  for (std::size_t k = 0; k < N; ++k) {
    inputs[k] = &vals[Idx[k]];
    in_dims[k] = &inputs[k]->dims;
  }
  const backend::rt_dims& dims = vals[A::index].dims;
  const detail::region_input<fused, In, N> src{ctx, dims, inputs,
                                               backend::loop_geometry<N>(dims, in_dims)};
  T* out = ctx.allocate<T>(vals[I]);
  reduce_from<Rd>(ctx.pool, src, dims, ops::reduce<Rd, K, Ax...>::template mask<A::rank>(), out);
  ctx.stats.fused_nodes += Region::members::size - 1;
}

template <std::size_t I, class T, class C, class X>
void kernel(context& ctx, ops::sum_to_like*, T*, value* vals, void*, C*, X*) {
  const value& in = vals[C::index];
  const auto mask = backend::sum_to_mask<C::rank>(in.dims, vals[I].dims);
  T* o = ctx.allocate<T>(vals[I]);
  reduce<ops::reducers::sum>(ctx.pool, static_cast<const T*>(in.data), in.dims, mask, o);
}

} // namespace typeflow::cpu_backend
