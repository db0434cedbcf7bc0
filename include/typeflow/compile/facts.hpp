// facts, the compiler's first stage: what the ops of a node table say about each node (its kind,
// its role, its dtype and static shape, which operands it reads only the shape of, its part in
// the folds), read once from the op types into plain tables that the later stages compute on.
#pragma once
#include <array>
#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../graph/op_traits.hpp"
#include "../graph/table.hpp"
#include "tables.hpp"

namespace typeflow::compile {

namespace detail {
template <class T>
constexpr std::string_view dtype_or_empty() {
  if constexpr (std::is_void_v<T>)
    return {};
  else
    return dtype_name<T>;
}
/// Shape S's extents (one instantiation per shape, not per node).
template <class S>
constexpr static_dims static_dims_of() {
  static_dims s{S::rank, {}};
  for (std::size_t i = 0; i < S::rank; ++i)
    s.d[i] = S::dims[i];
  return s;
}
template <class Op>
constexpr print_entry entry_for() {
  print_entry e{};
  if constexpr (op_traits<Op>::placeholder || op_traits<Op>::variable) {
    e.name = Op::name;
    e.named_leaf = true;
  } else if constexpr (requires { Op::to_string(); }) {
    e.leaf = &Op::to_string;
  } else {
    e.name = Op::name;
  }
  if constexpr (requires { Op::attrs(); })
    e.attrs = &Op::attrs;
  return e;
}
} // namespace detail

namespace detail {
/// What a node's op, dtype and shape say: one instantiation per distinct (op, dtype, shape).
struct op_facts {
  node_kind kind{};
  bool constant = false, state = false, placeholder = false, variable = false, fused_input = false,
       pieces = false, stored = false, products = false, all_reduce = false;
  epilogue_role epilogue{};
  unsigned shape_only = 0;
  std::string_view op, dtype;
  static_dims shape{};
};
template <class Op, class V, class S>
constexpr op_facts op_facts_of() {
  using tr = op_traits<Op>;
  op_facts r;
  r.kind = Op::kind;
  r.constant = tr::constant;
  r.state = tr::state;
  r.placeholder = tr::placeholder;
  r.variable = tr::variable;
  r.epilogue = tr::epilogue;
  r.fused_input = tr::reads_fused_input;
  r.pieces = tr::writes_in_pieces;
  r.stored = tr::stored;
  r.products = tr::follows_precision;
  r.all_reduce = tr::all_reduce;
  r.shape_only = tr::shape_only;
  r.op = Op::name;
  r.dtype = dtype_or_empty<V>();
  r.shape = static_dims_of<S>();
  return r;
}
/// Node I's op facts (indexed_table's generator).
template <class T>
struct node_facts_at {
  template <std::size_t I>
  struct at {
    using N = typename T::template node<I>;
    static constexpr op_facts value =
        op_facts_of<typename N::op, typename N::value_type, typename N::shape_type>();
  };
};
} // namespace detail

/// The facts of node table T's nodes, Fetches (the roots of T) marked fetched.
template <class T, class... Fetches>
consteval node_facts_t<T::size, T::n_edges> gather_facts() {
  constexpr std::size_t size = T::size;
  node_facts_t<size, T::n_edges> f;
  copy_all(f.edge_begin, T::topology.edge_begin);
  copy_all(f.edges, T::topology.edges);
  // One table of op facts, built in chunks (core/pack.hpp's indexed_table): an expansion of a
  // pack of every node costs the compilers O(n) per node.
  const std::array<detail::op_facts, size> nf =
      indexed_table<detail::op_facts, size, detail::node_facts_at<T>::template at>();
  for (std::size_t i = 0; i < size; ++i) {
    const detail::op_facts& o = nf[i];
    f.kind[i] = o.kind;
    f.constant[i] = o.constant;
    f.force_root[i] = o.state;
    f.placeholder[i] = o.placeholder;
    f.variable[i] = o.variable;
    f.elementwise[i] = o.kind == node_kind::elementwise;
    f.group[i] = o.kind == node_kind::group;
    f.leaf[i] = o.kind == node_kind::leaf;
    f.reduction[i] = o.kind == node_kind::reduction;
    f.no_buffer[i] = o.placeholder || o.variable || f.group[i];
    for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e) {
      const std::size_t c = e - f.edge_begin[i];
      f.shape_only[e] = c < 32 && ((o.shape_only >> c) & 1u) != 0;
    }
    f.epilogue[i] = o.epilogue;
    f.fused_input[i] = o.fused_input;
    f.pieces[i] = o.pieces;
    f.stored[i] = o.stored;
    f.products[i] = o.products;
    f.op[i] = o.variable ? "variable" : o.placeholder ? "placeholder" : o.op;
    f.dtype[i] = o.dtype;
    f.shape[i] = o.shape;
  }
  for (std::size_t j = 0; j < size; ++j)
    for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e)
      f.after_reduce[j] =
          f.after_reduce[j] || f.after_reduce[f.edges[e]] || nf[f.edges[e]].all_reduce;
  const bool marked[] = {
      (f.fetched[T::template index_c<graph::detail::unwrap<Fetches>>::value] = true)..., true};
  (void)marked;
  return f;
}

} // namespace typeflow::compile
