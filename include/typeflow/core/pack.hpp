// pack<Ts...>: the tuple of generated code, whose element count grows with the model (the
// inputs, members and values of a fused region; a sum of 300 squares has 600 members).
//
// std::tuple is the wrong tool there: every std::get<I> and std::tuple_element_t<I, ...>
// instantiates a helper named after the whole element list (libstdc++'s _Nth_type<I, Ts...>),
// so n look-ups into an n-element tuple cost O(n^2) in names and memory, and with it the whole
// compile of a model with hundreds of variables. A pack is one class with a base per element;
// pack_get<I> finds the element by deducing the base's type (no instantiation named after the
// list), and pack_element_t<I, P> does the same in an unevaluated call. An aggregate, one brace
// per element (pack<float, int>{{1.f}, {2}}; clang's -Wmissing-braces wants them), or {} for
// every element value-initialised; in host and device code.
#pragma once
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "dtype.hpp"

namespace typeflow {

namespace detail {
template <std::size_t I, class T>
struct pack_slot {
  T value;
};
template <class Seq, class... Ts>
struct pack_of;
template <std::size_t... I, class... Ts>
struct pack_of<std::index_sequence<I...>, Ts...> : pack_slot<I, Ts>... {};
template <std::size_t I, class T>
std::type_identity<T> pack_slot_type(const pack_slot<I, T>*);
} // namespace detail

/// An aggregate of one value per type, indexed at compile time (see the top of this file).
template <class... Ts>
using pack = detail::pack_of<std::index_sequence_for<Ts...>, Ts...>;

/// Element I of a pack.
template <std::size_t I, class T>
TYPEFLOW_HD constexpr T& pack_get(detail::pack_slot<I, T>& s) {
  return s.value;
}
template <std::size_t I, class T>
TYPEFLOW_HD constexpr const T& pack_get(const detail::pack_slot<I, T>& s) {
  return s.value;
}

/// The type of element I of pack P.
template <std::size_t I, class P>
using pack_element_t =
    typename decltype(detail::pack_slot_type<I>(static_cast<const P*>(nullptr)))::type;

/// Whether every flag is true: all_of({X...}) for a condition over a pack that can be as long
/// as a model is wide. (A fold expression, (X && ...), is limited to 256 operands under clang,
/// -fbracket-depth; a braced list is not. Likewise, a statement per element of a pack is
/// sequenced as `const int seq[] = {(statement, 0)..., 0};`, not by a comma fold.)
template <std::size_t N>
constexpr bool all_of(const bool (&flags)[N]) {
  for (bool f : flags)
    if (!f)
      return false;
  return true;
}
/// Whether some flag is true: any_of({X...}) (see all_of).
template <std::size_t N>
constexpr bool any_of(const bool (&flags)[N]) {
  for (bool f : flags)
    if (f)
      return true;
  return false;
}

namespace detail {
inline constexpr std::size_t table_chunk = 64;
template <class V, template <std::size_t> class G, std::size_t B, std::size_t... K>
constexpr void fill_chunk(V* out, std::index_sequence<K...>) {
  const V v[] = {G<B + K>::value...};
  for (std::size_t k = 0; k < sizeof...(K); ++k)
    out[B + k] = v[k];
}
constexpr std::size_t chunk_size(std::size_t n, std::size_t c) {
  return n - c * table_chunk < table_chunk ? n - c * table_chunk : table_chunk;
}
template <class V, std::size_t N, template <std::size_t> class G, std::size_t... C>
constexpr std::array<V, N> fill_table(std::index_sequence<C...>) {
  std::array<V, N> a{};
  const bool filled[] = {
      (fill_chunk<V, G, C * table_chunk>(a.data(), std::make_index_sequence<chunk_size(N, C)>{}),
       true)...,
      true};
  (void)filled;
  return a;
}
} // namespace detail

/// The array {G<0>::value, ..., G<N-1>::value}, for a table with an entry per node of a graph.
/// Built in chunks of 64 indices, never as one expansion of a pack of N: both compilers spend
/// O(N) on each element of a pack expansion inside a function templated on N indices (the
/// index_sequence<I...> idiom), O(N^2) in all; a chunk's function has 64 indices, and the
/// function over the chunks N / 64 (measured, g++ 12 and clang 19: 16,384 elements took 2.6 and
/// 3.7 s as one pack, 0.4 s in chunks).
template <class V, std::size_t N, template <std::size_t> class G>
constexpr std::array<V, N> indexed_table() {
  return detail::fill_table<V, N, G>(
      std::make_index_sequence<(N + detail::table_chunk - 1) / detail::table_chunk>{});
}

/// Plain arrays for tables that constant evaluation reads often (the compiler's stages, the
/// placement): in a constant evaluation g++ evaluates std::array's operator[] as a call, which
/// allocates, where a built-in subscript allocates nearly nothing, and the stages read their
/// tables hundreds of thousands of times for a large model (bench/README.md, *Plain arrays in
/// the compiler's tables*). Plain arrays are filled and assigned with these.
/// (Over any array type A, not T (&)[N]: an empty fetch list makes a plan of no nodes, whose
/// zero-length arrays, a GNU extension, deduce no N.)
template <class A, class V>
constexpr void fill_all(A& a, const V& v) {
  for (std::size_t i = 0; i < std::extent_v<A>; ++i)
    a[i] = v;
}
template <class A, class Src>
constexpr void copy_all(A& a, const Src& src) {
  for (std::size_t i = 0; i < std::extent_v<A>; ++i)
    a[i] = src[i];
}

} // namespace typeflow
