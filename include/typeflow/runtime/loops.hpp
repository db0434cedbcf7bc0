// The interpreter of `repeat` loops (ops/repeat.hpp), on the executor's public interface.
//
// A repeat runs its body's own plan once per layer, on cpu<0>: the carried value and the
// layer's slice of each stacked variable are bound to the body's placeholders (no copy), the
// body's steps run as any plan's (executor::run_body), and its value becomes the next layer's
// input. The body's plan is one type whatever the layer count. Its steps count in the run's
// statistics; a traced run records the loop as one step. Each layer runs with its own run salt,
// so random ops (dropout) draw per layer, and the gradient's recomputation draws as the forward
// did. The gradient (repeat_vjp) recomputes the layers' inputs forward, then runs the body's
// gradient plan from the last layer down.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../backend/common/value.hpp"
#include "../backend/cpu/loops.hpp"
#include "../compile/plan.hpp"
#include "../core/error.hpp"
#include "../device/device.hpp"
#include "../ops/repeat.hpp"

namespace typeflow {

/// Runs a repeat (or its gradient) as the step of executor `Ex` on frame `fr`: see above.
template <class Ex>
struct loop_interpreter {
  using value = backend::rt_value;

  /// A plan of a loop's body.
  template <class... Fetches>
  using body_plan = compile::plan<type_list<Fetches...>, on<cpu<0>>>;

  template <class P, class Ph>
  static void bind_body(std::vector<value>& v, const void* data, const backend::rt_dims& dims) {
    if constexpr (P::template contains_c<Ph>::value) {
      value& slot = v[P::template index_c<Ph>::value];
      slot.data = const_cast<void*>(data);
      slot.dims = dims;
    }
  }
  /// Layer `layer` of stacked variable value `s` as the body's placeholder Ph.
  template <class P, class Ph>
  static void bind_layer(std::vector<value>& v, const value& s, std::int64_t layer) {
    using T = typename Ph::value_type;
    constexpr std::int64_t n = numel(Ph::shape_type::dims);
    bind_body<P, Ph>(v, static_cast<const T*>(s.data) + layer * n,
                     backend::rt_dims::from(Ph::shape_type::dims));
  }
  static void check_carry(const value& out, const value& in, std::int64_t layer) {
    if (out.dims.rank != in.dims.rank ||
        !std::equal(in.dims.d.begin(), in.dims.d.begin() + in.dims.rank, out.dims.d.begin()))
      throw error("repeat: layer " + std::to_string(layer) + " returned " + out.dims.str() +
                  " for a carried value of " + in.dims.str() +
                  " (a body must keep its argument's shape)");
  }
  /// Layer `layer` of a repeat: the body on carry `h`, its value (owned).
  template <class Body, class Carry, class... Params, class... S>
  static value run_layer(Ex& ex, const value& h, std::int64_t layer,
                         [[maybe_unused]] const value* fr, type_list<S...>) {
    using P = body_plan<Body>;
    using T = typename Body::value_type;
    std::vector<value> v(P::slots);
    bind_body<P, Carry>(v, h.data, h.dims);
    (bind_layer<P, Params>(v, fr[S::index], layer), ...);
    ex.template run_body<P>(v, layer);
    value out = std::move(v[P::template index_c<Body>::value]);
    check_carry(out, h, layer);
    auto ctx = ex.cpu_context();
    return cpu_backend::owned_copy<T>(ctx, std::move(out));
  }

  template <std::int64_t N, class Body, class Carry, class... Params, class X, class... S>
  static void run(Ex& ex, ops::repeat<N, Body, Carry, Params...>*, value* fr, X*, S*...) {
    value h = fr[X::index];
    for (std::int64_t i = 0; i < N; ++i)
      h = run_layer<Body, Carry, Params...>(ex, h, i, fr, type_list<S...>{});
    fr[0].owner = h.owner;
    fr[0].data = h.data;
    fr[0].dims = h.dims;
  }

  template <std::int64_t N, class Body, class Carry, class Seed, class... G, class... Params,
            class GX, class X, class... S>
  static void run(Ex& ex, ops::repeat_vjp<N, Body, Carry, Seed, type_list<G...>, Params...>*,
                  value* fr, GX*, X*, S*...) {
    using T = typename X::value_type;
    using Q = body_plan<G...>;
    static_assert(sizeof...(G) == 1 + sizeof...(Params), "repeat_grad: one gradient per input");
    // the layers' inputs, recomputed
    std::vector<value> hs(static_cast<std::size_t>(N));
    hs[0] = fr[X::index];
    for (std::int64_t i = 0; i + 1 < N; ++i)
      hs[static_cast<std::size_t>(i + 1)] = run_layer<Body, Carry, Params...>(
          ex, hs[static_cast<std::size_t>(i)], i, fr, type_list<S...>{});
    T* out = ex.cpu_context().template allocate<T>(fr[0]);
    constexpr std::int64_t sizes[] = {numel(Params::shape_type::dims)..., 0};
    constexpr std::size_t grad_slot[] = {Q::template index_c<G>::value...};
    value g = fr[GX::index];
    for (std::int64_t i = N; i-- > 0;) {
      const value& h = hs[static_cast<std::size_t>(i)];
      std::vector<value> v(Q::slots);
      bind_body<Q, Carry>(v, h.data, h.dims);
      bind_body<Q, Seed>(v, g.data, g.dims);
      (bind_layer<Q, Params>(v, fr[S::index], i), ...);
      ex.template run_body<Q>(v, i);
      std::int64_t at = 0;
      for (std::size_t j = 0; j < sizeof...(Params); ++j) {
        cpu_backend::write_slice<T>(out, at + i * sizes[j], v[grad_slot[j + 1]].data, sizes[j]);
        at += N * sizes[j];
      }
      value next = std::move(v[grad_slot[0]]);
      check_carry(next, h, i);
      auto ctx = ex.cpu_context();
      g = cpu_backend::owned_copy<T>(ctx, std::move(next));
      hs[static_cast<std::size_t>(i)] = value{}; // this layer's input is no longer needed
    }
    std::int64_t at = 0;
    for (std::int64_t n : sizes)
      at += N * n;
    check_carry(g, fr[X::index], 0);
    cpu_backend::write_slice<T>(out, at, g.data, g.dims.numel());
  }
};

} // namespace typeflow
