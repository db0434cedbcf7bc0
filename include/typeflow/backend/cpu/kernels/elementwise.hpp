// CPU kernels of the elementwise ops. Fused elementwise regions: one loop over the region's inputs
// (backend/cpu/fused.hpp).
#pragma once
#include "../context.hpp"
#include "../fused.hpp"

namespace typeflow::cpu_backend {

// Elementwise region rooted at node I: one fused loop.
template <std::size_t I, class Op, class T, class Out, class Ins, class Members, class IdxSeq,
          class... Refs>
void kernel(context& ctx, Op*, T*, value* vals, graph::flat_region<Out, Ins, Members, IdxSeq>*,
            Refs*...) {
  constexpr auto Idx = graph::index_array<IdxSeq>::value;
  using fused = fused_kernel<Out, Ins, Members>;
  std::array<const value*, Idx.size()> inputs{};
  for (std::size_t k = 0; k < Idx.size(); ++k)
    inputs[k] = &vals[Idx[k]];
  T* out = ctx.allocate<T>(vals[I]);
  fused::run(ctx.pool, out, vals[I].dims, inputs);
  ctx.stats.fused_nodes += Members::size - 1;
}

} // namespace typeflow::cpu_backend
