// The node table of a graph: the nodes that some roots need, in topological order, with their
// positions by identity and their edges. It knows nothing of ops: autodiff differentiates over
// it, nn/ selects variables from it, and the compiler (compile/) computes its facts, placement,
// fusion, schedule and frames on top of it.
//
//   using T = graph::node_table<Y>;     // the roots (often one expression, or a session's fetches)
//   T::size, T::n_edges                 // nodes and edges
//   T::node<I>                          // the node type at position I
//   T::index_c<N>::value                // the position of node N (not a constant when absent)
//   T::contains_c<N>::value             // whether N is a node of the table
//   T::topology.edges[T::topology.edge_begin[i] + k]   // operand k of node i, by position
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include "traverse.hpp"

namespace typeflow::graph {

namespace detail {
// Lookups are overload resolution among non-template functions (one pair per node), never
// template argument deduction: deducing through the index map made g++ walk node types as trees,
// exponential in the sharing of the graph. (nvcc's units, whose nodes nest: see node.hpp.)
template <class N, std::size_t I>
struct indexed {
  static std::integral_constant<std::size_t, I> index_of(N*);
  static N node_at(std::integral_constant<std::size_t, I>);
};
template <class N>
struct present {};

template <class List, class Seq>
struct index_map;
template <class... Ns, std::size_t... I>
struct index_map<type_list<Ns...>, std::index_sequence<I...>> : indexed<Ns, I>..., present<Ns>... {
  using indexed<Ns, I>::index_of...;
  using indexed<Ns, I>::node_at...;
};

// Membership is a base-class test, never a failed deduction: g++ spends time exponential in the
// sharing of a graph when a deduction through the index map fails.
template <class Map, class N>
using has_node = std::is_base_of<present<std::remove_cvref_t<N>>, Map>;

#if TYPEFLOW_NODE_REFS
/// The index of a table's nodes by identity (graph/node.hpp's node_hash): a position is found by
/// a binary search over the sorted identities, and the node at a position from its identity
/// through the registry, so that each look-up costs O(log n) steps of constant evaluation
/// instead of overload resolution among n candidates (a quadratic table).
struct hash_entry {
  std::uint64_t hash = 0;
  std::size_t index = 0;
};
/// Orders entries by identity.
struct hash_less {
  constexpr bool operator()(const hash_entry& x, const hash_entry& y) const {
    return x.hash < y.hash;
  }
};
template <std::size_t N>
struct sorted_hashes {
  hash_entry v[N];
};
/// The identities h[0..N) with their positions, sorted: a function of N alone, and std::sort
/// over hash_entry* with hash_less, one instantiation for every table. (Called with a lambda of
/// the index, each of std::sort's two dozen helper functions was named after the index, which
/// was then named after the walk's whole trie: bench/README.md.)
template <std::size_t N, class H>
constexpr sorted_hashes<N> sort_hashes(const H& h) {
  sorted_hashes<N> a{};
  for (std::size_t i = 0; i < N; ++i)
    a.v[i] = {h[i], i};
  std::sort(a.v, a.v + N, hash_less{});
  return a;
}
/// The index of the nodes of a finished walk (traverse.hpp's walk_order<Roots...>): its
/// identities in post-order are the table's, so nothing is hashed again, and the index is named
/// by the walk's roots, never by its trie or a list of every node (a class templated on n nodes
/// costs the compilers O(n) per use of the list, and g++ mangles the names of its members in
/// time quadratic in n).
template <class... Roots>
struct hash_index {
  static constexpr std::size_t size = walk_order<Roots...>::size;
  // Plain arrays, read with built-in subscripts (see core/pack.hpp's fill_all): every
  // node<I> and index_c<N> reads them in a constant evaluation.
  static constexpr const std::uint64_t (&hashes)[size] = walk_order<Roots...>::value.v;
  static constexpr sorted_hashes<size> sorted_entries = sort_hashes<size>(hashes);
  static constexpr const hash_entry (&sorted)[size] = sorted_entries.v;
  /// Position of the node with identity h, or size.
  static constexpr std::size_t find(std::uint64_t h) {
    std::size_t lo = 0, hi = size;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (sorted[mid].hash < h)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo < size && sorted[lo].hash == h ? sorted[lo].index : size;
  }
};
/// index_c of a node that is not in the table: not a constant expression.
inline std::size_t node_not_in_plan() {
  return 0;
}
constexpr std::size_t checked_index(std::size_t i, std::size_t size) {
  return i < size ? i : node_not_in_plan();
}
#endif

template <class N>
struct arity;
template <class Op, class... Cs>
struct arity<expr<Op, Cs...>> : std::integral_constant<std::size_t, sizeof...(Cs)> {};

/// A node's operands as positions in its table.
struct operand_list {
  const std::size_t* positions = nullptr;
  std::size_t size = 0;
};
template <class Seq>
struct seq_values;
template <std::size_t... K>
struct seq_values<std::index_sequence<K...>> {
  static constexpr std::array<std::size_t, sizeof...(K)> value{K...};
};

/// A root of a node table as given: a node type, or in nvcc's device pass either a node type
/// (autodiff's and nn's tables) or traverse.hpp's opaque<node> (a plan's fetches).
#if defined(__CUDA_ARCH__)
template <class K>
struct root_of {
  using type = K;
};
template <class K>
requires requires {
  typename K::type;
}
struct root_of<K> {
  using type = typename K::type;
};
template <class K>
using root_t = typename root_of<K>::type;
#else
template <class K>
using root_t = K;
#endif

#if !TYPEFLOW_NODE_REFS
template <class L>
struct edge_count;
template <class... Ns>
struct edge_count<type_list<Ns...>> {
  // A loop, not a fold: clang limits a fold expression to 256 operands (-fbracket-depth).
  static constexpr std::size_t value = [] {
    const std::size_t arity[] = {detail::arity<def_t<Ns>>::value..., 0};
    std::size_t n = 0;
    for (std::size_t a : arity)
      n += a;
    return n;
  }();
};
#endif
} // namespace detail

/// Edges of a table of `size` nodes, templated on sizes only (a type nested in a table would be
/// named after the whole graph: see compile/tables.hpp). Operand k of node i is node
/// edges[edge_begin[i] + k].
template <std::size_t size, std::size_t n_edges>
struct edge_table {
  std::size_t edge_begin[size + 1]{};
  std::size_t edges[n_edges + 1]{};
};

/// The node table of the graph that Roots need (see the top of this file; in nvcc's device pass
/// each root is traverse.hpp's opaque<root>). A class named by its roots, not an alias: g++ took
/// three times as long on test/deep's model when the plan was an alias of a class over a type_list
/// of its fetches; the cause is not known.
template <class... Roots>
struct node_table {
  using nodes = topological_order<detail::root_t<Roots>...>;
  static constexpr std::size_t size = nodes::size;

#if TYPEFLOW_NODE_REFS
private:
  using map = detail::hash_index<detail::root_t<Roots>...>;

public:
  /// Position of node N in the topological order: index_c<N>::value.
  template <class N>
  using index_c = std::integral_constant<
      std::size_t,
      detail::checked_index(map::find(typeflow::detail::node_hash<std::remove_cvref_t<N>>::value),
                            size)>;
  /// Whether N is a node of this table: contains_c<N>::value.
  template <class N>
  using contains_c =
      std::bool_constant<map::find(typeflow::detail::node_hash<std::remove_cvref_t<N>>::value) <
                         size>;
  /// The node at position I.
  template <std::size_t I>
  using node = typename detail::node_of<map::hashes[I]>::type;
#else
private:
  using map = detail::index_map<nodes, std::make_index_sequence<size>>;

public:
  // Members that depend on a node type are aliases to small types, never variables or
  // functions: g++ mangles the name of every instantiated variable and function of the table,
  // and a name that holds both the table and a node grows with the graph (cubic in all).

