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
  if constexpr (requires { Op::to_string(); })
    e.leaf = &Op::to_string;
  else
    e.name = Op::name;
  if constexpr (requires { Op::attrs(); })
    e.attrs = &Op::attrs;
  return e;
}
} // namespace detail

/// The facts of node table T's nodes, Fetches (the roots of T) marked fetched.
template <class T, class... Fetches, std::size_t... I>
consteval node_facts_t<T::size, T::n_edges> gather_facts(std::index_sequence<I...>) {
  constexpr std::size_t size = T::size;
  node_facts_t<size, T::n_edges> f;
  // Arrays and loops, not folds over the nodes: clang limits a fold expression to 256 operands
  // (-fbracket-depth), and a plan can have thousands of nodes.
  f.edge_begin = T::topology.edge_begin;
  f.edges = T::topology.edges;
  f.kind = {T::template node<I>::op::kind...};
  f.constant = {op_traits<typename T::template node<I>::op>::constant...};
  f.force_root = {op_traits<typename T::template node<I>::op>::state...};
  f.placeholder = {op_traits<typename T::template node<I>::op>::placeholder...};
  f.variable = {op_traits<typename T::template node<I>::op>::variable...};
  const unsigned shape_only[] = {op_traits<typename T::template node<I>::op>::shape_only..., 0u};
  for (std::size_t i = 0; i < size; ++i) {
    f.elementwise[i] = f.kind[i] == node_kind::elementwise;
    f.group[i] = f.kind[i] == node_kind::group;
    f.leaf[i] = f.kind[i] == node_kind::leaf;
    f.reduction[i] = f.kind[i] == node_kind::reduction;
    f.no_buffer[i] = f.placeholder[i] || f.variable[i] || f.group[i];
    for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e) {
      const std::size_t c = e - f.edge_begin[i];
      f.shape_only[e] = c < 32 && ((shape_only[i] >> c) & 1u) != 0;
    }
  }
  f.epilogue = {op_traits<typename T::template node<I>::op>::epilogue...};
  f.fused_input = {op_traits<typename T::template node<I>::op>::reads_fused_input...};
  f.pieces = {op_traits<typename T::template node<I>::op>::writes_in_pieces...};
  f.stored = {op_traits<typename T::template node<I>::op>::stored...};
  f.products = {op_traits<typename T::template node<I>::op>::follows_precision...};
  const bool all_reduce[] = {op_traits<typename T::template node<I>::op>::all_reduce..., false};
  for (std::size_t j = 0; j < size; ++j)
    for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e)
      f.after_reduce[j] = f.after_reduce[j] || f.after_reduce[f.edges[e]] || all_reduce[f.edges[e]];
  ((f.fetched[T::template index_c<graph::detail::unwrap<Fetches>>::value] = true), ...);
  f.op = {T::template node<I>::op::name...};
  for (std::size_t i = 0; i < size; ++i)
    f.op[i] = f.variable[i] ? "variable" : f.placeholder[i] ? "placeholder" : f.op[i];
  f.dtype = {detail::dtype_or_empty<typename T::template node<I>::value_type>()...};
  f.shape = {detail::static_dims_of<typename T::template node<I>::shape_type>()...};
  return f;
}

} // namespace typeflow::compile
