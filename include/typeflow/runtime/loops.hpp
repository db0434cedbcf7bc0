// The interpreter of `repeat` and `scan` loops (ops/repeat.hpp), on the executor's public
// interface. A scan runs the same way over a sequence's steps (the carry, the step's slice of xs
// and the shared variables bound to the body's placeholders), writing each carry into its value;
// its gradient (scan_vjp) reads the carries from that value, runs the body's gradient plan from
// the last step down and sums the shared variables' gradients over the steps: a gradient that is
// a^T b of a step's values (an LSTM's weights) as one product of the steps' stacked a and b
// after the loop (tn_product below).
//
// A repeat runs its body's own plan once per layer, on cpu<0>: the carried value and the
// layer's slice of each stacked variable are bound to the body's placeholders (no copy), the
// body's steps run as any plan's (executor::run_body), and its value becomes the next layer's
// input. The body's plan is one type whatever the layer count. Its steps count in the run's
// statistics; a traced run records the loop as one step. Each layer runs with its own run salt,
// so random ops (dropout) draw per layer, and the gradient's recomputation draws as the forward
// did. The gradient (repeat_vjp) recomputes the layers' inputs forward, then runs the body's
// gradient plan from the last layer down; under checkpoint_every or memory_budget it keeps every
// k-th input of that sweep and recomputes the others segment by segment as it goes down.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/common/value.hpp"
#include "../backend/cpu/gemm.hpp"
#include "../backend/cpu/loops.hpp"
#include "../compile/plan.hpp"
#include "../core/error.hpp"
#include "../device/device.hpp"
#include "../ops/matmul.hpp"
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
  // ---- activations kept for a gradient (ops::keep_activations: repeat_stored, scan) ----------

  /// The activations a loop keeps for its gradient: the gradient's body plan Q's steps that
  /// compute nodes of the forward body's graph (they read only the layer's or step's carry,
  /// input and variables) with a kernel of their own. The forward's body plan fetches them, and
  /// the gradient binds them and skips those steps instead of recomputing them.
  template <class Q, class Fwd, class Seq = std::make_index_sequence<Q::size>>
  struct kept_of;
  template <class Q, class Fwd, std::size_t... I>
  struct kept_of<Q, Fwd, std::index_sequence<I...>> {
    using plan = Q;
    static constexpr std::array<bool, Q::size> skip = [] {
      constexpr bool forward[] = {Fwd::template contains_c<typename Q::template node<I>>::value...};
      std::array<bool, Q::size> r{};
      for (std::size_t i = 0; i < Q::size; ++i) {
        const graph::step_kind k = Q::layout.step[i];
        r[i] = forward[i] && (k == graph::step_kind::kernel || k == graph::step_kind::epilogue ||
                              k == graph::step_kind::prologue || k == graph::step_kind::chained);
      }
      return r;
    }();
    static constexpr std::size_t count = [] {
      std::size_t n = 0;
      for (bool b : skip)
        n += b ? 1 : 0;
      return n;
    }();
    /// The kept nodes' positions in Q.
    static constexpr std::array<std::size_t, count> at = [] {
      std::array<std::size_t, count> r{};
      std::size_t n = 0;
      for (std::size_t i = 0; i < Q::size; ++i)
        if (skip[i])
          r[n++] = i;
      return r;
    }();
    template <std::size_t... K>
    static auto list(std::index_sequence<K...>) -> type_list<typename Q::template node<at[K]>...>;
    using nodes = decltype(list(std::make_index_sequence<count>{}));
  };
  /// Nothing kept.
  struct no_kept {
    using plan = void;
    static constexpr std::size_t count = 0;
  };
  /// Identifies the gradient body plan Q that kept values are for (its address).
  template <class Q>
  struct kept_tag {
    static constexpr char value = 0;
  };
  /// A loop's kept activations, held by its value (rt_value::aux) until its gradient takes them:
  /// layer or step t's k-th kept node at values[t * per_step + k].
  struct loop_kept : backend::aux_header {
    std::int64_t steps = 0;
    std::size_t per_step = 0;
    bool taken = false; ///< moved out by a gradient (a second gradient of the loop recomputes)
    std::vector<value> values;
  };

  /// The forward's side: each layer's or step's kept values of body plan P move into a
  /// loop_kept, while their bytes (the first step's, times the steps) stay within the budget.
  template <class P, class Kept>
  struct keeper {
    std::shared_ptr<loop_kept> kept;
    std::uint64_t budget = 0;
    keeper(std::int64_t steps, std::uint64_t b) : budget(b) {
      if constexpr (Kept::count > 0) {
        kept = std::make_shared<loop_kept>();
        kept->tag = &kept_tag<typename Kept::plan>::value;
        kept->steps = steps;
        kept->per_step = Kept::count;
        kept->values.resize(static_cast<std::size_t>(steps) * Kept::count);
      }
    }
    void take(std::vector<value>& v, std::int64_t t) {
      if constexpr (Kept::count > 0) {
        if (!kept)
          return;
        move_row(v, kept->values.data() + t * static_cast<std::int64_t>(Kept::count),
                 std::make_index_sequence<Kept::count>{});
        if (t == 0 && row_bytes(std::make_index_sequence<Kept::count>{}) *
                              static_cast<std::uint64_t>(kept->steps) >
                          budget)
          kept.reset(); // over the budget: the gradient recomputes
      }
    }
    /// Hands the kept values to the loop's value (for its gradient).
    void attach(value& out) {
      if (kept)
        out.aux = std::move(kept);
    }

  private:
    template <std::size_t... K>
    static void move_row(std::vector<value>& v, value* row, std::index_sequence<K...>) {
      using Q = typename Kept::plan;
      ((row[K] = std::move(v[P::template index_c<typename Q::template node<Kept::at[K]>>::value])),
       ...);
    }
    template <std::size_t... K>
    std::uint64_t row_bytes(std::index_sequence<K...>) const {
      return (
          std::uint64_t{0} + ... +
          (static_cast<std::uint64_t>(kept->values[K].dims.numel()) *
           backend::value_bytes<typename Kept::plan::template node<Kept::at[K]>::value_type>()));
    }
  };
  /// The gradient's side: the values kept for plan Q on the loop's value `y`, if the forward kept
  /// them (for Q, `steps` of them, not taken yet); taken.
  template <class Q, class Kept>
  static std::shared_ptr<loop_kept> take_kept(const value& y, std::int64_t steps) {
    if constexpr (Kept::count > 0) {
      if (!y.aux || y.aux->tag != &kept_tag<Q>::value)
        return nullptr;
      auto k = std::static_pointer_cast<loop_kept>(y.aux);
      if (!k->taken && k->steps == steps) {
        k->taken = true;
        return k;
      }
    }
    return nullptr;
  }
  /// Binds step t's kept values into the gradient's values v (Kept::skip then says which steps
  /// not to run).
  template <class Kept>
  static void bind_kept(std::vector<value>& v, loop_kept& kept, std::int64_t t) {
    if constexpr (Kept::count > 0) {
      value* row = kept.values.data() + t * static_cast<std::int64_t>(Kept::count);
      for (std::size_t k = 0; k < Kept::count; ++k)
        v[Kept::at[k]] = std::move(row[k]);
    }
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

  template <std::int64_t N, class Hold, class Body, class Carry, class... Params, class X,
            class... S>
  static void run(Ex& ex, ops::repeat<N, Hold, Body, Carry, Params...>*, value* fr, X*, S*...) {
    value h = fr[X::index];
    for (std::int64_t i = 0; i < N; ++i)
      h = run_layer<Body, Carry, Params...>(ex, h, i, fr, type_list<S...>{});
    fr[0].owner = h.owner;
    fr[0].data = h.data;
    fr[0].dims = h.dims;
  }

  /// Layer i of repeat's backward loop (both policies' gradients): the body's gradient plan Q on
  /// the layer's input h and the upstream gradient g, each stacked variable's gradient written
  /// into its slice of the packed result `out`; then `then(gradient of h)`, while the plan's
  /// values (which it may view) are alive.
  template <std::int64_t N, class Q, class Carry, class Seed, class T, class... G, class... Params,
            class... S, class Bind, class Then>
  static void layer_gradient(Ex& ex, [[maybe_unused]] const value* fr, const void* h,
                             const backend::rt_dims& hd, const void* g, const backend::rt_dims& gd,
                             std::int64_t i, T* out, type_list<G...>, type_list<Params...>,
                             type_list<S...>, Bind bind, Then then) {
    constexpr std::int64_t sizes[] = {numel(Params::shape_type::dims)..., 0};
    constexpr std::size_t grad_slot[] = {Q::template index_c<G>::value...};
    std::vector<value> v(Q::slots);
    bind_body<Q, Carry>(v, h, hd);
    bind_body<Q, Seed>(v, g, gd);
    (bind_layer<Q, Params>(v, fr[S::index], i), ...);
    const bool* skip = bind(v); // kept activations bound, and the steps not to run
    ex.template run_body<Q>(v, i, skip);
    std::int64_t at = 0;
    for (std::size_t j = 0; j < sizeof...(Params); ++j) {
      cpu_backend::write_slice<T>(out, at + i * sizes[j], v[grad_slot[j + 1]].data, sizes[j]);
      at += N * sizes[j];
    }
    then(v[grad_slot[0]]);
  }

  /// How many layers one segment of repeat's backward loop spans (ops::hold_all and the others):
  /// its first layer's input is a checkpoint kept from the forward sweep, the others' are
  /// recomputed from it. Held at once: the checkpoints but x and one segment's inputs but its
  /// first, ceil(n / k) - 1 + k - 1 carries.
  template <class Hold>
  static std::int64_t segment_layers(std::int64_t n, std::uint64_t carry_bytes) {
    if constexpr (std::is_same_v<Hold, ops::hold_all>) {
      return n;
    } else if constexpr (requires { Hold::layers; }) {
      return std::min(Hold::layers, n);
    } else {
      const std::uint64_t fit = carry_bytes == 0 ? ~std::uint64_t{0} : Hold::bytes / carry_bytes;
      std::int64_t fewest = n;
      std::uint64_t fewest_held = ~std::uint64_t{0};
      for (std::int64_t k = n; k >= 1; --k) { // the longest segments recompute the least
        const auto held = static_cast<std::uint64_t>((n + k - 1) / k - 1 + k - 1);
        if (held <= fit)
          return k;
        if (held < fewest_held) {
          fewest_held = held;
          fewest = k;
        }
      }
      return fewest;
    }
  }

  template <std::int64_t N, class Hold, class Body, class Carry, class Seed, class... G,
            class... Params, class GX, class X, class... S>
  static void run(Ex& ex, ops::repeat_vjp<N, Hold, Body, Carry, Seed, type_list<G...>, Params...>*,
                  value* fr, GX*, X*, S*...) {
    using T = typename X::value_type;
    using Q = body_plan<G...>;
    static_assert(sizeof...(G) == 1 + sizeof...(Params), "repeat_grad: one gradient per input");
    const std::int64_t k =
        segment_layers<Hold>(N, static_cast<std::uint64_t>(fr[X::index].dims.numel()) * sizeof(T));
    const std::int64_t last = (N - 1) / k * k; // the first layer of the last segment
    // the layers' inputs, recomputed: each segment's first (a checkpoint) and the last
    // segment's all; an input not held has no data
    std::vector<value> hs(static_cast<std::size_t>(N));
    hs[0] = fr[X::index];
    value h = hs[0];
    for (std::int64_t i = 0; i + 1 < N; ++i) {
      h = run_layer<Body, Carry, Params...>(ex, h, i, fr, type_list<S...>{});
      if ((i + 1) % k == 0 || i + 1 >= last)
        hs[static_cast<std::size_t>(i + 1)] = h;
    }
    h = value{};
    T* out = ex.cpu_context().template allocate<T>(fr[0]);
    constexpr std::int64_t sizes[] = {numel(Params::shape_type::dims)..., 0};
    value g = fr[GX::index];
    for (std::int64_t first = last; first >= 0; first -= k) {
      const std::int64_t end = std::min(first + k, N);
      for (std::int64_t i = first; i + 1 < end; ++i) // this segment's inputs, again
        if (!hs[static_cast<std::size_t>(i + 1)].data)
          hs[static_cast<std::size_t>(i + 1)] = run_layer<Body, Carry, Params...>(
              ex, hs[static_cast<std::size_t>(i)], i, fr, type_list<S...>{});
      for (std::int64_t i = end; i-- > first;) {
        const value& hi = hs[static_cast<std::size_t>(i)];
        layer_gradient<N, Q, Carry, Seed>(
            ex, fr, hi.data, hi.dims, g.data, g.dims, i, out, type_list<G...>{},
            type_list<Params...>{}, type_list<S...>{},
            [](std::vector<value>&) -> const bool* {
              return nullptr; // nothing kept: all recomputed
            },
            [&](value& next) {
              check_carry(next, hi, i);
              auto ctx = ex.cpu_context();
              g = cpu_backend::owned_copy<T>(ctx, std::move(next));
            });
        hs[static_cast<std::size_t>(i)] = value{}; // this layer's input is no longer needed
      }
    }
    std::int64_t at = 0;
    for (std::int64_t n : sizes)
      at += N * n;
    check_carry(g, fr[X::index], 0);
    cpu_backend::write_slice<T>(out, at, g.data, g.dims.numel());
  }

  /// repeat under ty::store: the layers as repeat's, each carry written into its row of the
  /// value (row 0 is x).
  /// Under ops::keep_activations, each layer's activations are kept for the gradient too (in a
  /// run that has the gradient; see keeper).
  template <std::int64_t N, class Body, class Carry, class Keep, class... Params, class X,
            class... S>
  static void run(Ex& ex, ops::repeat_stored<N, Body, Carry, Keep, Params...>*, value* fr, X* x,
                  S*... s) {
    using K = typename stored_keep<Body, Keep>::type;
    if constexpr (K::count > 0) {
      if (ex.loop_gradients()) {
        stored_layers<N, Body, Carry, typename joined<type_list<Body>, typename K::nodes>::type, K>(
            ex, fr, stored_keep<Body, Keep>::budget, type_list<Params...>{}, x, s...);
        return;
      }
    }
    stored_layers<N, Body, Carry, body_plan<Body>, no_kept>(ex, fr, 0, type_list<Params...>{}, x,
                                                            s...);
  }
  /// What a stored repeat keeps: kept_of its gradient's body plan, or nothing.
  template <class Body, class Keep>
  struct stored_keep {
    using type = no_kept;
    static constexpr std::uint64_t budget = 0;
  };
  template <class Body, class Seed, class... G, std::uint64_t Budget>
  struct stored_keep<Body, ops::keep_activations<Seed, type_list<G...>, Budget>> {
    using type = kept_of<body_plan<G...>, body_plan<Body>>;
    static constexpr std::uint64_t budget = Budget;
  };
  template <std::int64_t N, class Body, class Carry, class P, class Kept, class... Params, class X,
            class... S>
  static void stored_layers(Ex& ex, value* fr, std::uint64_t budget, type_list<Params...>, X*,
                            S*...) {
    using T = typename Body::value_type;
    const value& x = fr[X::index];
    const std::int64_t n = x.dims.numel();
    T* out = ex.cpu_context().template allocate<T>(fr[0]);
    cpu_backend::write_slice<T>(out, 0, x.data, n);
    keeper<P, Kept> keep(N, budget);
    for (std::int64_t i = 0; i < N; ++i) {
      std::vector<value> v(P::slots);
      bind_body<P, Carry>(v, out + i * n, x.dims);
      (bind_layer<P, Params>(v, fr[S::index], i), ...);
      ex.template run_body<P>(v, i);
      const value& y = v[P::template index_c<Body>::value];
      check_carry(y, x, i);
      cpu_backend::write_slice<T>(out, (i + 1) * n, y.data, n);
      keep.take(v, i);
    }
    keep.attach(fr[0]);
  }

  /// Its gradient: repeat_vjp's loop, each layer's input read from the stored carries.
  template <std::int64_t N, bool LastRow, class Body, class Carry, class Seed, class... G,
            class... Params, class GY, class Y, class X, class... S>
  static void
  run(Ex& ex, ops::repeat_stored_vjp<N, LastRow, Body, Carry, Seed, type_list<G...>, Params...>*,
      value* fr, GY*, Y*, X*, S*...) {
    using T = typename X::value_type;
    using Q = body_plan<G...>;
    static_assert(sizeof...(G) == 1 + sizeof...(Params), "repeat_grad: one gradient per input");
    const value& x = fr[X::index];
    const std::int64_t n = x.dims.numel();
    T* out = ex.cpu_context().template allocate<T>(fr[0]);
    constexpr std::int64_t sizes[] = {numel(Params::shape_type::dims)..., 0};
    const T* gy = static_cast<const T*>(fr[GY::index].data); // null: a zero gradient
    const T* ys = static_cast<const T*>(fr[Y::index].data);
    // row r of the stacked carries' gradient (LastRow: only row N has one, the operand's only)
    auto row = [&](std::int64_t r) -> const T* {
      if constexpr (LastRow)
        return r == N ? gy : nullptr;
      else
        return gy ? gy + r * n : nullptr;
    };
    std::vector<T> seed(static_cast<std::size_t>(n)), carry(static_cast<std::size_t>(n), T(0));
    // each layer's activations, where the forward kept them (ops::keep_activations)
    using K = kept_of<Q, body_plan<Body>>;
    const std::shared_ptr<loop_kept> kept = take_kept<Q, K>(fr[Y::index], N);
    for (std::int64_t i = N; i-- > 0;) {
      // the gradient reaching h_{i+1}: the value's own row i + 1 and what layer i + 1 sent back
      const T* gr = row(i + 1);
      for (std::int64_t k = 0; k < n; ++k)
        seed[static_cast<std::size_t>(k)] =
            (gr ? gr[k] : T(0)) + carry[static_cast<std::size_t>(k)];
      layer_gradient<N, Q, Carry, Seed>(
          ex, fr, ys + i * n, x.dims, seed.data(), x.dims, i, out, type_list<G...>{},
          type_list<Params...>{}, type_list<S...>{},
          [&](std::vector<value>& v) {
            if (kept)
              bind_kept<K>(v, *kept, i);
            return kept ? K::skip.data() : nullptr;
          },
          [&](const value& next) {
            if (next.data) {
              check_carry(next, x, i);
              std::memcpy(carry.data(), next.data, sizeof(T) * static_cast<std::size_t>(n));
            } else {
              std::fill(carry.begin(), carry.end(), T(0));
            }
          });
    }
    std::int64_t at = 0;
    for (std::int64_t k : sizes)
      at += N * k;
    const T* g0 = row(0);
    for (std::int64_t k = 0; k < n; ++k)
      out[at + k] = (g0 ? g0[k] : T(0)) + carry[static_cast<std::size_t>(k)];
  }

  /// The extents of one step of a sequence: its dims without the leading (time) axis.
  static backend::rt_dims step_dims(const backend::rt_dims& d) {
    backend::rt_dims s;
    s.rank = d.rank - 1;
    for (std::size_t i = 1; i < d.rank; ++i)
      s.d[i - 1] = d.d[i];
    return s;
  }
  static void check_step(const value& got, const backend::rt_dims& want, std::int64_t t,
                         const char* what) {
    if (got.data && !(got.dims == want))
      throw error("scan: step " + std::to_string(t) + " gave " + got.dims.str() + " for " + what +
                  " of " + want.str() + " (a body must keep its carry's shape)");
  }

  /// The forward loop: body plan P on each step; with Kept (a kept_of), each step's kept values
  /// move to `kept` while their bytes stay within `budget` (else none is kept).
  template <class Body, class Carry, class Input, class P, class Kept, class T, class... Params,
            class H, class X, class... S>
  static void scan_loop(Ex& ex, value* fr, std::uint64_t budget, type_list<Params...>, H*, X*,
                        S*...) {
    const value& h0 = fr[H::index];
    const value& xs = fr[X::index];
    const backend::rt_dims xd = step_dims(xs.dims);
    const std::int64_t steps = xs.dims.d[0], nx = xd.numel(), nh = h0.dims.numel();
    T* out = ex.cpu_context().template allocate<T>(fr[0]);
    const T* x = static_cast<const T*>(xs.data);
    keeper<P, Kept> keep(steps, budget);
    for (std::int64_t t = 0; t < steps; ++t) {
      std::vector<value> v(P::slots);
      bind_body<P, Carry>(v, t == 0 ? h0.data : out + (t - 1) * nh, h0.dims);
      bind_body<P, Input>(v, x + t * nx, xd);
      (bind_body<P, Params>(v, fr[S::index].data, fr[S::index].dims), ...);
      ex.template run_body<P>(v, t);
      const value& y = v[P::template index_c<Body>::value];
      check_step(y, h0.dims, t, "a carry");
      cpu_backend::write_slice<T>(out, t * nh, y.data, nh);
      keep.take(v, t);
    }
    keep.attach(fr[0]);
  }
  template <class Body, class Carry, class Input, class... Params, class H, class X, class... S>
  static void run(Ex& ex, ops::scan<Body, Carry, Input, ops::keep_none, Params...>*, value* fr,
                  H* h, X* x, S*... s) {
    scan_loop<Body, Carry, Input, body_plan<Body>, no_kept, typename Body::value_type>(
        ex, fr, 0, type_list<Params...>{}, h, x, s...);
  }
  template <class Body, class Carry, class Input, class Seed, class G0, class G1, class... GP,
            std::uint64_t Budget, class... Params, class H, class X, class... S>
  static void
  run(Ex& ex,
      ops::scan<Body, Carry, Input, ops::keep_activations<Seed, type_list<G0, G1, GP...>, Budget>,
                Params...>*,
      value* fr, H* h, X* x, S*... s) {
    using T = typename Body::value_type;
    using Q = scan_grad_plan<T, G0, G1, GP...>;
    using K = kept_of<Q, body_plan<Body>>;
    if constexpr (K::count > 0) {
      if (ex.loop_gradients()) { // else this run has no scan gradient to keep them for
        scan_loop<Body, Carry, Input, typename joined<type_list<Body>, typename K::nodes>::type, K,
                  T>(ex, fr, Budget, type_list<Params...>{}, h, x, s...);
        return;
      }
    }
    scan_loop<Body, Carry, Input, body_plan<Body>, no_kept, T>(ex, fr, 0, type_list<Params...>{}, h,
                                                               x, s...);
  }

  /// Whether a shared variable's gradient in a scan's body, node G, is a^T b (matmul<true,
  /// false>) of two rank-2 values in T = float or double, a [m, k] and b [m, n] with k and n
  /// static (m, a step's rows, may be a run-time batch). Its sum over the steps is then one
  /// product of the steps' a and b stacked by rows, after the loop, instead of one product of
  /// inner extent m (an LSTM's batch) and an addition of the whole [k, n] gradient per step.
  template <class T, class D>
  struct tn_product : std::false_type {
    using fetches = type_list<>;
  };
  template <class T, class A, class B>
  requires(std::is_same_v<T, float> || std::is_same_v<T, double>) &&
      std::is_same_v<typename A::value_type, T>&& std::is_same_v<typename B::value_type, T> &&
      (A::shape_type::rank == 2) && (B::shape_type::rank == 2) && (A::shape_type::dims[1] != dyn) &&
      (B::shape_type::dims[1] != dyn) struct tn_product<T, expr<ops::matmul<true, false>, A, B>>
      : std::true_type {
    using fetches = type_list<A, B>;
    using a = A;
    using b = B;
  };
  template <class T, class G>
  using hoisted = tn_product<T, def_t<G>>;
  /// What the body's gradient plan fetches for the gradient G: G, or a and b where hoisted.
  template <class T, class G>
  using grad_fetches =
      std::conditional_t<hoisted<T, G>::value, typename hoisted<T, G>::fetches, type_list<G>>;
  template <class... L>
  struct joined;
  template <class... A>
  struct joined<type_list<A...>> {
    using type = body_plan<A...>;
  };
  template <class... A, class... B, class... L>
  struct joined<type_list<A...>, type_list<B...>, L...> : joined<type_list<A..., B...>, L...> {};
  /// The scan gradient's body plan: the carry's and the input's gradients, then each shared
  /// variable's (or its a and b, where hoisted).
  template <class T, class G0, class G1, class... GP>
  using scan_grad_plan = typename joined<type_list<G0, G1>, grad_fetches<T, GP>...>::type;

  /// A hoisted gradient's a and b over the steps, stacked by rows (step t's at rows t m); a step
  /// whose a or b has no buffer (a zero gradient) keeps its zeros.
  template <class T>
  struct hoist_stack {
    std::vector<T> a, b;
    std::int64_t m = -1, k = 0, n = 0; ///< a [m, k] and b [m, n] per step; m < 0: none seen
  };
  template <class T, class Q, class G>
  static void stack_step(hoist_stack<T>& h, const std::vector<value>& v, std::int64_t t,
                         std::int64_t steps) {
    if constexpr (hoisted<T, G>::value) {
      using A = typename hoisted<T, G>::a;
      using B = typename hoisted<T, G>::b;
      const value& va = v[Q::template index_c<A>::value];
      const value& vb = v[Q::template index_c<B>::value];
      if (!va.data || !vb.data)
        return; // a^T b is zero at this step
      const std::int64_t m = va.dims.d[0];
      if (h.m < 0) {
        h.m = m;
        h.k = A::shape_type::dims[1];
        h.n = B::shape_type::dims[1];
        h.a.assign(static_cast<std::size_t>(steps * h.m * h.k), T(0));
        h.b.assign(static_cast<std::size_t>(steps * h.m * h.n), T(0));
      }
      if (m != h.m || vb.dims.d[0] != h.m)
        throw error("scan_grad: step " + std::to_string(t) + " has " + std::to_string(m) + " and " +
                    std::to_string(vb.dims.d[0]) + " rows where the others have " +
                    std::to_string(h.m));
      std::memcpy(h.a.data() + t * h.m * h.k, va.data,
                  sizeof(T) * static_cast<std::size_t>(h.m * h.k));
      std::memcpy(h.b.data() + t * h.m * h.n, vb.data,
                  sizeof(T) * static_cast<std::size_t>(h.m * h.n));
    }
  }

  template <class Body, class Carry, class Input, class Seed, class... G, bool InitFirst,
            class... Params, class GY, class Y, class H, class X, class... S>
  static void run(Ex& ex,
                  ops::scan_vjp<Body, Carry, Input, Seed, type_list<G...>, InitFirst, Params...>*,
                  value* fr, GY*, Y*, H*, X*, S*...) {
    static_assert(sizeof...(G) == 2 + sizeof...(Params), "scan_grad: one gradient per input");
    run_scan_grad<Body, Carry, Input, Seed, InitFirst, Params...>(ex, fr, type_list<G...>{},
                                                                  type_list<GY, Y, H, X, S...>{});
  }

  template <class Body, class Carry, class Input, class Seed, bool InitFirst, class... Params,
            class G0, class G1, class... GP, class GY, class Y, class H, class X, class... S>
  static void run_scan_grad(Ex& ex, value* fr, type_list<G0, G1, GP...>,
                            type_list<GY, Y, H, X, S...>) {
    using T = typename H::value_type;
    using Q = scan_grad_plan<T, G0, G1, GP...>;
    const value& h0 = fr[H::index];
    const value& xs = fr[X::index];
    const backend::rt_dims xd = step_dims(xs.dims);
    const std::int64_t steps = xs.dims.d[0], nx = xd.numel(), nh = h0.dims.numel();
    T* out = ex.cpu_context().template allocate<T>(fr[0]);
    constexpr std::int64_t sizes[] = {numel(Params::shape_type::dims)..., 0};
    constexpr std::size_t slot[] = {Q::template index_c<G0>::value, Q::template index_c<G1>::value};
    constexpr bool hoist[] = {hoisted<T, GP>::value..., false};
    // where a gradient is not hoisted, its slot in the body's values
    constexpr std::size_t param_slot[] = {param_slot_of<Q, T, GP>()..., 0};
    hoist_stack<T> stacks[sizeof...(GP) + 1];
    std::int64_t shared = 0;
    for (std::int64_t n : sizes)
      shared += n;
    std::fill_n(out, shared, T(0));
    const std::int64_t at_x = InitFirst ? shared + nh : shared;
    const std::int64_t at_h = InitFirst ? shared : shared + steps * nx;
    const T* gy = static_cast<const T*>(fr[GY::index].data); // null: a zero gradient
    const T* ys = static_cast<const T*>(fr[Y::index].data);
    const T* x = static_cast<const T*>(xs.data);
    std::vector<T> seed(static_cast<std::size_t>(nh)), carry(static_cast<std::size_t>(nh), T(0));
    // the activations the forward kept for Q (ops::keep_activations), if it did: bound, not
    // recomputed
    using K = kept_of<Q, body_plan<Body>>;
    const std::shared_ptr<loop_kept> kept = take_kept<Q, K>(fr[Y::index], steps);
    for (std::int64_t t = steps; t-- > 0;) {
      // the gradient reaching h_{t+1}: the value's own at step t, and what step t + 1 sent back
      for (std::int64_t i = 0; i < nh; ++i)
        seed[static_cast<std::size_t>(i)] =
            (gy ? gy[t * nh + i] : T(0)) + carry[static_cast<std::size_t>(i)];
      std::vector<value> v(Q::slots);
      bind_body<Q, Carry>(v, t == 0 ? h0.data : ys + (t - 1) * nh, h0.dims);
      bind_body<Q, Input>(v, x + t * nx, xd);
      bind_body<Q, Seed>(v, seed.data(), h0.dims);
      (bind_body<Q, Params>(v, fr[S::index].data, fr[S::index].dims), ...);
      if (kept)
        bind_kept<K>(v, *kept, t);
      ex.template run_body<Q>(v, t, kept ? K::skip.data() : nullptr);
      std::int64_t at = 0;
      for (std::size_t j = 0; j < sizeof...(Params); ++j) {
        if (!hoist[j])
          cpu_backend::add_slice<T>(out, at, v[param_slot[j]].data, sizes[j]);
        at += sizes[j];
      }
      {
        std::size_t j = 0;
        (stack_step<T, Q, GP>(stacks[j++], v, t, steps), ...);
      }
      check_step(v[slot[1]], xd, t, "the gradient of a step's input");
      cpu_backend::write_slice<T>(out, at_x + t * nx, v[slot[1]].data, nx);
      check_step(v[slot[0]], h0.dims, t, "the gradient of a carry");
      if (v[slot[0]].data)
        std::memcpy(carry.data(), v[slot[0]].data, sizeof(T) * static_cast<std::size_t>(nh));
      else
        std::fill(carry.begin(), carry.end(), T(0));
    }
    cpu_backend::write_slice<T>(out, at_h, carry.data(), nh);
    // the hoisted gradients: sum over the steps of a_t^T b_t = (stacked a)^T (stacked b)
    std::int64_t at = 0;
    for (std::size_t j = 0; j < sizeof...(Params); ++j) {
      const hoist_stack<T>& h = stacks[j];
      if (hoist[j] && h.m > 0)
        cpu_backend::gemm(ex.cpu_context().pool, true, false, h.k, h.n, steps * h.m, h.a.data(),
                          h.b.data(), out + at);
      at += sizes[j];
    }
  }
  template <class Q, class T, class G>
  static constexpr std::size_t param_slot_of() {
    if constexpr (hoisted<T, G>::value)
      return 0;
    else
      return Q::template index_c<G>::value;
  }
};

} // namespace typeflow
