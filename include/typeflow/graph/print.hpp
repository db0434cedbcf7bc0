// to_string(expr): a readable form of any expression, e.g. `relu(add(matmul(x, W), b))`.
#pragma once
#include <string>

#include "node.hpp"

namespace typeflow {

namespace detail {
template <class Op>
concept has_attrs = requires {
  Op::attrs();
};

template <class Def>
struct printer;

template <class Op, class... Cs>
struct printer<expr<Op, Cs...>> {
  static std::string str() {
    if constexpr (sizeof...(Cs) == 0 && requires { Op::to_string(); }) {
      return Op::to_string();
    } else {
      std::string s = std::string(Op::name) + "(";
      bool first = true;
      [[maybe_unused]] const int seq[] = {
          ((s += (first ? "" : ", ") + printer<def_t<Cs>>::str(), first = false), 0)..., 0};
      if constexpr (has_attrs<Op>) {
        const std::string a = Op::attrs();
        if (!a.empty())
          s += (first ? "" : ", ") + a;
      }
      return s + ")";
    }
  }
};
} // namespace detail

/// The readable form of an expression: ops as calls, leaves by name, attributes last.
template <expression E>
std::string to_string(E) {
  return detail::printer<def_t<E>>::str();
}

} // namespace typeflow
