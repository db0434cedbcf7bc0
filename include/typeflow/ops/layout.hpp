// Layout ops (region boundaries): reshape, transpose, concat, slice.
#pragma once
#include <string>
#include <tuple>
#include <utility>

#include "../graph/node.hpp"

namespace typeflow {
namespace ops {

namespace detail_layout {
inline std::string join(std::initializer_list<std::int64_t> v) {
  std::string s = "[";
  bool first = true;
  for (auto x : v) {
    if (!first)
      s += ',';
    s += std::to_string(x); // (not `"," + to_string(x)`: g++ 12 -O3 warns, PR105329)
    first = false;
  }
  return s + "]";
}
} // namespace detail_layout

/// reshape<dims...>: at most one extent may be -1 (`dyn`), inferred from the element count.
template <std::int64_t... Dims>
struct reshape : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "reshape";
  static constexpr std::size_t out_rank = sizeof...(Dims);
  template <class A>
  using value_type = typename A::value_type;
  static std::string attrs() { return detail_layout::join({Dims...}); }
  static constexpr void attrs_message(detail::msg_buf& b) {
    b << std::string_view(" into [");
    bool first = true;
    ((b << std::string_view(first ? "" : ",") << Dims, first = false), ...);
    b << std::string_view("]");
  }
  template <std::size_t R>
  static constexpr rule_result<out_rank> rule(const dims_t<R>& d) {
    rule_result<out_rank> r{{}, {Dims...}};
    int inferred = -1, count = 0;
    std::int64_t known = 1;
    for (std::size_t i = 0; i < out_rank; ++i) {
      if (r.dims[i] == -1) {
        inferred = static_cast<int>(i);
        ++count;
      } else if (r.dims[i] < 0) {
        r.error = "negative extent";
        return r;
      } else {
        known *= r.dims[i];
      }
    }
    if (count > 1) {
      r.error = "more than one inferred extent";
      return r;
    }
    if (!is_static(d))
      return r; // checked again when fed; the inferred extent stays dyn
    const std::int64_t total = numel(d);
    if (inferred >= 0) {
      if (known == 0 || total % known != 0) {
        r.error = "element count does not divide";
        return r;
      }
      r.dims[inferred] = total / known;
    } else if (known != total) {
      r.error = "element counts differ";
    }
    return r;
  }
};

/// transpose<perm...>: output axis i is input axis perm[i].
template <std::int64_t... Perm>
struct transpose : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "transpose";
  static constexpr std::array<std::int64_t, sizeof...(Perm)> perm{Perm...};
  template <class A>
  using value_type = typename A::value_type;
  static std::string attrs() { return "perm=" + detail_layout::join({Perm...}); }
  static constexpr void attrs_message(detail::msg_buf& b) {
    b << std::string_view(" (perm");
    ((b << std::string_view(" ") << Perm), ...);
    b << std::string_view(")");
  }
  template <std::size_t R>
  static constexpr rule_result<sizeof...(Perm)> rule(const dims_t<R>& d) {
    rule_result<sizeof...(Perm)> r;
    if (R != sizeof...(Perm)) {
      r.error = "permutation length differs from the rank";
      return r;
    }
    std::array<bool, sizeof...(Perm)> seen{};
    for (std::size_t i = 0; i < R; ++i) {
      const auto p = perm[i];
      if (p < 0 || p >= static_cast<std::int64_t>(R) || seen[p]) {
        r.error = "not a permutation";
        return r;
      }
      seen[p] = true;
      r.dims[i] = d[p];
    }
    return r;
  }
};

/// concat<axis>(a, b, ...): equal ranks and extents except along the axis.
template <std::int64_t Axis>
struct concat {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "concat";
  template <class A, class...>
  using value_type = typename A::value_type;
  template <class... Cs>
  static constexpr std::string_view dtype_error() {
    return same_dtype<Cs...>() ? std::string_view{} : std::string_view{"operand dtypes differ"};
  }
  static std::string attrs() { return "axis=" + std::to_string(Axis); }
  static constexpr void attrs_message(detail::msg_buf& b) {
    b << std::string_view(" (axis ") << Axis << std::string_view(")");
  }
  template <std::size_t R, std::size_t... Rs>
  static constexpr rule_result<R> rule(const dims_t<R>& first, const dims_t<Rs>&... rest) {
    rule_result<R> r{{}, first};
    const std::int64_t axis = Axis < 0 ? Axis + static_cast<std::int64_t>(R) : Axis;
    if (axis < 0 || axis >= static_cast<std::int64_t>(R)) {
      r.error = "axis out of range";
      return r;
    }
    if (!all_of({(Rs == R)..., true})) {
      r.error = "ranks differ";
      return r;
    }
    auto add = [&](const auto& d) {
      for (std::size_t i = 0; i < R; ++i) {
        if (static_cast<std::int64_t>(i) == axis) {
          r.dims[i] = (r.dims[i] == dyn || d[i] == dyn) ? dyn : r.dims[i] + d[i];
        } else if (d[i] != r.dims[i] && d[i] != dyn && r.dims[i] != dyn) {
          r.error = "extents differ off the concatenation axis";
        } else if (r.dims[i] == dyn) {
          r.dims[i] = d[i];
        }
      }
    };
    [[maybe_unused]] const int seq[] = {(add(rest), 0)..., 0};
    return r;
  }
};

