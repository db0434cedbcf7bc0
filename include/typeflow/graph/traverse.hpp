// Traversal: the nodes that the fetches need, each distinct node once, in a topological order
// (children before parents): a depth-first walk with a visited set.
//
// With node identities (TYPEFLOW_NODE_REFS, every host compiler) the visited set is a hash trie
// and the walk is iterative, its stack a type, so that neither the graph's depth nor a node's
// operand count nests instantiations (see detail::walk_state below). nvcc's device pass keeps
// the older recursive walk over nested node types: its visited set is a type that inherits one
// tag per visited node, and a graph level costs two nested instantiations (900 in g++).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../core/pack.hpp"
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

#if TYPEFLOW_NODE_REFS
namespace detail {
// The walk over node identities (graph/node.hpp): the visited set is a persistent two-level hash
// trie of 16 x 16 buckets, each entry a node's identity and its place in the post-order. Adding a
// node makes a bucket, a row of 16 buckets and a top row of 16, and a membership test reads one
// bucket (n / 256 entries), so the walk costs O(n) small instantiations where a set of n base
// classes cost O(n) per step (quadratic in all: g++ spent its time setting up and searching
// those bases). The order comes back as the identities in post-order, the nodes from the
// registry.
//
// The trie's rows are hash-consed as the nodes are: a row of buckets is registered under a
// 64-bit hash of its contents (walk_entry, graph/node.hpp), and the top row names it by that
// number (ref<H>). A walk's state, a top row of 16 numbers and the stack, so does not spell the
// visited set: a bucket (n / 256 entries) is the longest part of a name. With -g, g++ writes the
// name of every class it instantiates into its debug information; when the trie was a type,
// each step's name spelled the whole visited set (O(n^2) characters per walk), and the
// 300-variable test needed 10 GB of g++ at -O0 -g where it needed 2.2 GB without -g
// (bench/README.md, *Debug builds*). The stack's frames nest (a name grows with the depth of the
// walk, not with what it has visited): registered too, they cost g++ 3 % more memory at -O2 and
// saved at most 3 % with -g (bench/README.md, *The stack's frames nest again*).
template <std::uint64_t H, std::size_t I>
struct entry {};
template <class... E>
struct bucket {};
/// A row of 16: a top row holds the identities of the registered rows below it, a row below
/// holds its buckets.
template <class... B>
struct row {};

template <std::size_t Count, class Top>
struct trie {
  enum : std::size_t { count = Count }; // an enumerator: no symbol named after the trie
};
/// The row registered as H, and H. The walk names it ref<H> before it reads it, and registers it
/// first.
template <std::uint64_t H>
struct ref {
  static constexpr std::uint64_t value = H;
  using type = decltype(walk_def(typeflow::detail::walk_key<H>{}));
};
/// A row's hash, updated in a few operations as the walk adds to it (g++ keeps a tree for every
/// value a constant evaluation makes: mixing the 16 members of a row at every step cost a fifth
/// more time): the sum of a mix of its entries (identity and place); a set of entries determines
/// the row, since a bucket holds its entries in the order of their places. The parts are
/// themselves hashes, so two different rows share a hash with probability about 2^-64; if they
/// did, the second registration would be a redefinition error, never a silent mix-up.
constexpr std::uint64_t empty_row_hash = 0x726f770000000002ull;
constexpr std::uint64_t row_hash_add(std::uint64_t row, std::uint64_t h, std::size_t i) {
  return row + (h ^ (i * 0xbf58476d1ce4e5b9ull)) * 0x9e3779b97f4a7c15ull;
}
/// Member I of a row of 16, by one partial specialization per position (std::tuple_element
/// instantiated a chain of helpers per look-up).
template <class Row, std::size_t I>
struct row_at;
#define TYPEFLOW_ROW_AT(I, ...)                                                                    \
  template <class B0, class B1, class B2, class B3, class B4, class B5, class B6, class B7,        \
            class B8, class B9, class B10, class B11, class B12, class B13, class B14, class B15>  \
  struct row_at<row<B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15>, I> {    \
    using type = B##I;                                                                             \
  };
TYPEFLOW_ROW_AT(0)
TYPEFLOW_ROW_AT(1)
TYPEFLOW_ROW_AT(2)
TYPEFLOW_ROW_AT(3)
TYPEFLOW_ROW_AT(4)
TYPEFLOW_ROW_AT(5)
TYPEFLOW_ROW_AT(6)
TYPEFLOW_ROW_AT(7)
TYPEFLOW_ROW_AT(8)
TYPEFLOW_ROW_AT(9)
TYPEFLOW_ROW_AT(10)
TYPEFLOW_ROW_AT(11)
TYPEFLOW_ROW_AT(12)
TYPEFLOW_ROW_AT(13)
TYPEFLOW_ROW_AT(14)
TYPEFLOW_ROW_AT(15)
#undef TYPEFLOW_ROW_AT
/// The row with entry I replaced by New, likewise one partial specialization per position (a
/// conditional per entry instantiated 16 helpers per add).
template <class Row, std::size_t I, class New>
struct row_with;
#define TYPEFLOW_ROW_WITH(I, ...)                                                                  \
  template <class B0, class B1, class B2, class B3, class B4, class B5, class B6, class B7,        \
            class B8, class B9, class B10, class B11, class B12, class B13, class B14, class B15,  \
            class New>                                                                             \
  struct row_with<row<B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15>, I,    \
                  New> {                                                                           \
    using type = row<__VA_ARGS__>;                                                                 \
  };
TYPEFLOW_ROW_WITH(0, New, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(1, B0, New, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(2, B0, B1, New, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(3, B0, B1, B2, New, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(4, B0, B1, B2, B3, New, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(5, B0, B1, B2, B3, B4, New, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(6, B0, B1, B2, B3, B4, B5, New, B7, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(7, B0, B1, B2, B3, B4, B5, B6, New, B8, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(8, B0, B1, B2, B3, B4, B5, B6, B7, New, B9, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(9, B0, B1, B2, B3, B4, B5, B6, B7, B8, New, B10, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(10, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, New, B11, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(11, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, New, B12, B13, B14, B15)
TYPEFLOW_ROW_WITH(12, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, New, B13, B14, B15)
TYPEFLOW_ROW_WITH(13, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, New, B14, B15)
TYPEFLOW_ROW_WITH(14, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, New, B15)
TYPEFLOW_ROW_WITH(15, B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, New)
#undef TYPEFLOW_ROW_WITH
template <class Bucket, std::uint64_t H>
struct bucket_has;
template <std::uint64_t H, std::uint64_t... Hs, std::size_t... Is>
struct bucket_has<bucket<entry<Hs, Is>...>, H> : std::bool_constant<((Hs == H) || ...)> {};
template <class Bucket, std::uint64_t H, std::size_t I>
struct bucket_add;
template <class... E, std::uint64_t H, std::size_t I>
struct bucket_add<bucket<E...>, H, I> {
  using type = bucket<E..., entry<H, I>>;
};
constexpr std::size_t top_of(std::uint64_t h) {
  return h & 15u;
}
constexpr std::size_t mid_of(std::uint64_t h) {
  return (h >> 4) & 15u;
}
/// The empty trie: every top member the row of 16 empty buckets (registered here).
struct empty_trie_def {
  using b = bucket<>;
  using r = ref<empty_row_hash>;
  static_assert(sizeof(typeflow::detail::walk_entry<
                       empty_row_hash, row<b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b>>) > 0);
  using type = trie<0, row<r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r>>;
};
using empty_trie = empty_trie_def::type;

// The walk itself is iterative: its state is the trie and an explicit stack of frames (a node
// and the index of its next operand), and one step either pushes an unseen operand, skips a seen
// one, or pops a finished node into the trie. A recursive walk nested one instantiation per graph
// level and per operand before it (g++ stops at 900, clang at 1,024: a chain of 300 additions,
// or a group of 600 assignments, did not compile). Steps are applied in runs of 4^L (four runs
// of 4^(L-1)), so the nesting is O(log^2) of the graph's size, not its depth. What g++ keeps of
// a walk is its classes (a few KB each, all alive to the end), so a step instantiates as few as
// it can: one walk_steps<S, 0> and either a walk_visit or a walk_pop (which adds to the trie
// itself); a frame says whether its node has operands left, and a run of four steps costs a
// third of a class per step where doubling cost one (figures in bench/README.md, *Plain arrays
// in the compiler's tables*). A frame holds the frame below it (the bottom frame stack_end).
template <class... Roots>
struct walk_roots {};
struct stack_end {};
template <class Def>
struct operands_of_def;
template <class Op, class... Cs>
struct operands_of_def<expr<Op, Cs...>> {
  using type = pack<Cs...>;
  static constexpr std::size_t size = sizeof...(Cs);
};
template <class N>
struct operands_of : operands_of_def<def_t<N>> {};
template <class... Roots>
struct operands_of<walk_roots<Roots...>> {
  using type = pack<Roots...>;
  static constexpr std::size_t size = sizeof...(Roots);
};

template <class N, std::size_t K, class Below, bool More = (K < operands_of<N>::size)>
struct frame {};
template <class Trie, class Stack>
struct walk_state {};

/// After node N's operands: N enters the trie (the roots' frame only leaves the stack). The
/// trie's rows are named here and in walk_visit, not through classes of their own (trie_has,
/// trie_add): a class instantiated per edge or per node costs g++ a few KB each.
template <class T, class N, class Below, std::uint64_t H = typeflow::detail::node_hash<N>::value>
struct walk_pop;
template <std::size_t C, class Top, class N, class Below, std::uint64_t H>
struct walk_pop<trie<C, Top>, N, Below, H> {
  // A leaf enters the registry here (a node with operands did as make_node made it).
  static_assert(sizeof(typeflow::detail::node_entry<H, def_t<N>>) > 0);
  using mid_ref = typename row_at<Top, top_of(H)>::type;
  using mid = typename mid_ref::type;
  // An enumerator, not a static member: g++ gives every static member it instantiates a symbol,
  // and this class's name spells the stack.
  enum : std::uint64_t { new_mid = row_hash_add(mid_ref::value, H, C) };
  static_assert(
      sizeof(typeflow::detail::walk_entry<
             new_mid, typename row_with<mid, mid_of(H),
                                        typename bucket_add<typename row_at<mid, mid_of(H)>::type,
                                                            H, C>::type>::type>) > 0);
  using type =
      walk_state<trie<C + 1, typename row_with<Top, top_of(H), ref<new_mid>>::type>, Below>;
};
template <class T, class N, std::size_t K, class Below, class C, bool Seen>
struct walk_visit {
  using type = walk_state<T, frame<N, K + 1, Below>>;
};
template <class T, class N, std::size_t K, class Below, class C>
struct walk_visit<T, N, K, Below, C, false> {
  using type = walk_state<T, frame<C, 0, frame<N, K + 1, Below>>>;
};
/// Whether the trie whose top row is Top holds H.
template <class Top, std::uint64_t H>
using top_has =
    bucket_has<typename row_at<typename row_at<Top, top_of(H)>::type::type, mid_of(H)>::type, H>;
/// 4^L steps (a finished walk, an empty stack, stays as it is).
template <class S, std::size_t L>
struct walk_steps {
  using type = typename walk_steps<
      typename walk_steps<typename walk_steps<typename walk_steps<S, L - 1>::type, L - 1>::type,
                          L - 1>::type,
      L - 1>::type;
};
template <class T>
struct walk_steps<walk_state<T, stack_end>, 0> {
  using type = walk_state<T, stack_end>;
};
/// One step: N's next operand is visited (or skipped, if seen), or N is done.
template <std::size_t Count, class Top, class N, std::size_t K, class Below>
struct walk_steps<walk_state<trie<Count, Top>, frame<N, K, Below, true>>, 0>
    : walk_visit<trie<Count, Top>, N, K, Below, pack_element_t<K, typename operands_of<N>::type>,
                 top_has<Top, typeflow::detail::node_hash<pack_element_t<
                                  K, typename operands_of<N>::type>>::value>::value> {};
template <std::size_t Count, class Top, class N, std::size_t K, class Below>
struct walk_steps<walk_state<trie<Count, Top>, frame<N, K, Below, false>>, 0>
    : walk_pop<trie<Count, Top>, N, Below> {};
template <std::size_t Count, class Top, class... Roots, std::size_t K, class Below>
struct walk_steps<walk_state<trie<Count, Top>, frame<walk_roots<Roots...>, K, Below, false>>, 0> {
  using type = walk_state<trie<Count, Top>, Below>;
};
template <class S>
struct walk_done : std::false_type {};
template <class T>
struct walk_done<walk_state<T, stack_end>> : std::true_type {};
/// Runs of 4^L, 4^(L+1), ... steps until the stack is empty.
template <class S, std::size_t L, bool Done = walk_done<S>::value>
struct walk_run {
  using type = typename walk_run<typename walk_steps<S, L>::type, L + 1>::type;
};
template <class S, std::size_t L>
struct walk_run<S, L, true> {
  using type = S;
};
template <class S>
struct walk_trie;
template <class T>
struct walk_trie<walk_state<T, stack_end>> {
  using type = T;
};
/// The trie T extended by the nodes that Roots need, in one walk.
template <class T, class... Roots>
using walk_from = typename walk_trie<
    typename walk_run<walk_state<T, frame<walk_roots<Roots...>, 0, stack_end>>, 0>::type>::type;
/// The last root is walked alone and all the roots then continue its trie: the walk of a root
/// alone is then the start of every walk that ends with it, and the compiler instantiates it
/// once. A session's `initialize(train)` walks `train`; its plan for `fetch(loss, train)` starts
/// from that walk and adds only what `loss` needs beyond it. (The first root first shared only
/// the forward graph of `loss` with the walk `grad` made, and a training graph was walked
/// twice; figures in bench/README.md.) In the post-order the last root's nodes come first, then
/// those only the others need.
template <class... Roots>
struct walk_seq {
  using type = walk_from<empty_trie, Roots...>;
};
template <class R, class R2, class... Rest>
struct walk_seq<R, R2, Rest...> {
  using last = pack_element_t<sizeof...(Rest) + 1, pack<R, R2, Rest...>>;
  using type = walk_from<walk_from<empty_trie, last>, R, R2, Rest...>;
};
/// The trie of the nodes that Roots need, each entry at its place in post-order.
template <class... Roots>
using walk_all = typename walk_seq<Roots...>::type;

/// A bucket's entries as plain arrays, and a row's buckets as views of them: each named by the
/// bucket or row alone. (Nested helpers of post_order, or a lambda in its initializer, were
/// functions named after the whole trie: g++ mangled the name of each, 46 KB apiece for a
/// 1,230-node walk, 25 MB in all, which was most of the mangler's time.)
struct bucket_view {
  const std::uint64_t* hashes = nullptr;
  const std::size_t* places = nullptr;
  std::size_t size = 0;
};
template <class Bucket>
struct bucket_entries;
template <std::uint64_t... Hs, std::size_t... Is>
struct bucket_entries<bucket<entry<Hs, Is>...>> {
  static constexpr std::uint64_t hashes[sizeof...(Hs) + 1] = {Hs..., 0};
  static constexpr std::size_t places[sizeof...(Hs) + 1] = {Is..., 0};
};
template <class Row>
struct row_views;
template <class... Buckets>
struct row_views<row<Buckets...>> {
  static constexpr std::array<bucket_view, 16> value{
      bucket_view{bucket_entries<Buckets>::hashes, bucket_entries<Buckets>::places,
                  sizeof(bucket_entries<Buckets>::places) / sizeof(std::size_t) - 1}...};
};
/// The identities of C entries put at their places in post-order (a plain array: see
/// core/pack.hpp's fill_all).
template <std::size_t C>
struct identities {
  std::uint64_t v[C];
};
template <std::size_t C, class... Rows>
consteval identities<C> gather(const Rows&... rows) {
  identities<C> out{};
  for (const std::array<bucket_view, 16>* r : {&rows...})
    for (const bucket_view& b : *r)
      for (std::size_t k = 0; k < b.size; ++k)
        out.v[b.places[k]] = b.hashes[k];
  return out;
}

/// The top row of a trie (a member type: no symbol).
template <class Trie>
struct trie_top;
template <std::size_t C, class Top>
struct trie_top<trie<C, Top>> {
  using type = Top;
};
/// The identities of a finished walk in post-order, kept by a class named after the walk's
/// roots. Nothing here is templated on the trie, which spells every node's identity: g++ names
/// every function and static member it instantiates (immediate functions included), and mangles
/// a name that long in time quadratic in the graph (bench/README.md, *Where g++'s time per block
/// grows*). Its rows' views are named after one row each, and gather after their common type.
template <class... Roots>
struct walk_order {
  using trie_type = walk_all<Roots...>;
  static constexpr std::size_t size = trie_type::count;

private:
  using top = typename trie_top<trie_type>::type;
  template <std::size_t K>
  static constexpr const std::array<bucket_view, 16>& row_of =
      row_views<typename row_at<top, K>::type::type>::value;

public:
  static constexpr identities<size> value = gather<size>(
      row_of<0>, row_of<1>, row_of<2>, row_of<3>, row_of<4>, row_of<5>, row_of<6>, row_of<7>,
      row_of<8>, row_of<9>, row_of<10>, row_of<11>, row_of<12>, row_of<13>, row_of<14>, row_of<15>);
};

/// The node whose identity is H (registered): node_ref<H>, or the leaf itself.
template <std::uint64_t H, class Def = decltype(node_def(typeflow::detail::node_key<H>{}))>
struct node_of {
  using type = node_ref<H>;
};
template <std::uint64_t H, class Op>
struct node_of<H, expr<Op>> {
  using type = expr<Op>;
};

template <class Order, class Seq = std::make_index_sequence<Order::size>>
struct order_of;
template <class Order, std::size_t... I>
struct order_of<Order, std::index_sequence<I...>> {
  using type = type_list<typename node_of<Order::value.v[I]>::type...>;
};
} // namespace detail

/// `type_list` of the distinct nodes reachable from `Roots`, children before parents.
template <class... Roots>
using topological_order = typename detail::order_of<detail::walk_order<Roots...>>::type;
#else
namespace detail {
/// The nested form's post-order, the same as the walk's above: the last root's nodes first.
template <class... Roots>
struct visit_seq {
  using type = typename visit_all<visited<>, Roots...>::type;
};
template <class R, class R2, class... Rest>
struct visit_seq<R, R2, Rest...> {
  using last = pack_element_t<sizeof...(Rest) + 1, pack<R, R2, Rest...>>;
  using type = typename visit_all<typename visit<visited<>, last>::type, R, R2, Rest...>::type;
};
} // namespace detail
/// `type_list` of the distinct nodes reachable from `Roots`, children before parents.
template <class... Roots>
using topological_order = typename detail::visit_seq<Roots...>::type::list;
#endif

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
