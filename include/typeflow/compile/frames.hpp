// frames, the compiler's fifth stage: what each step reads, turned back into types where a kernel
// needs them. A step's flat form (graph/flat.hpp) names its op, dtypes, ranks and operands by
// number; its *frame* is the list of value slots it reads, so that the executor instantiates each
// step from its local form, in which operands are numbered by their place in the frame: 0 is the
// step's own value, 1.. its operands, then what its region, epilogue or prologue reads. Steps that
// differ only in where they sit in the graph (every block of a deep model) then share one
// instantiation, and the executor's code grows with the kinds of steps, not their number.
#pragma once
#include <cstddef>
#include <utility>

#include "../graph/flat.hpp"
#include "../graph/table.hpp"
#include "fuse.hpp"

namespace typeflow::compile {

/// The frames of a placed and fused graph: frames.slot[frames.begin[i] ..] are the value slots
/// of node i's frame, in the order above.
template <std::size_t size, std::size_t slots, std::size_t n_edges>
consteval frame_table<size, 3 * size + 3 * n_edges + 1>
frames(const placed<size, n_edges>& g, const layout_table<size, slots, n_edges>& L) {
  frame_table<size, 3 * size + 3 * n_edges + 1> F;
  const auto& f = g.fact;
  std::size_t n = 0;
  auto operands = [&](std::size_t i) {
    for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e)
      F.slot[n++] = g.edge_slot(e);
  };
  auto inputs = [&](std::size_t r) {
    for (std::size_t k = L.input_begin[r]; k < L.input_begin[r + 1]; ++k)
      F.slot[n++] = L.inputs[k];
  };
  for (std::size_t i = 0; i < size; ++i) {
    F.begin[i] = n;
    F.slot[n++] = i;
    operands(i);
    if (L.step[i] == graph::step_kind::kernel && f.elementwise[i]) {
      inputs(i);
      for (std::size_t m = L.member_begin[i]; m < L.member_begin[i + 1]; ++m)
        if (L.step[L.members[m]] == graph::step_kind::fused_output)
          F.slot[n++] = L.members[m];
    } else if (L.step[i] == graph::step_kind::epilogue) {
      operands(L.producer[i]);
      F.slot[n++] = g.edge_slot(L.bias_edge[i]);
    } else if (L.step[i] == graph::step_kind::prologue) {
      inputs(L.source[i]);
    } else if (L.step[i] == graph::step_kind::chained) {
      inputs(i);
      operands(L.producer[i]);
    }
  }
  F.begin[size] = n;
  return F;
}