/// slice<ints<begin...>, ints<size...>>: a size of -1 runs to the end of the axis.
template <class Begin, class Size>
struct slice : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "slice";
  static constexpr auto begin = Begin::values;
  static constexpr auto size = Size::values;
  template <class A>
  using value_type = typename A::value_type;
  static std::string attrs() {
    std::string b = "begin=[", s = "size=[";
    for (std::size_t i = 0; i < Begin::size; ++i)
      (b += i ? "," : "", b += std::to_string(begin[i]));
    for (std::size_t i = 0; i < Size::size; ++i)
      (s += i ? "," : "", s += std::to_string(size[i]));
    return b + "], " + s + "]";
  }
  static constexpr void attrs_message(detail::msg_buf& b) {
    b << std::string_view(" (begin");
    for (auto v : begin)
      b << std::string_view(" ") << v;
    b << std::string_view(", size");
    for (auto v : size)
      b << std::string_view(" ") << v;
    b << std::string_view(")");
  }
  template <std::size_t R>
  static constexpr rule_result<Size::size> rule(const dims_t<R>& d) {
    rule_result<Size::size> r;
    if (Begin::size != R || Size::size != R) {
      r.error = "begin and size must have one entry per axis";
      return r;
    }
    for (std::size_t i = 0; i < R; ++i) {
      if (begin[i] < 0 || size[i] < -1) {
        r.error = "negative begin or size";
        return r;
      }
      if (d[i] == dyn) {
        r.dims[i] = size[i] == -1 ? dyn : size[i];
        continue;
      }
      const std::int64_t n = size[i] == -1 ? d[i] - begin[i] : size[i];
      if (begin[i] > d[i] || n < 0 || begin[i] + n > d[i]) {
        r.error = "slice out of bounds";
        return r;
      }
      r.dims[i] = n;
    }
    return r;
  }
};

/// expand_dims<axes...>(x): inserts extent-1 axes at the given output positions (a view).
template <std::int64_t... Axes>
struct expand_dims : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "expand_dims";
  template <class A>
  using value_type = typename A::value_type;
  static std::string attrs() { return "axes=" + detail_layout::join({Axes...}); }
  template <std::size_t R>
  static constexpr rule_result<R + sizeof...(Axes)> rule(const dims_t<R>& d) {
    constexpr std::size_t out = R + sizeof...(Axes);
    rule_result<out> r;
    std::array<bool, out> ins{};
    for (std::int64_t a : {Axes...}) {
      const std::int64_t k = a < 0 ? a + static_cast<std::int64_t>(out) : a;
      if (k < 0 || k >= static_cast<std::int64_t>(out) || ins[k]) {
        r.error = "axis out of range or repeated";
        return r;
      }
      ins[k] = true;
    }
    std::size_t j = 0;
    for (std::size_t i = 0; i < out; ++i)
      r.dims[i] = ins[i] ? 1 : d[j++];
    return r;
  }
};

/// reshape_like(a, x): a's elements with x's (run-time) shape (a view).
struct reshape_like : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "reshape_like";
  static constexpr unsigned shape_only = 1u << 1; // x: graph/node.hpp
  template <class A, class X>
  using value_type = typename A::value_type;
  template <std::size_t RA, std::size_t RX>
  static constexpr rule_result<RX> rule(const dims_t<RA>& a, const dims_t<RX>& x) {
    rule_result<RX> r{{}, x};
    if (is_static(a) && is_static(x) && numel(a) != numel(x))
      r.error = "element counts differ";
    return r;
  }
};

/// replica_mean(g): g averaged over the towers of a replicated session, each weighted by its
/// share of the batch (minimize() wraps every gradient in one). Outside a replicated session it
/// is g itself (a view).
struct replica_mean : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "replica_mean";
  static constexpr bool all_reduce = true; // graph/node.hpp
  template <class A>
  using value_type = typename A::value_type;
  template <std::size_t R>
  static constexpr rule_result<R> rule(const dims_t<R>& a) {
    return {{}, a};
  }
};

/// pad_like<ints<begin...>>(g, x): a zero tensor of x's shape with g written at `begin` (the
/// gradient of slice).
template <class Begin>
struct pad_like : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "pad_like";
  static constexpr auto begin = Begin::values;
  template <class A, class X>
  using value_type = typename A::value_type;
  static std::string attrs() {
    std::string b = "begin=[";
    for (std::size_t i = 0; i < Begin::size; ++i)
      (b += i ? "," : "", b += std::to_string(begin[i]));
    return b + "]";
  }
  template <std::size_t RA, std::size_t RX>
  static constexpr rule_result<RX> rule(const dims_t<RA>& a, const dims_t<RX>& x) {
    rule_result<RX> r{{}, x};
    if (RA != RX || Begin::size != RX) {
      r.error = "ranks differ";
      return r;
    }
    for (std::size_t i = 0; i < RX; ++i)
      if (a[i] != dyn && x[i] != dyn && begin[i] + a[i] > x[i])
        r.error = "padded region out of bounds";
    return r;
  }
};

