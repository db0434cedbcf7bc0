// Compile-time strings: names of placeholders and variables, and compile-time error messages.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

namespace typeflow {

/// A string usable as a template argument: `placeholder<"images", ...>`.
template <std::size_t N>
struct fixed_string {
  char data[N + 1]{};
  constexpr fixed_string() = default;
  constexpr fixed_string(const char (&s)[N + 1]) { // NOLINT: implicit on purpose
    for (std::size_t i = 0; i <= N; ++i)
      data[i] = s[i];
  }
  static constexpr std::size_t size() { return N; }
  constexpr std::string_view view() const { return {data, N}; }
  template <std::size_t M>
  constexpr bool operator==(const fixed_string<M>& o) const {
    return view() == o.view();
  }
};
template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N - 1>;

/// Concatenation: `Name + fixed_string("/weights")` names a layer's variables.
template <std::size_t N, std::size_t M>
constexpr fixed_string<N + M> operator+(const fixed_string<N>& a, const fixed_string<M>& b) {
  fixed_string<N + M> r;
  for (std::size_t i = 0; i < N; ++i)
    r.data[i] = a.data[i];
  for (std::size_t i = 0; i < M; ++i)
    r.data[N + i] = b.data[i];
  return r;
}

/// A name as a type: the characters of a fixed_string as a pack. Op types hold names this way,
/// not as class-type template arguments, so that nvcc's host-code generation can spell them (it
/// cannot spell a class-type template argument outside a template).
template <char... C>
struct static_name {
  static constexpr char chars[sizeof...(C) + 1] = {C..., '\0'};
  static constexpr fixed_string<sizeof...(C)> value{chars};
  static constexpr std::string_view view() { return {chars, sizeof...(C)}; }
};

namespace detail {
template <class Seq>
struct static_name_of;
template <std::size_t... I>
struct static_name_of<std::index_sequence<I...>> {
  template <fixed_string S>
  using type = static_name<S.data[I]...>;
};
} // namespace detail

/// `name_t<"conv1/weights">` is `static_name<'c', 'o', ...>`.
template <fixed_string S>
using name_t =
    typename detail::static_name_of<std::make_index_sequence<S.size()>>::template type<S>;

namespace detail {

/// A bounded constexpr string builder for compile-time messages.
struct msg_buf {
  char data[512]{};
  std::size_t n = 0;
  constexpr msg_buf& operator<<(std::string_view s) {
    for (char c : s)
      if (n < sizeof(data) - 1)
        data[n++] = c;
    return *this;
  }
  constexpr msg_buf& operator<<(std::int64_t v) {
    if (v < 0) {
      *this << std::string_view("-");
      v = -v;
    }
    char tmp[24]{};
    int k = 0;
    do {
      tmp[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0)
      data[n < sizeof(data) - 1 ? n++ : n] = tmp[--k];
    return *this;
  }
};

template <std::size_t N>
constexpr fixed_string<N> shrink(const msg_buf& b) {
  fixed_string<N> s;
  for (std::size_t i = 0; i < N; ++i)
    s.data[i] = b.data[i];
  return s;
}

} // namespace detail

/// A model the library rejects at compile time. Its message (the op, the problem and the
/// shapes) is the template argument, so that the compiler's first error line spells it:
///   error: no type named 'see_message' in 'struct typeflow::invalid_model<
///          typeflow::fixed_string<51>{"matmul: inner dimensions differ: [?,784] x [100,10]"}>'
/// Compilers with computed static_assert messages (C++26, P2741R3: clang 17+ or g++ 14+ with
/// -std=c++2c) print the message as the assertion's instead.
template <fixed_string Msg>
struct invalid_model {};

namespace detail {
/// The message a builder (a type with `static constexpr msg_buf message()`) makes.
template <class Builder>
inline constexpr auto message_of = [] {
  constexpr msg_buf b = Builder::message();
  return shrink<b.n>(b);
}();
/// Rejects the model with Builder's message where the misuse is found:
///   using invalid = detail::reject<detail::shape_message<Op, Cs...>>;
/// (an alias, so that the diagnostic has no extra instantiation frame).
#if defined(__cpp_static_assert) && __cpp_static_assert >= 202306L
template <class Builder>
struct rejected {
  static_assert(false, message_of<Builder>.view());
  using type = void;
};
template <class Builder>
using reject = typename rejected<Builder>::type;
#else
template <class Builder>
using reject = typename invalid_model<message_of<Builder>>::see_message;
#endif
/// reject_unless<Ok, Builder>::type: void when Ok, else the rejection (for class scopes).
template <bool Ok, class Builder>
struct reject_unless {
  using type = void;
};
template <class Builder>
struct reject_unless<false, Builder> {
  using type = reject<Builder>;
};
} // namespace detail

} // namespace typeflow
