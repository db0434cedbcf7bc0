// What a step costs: the bytes its frame holds and the floating-point operations of its op, for
// step traces and the roofline profile (runtime/trace.hpp, io/trace.hpp). The FLOP counts are
// the conventional ones (a multiply-add is two, a comparison or a max one, an elementwise op one
// per element whatever its function); an op with no formula here counts -1 (unknown).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../graph/flat.hpp"
#include "../../ops/attention.hpp"
#include "../../ops/matmul.hpp"
#include "../../ops/nn.hpp"
#include "../../ops/recurrent.hpp"
#include "attention.hpp"
#include "value.hpp"

namespace typeflow::backend {

/// FLOPs of op Op whose result has dims d[0] and whose operands have d[1], d[2], ...
template <class Op>
struct op_cost {
  static double flops(const rt_dims* const* d) {
    switch (Op::kind) {
    case node_kind::elementwise:
      return static_cast<double>(d[0]->numel());
    case node_kind::reduction:
      return static_cast<double>(d[1]->numel());
    case node_kind::layout:
    case node_kind::leaf:
    case node_kind::group:
      return 0;
    default:
      return -1;
    }
  }
};
template <bool TA, bool TB>
struct op_cost<ops::matmul<TA, TB>> {
  static double flops(const rt_dims* const* d) {
    const auto e = matmul_extents::of(*d[1], *d[2], *d[0], TA);
    return 2.0 * static_cast<double>(e.m) * static_cast<double>(e.n) * static_cast<double>(e.k) *
           static_cast<double>(e.batch);
  }
};
namespace cost_detail {
/// 2 x (output positions) x (filter taps per output channel): a convolution and both of its
/// gradients, from the tensor shaped as the convolution's output and the filter (HWIO).
inline double conv_flops(const rt_dims& out_like, const rt_dims& filter) {
  const std::int64_t oc = filter.rank == 4 ? filter.d[3] : 0;
  if (oc <= 0)
    return 0;
  return 2.0 * static_cast<double>(out_like.numel()) * static_cast<double>(filter.numel() / oc);
}
} // namespace cost_detail
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct op_cost<ops::conv2d<P, SH, SW, DH, DW>> { // (x, w)
  static double flops(const rt_dims* const* d) { return cost_detail::conv_flops(*d[0], *d[2]); }
};
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct op_cost<ops::conv2d_backprop_input<P, SH, SW, DH, DW>> { // (dy, w, x)
  static double flops(const rt_dims* const* d) { return cost_detail::conv_flops(*d[1], *d[2]); }
};
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct op_cost<ops::conv2d_backprop_filter<P, SH, SW, DH, DW>> { // (x, dy, w)
  static double flops(const rt_dims* const* d) { return cost_detail::conv_flops(*d[2], *d[3]); }
};
template <ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW, std::int64_t SH,
          std::int64_t SW>
struct op_cost<ops::pool<K, P, KH, KW, SH, SW>> { // one max or add per window tap
  static double flops(const rt_dims* const* d) {
    return static_cast<double>(d[0]->numel()) * static_cast<double>(KH * KW);
  }
};
template <ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW, std::int64_t SH,
          std::int64_t SW>
struct op_cost<ops::pool_grad<K, P, KH, KW, SH, SW>> { // (x, dy): each dy's window again
  static double flops(const rt_dims* const* d) {
    return static_cast<double>(d[2]->numel()) * static_cast<double>(KH * KW);
  }
};
template <bool C, attention_dropout D>
struct op_cost<ops::attention<C, D>> { // (q, k, v): q k^T and p v, half of them when causal
  static double flops(const rt_dims* const* d) {
    const auto g = attention_geometry::of(*d[1], *d[2], *d[3]);
    return 2.0 * static_cast<double>(g.batch * g.t * g.s) * static_cast<double>(g.d + g.dv) /
           (C ? 2.0 : 1.0);
  }
};
template <bool C>
struct op_cost<ops::attention_stats<C>> { // the scores, for each row's log-sum-exp
  static double flops(const rt_dims* const* d) {
    const auto g = attention_geometry::of(*d[1], *d[2], *d[3]);
    return 2.0 * static_cast<double>(g.batch * g.t * g.s) * static_cast<double>(g.d) /
           (C ? 2.0 : 1.0);
  }
};
template <bool C, int W, attention_dropout D>
struct op_cost<ops::attention_grad<C, W, D>> { // the scores, dO v^T (not for v's), one product
  static double flops(const rt_dims* const* d) {
    const auto g = attention_geometry::of(*d[1], *d[2], *d[3]);
    const std::int64_t per = W == 2 ? g.d + g.dv : 2 * g.d + g.dv;
    return 2.0 * static_cast<double>(g.batch * g.t * g.s) * static_cast<double>(per) /
           (C ? 2.0 : 1.0);
  }
};

template <double FB>
struct op_cost<ops::lstm<FB>> { // (x, w, b): [x_t, h_t] w for every step
  static double flops(const rt_dims* const* d) {
    return 2.0 * static_cast<double>(d[1]->d[0] * d[1]->d[1]) *
           static_cast<double>(d[2]->d[0] * d[2]->d[1]);
  }
};
template <double FB>
struct op_cost<ops::lstm_grads<FB>> { // dz_t w_h^T per step, then x^T dz, h^T dz and dz w_x^T
  static double flops(const rt_dims* const* d) {
    return 4.0 * static_cast<double>(d[1]->d[0] * d[1]->d[1]) *
           static_cast<double>(d[2]->d[0] * d[2]->d[1]);
  }
};

namespace cost_detail {
template <class Region>
struct frame_tail {
  static constexpr std::array<std::size_t, 0> sizes{};
  static constexpr std::size_t members = 0;
};
/// A region's inputs, then the merged outputs it stores (of its root's dtype).
template <class Out, class... Ins, class Members, class Idx, std::size_t... S>
struct frame_tail<
    graph::flat_region<Out, type_list<Ins...>, Members, Idx, std::index_sequence<S...>>> {
  static constexpr std::array<std::size_t, sizeof...(Ins) + sizeof...(S) / 2> sizes = [] {
    std::array<std::size_t, sizeof...(Ins) + sizeof...(S) / 2> s{};
    std::size_t n = 0;
    for (std::size_t e : {value_bytes<Ins>()..., std::size_t{0}})
      if (n < sizeof...(Ins))
        s[n++] = e;
    for (; n < s.size(); ++n)
      s[n] = value_bytes<Out>();
    return s;
  }();
  static constexpr std::size_t members = Members::size;
};
template <graph::step_kind K, class Op, class T, std::size_t R, class... PRefs, class B, bool Relu>
struct frame_tail<graph::epilogue<graph::flat_node<K, Op, T, R, PRefs...>, B, Relu>> {
  static constexpr std::array<std::size_t, sizeof...(PRefs) + 1> sizes{
      value_bytes<typename PRefs::value_type>()..., value_bytes<typename B::value_type>()};
  static constexpr std::size_t members = 0;
};
template <class Region>
struct frame_tail<graph::prologue<Region>> : frame_tail<Region> {};
template <graph::step_kind K, class Op, class T, std::size_t R, class... PRefs, class Region,
          std::size_t In>
struct frame_tail<graph::chained<graph::flat_node<K, Op, T, R, PRefs...>, Region, In>> {
  static constexpr std::array<std::size_t, frame_tail<Region>::sizes.size() + sizeof...(PRefs)>
      sizes = [] {
        std::array<std::size_t, frame_tail<Region>::sizes.size() + sizeof...(PRefs)> s{};
        std::size_t n = 0;
        for (std::size_t e : frame_tail<Region>::sizes)
          s[n++] = e;
        for (std::size_t e : {value_bytes<typename PRefs::value_type>()..., std::size_t{0}})
          if (n < s.size())
            s[n++] = e;
        return s;
      }();
  static constexpr std::size_t members = Region::members::size;
};
/// The bytes of the distinct buffers of a frame of n values of elem[k]-byte elements (a loop's
/// output, `loop`, counted apart from its inputs even when written over one). Out of line: one
/// function for every step's trace.
[[gnu::noinline]] inline std::uint64_t
distinct_bytes(const rt_value* frame, const std::size_t* elem, std::size_t n, bool loop) {
  std::uint64_t b = 0;
  for (std::size_t k = 0; k < n; ++k) {
    if (!frame[k].data)
      continue;
    bool seen = false;
    for (std::size_t j = loop && k > 0 ? 1 : 0; j < k && !seen; ++j)
      seen = frame[j].data == frame[k].data;
    if (!seen)
      b += elem[k] * static_cast<std::uint64_t>(frame[k].dims.numel());
  }
  return b;
}

} // namespace cost_detail

/// The cost of one step from its local form (see compile::plan's local forms): its frame is its
/// own value, its operands, then what its region, epilogue or prologue reads.
template <class Op, class T, class Region, class... Refs>
struct step_cost {
  using tail = cost_detail::frame_tail<Region>;
  static constexpr std::size_t size = 1 + sizeof...(Refs) + tail::sizes.size();
  static constexpr std::array<std::size_t, size> elem = [] {
    std::array<std::size_t, size> e{value_bytes<T>(), value_bytes<typename Refs::value_type>()...};
    for (std::size_t k = 0; k < tail::sizes.size(); ++k)
      e[1 + sizeof...(Refs) + k] = tail::sizes[k];
    return e;
  }();

