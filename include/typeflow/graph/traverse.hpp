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

/// opaque<T>: T, except in nvcc's device pass (cicc), where it is a class local to a function
/// template, the same entity in every translation unit (as a lambda in an inline function is),
/// that holds T as ::type; unwrap<opaque<T>> is T either way. cicc walks the template arguments
/// of every class it instantiates as a tree, without sharing, and a gradient's node types are
/// trees of thousands of nodes (the seed model's training op spells 24,000): a visited set of the
/// nodes themselves cost the sum of their trees at every step of the walk, and a plan named by
/// its fetches their size in each of the executor's thousands of instantiations (545 s of cicc
/// for the main job's CUDA build, about 50 s with these). A local class costs one step. The host
/// compilers (g++, clang, nvcc's host pass) do not walk types so and keep the types themselves.
/// No kernel's template arguments name a plan or a visited set (kernels take the fused regions'
/// flat types, graph/flat.hpp), so both passes instantiate the same kernels; a kernel that
/// only the host pass instantiated would fail at run time only, so CTest's
/// cuda.kernel_agreement compares the two passes' kernels in an object file.
#if defined(__CUDA_ARCH__)
template <class T>
constexpr auto opaque_key() {
  struct key {
    using type [[maybe_unused]] = T;
  };
  return key{};
}
template <class T>
using opaque = decltype(opaque_key<T>());
template <class K>
using unwrap = typename K::type;
#else
template <class T>
using opaque = T;
template <class K>
using unwrap = K;
#endif

/// The visited set and the post-order list at once.
template <class... Ks>
struct visited : tag<Ks>... {
  using list = type_list<unwrap<Ks>...>;
  template <class N>
  using push = visited<Ks..., opaque<N>>;
};

template <class V, class... Cs>
struct visit_all;

// std::is_base_of (a class), not a variable template: g++ mangles every instantiated variable,
// and these names hold the whole visited set.
template <class V, class Def>
struct visit_operands;
template <class V, class Op, class... Cs>
struct visit_operands<V, expr<Op, Cs...>> {
  using type = typename visit_all<V, Cs...>::type;
};
template <class V, class N, bool Seen = std::is_base_of<tag<opaque<N>>, V>::value>
struct visit {
  using type = V;
};
template <class V, class N>
struct visit<V, N, false> {
  using type = typename visit_operands<V, def_t<N>>::type::template push<N>;
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