/// slice_like<ints<begin...>>(g, a): the block of g at `begin` with a's shape.
template <class Begin>
struct slice_like : no_dtype_rule {
  static constexpr node_kind kind = node_kind::layout;
  static constexpr std::string_view name = "slice_like";
  static constexpr auto begin = Begin::values;
  template <class G, class A>
  using value_type = typename G::value_type;
  static std::string attrs() { return pad_like<Begin>::attrs(); }
  template <std::size_t RG, std::size_t RA>
  static constexpr rule_result<RA> rule(const dims_t<RG>& g, const dims_t<RA>& a) {
    rule_result<RA> r{{}, a};
    if (RA != RG || Begin::size != RA) {
      r.error = "ranks differ";
      return r;
    }
    for (std::size_t i = 0; i < RA; ++i)
      if (a[i] != dyn && g[i] != dyn && begin[i] + a[i] > g[i])
        r.error = "slice out of bounds";
    return r;
  }
};

} // namespace ops

/// pad_like<ints<begin...>>(g, x)
template <class Begin, expression A, expression X>
consteval auto pad_like(A, X) {
  return make_node<ops::pad_like<Begin>, A, shape_source_t<X>>();
}
/// slice_like<ints<begin...>>(g, a)
template <class Begin, expression G, expression A>
consteval auto slice_like(G, A) {
  return make_node<ops::slice_like<Begin>, G, shape_source_t<A>>();
}

/// expand_dims<axes...>(x)
template <std::int64_t... Axes, expression A>
consteval auto expand_dims(A) {
  return make_node<ops::expand_dims<Axes...>, A>();
}

/// replica_mean(g): see ops::replica_mean.
template <expression A>
consteval auto replica_mean(A) {
  return make_node<ops::replica_mean, A>();
}

/// reshape_like(a, x)
template <expression A, expression X>
consteval auto reshape_like(A, X) {
  return make_node<ops::reshape_like, A, shape_source_t<X>>();
}

/// reshape<dims...>(x); one extent may be -1 (`dyn`) and is inferred.
template <std::int64_t... Dims, expression A>
consteval auto reshape(A) {
  return make_node<ops::reshape<Dims...>, A>();
}

namespace detail {
template <class A, std::size_t... I>
consteval auto reversed_transpose(std::index_sequence<I...>) {
  return make_node<ops::transpose<static_cast<std::int64_t>(A::shape_type::rank - 1 - I)...>, A>();
}
} // namespace detail

/// transpose<perm...>(x); transpose(x) reverses the axes.
template <std::int64_t... Perm, expression A>
consteval auto transpose(A) {
  if constexpr (sizeof...(Perm) == 0)
    return detail::reversed_transpose<A>(std::make_index_sequence<A::shape_type::rank>{});
  else
    return make_node<ops::transpose<Perm...>, A>();
}

/// concat<axis>(a, b, ...)
template <std::int64_t Axis, expression... A>
consteval auto concat(A...) {
  static_assert(sizeof...(A) >= 1, "concat: needs at least one operand");
  return make_node<ops::concat<Axis>, A...>();
}

/// slice<ints<begin...>, ints<size...>>(x)
template <class Begin, class Size, expression A>
consteval auto slice(A) {
  return make_node<ops::slice<Begin, Size>, A>();
}

namespace detail {
template <std::int64_t Ax, std::int64_t At, std::int64_t Sz, class A, std::size_t... I>
consteval auto split_piece(A a, std::index_sequence<I...>) {
  return typeflow::slice<ints<(static_cast<std::int64_t>(I) == Ax ? At : 0)...>,
                         ints<(static_cast<std::int64_t>(I) == Ax ? Sz : -1)...>>(a);
}
} // namespace detail

/// split<axis, n>(x): n equal slices of x along axis (negative from the end), as a std::tuple:
/// `auto [q, k, v] = ty::split<-1, 3>(qkv);`. The extent along the axis must be static and
/// divisible by n.
template <std::int64_t Axis, std::int64_t N, expression A>
consteval auto split(A a) {
  constexpr auto r = static_cast<std::int64_t>(A::shape_type::rank);
  constexpr std::int64_t ax = Axis < 0 ? Axis + r : Axis;
  static_assert(ax >= 0 && ax < r, "split: the axis is out of range");
  static_assert(N >= 1, "split: the number of pieces must be at least 1");
  constexpr std::int64_t extent = A::shape_type::dims[static_cast<std::size_t>(ax)];
  static_assert(extent != dyn, "split: the extent along the axis must be static");
  static_assert(extent % N == 0, "split: the extent along the axis is not divisible by n");
  constexpr std::int64_t size = extent / N;
  return [a]<std::size_t... P>(std::index_sequence<P...>) {
    return std::tuple{detail::split_piece<ax, static_cast<std::int64_t>(P) * size, size>(
        a, std::make_index_sequence<static_cast<std::size_t>(r)>{})...};
  }
  (std::make_index_sequence<static_cast<std::size_t>(N)>{});
}

} // namespace typeflow
