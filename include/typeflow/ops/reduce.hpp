// Reductions over chosen axes, with keepdims: sum, mean, max, min, argmax.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "../graph/node.hpp"

namespace typeflow {

/// Tag: keep reduced axes as extent 1.
struct keepdims_t {};
inline constexpr keepdims_t keepdims{};

namespace ops {

namespace reducers {
struct sum {
  static constexpr std::string_view name = "sum";
  template <class T>
  static constexpr T identity() {
    return T(0);
  }
};
struct mean : sum {
  static constexpr std::string_view name = "mean";
};
// Conventions: max/min of an empty axis is the lowest/highest value (as TensorFlow); ties in
// argmax go to the first index; NaN propagates through max and min.
struct max {
  static constexpr std::string_view name = "max";
  template <class T>
  static constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity)
      return -std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::lowest();
  }
};
struct min {
  static constexpr std::string_view name = "min";
  template <class T>
  static constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity)
      return std::numeric_limits<T>::infinity();
    else
      return std::numeric_limits<T>::max();
  }
};
struct argmax {
  static constexpr std::string_view name = "argmax";
};
} // namespace reducers

/// The reduced axes of a reduction over `Axes` (all when empty) of a rank-R input.
template <std::size_t R, std::int64_t... Axes>
constexpr std::array<bool, R> reduced_mask(std::string_view* error = nullptr) {
  std::array<bool, R> m{};
  if constexpr (sizeof...(Axes) == 0) {
    m.fill(true);
  } else {
    for (std::int64_t a : {Axes...}) {
      const std::int64_t k = a < 0 ? a + static_cast<std::int64_t>(R) : a;
      if (k < 0 || k >= static_cast<std::int64_t>(R)) {
        if (error)
          *error = "axis out of range";
      } else if (m[k]) {
        if (error)
          *error = "axis repeated";
      } else {
        m[k] = true;
      }
    }
  }
  return m;
}

template <class Reducer, bool Keep, std::int64_t... Axes>
struct reduce {
  static constexpr node_kind kind = node_kind::reduction;
  static constexpr std::string_view name = Reducer::name;
  static constexpr bool reads_fused_input = true; // see graph/op_traits.hpp
  /// max and min select by value: their gradient reads its operands exactly (autodiff's saved_in).
  static constexpr bool keeps_float32 =
      std::is_same_v<Reducer, reducers::max> || std::is_same_v<Reducer, reducers::min>;
  using reducer = Reducer;
  static constexpr bool keep = Keep;

  template <class A>
  using value_type = std::conditional_t<std::is_same_v<Reducer, reducers::argmax>, std::int64_t,
                                        typename A::value_type>;

  template <class A>
  static constexpr std::string_view dtype_error() {
    if (std::is_same_v<typename A::value_type, bool>)
      return "cannot reduce a bool tensor";
    return {};
  }

  template <std::size_t R>
  static constexpr std::size_t out_rank() {
    if constexpr (Keep)
      return R;
    if constexpr (sizeof...(Axes) == 0)
      return 0;
    return R >= sizeof...(Axes) ? R - sizeof...(Axes) : 0;
  }

  template <std::size_t R>
  static constexpr rule_result<out_rank<R>()> rule(const dims_t<R>& d) {
    rule_result<out_rank<R>()> r;
    if (std::is_same_v<Reducer, reducers::argmax> && sizeof...(Axes) != 1) {
      r.error = "argmax takes exactly one axis";
      return r;
    }
    const auto mask = reduced_mask<R, Axes...>(&r.error);
    if (!r.ok())
      return r;
    std::size_t o = 0;
    for (std::size_t i = 0; i < R; ++i) {
      if (!mask[i])
        r.dims[o++] = d[i];
      else if (Keep)
        r.dims[o++] = 1;
    }
    return r;
  }

  template <std::size_t R>
  static constexpr std::array<bool, R> mask() {
    return reduced_mask<R, Axes...>();
  }

