// CPU kernels of the elementwise ops. Fused elementwise regions: one loop over the region's inputs
// (backend/cpu/fused.hpp).
#pragma once
#include "../../../ops/state.hpp"
#include "../context.hpp"
#include "../fused.hpp"

namespace typeflow::cpu_backend {

namespace detail {
/// Whether a region is a lone `assign(var, x)` of a materialized x (its input K), and K.
template <class Members>
struct lone_assign : std::false_type {};
template <class C, class T, class V, std::size_t K>
struct lone_assign<
    type_list<graph::member<ops::assign_op<ops::assign_mode::set>, C, T, V, graph::ref_input<K>>>>
    : std::true_type {
  static constexpr std::size_t input = K;
};
template <std::size_t K, class L>
struct nth;
template <std::size_t K, class... Ts>
struct nth<K, type_list<Ts...>> {
  using type = pack_element_t<K, pack<Ts...>>;
};
} // namespace detail

// Elementwise region rooted at node I: one fused loop, which also stores the region's merged
// outputs (assignments merged into it: compile::plan's mergeable).
template <std::size_t I, class Op, class T, class Out, class Ins, class Members, class IdxSeq,
          class Stores, class... Refs>
void kernel(context& ctx, Op*, T*, value* vals,
            graph::flat_region<Out, Ins, Members, IdxSeq, Stores>*, Refs*...) {
  constexpr auto Idx = graph::index_array<IdxSeq>::value;
  constexpr auto St = graph::index_array<Stores>::value;
  using fused = fused_kernel<Out, Ins, Members, Stores>;
  static_assert(!fused::lacks_a_vector_form, // the session names the op before it gets here
                "fused CPU loop: an elementwise op has no vector form");
  std::array<const value*, Idx.size()> inputs{};
  for (std::size_t k = 0; k < Idx.size(); ++k)
    inputs[k] = &vals[Idx[k]];
  if constexpr (St.size() == 0 && detail::lone_assign<Members>::value) {
    // assign(var, x) of a run's own buffer x of the variable's shape and dtype: the assignment's
    // value is x itself (committed from there at the end of the run), not a copy of it.
    using In = typename detail::nth<detail::lone_assign<Members>::input, Ins>::type;
    const value& x = *inputs[detail::lone_assign<Members>::input];
    if (std::is_same_v<In, T> && x.owner && x.dims.numel() == vals[I].dims.numel()) {
      vals[I].owner = x.owner;
      vals[I].data = x.data;
      return;
    }
  }
  // Outputs over inputs that die with the step (context::allocate_in_place).
  std::array<value*, Idx.size()> in{};
  for (std::size_t k = 0; k < Idx.size(); ++k)
    in[k] = &vals[Idx[k]];
  std::uint64_t taken = 0;
  T* out = ctx.allocate_in_place<T>(vals[I], in, detail::same_types<T, Ins>::value, taken);
  typename fused::outs_t so{};
  for (std::size_t q = 0; q < fused::n_out; ++q) {
    value& v = vals[St[2 * q + 1]];
    if (!(v.dims == vals[I].dims))
      throw error("fused loop: a merged assignment's shape " + v.dims.str() + " differs from " +
                  vals[I].dims.str());
    so[q] = ctx.allocate_in_place<T>(v, in, detail::same_types<T, Ins>::value, taken);
  }
  fused::run(ctx.pool, out, vals[I].dims, inputs, so);
  ctx.stats.fused_nodes += Members::size - 1;
}

} // namespace typeflow::cpu_backend
