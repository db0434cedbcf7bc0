// NumPy broadcasting of static and run-time extents.
#pragma once
#include <algorithm>

#include "../graph/node.hpp"

namespace typeflow::detail {

/// Right-aligned NumPy broadcasting of any number of shapes. At compile time an extent may be
/// `dyn`: `dyn` against a static `n != 1` gives `n` (checked again when fed), `dyn` against `1`
/// or `dyn` gives `dyn`.
template <std::size_t... R>
constexpr rule_result<std::max({std::size_t{0}, R...})> broadcast_rule(const dims_t<R>&... ds) {
  constexpr std::size_t out_rank = std::max({std::size_t{0}, R...});
  rule_result<out_rank> r;
  for (std::size_t k = 0; k < out_rank; ++k)
    r.dims[k] = 1;
  auto merge = [&](const auto& d) {
    const std::size_t rank = d.size();
    for (std::size_t i = 0; i < rank; ++i) {
      std::int64_t& o = r.dims[out_rank - rank + i];
      const std::int64_t e = d[i];
      if (e == o || e == 1)
        continue;
      if (o == 1) {
        o = e;
      } else if (e == dyn) {
        // o is static and != 1: keep it
      } else if (o == dyn) {
        o = e;
      } else {
        r.error = "shapes are not broadcastable";
      }
    }
  };
  (merge(ds), ...);
  return r;
}

} // namespace typeflow::detail