  static constexpr void attrs_message(detail::msg_buf& b) {
    b << std::string_view(" (axes");
    ((b << std::string_view(" ") << Axes), ...);
    b << std::string_view(")");
  }
  static std::string attrs() {
    std::string s;
    if constexpr (sizeof...(Axes) > 0) {
      s = "axes=[";
      bool first = true;
      ((s += first ? "" : ",", s += std::to_string(Axes), first = false), ...);
      s += "]";
    }
    if (Keep)
      s += s.empty() ? "keepdims" : ", keepdims";
    return s;
  }
};

/// sum_to_like(c, x): c summed over the axes along which it was broadcast to reach x's shape,
/// decided at run time (a dyn extent of x may turn out to be 1). Used to undo broadcasting.
struct sum_to_like {
  static constexpr node_kind kind = node_kind::reduction;
  static constexpr std::string_view name = "sum_to_like";
  template <class C, class X>
  using value_type = typename C::value_type;
  template <class C, class X>
  static constexpr std::string_view dtype_error() {
    return std::is_same_v<typename C::value_type, bool>
               ? std::string_view{"cannot reduce a bool tensor"}
               : std::string_view{};
  }
  template <std::size_t RC, std::size_t RX>
  static constexpr rule_result<RX> rule(const dims_t<RC>& c, const dims_t<RX>& x) {
    rule_result<RX> r{{}, x};
    if (RX > RC) {
      r.error = "target rank above the operand's";
      return r;
    }
    for (std::size_t i = 0; i < RX; ++i) {
      const std::int64_t e = c[i + RC - RX];
      if (x[i] != e && x[i] != 1 && x[i] != dyn && e != dyn)
        r.error = "shape is not a broadcast of the target";
    }
    return r;
  }
};

/// element_count<axes...>(x): the number of elements a reduction over `axes` combines, as a
/// scalar of x's dtype (known at run time when an axis is dyn). Used by mean's gradient.
template <std::int64_t... Axes>
struct element_count : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "element_count";
  template <class A>
  using value_type = typename A::value_type;
  static std::string attrs() { return reduce<reducers::sum, false, Axes...>::attrs(); }
  template <std::size_t R>
  static constexpr rule_result<0> rule(const dims_t<R>&) {
    rule_result<0> r;
    reduced_mask<R, Axes...>(&r.error);
    return r;
  }
  template <std::size_t R>
  static constexpr std::array<bool, R> mask() {
    return reduced_mask<R, Axes...>();
  }
};

} // namespace ops

/// sum_to_like(c, x)
template <expression C, expression X>
consteval auto sum_to_like(C, X) {
  return make_node<ops::sum_to_like, C, shape_source_t<X>>();
}

/// element_count<axes...>(x)
template <std::int64_t... Axes, expression A>
consteval auto element_count(A) {
  return make_node<ops::element_count<Axes...>, shape_source_t<A>>();
}

#define TYPEFLOW_REDUCTION(NAME)                                                                   \
  template <std::int64_t... Axes, expression A>                                                    \
  consteval auto NAME(A) {                                                                         \
    return make_node<ops::reduce<ops::reducers::NAME, false, Axes...>, A>();                       \
  }                                                                                                \
  template <std::int64_t... Axes, expression A>                                                    \
  consteval auto NAME(A, keepdims_t) {                                                             \
    return make_node<ops::reduce<ops::reducers::NAME, true, Axes...>, A>();                        \
  }
/// sum<axes...>(x[, keepdims]): all axes when none are given; negative axes count from the end.
TYPEFLOW_REDUCTION(sum)
TYPEFLOW_REDUCTION(mean)
TYPEFLOW_REDUCTION(max)
TYPEFLOW_REDUCTION(min)
#undef TYPEFLOW_REDUCTION

/// argmax<axis>(x): int64 index of the largest element along one axis (first on ties).
template <std::int64_t Axis, expression A>
consteval auto argmax(A) {
  return make_node<ops::reduce<ops::reducers::argmax, false, Axis>, A>();
}
template <std::int64_t Axis, expression A>
consteval auto argmax(A, keepdims_t) {
  return make_node<ops::reduce<ops::reducers::argmax, true, Axis>, A>();
}

} // namespace typeflow
