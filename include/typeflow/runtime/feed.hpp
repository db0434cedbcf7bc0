// fetch(...) and feed(...): what a run computes and what it is given.
#pragma once
#include <type_traits>

#include "../backend/common/value.hpp"
#include "../core/tensor.hpp"
#include "../graph/node.hpp"
#include "../ops/leaves.hpp"

namespace typeflow {

/// The nodes a run computes and returns (groups run but return nothing).
template <class... E>
struct fetch_t {};

template <class... E>
requires expressions<E...>
constexpr fetch_t<E...> fetch(E...) {
  return {};
}

/// One fed placeholder: a non-owning view of host memory.
template <class P>
struct feed_t {
  using placeholder = P;                     ///< the placeholder node fed
  using value_type = typename P::value_type; ///< its dtype
  const value_type* data = nullptr;          ///< the first element, row-major
  backend::rt_dims dims;                     ///< the extents fed
};

namespace detail {
template <class P, class U>
struct feed_dtype_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("feed: placeholder \"") << P::op::name
      << std::string_view("\" has dtype ")
      << dtype_name<typename P::value_type> << std::string_view(", fed ") << dtype_name<U>;
    return b;
  }
};

template <class P>
struct not_placeholder_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("feed: only placeholders can be fed, not ") << P::op::name
      << std::string_view(" ");
    append_dims(b, P::shape_type::dims);
    b << std::string_view(" (a variable is set with session::write)");
    return b;
  }
};

template <class P, class U>
feed_t<P> make_feed(const U* data, const std::vector<std::int64_t>& dims) {
  if constexpr (!is_placeholder<P>) {
    using invalid [[maybe_unused]] = reject<not_placeholder_message<P>>;
    return {};
  } else if constexpr (!std::is_same_v<U, typename P::value_type>) {
    using invalid [[maybe_unused]] = reject<feed_dtype_message<P, U>>;
    return {};
  } else {
    if (dims.size() > max_rank)
      throw error("feed: placeholder \"" + std::string(P::op::name) + "\" expects " +
                  dims_string(P::shape_type::dims) + ", fed " + dims_string(dims));
    feed_t<P> f;
    f.data = data;
    f.dims.rank = dims.size();
    for (std::size_t i = 0; i < dims.size(); ++i)
      f.dims.d[i] = dims[i];
    return f;
  }
}
} // namespace detail

/// feed(placeholder, tensor): the tensor must outlive the run.
template <expression P, dtype U>
feed_t<P> feed(P, const tensor<U>& t) {
  return detail::make_feed<P, U>(t.data(), t.shape());
}

/// feed(placeholder, view): a non-owning view of user memory.
template <expression P, dtype U>
feed_t<P> feed(P, const tensor_view<U>& v) {
  return detail::make_feed<P, U>(v.data, v.dims);
}

} // namespace typeflow
