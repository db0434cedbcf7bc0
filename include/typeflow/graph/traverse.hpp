// Traversal: the nodes that the fetches need, each distinct node once, in a topological order
// (children before parents). Depth-first with a visited set written with Boost.Hana; the set is a
// type that inherits one tag per visited node, so a membership test is a base-class lookup and the
// traversal instantiates one state per node (linear in the node count).
#pragma once
#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/type.hpp>
#include <type_traits>

#include "node.hpp"

namespace typeflow::graph {

namespace hana = boost::hana;

namespace detail {
template <class N>
struct tag {};

/// The visited set and the post-order list at once.
template <class... Ns>
struct visited : tag<Ns>... {
  using list = type_list<Ns...>;
  template <class N>
  static constexpr bool contains = std::is_base_of_v<tag<N>, visited>;
  template <class N>
  using push = visited<Ns..., N>;
};

template <class N>
struct children_of;
template <class Op, class... Cs>
struct children_of<expr<Op, Cs...>> {
  static constexpr hana::basic_tuple<hana::basic_type<Cs>...> value{};
};

struct dfs {
  template <class V, class N>
  constexpr auto operator()(V, hana::basic_type<N>) const {
    if constexpr (V::template contains<N>) {
      return V{};
    } else {
      using after = decltype(hana::fold_left(children_of<N>::value, V{}, dfs{}));
      return typename after::template push<N>{};
    }
  }
};
} // namespace detail

/// `type_list` of the distinct nodes reachable from `Roots`, children before parents.
template <class... Roots>
using topological_order = typename decltype(hana::fold_left(
    hana::basic_tuple<hana::basic_type<Roots>...>{}, detail::visited<>{}, detail::dfs{}))::list;

} // namespace typeflow::graph
