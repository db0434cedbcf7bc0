// What the CPU and CUDA kernels of batch norm share: the geometry of x [rows..., C] read from its
// run-time dims, and the check that a batch has more than one row per channel.
#pragma once
#include <cstdint>
#include <string>

#include "../../core/error.hpp"
#include "value.hpp"

namespace typeflow::backend {

/// x as `rows` rows of `c` channels (every axis but the last, then the last).
struct channel_geometry {
  std::int64_t rows = 0;
  std::int64_t c = 0;
  static channel_geometry of(const rt_dims& x) {
    channel_geometry g;
    g.c = x.d[x.rank - 1];
    g.rows = g.c == 0 ? 0 : x.numel() / g.c;
    return g;
  }
  /// Throws unless there are at least two rows (the unbiased variance divides by rows - 1;
  /// torch's batch norm refuses one value per channel too).
  void check_batch(std::string_view op) const {
    if (c > 0 && rows < 2)
      throw error(std::string(op) +
                  ": training needs more than one value per channel, the batch "
                  "has " +
                  std::to_string(rows));
  }
};

} // namespace typeflow::backend
