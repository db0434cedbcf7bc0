// CPU kernels of the layout ops. Layout ops: views (reshape, expand_dims), transpose, slices, pads,
// concatenation.
#pragma once
#include "../../../ops/layout.hpp"
#include "../../common/layout.hpp"
#include "../context.hpp"
#include "../layout.hpp"

namespace typeflow::cpu_backend {

template <std::size_t I, std::int64_t... D, class T, class A>
void kernel(context&, ops::reshape<D...>*, T*, value* vals, void*, A*) {
  vals[I].owner = vals[A::index].owner; // a view: shares the input's buffer
  vals[I].data = vals[A::index].data;
}

template <std::size_t I, std::int64_t... Ax, class T, class A>
void kernel(context&, ops::expand_dims<Ax...>*, T*, value* vals, void*, A*) {
  vals[I].owner = vals[A::index].owner; // a view
  vals[I].data = vals[A::index].data;
}

template <std::size_t I, class T, class A>
void kernel(context&, ops::replica_mean*, T*, value* vals, void*, A*) {
  vals[I].owner = vals[A::index].owner; // a view (a replicated session averages it)
  vals[I].data = vals[A::index].data;
}

template <std::size_t I, class T, class A, class X>
void kernel(context&, ops::reshape_like*, T*, value* vals, void*, A*, X*) {
  if (vals[A::index].dims.numel() != vals[I].dims.numel())
    throw error("reshape_like: element counts differ: " + vals[A::index].dims.str() + " x " +
                vals[I].dims.str());
  vals[I].owner = vals[A::index].owner; // a view
  vals[I].data = vals[A::index].data;
}

template <std::size_t I, std::int64_t... Ax, class T, class A>
void kernel(context& ctx, ops::element_count<Ax...>*, T*, value* vals, void*, A*) {
  const auto mask = ops::element_count<Ax...>::template mask<A::rank>();
  std::int64_t n = 1;
  for (std::size_t i = 0; i < A::rank; ++i)
    if (mask[i])
      n *= vals[A::index].dims.d[i];
  *ctx.allocate<T>(vals[I]) = static_cast<T>(n);
}

template <std::size_t I, std::int64_t... Perm, class T, class A>
void kernel(context& ctx, ops::transpose<Perm...>*, T*, value* vals, void*, A*) {
  const value& in = vals[A::index];
  T* out = ctx.allocate<T>(vals[I]);
  transpose(ctx.pool, static_cast<const T*>(in.data), in.dims, ops::transpose<Perm...>::perm, out,
            vals[I].dims);
}

/// Makes `out` (its dims set) a view of `in` where the slice at `begin` is one contiguous block
/// of in's buffer (contiguous_block): out shares in's buffer, no copy. Whether it did.
template <class T, std::size_t R>
bool slice_view(const value& in, const std::array<std::int64_t, R>& begin, value& out) {
  const auto off = contiguous_block(in.dims, begin, out.dims);
  if (!off)
    return false;
  out.owner = in.owner;
  out.data = const_cast<T*>(static_cast<const T*>(in.data)) + *off;
  return true;
}

template <std::size_t I, class B, class S, class T, class A>
void kernel(context& ctx, ops::slice<B, S>*, T*, value* vals, void*, A*) {
  const value& in = vals[A::index];
  // a view where a block of whole rows (a variable's leading rows, one step of a sequence) is
  // contiguous in the input's buffer
  if (slice_view<T>(in, B::values, vals[I]))
    return;
  T* out = ctx.allocate<T>(vals[I]);
  slice(ctx.pool, static_cast<const T*>(in.data), in.dims, B::values, out, vals[I].dims);
}

template <std::size_t I, class B, class T, class A, class X>
void kernel(context& ctx, ops::pad_like<B>*, T*, value* vals, void*, A*, X*) {
  const value& in = vals[A::index];
  backend::check_pad_like(B::values, in.dims, vals[I].dims);
  pad(static_cast<const T*>(in.data), in.dims, B::values, ctx.allocate<T>(vals[I]), vals[I].dims);
}

template <std::size_t I, class B, class T, class G, class A>
void kernel(context& ctx, ops::slice_like<B>*, T*, value* vals, void*, G*, A*) {
  const value& in = vals[G::index];
  backend::check_slice_like(B::values, vals[I].dims, in.dims);
  // a view, as slice's (a loop's packed gradient unpacked into its variables' gradients)
  if (slice_view<T>(in, B::values, vals[I]))
    return;
  T* out = ctx.allocate<T>(vals[I]);
  slice(ctx.pool, static_cast<const T*>(in.data), in.dims, B::values, out, vals[I].dims);
}

template <std::size_t I, std::int64_t Axis, class T, class... Cs>
void kernel(context& ctx, ops::concat<Axis>*, T*, value* vals, void*, Cs*...) {
  T* out = ctx.allocate<T>(vals[I]);
  const T* parts[] = {static_cast<const T*>(vals[Cs::index].data)...};
  const backend::rt_dims* dims[] = {&vals[Cs::index].dims...};
  const std::int64_t rank = static_cast<std::int64_t>(vals[I].dims.rank);
  concat(Axis < 0 ? Axis + rank : Axis, parts, dims, sizeof...(Cs), out, vals[I].dims);
}

} // namespace typeflow::cpu_backend