  /// Bytes read and written: every distinct buffer of the frame (values computed inside the
  /// step, such as fused members, have none). A step whose result is one of its operands'
  /// buffers (a view: reshape, a one-tower replica_mean) moved nothing.
  static std::uint64_t bytes(const rt_value* frame) {
    // A fused loop's output may be written over an input that dies with it (in place: the
    // input read, the output written). A layout step whose output is an operand's buffer is a
    // view and moves nothing (reshape, a one-tower replica_mean), as is a lone assign(var, x),
    // which hands x over as the variable's value; another kernel may write its output over an
    // operand that dies with it and moves its bytes all the same (conv2d_backprop_input over x,
    // which it reads only for its shape).
    constexpr bool lone_assign = tail::members == 1 && Op::name == std::string_view("assign");
    constexpr bool loop =
        is_chained<Region>::value || (tail::members > 0 && !is_prologue && !lone_assign);
    if constexpr (!loop && (Op::kind == node_kind::layout || lone_assign))
      for (std::size_t k = 1; k < size; ++k)
        if (frame[0].data && frame[k].data == frame[0].data)
          return 0;
    return cost_detail::distinct_bytes(frame, elem.data(), size, loop);
  }

  static double flops(const rt_value* frame) {
    std::array<const rt_dims*, size> d{};
    for (std::size_t k = 0; k < size; ++k)
      d[k] = &frame[k].dims;
    const double out = static_cast<double>(frame[0].dims.numel());
    if constexpr (is_chained<Region>::value) {
      return chained_flops(d.data(), out, static_cast<Region*>(nullptr));
    } else if constexpr (tail::members > 0 && !is_prologue) {
      return out * static_cast<double>(tail::members); // a fused elementwise region
    } else if constexpr (is_prologue) {
      const double f = op_cost<Op>::flops(d.data());
      const double in = static_cast<double>(frame[1].dims.numel());
      return f < 0 ? -1 : f + in * static_cast<double>(tail::members);
    } else if constexpr (is_epilogue<Region>::value) {
      return epilogue_flops(d.data(), out, static_cast<Region*>(nullptr));
    } else {
      return op_cost<Op>::flops(d.data());
    }
  }

private:
  template <class R>
  struct is_epilogue : std::false_type {};
  template <class P, class B, bool Relu>
  struct is_epilogue<graph::epilogue<P, B, Relu>> : std::true_type {};
  template <class R>
  struct is_chained : std::false_type {};
  template <class P, class R, std::size_t In>
  struct is_chained<graph::chained<P, R, In>> : std::true_type {};
  /// The producer's FLOPs (its result is the region's input In, its operands follow the
  /// region's inputs), then the region's per element.
  template <graph::step_kind K, class POp, class PT, std::size_t R, class... PRefs, class Rg,
            std::size_t In>
  static double chained_flops(const rt_dims* const* d, double out,
                              graph::chained<graph::flat_node<K, POp, PT, R, PRefs...>, Rg, In>*) {
    constexpr std::size_t inputs = cost_detail::frame_tail<Rg>::sizes.size();
    std::array<const rt_dims*, 1 + sizeof...(PRefs)> pd{d[1 + sizeof...(Refs) + In]};
    for (std::size_t k = 0; k < sizeof...(PRefs); ++k)
      pd[1 + k] = d[1 + sizeof...(Refs) + inputs + k];
    const double f = op_cost<POp>::flops(pd.data());
    return f < 0 ? -1 : f + out * static_cast<double>(Rg::members::size);
  }
  template <class R>
  struct is_prologue_t : std::false_type {};
  template <class R>
  struct is_prologue_t<graph::prologue<R>> : std::true_type {};
  static constexpr bool is_prologue = is_prologue_t<Region>::value;

  /// The producer's FLOPs (its result is the step's, its operands follow the root's), then one
  /// add per element for the bias and one max for relu.
  template <graph::step_kind K, class POp, class PT, std::size_t R, class... PRefs, class B,
            bool Relu>
  static double
  epilogue_flops(const rt_dims* const* d, double out,
                 graph::epilogue<graph::flat_node<K, POp, PT, R, PRefs...>, B, Relu>*) {
    std::array<const rt_dims*, 1 + sizeof...(PRefs)> pd{d[0]};
    for (std::size_t k = 0; k < sizeof...(PRefs); ++k)
      pd[1 + k] = d[1 + sizeof...(Refs) + k];
    const double f = op_cost<POp>::flops(pd.data());
    return f < 0 ? -1 : f + out * (Relu ? 2.0 : 1.0);
  }
};

} // namespace typeflow::backend
