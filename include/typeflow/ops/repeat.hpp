// Control flow: a block of layers repeated N times with its variables stacked along a leading
// layer axis (jax.lax.scan, flax nn.scan, dlib's repeat), and a scan over a sequence's time axis
// with its variables shared by every step (tf.scan, dynamic_rnn). nn/repeat.hpp and nn/scan.hpp
// build these nodes from a body function; the executor runs them (runtime/loops.hpp) as loops
// over the body's own plan, which is instantiated once whatever the layer or step count. They
// have no kernel of their own (so none on a GPU either: placement moves them to cpu<0>).
#pragma once
#include <cstdint>
#include <string>

#include "../graph/node.hpp"

namespace typeflow::ops {

/// Which layers' inputs repeat's gradient holds while it runs (it recomputes them from x):
/// hold_all keeps all N; hold_every<K> keeps every K-th (a checkpoint) and recomputes the K - 1
/// between two checkpoints again when the backward loop reaches them (about N / K + K held
/// instead of N, for up to N more layer evaluations); hold_budget<Bytes> chooses K at run time,
/// from the carry's size, as the fewest recomputations within Bytes of held carries (the
/// fewest carries where nothing fits).
struct hold_all {
  static std::string str() { return {}; }
};
template <std::int64_t K>
struct hold_every {
  static_assert(K >= 1, "repeat: checkpoint_every<K> needs K >= 1");
  static constexpr std::int64_t layers = K;
  static std::string str() { return ", every=" + std::to_string(K); }
};
template <std::uint64_t Bytes>
struct hold_budget {
  static constexpr std::uint64_t bytes = Bytes;
  static std::string str() { return ", budget=" + std::to_string(Bytes); }
};

/// repeat: h_0 = x, h_{i+1} = Body(Carry = h_i, Params = layer i of each stacked variable), the
/// value h_N. Body is an expression of the placeholders Carry (x's dtype and shape) and
/// Params... (one layer of each stacked variable); the operands are x, then the stacked
/// variables [N, ...] in the order of Params. Hold says what its gradient keeps (above).
template <std::int64_t N, class Hold, class Body, class Carry, class... Params>
struct repeat : no_dtype_rule {
  static constexpr node_kind kind = node_kind::nn;
  static constexpr std::string_view name = "repeat";
  static constexpr bool control_flow = true;
  template <class X, class... S>
  using value_type = typename X::value_type;
  template <std::size_t RX, std::size_t... RS>
  static constexpr rule_result<RX> rule(const dims_t<RX>& x, const dims_t<RS>&...) {
    return {{}, x};
  }
  static std::string attrs() { return "n=" + std::to_string(N) + Hold::str(); }
};

/// repeat_vjp: repeat's vector-Jacobian product. Operands: g (the gradient of repeat's value),
/// x, the stacked variables. Its value is one vector: the stacked variables' gradients in order,
/// then x's; the gradient rule slices it apart. It recomputes the forward (h_0 ... h_{N-1},
/// rematerialized rather than kept from the forward step), then runs Grads (a type_list of the
/// body's gradients with respect to Carry and Params..., with upstream gradient Seed, a
/// placeholder of the body's shape) from layer N-1 down to layer 0, holding what Hold says.
template <std::int64_t N, class Hold, class Body, class Carry, class Seed, class Grads,
          class... Params>
struct repeat_vjp : no_dtype_rule {
  static constexpr node_kind kind = node_kind::nn;
  static constexpr std::string_view name = "repeat_grad";
  static constexpr bool control_flow = true;
  template <class G, class X, class... S>
  using value_type = typename X::value_type;
  template <std::size_t RG, std::size_t RX, std::size_t... RS>
  static constexpr rule_result<1> rule(const dims_t<RG>&, const dims_t<RX>& x,
                                       const dims_t<RS>&... s) {
    rule_result<1> r{};
    r.dims[0] = is_static(x) ? (numel(x) + ... + numel(s)) : dyn;
    return r;
  }
  static std::string attrs() { return "n=" + std::to_string(N) + Hold::str(); }
};

/// What a loop's forward (repeat_stored, scan) keeps for its gradient besides its carries
/// (nn/repeat.hpp's and nn/scan.hpp's policies): nothing (keep_none: the gradient recomputes each
/// layer's or step's activations from its carry and input), or, under keep_activations, the
/// activations that the gradient's body plan would compute (the steps of that plan, Grads as
/// the loop's vjp's with upstream Seed, that read only the layer's or step's carry, input and
/// variables), when the run also runs the loop's gradient and they take at most Budget bytes (no
/// limit at ~0).
struct keep_none {};
template <class Seed, class Grads, std::uint64_t Budget>
struct keep_activations {};

/// repeat_stored: repeat under ty::store, with repeat's operands; its value keeps every layer's
/// input: h_0 ... h_N stacked, [N + 1, x...] (nn/repeat.hpp gives the user the last row). Keep:
/// keep_none or keep_activations (each layer's).
template <std::int64_t N, class Body, class Carry, class Keep, class... Params>
struct repeat_stored : no_dtype_rule {
  static constexpr node_kind kind = node_kind::nn;
  static constexpr std::string_view name = "repeat_stored";
  static constexpr bool control_flow = true;
  static constexpr bool keeps_float32 = true; // the gradient's layers read the exact carries
  template <class X, class... S>
  using value_type = typename X::value_type;
  template <std::size_t RX, std::size_t... RS>
  static constexpr rule_result<RX + 1> rule(const dims_t<RX>& x, const dims_t<RS>&...) {
    rule_result<RX + 1> r{};
    r.dims[0] = N + 1;
    for (std::size_t i = 0; i < RX; ++i)
      r.dims[i + 1] = x[i];
    return r;
  }
  static std::string attrs() { return "n=" + std::to_string(N); }
};

/// repeat_stored_vjp: repeat_stored's vector-Jacobian product. Operands: g (the gradient of the
/// stacked carries, [N + 1, x...]; or of their last row alone, [1, x...], when LastRow), y (the
/// stacked carries, stored by the forward: nothing is recomputed but each layer's insides), x,
/// the stacked variables. Its value is repeat_vjp's: the stacked variables' gradients in order,
/// then x's.
template <std::int64_t N, bool LastRow, class Body, class Carry, class Seed, class Grads,
          class... Params>
struct repeat_stored_vjp : no_dtype_rule {
  static constexpr node_kind kind = node_kind::nn;
  static constexpr std::string_view name = "repeat_stored_grad";
  static constexpr bool control_flow = true;
  template <class G, class Y, class X, class... S>
  using value_type = typename X::value_type;
  template <std::size_t RG, std::size_t RY, std::size_t RX, std::size_t... RS>
  static constexpr rule_result<1> rule(const dims_t<RG>&, const dims_t<RY>&, const dims_t<RX>& x,
                                       const dims_t<RS>&... s) {
    rule_result<1> r{};
    r.dims[0] = is_static(x) ? (numel(x) + ... + numel(s)) : dyn;
    return r;
  }
  static std::string attrs() { return "n=" + std::to_string(N); }
};

/// scan: h_0 = init, h_{t+1} = Body(Carry = h_t, Input = xs[t], Params = the variables) for t
/// from 0 to T - 1 (T = xs's leading extent); the value is h_1 ... h_T stacked, [T, carry...]
/// (tf.scan's). Operands: init, xs, then the variables the body reads, shared by every step (not
/// stacked). Keep: keep_none or keep_activations. nn/scan.hpp builds it; the executor runs it
/// (runtime/loops.hpp).
template <class Body, class Carry, class Input, class Keep, class... Params>
struct scan : no_dtype_rule {
  static constexpr node_kind kind = node_kind::nn;
  static constexpr std::string_view name = "scan";
  static constexpr bool control_flow = true;
  static constexpr bool keeps_float32 = true; // the gradient's steps read the exact carries
  template <class H, class X, class... S>
  using value_type = typename H::value_type;
  template <std::size_t RH, std::size_t RX, std::size_t... RS>
  static constexpr rule_result<RH + 1> rule(const dims_t<RH>& h, const dims_t<RX>& x,
                                            const dims_t<RS>&...) {
    rule_result<RH + 1> r{};
    if constexpr (RX == 0) {
      r.error = "the sequence has no time axis";
    } else {
      r.dims[0] = x[0];
      for (std::size_t i = 0; i < RH; ++i)
        r.dims[i + 1] = h[i];
    }
    return r;
  }
};

/// scan_vjp: scan's vector-Jacobian product. Operands: g (the gradient of scan's value), y
/// (scan's value: the carries h_1 ... h_T, stored by the forward, so nothing is recomputed but
/// the body's insides), init, xs, the variables. Its value is one vector: the variables'
/// gradients in order (each summed over the steps), then xs's and init's, or init's and xs's
/// when InitFirst (the gradient rule slices it apart). Grads is a type_list of the body's
/// gradients with respect to Carry, Input and Params..., with upstream gradient Seed (a
/// placeholder of the carry's shape); they run from step T - 1 down to 0.
template <class Body, class Carry, class Input, class Seed, class Grads, bool InitFirst,
          class... Params>
struct scan_vjp : no_dtype_rule {
  static constexpr node_kind kind = node_kind::nn;
  static constexpr std::string_view name = "scan_grad";
  static constexpr bool control_flow = true;
  template <class G, class Y, class H, class X, class... S>
  using value_type = typename H::value_type;
  template <std::size_t RG, std::size_t RY, std::size_t RH, std::size_t RX, std::size_t... RS>
  static constexpr rule_result<1> rule(const dims_t<RG>&, const dims_t<RY>&, const dims_t<RH>& h,
                                       const dims_t<RX>& x, const dims_t<RS>&... s) {
    rule_result<1> r{};
    r.dims[0] = is_static(h) && is_static(x)
                    ? numel(h) + numel(x) + (std::int64_t{0} + ... + numel(s))
                    : dyn;
    return r;
  }
};

} // namespace typeflow::ops

namespace typeflow {
/// Whether op Op is a loop the executor runs itself (repeat, repeat_stored, scan and their
/// gradients).
template <class Op>
concept control_flow_op = op_traits<Op>::control_flow;
} // namespace typeflow