// The flat forms of a plan P's steps (P: compile/plan.hpp's plan_impl; its fact, layout, node<I>
// and edge_slot). Base == none: operands by value slot; otherwise Base + k, a local form.
namespace forms {

/// Operand of a fused member, by kind: 0 inlined constant, 1 another member, 2 an input.
template <int Kind, std::size_t Pos, class C>
struct operand;
template <std::size_t Pos, class C>
struct operand<0, Pos, C> {
  using type = graph::ref_const<C::op::bits, typename C::value_type>;
};
template <std::size_t Pos, class C>
struct operand<1, Pos, C> {
  using type = graph::ref_local<Pos>;
};
template <std::size_t Pos, class C>
struct operand<2, Pos, C> {
  using type = graph::ref_input<Pos>;
};

template <class P>
constexpr std::size_t arity_of(std::size_t i) {
  return P::fact.edge_begin[i + 1] - P::fact.edge_begin[i];
}
/// Operand C of node I in a flat form: its value slot in the plan (Base == none), or Base + C
/// (a local form: the operand's place in the step's frame).
template <class P>
constexpr std::size_t operand_index(std::size_t i, std::size_t c, std::size_t base) {
  return base == none ? P::edge_slot(P::fact.edge_begin[i] + c) : base + c;
}
template <class P, std::size_t I, std::size_t Base, class N = def_t<typename P::template node<I>>,
          class Seq = std::make_index_sequence<graph::detail::arity<N>::value>>
struct flat_of;
template <class P, std::size_t I, std::size_t Base, class Op, class... Cs, std::size_t... C>
struct flat_of<P, I, Base, expr<Op, Cs...>, std::index_sequence<C...>> {
  using type = graph::flat_node<
      P::layout.step[I], Op, typename expr<Op, Cs...>::value_type,
      expr<Op, Cs...>::shape_type::rank,
      graph::ref<operand_index<P>(I, C, Base), typename Cs::value_type, Cs::shape_type::rank>...>;
};

/// Operand K of member M. A namespace-scope alias, not a member alias template of member_of:
/// g++ 12 substituted such a member template's pattern, which reads P::fact, at a cost that grew
/// with the graph at each use (the 8-block transformer's local regions took 41 s of g++, now 9).
template <class P, std::size_t M, std::size_t K>
using child_of = typename P::template node<P::fact.edges[P::fact.edge_begin[M] + K]>;
template <class P, std::size_t M, class Seq>
struct member_of;
template <class P, std::size_t M, std::size_t... C>
struct member_of<P, M, std::index_sequence<C...>> {
  using op = typename P::template node<M>::op;
  using type = graph::member<
      op, op_compute_type<op, child_of<P, M, C>...>, typename P::template node<M>::value_type,
      typename operand<P::layout.edge_kind[P::fact.edge_begin[M] + C],
                       P::layout.edge_pos[P::fact.edge_begin[M] + C], child_of<P, M, C>>::type...>;
};
template <class P, std::size_t M>
using member_t = typename member_of<
    P, M, std::make_index_sequence<P::fact.edge_begin[M + 1] - P::fact.edge_begin[M]>>::type;

/// Input K of region R: its value slot (Base == none), or Base + K in a local form.
template <class P>
constexpr std::size_t input_index(std::size_t r, std::size_t k, std::size_t base) {
  return base == none ? P::layout.inputs[P::layout.input_begin[r] + k] : base + k;
}
/// The merged outputs of region R (members other than R that are assignments): how many, and
/// entry Q of its stores list, pairs (member position, value slot or, in a local form, frame
/// position Base + inputs + q).
template <class P>
constexpr std::size_t stores_of(std::size_t r) {
  const auto& L = P::layout;
  std::size_t n = 0;
  for (std::size_t m = L.member_begin[r]; m < L.member_begin[r + 1]; ++m)
    n += L.step[L.members[m]] == graph::step_kind::fused_output ? 1 : 0;
  return n;
}
template <class P>
constexpr std::size_t store_entry(std::size_t r, std::size_t base, std::size_t q) {
  const auto& L = P::layout;
  std::size_t n = 0;
  for (std::size_t m = L.member_begin[r]; m < L.member_begin[r + 1]; ++m) {
    const std::size_t i = L.members[m];
    if (L.step[i] != graph::step_kind::fused_output)
      continue;
    if (n == q / 2)
      return q % 2 == 0     ? L.local_pos[i]
             : base == none ? i
                            : base + L.input_begin[r + 1] - L.input_begin[r] + q / 2;
    ++n;
  }
  return none;
}
template <class P, std::size_t R, std::size_t Base,
          class Q = std::make_index_sequence<2 * stores_of<P>(R)>>
struct stores_seq;
template <class P, std::size_t R, std::size_t Base, std::size_t... Q>
struct stores_seq<P, R, Base, std::index_sequence<Q...>> {
  using type = std::index_sequence<store_entry<P>(R, Base, Q)...>;
};

template <class P, std::size_t R, std::size_t Base,
          class MSeq =
              std::make_index_sequence<P::layout.member_begin[R + 1] - P::layout.member_begin[R]>,
          class KSeq =
              std::make_index_sequence<P::layout.input_begin[R + 1] - P::layout.input_begin[R]>>
struct region_of;
template <class P, std::size_t R, std::size_t Base, std::size_t... M, std::size_t... K>
struct region_of<P, R, Base, std::index_sequence<M...>, std::index_sequence<K...>> {
  using type = graph::flat_region<
      typename P::template node<R>::value_type,
      type_list<typename P::template node<
          P::layout.input_nodes[P::layout.input_begin[R] + K]>::value_type...>,
      type_list<member_t<P, P::layout.members[P::layout.member_begin[R] + M]>...>,
      std::index_sequence<input_index<P>(R, K, Base)...>, typename stores_seq<P, R, Base>::type>;
};
template <class P, std::size_t R, std::size_t Base>
using chained_of = graph::chained<
    typename flat_of<
        P, P::layout.producer[R],
        Base == none ? none : Base + P::layout.input_begin[R + 1] - P::layout.input_begin[R]>::type,
    typename region_of<P, R, Base>::type, P::layout.chain_input[R]>;
template <class P, std::size_t R, std::size_t Base>
using epilogue_of = graph::epilogue<
    typename flat_of<P, P::layout.producer[R], Base>::type,
    graph::ref<Base == none ? P::edge_slot(P::layout.bias_edge[R])
                            : Base + arity_of<P>(P::layout.producer[R]),
               typename P::template node<P::fact.edges[P::layout.bias_edge[R]]>::value_type, 1>,
    P::layout.relu[R]>;

} // namespace forms

} // namespace typeflow::compile
