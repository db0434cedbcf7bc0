// What the CPU and CUDA kernels of the attention op share: the geometry read from the run-time
// dims of q [..., T, D], k [..., S, D] and v [..., S, Dv], and the scale 1 / sqrt(D).
#pragma once
#include <cmath>
#include <cstdint>

#include "value.hpp"

namespace typeflow::backend {

struct attention_geometry {
  std::int64_t batch = 1, t = 0, s = 0, d = 0, dv = 0;
  double scale = 1;
  static attention_geometry of(const rt_dims& q, const rt_dims& k, const rt_dims& v) {
    attention_geometry g;
    const std::size_t r = q.rank;
    for (std::size_t i = 0; i + 2 < r; ++i)
      g.batch *= q.d[i];
    g.t = q.d[r - 2];
    g.d = q.d[r - 1];
    g.s = k.d[r - 2];
    g.dv = v.d[r - 1];
    g.scale = g.d > 0 ? 1.0 / std::sqrt(static_cast<double>(g.d)) : 1.0;
    return g;
  }
  /// The keys query i attends to: [0, keys(i)).
  std::int64_t keys(bool causal, std::int64_t i) const {
    return causal ? (i + 1 < s ? i + 1 : s) : s;
  }
  /// The first query that attends to key j.
  std::int64_t first_query(bool causal, std::int64_t j) const { return causal ? j : 0; }
};

} // namespace typeflow::backend
