// Run-time checks of the layout ops that both backends make before writing a result.
#pragma once
#include <cstddef>

#include "../../core/error.hpp"
#include "value.hpp"

namespace typeflow::backend {

/// slice_like: the block of extents `out` at `begin` must lie inside `in`.
template <class Begin>
void check_slice_like(const Begin& begin, const rt_dims& out, const rt_dims& in) {
  for (std::size_t i = 0; i < in.rank; ++i)
    if (begin[i] + out.d[i] > in.d[i])
      throw error("slice_like: slice out of bounds: " + out.str() + " of " + in.str());
}

/// pad_like: `in` placed at `begin` must lie inside `out`.
template <class Begin>
void check_pad_like(const Begin& begin, const rt_dims& in, const rt_dims& out) {
  for (std::size_t i = 0; i < in.rank; ++i)
    if (begin[i] + in.d[i] > out.d[i])
      throw error("pad_like: padded region out of bounds: " + in.str() + " in " + out.str());
}

} // namespace typeflow::backend
