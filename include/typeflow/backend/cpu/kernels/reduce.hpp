// CPU kernels of the reduce ops. Reductions, and sum_to_like (a broadcast's gradient), on
// backend/cpu/reduce.hpp.
#pragma once
#include "../../../ops/broadcast.hpp"
#include "../../../ops/reduce.hpp"
#include "../context.hpp"
#include "../reduce.hpp"

namespace typeflow::cpu_backend {

template <std::size_t I, class Rd, bool K, std::int64_t... Ax, class T, class A>
void kernel(context& ctx, ops::reduce<Rd, K, Ax...>*, T*, value* vals, void*, A*) {
  const value& in = vals[A::index];
  T* out = ctx.allocate<T>(vals[I]);
  reduce<Rd>(ctx.pool, static_cast<const typename A::value_type*>(in.data), in.dims,
             ops::reduce<Rd, K, Ax...>::template mask<A::rank>(), out);
}

template <std::size_t I, class T, class C, class X>
void kernel(context& ctx, ops::sum_to_like*, T*, value* vals, void*, C*, X*) {
  const value& in = vals[C::index];
  const auto mask = backend::sum_to_mask<C::rank>(in.dims, vals[I].dims);
  T* o = ctx.allocate<T>(vals[I]);
  reduce<ops::reducers::sum>(ctx.pool, static_cast<const T*>(in.data), in.dims, mask, o);
}

} // namespace typeflow::cpu_backend
