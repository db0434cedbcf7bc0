// How reducers combine partial results, shared by the CPU and CUDA reductions (NaN propagates
// through max and min).
#pragma once
#include <type_traits>

#include "../../core/dtype.hpp"
#include "../../ops/reduce.hpp"

namespace typeflow::backend {

/// Whether reducer R keeps one of its inputs (max, min) rather than adding them: exact in any
/// precision and any order, so it needs neither a wider accumulator nor periodic flushes.
template <class R>
inline constexpr bool is_extremum_v =
    std::is_same_v<R, ops::reducers::max> || std::is_same_v<R, ops::reducers::min>;

/// Combines two partial results of reducer R.
template <class R, class T>
TYPEFLOW_HD inline T combine(T acc, T v) {
  if constexpr (std::is_same_v<R, ops::reducers::max>)
    return (acc >= v || acc != acc) ? acc : v; // NaN propagates
  else if constexpr (std::is_same_v<R, ops::reducers::min>)
    return (acc <= v || acc != acc) ? acc : v;
  else
    return acc + v;
}

} // namespace typeflow::backend
