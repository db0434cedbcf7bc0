// Shapes: static extents plus `dyn` for extents known only when fed.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fixed_string.hpp"

namespace typeflow {

/// An extent known only at run time (the batch). In `reshape` it marks the inferred extent.
inline constexpr std::int64_t dyn = -1;

/// Maximum rank of any tensor.
inline constexpr std::size_t max_rank = 8;

template <std::size_t R>
using dims_t = std::array<std::int64_t, R>;

/// A static shape: `shape<dyn, 28, 28, 1>`; `shape<>` is a scalar.
template <std::int64_t... E>
struct shape {
  static constexpr std::size_t rank = sizeof...(E);
  static constexpr dims_t<rank> dims{E...};
  static_assert(rank <= max_rank, "shape: rank above typeflow::max_rank");
  static_assert(((E >= 0 || E == dyn) && ...), "shape: extents must be >= 0 or typeflow::dyn");
};

/// A list of integers as a template argument (axes, permutations, slice bounds).
template <std::int64_t... V>
struct ints {
  static constexpr std::size_t size = sizeof...(V);
  static constexpr std::array<std::int64_t, size> values{V...};
};

namespace detail {
template <auto Dims, class Seq>
struct shape_from_impl;
template <auto Dims, std::size_t... I>
struct shape_from_impl<Dims, std::index_sequence<I...>> {
  using type = shape<Dims[I]...>;
};
} // namespace detail

/// The `shape<...>` type of a constexpr dims array.
template <auto Dims>
using shape_from =
    typename detail::shape_from_impl<Dims, std::make_index_sequence<Dims.size()>>::type;

template <std::size_t R>
constexpr bool is_static(const dims_t<R>& d) {
  for (auto e : d)
    if (e == dyn)
      return false;
  return true;
}

template <std::size_t R>
constexpr std::int64_t numel(const dims_t<R>& d) {
  std::int64_t n = 1;
  for (auto e : d)
    n *= e;
  return n;
}

/// Writes `[?,784]` into a compile-time message.
template <std::size_t R>
constexpr void append_dims(detail::msg_buf& b, const dims_t<R>& d) {
  b << std::string_view("[");
  for (std::size_t i = 0; i < R; ++i) {
    if (i)
      b << std::string_view(",");
    if (d[i] == dyn)
      b << std::string_view("?");
    else
      b << d[i];
  }
  b << std::string_view("]");
}

/// Run-time form of the same: `[2,784]`.
template <class It>
std::string dims_string(It first, It last) {
  std::string s = "[";
  for (It i = first; i != last; ++i) {
    if (i != first)
      s += ",";
    s += *i == dyn ? std::string("?") : std::to_string(*i);
  }
  return s + "]";
}
template <class C>
std::string dims_string(const C& c) {
  return dims_string(std::begin(c), std::end(c));
}

} // namespace typeflow
