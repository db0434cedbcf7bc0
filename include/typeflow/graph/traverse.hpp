// Traversal: the nodes that the fetches need, each distinct node once, in a topological order
// (children before parents): a depth-first walk with a visited set. The set is a type that
// inherits one tag per visited node, so a membership test is one base-class lookup and the walk
// instantiates one state per distinct node.
//
// The walk is written with plain class templates rather than hana::fold_left: every nested
// instantiation counts against the compiler's depth limit (900 in g++), and Hana's fold added
// three levels per graph level, so a 200-op chain did not compile. Here a graph level costs two.
#pragma once
#include <type_traits>

#include "node.hpp"

namespace typeflow::graph {

namespace detail {
template <class N>
struct tag {};

/// The visited set and the post-order list at once.
template <class... Ns>
struct visited : tag<Ns>... {
  using list = type_list<Ns...>;
  template <class N>
  using push = visited<Ns..., N>;
};

template <class V, class... Cs>
struct visit_all;

// std::is_base_of (a class), not a variable template: g++ mangles every instantiated variable,
// and these names hold the whole visited set.
template <class V, class N, bool Seen = std::is_base_of<tag<N>, V>::value>
struct visit {
  using type = V;
};
template <class V, class Op, class... Cs>
struct visit<V, expr<Op, Cs...>, false> {
  using type = typename visit_all<V, Cs...>::type::template push<expr<Op, Cs...>>;
};

template <class V, class... Cs>
struct visit_all {
  using type = V;
};
template <class V, class C, class... Rest>
struct visit_all<V, C, Rest...> {
  using type = typename visit_all<typename visit<V, C>::type, Rest...>::type;
};
} // namespace detail

/// `type_list` of the distinct nodes reachable from `Roots`, children before parents.
template <class... Roots>
using topological_order = typename detail::visit_all<detail::visited<>, Roots...>::type::list;

/// Start offsets of buckets of the given sizes (an exclusive prefix sum; the last entry is the
/// total), for the counting sorts that group edges, members and transfers.
template <std::size_t N>
constexpr std::array<std::size_t, N> bucket_begins(const std::array<std::size_t, N>& count) {
  std::array<std::size_t, N> begin{};
  std::size_t acc = 0;
  for (std::size_t k = 0; k + 1 < N; ++k) {
    begin[k] = acc;
    acc += count[k];
  }
  begin[N - 1] = acc;
  return begin;
}

} // namespace typeflow::graph