  /// Position of node N in the topological order: index_c<N>::value.
  template <class N>
  using index_c = decltype(map::index_of(static_cast<std::remove_cvref_t<N>*>(nullptr)));
  /// Whether N is a node of this table: contains_c<N>::value.
  template <class N>
  using contains_c = detail::has_node<map, N>;
  /// The node at position I.
  template <std::size_t I>
  using node = decltype(map::node_at(std::integral_constant<std::size_t, I>{}));
#endif

  /// The nodes as a Boost.Hana sequence of types, in topological order, for introspection:
  /// `hana::for_each(T::nodes_c(), f)` calls `f` with a `hana::type` of each node.
  /// A function, so that the sequence is instantiated only by those who ask for it.
  static constexpr auto nodes_c() {
    return as_hana(static_cast<nodes*>(nullptr));
  }

private:
  template <std::size_t I>
  struct arity_at {
    static constexpr std::size_t value = detail::arity<def_t<node<I>>>::value;
  };
  static constexpr std::size_t count_edges() {
    const auto arity = indexed_table<std::size_t, size, arity_at>();
    std::size_t n = 0;
    for (std::size_t a : arity)
      n += a;
    return n;
  }

public:
#if TYPEFLOW_NODE_REFS
  static constexpr std::size_t n_edges = count_edges();
#else
  // nvcc's units: a look-up of node<I> there is overload resolution among n candidates, so
  // the arities come from the list itself.
  static constexpr std::size_t n_edges = detail::edge_count<nodes>::value;
#endif

private:
  template <class... Ns>
  static constexpr auto as_hana(type_list<Ns...>*) {
    return boost::hana::tuple_t<Ns...>;
  }
  template <class Def>
  struct child_seq;
  template <class Op, class... Cs>
  struct child_seq<expr<Op, Cs...>> {
    using type = std::index_sequence<index_c<Cs>::value...>;
  };
  /// Node I's operands by position (indexed_table's generator).
  template <std::size_t I>
  struct operands_at {
    using def = def_t<node<I>>;
    static constexpr detail::operand_list value{
        detail::seq_values<typename child_seq<def>::type>::value.data(), detail::arity<def>::value};
  };
  static consteval edge_table<size, n_edges> make_edges() {
    edge_table<size, n_edges> t;
    // A table built in chunks (core/pack.hpp's indexed_table), not an expansion of a pack of
    // every node, which costs the compilers O(n) per node.
    const auto kids = indexed_table<detail::operand_list, size, operands_at>();
    std::size_t e = 0;
    for (std::size_t i = 0; i < size; ++i) {
      t.edge_begin[i] = e;
      for (std::size_t c = 0; c < kids[i].size; ++c)
        t.edges[e++] = kids[i].positions[c];
    }
    t.edge_begin[size] = e;
    return t;
  }

public:
  /// The edges, by position.
  static constexpr edge_table<size, n_edges> topology = make_edges();
};

} // namespace typeflow::graph
