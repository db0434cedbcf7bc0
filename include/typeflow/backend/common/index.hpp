// What the CPU and CUDA kernels of gather, its scatter-add gradient, one_hot and iota share: the
// geometry read from the run-time dims (iota's from its static shape), and the message for an
// index out of range.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "../../core/error.hpp"
#include "value.hpp"

namespace typeflow::backend {

/// n indices, each picking one of `rows` rows of `row` elements.
struct gather_geometry {
  std::int64_t n = 0;
  std::int64_t rows = 0;
  std::int64_t row = 1;
  static gather_geometry of(const rt_dims& params, const rt_dims& indices) {
    gather_geometry g;
    g.n = indices.numel();
    g.rows = params.d[0];
    for (std::size_t k = 1; k < params.rank; ++k)
      g.row *= params.d[k];
    return g;
  }
};

/// iota's `size` elements: element i's coordinate along the axis is (i / inner) % extent.
struct iota_geometry {
  std::int64_t size = 1;
  std::int64_t inner = 1;  ///< elements per step along the axis (the extents after it)
  std::int64_t extent = 1; ///< the axis' extent
  template <class Shape, std::size_t Axis>
  static constexpr iota_geometry of() {
    iota_geometry g;
    for (std::size_t k = 0; k < Shape::rank; ++k) {
      g.size *= Shape::dims[k];
      if (k > Axis)
        g.inner *= Shape::dims[k];
    }
    g.extent = Shape::dims[Axis];
    return g;
  }
  TYPEFLOW_HD constexpr std::int64_t coordinate(std::int64_t i) const {
    return (i / inner) % extent;
  }
};

/// The error for index `index` at flat position `at` of an op's indices, outside [0, rows).
inline std::string index_message(std::string_view op, std::int64_t index, std::int64_t at,
                                 std::int64_t rows) {
  return std::string(op) + ": index " + std::to_string(index) + " at position " +
         std::to_string(at) + " of the indices is outside [0, " + std::to_string(rows) + ")";
}

/// Throws index_message for the first index outside [0, rows).
template <class Ix>
void check_indices(std::string_view op, const Ix* ix, std::int64_t n, std::int64_t rows) {
  for (std::int64_t i = 0; i < n; ++i)
    if (ix[i] < 0 || static_cast<std::int64_t>(ix[i]) >= rows)
      throw error(index_message(op, static_cast<std::int64_t>(ix[i]), i, rows));
}

} // namespace typeflow::backend
