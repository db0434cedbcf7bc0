// Broadcasting geometry of a fused elementwise loop, shared by the CPU loop and the CUDA kernel:
// each input's strides in the output's index space, adjacent axes coalesced, extent-1 axes
// dropped.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "value.hpp"

namespace typeflow::backend {

/// Broadcasting strides of each input in the output's index space, coalesced.
template <std::size_t NIn>
struct loop_geometry {
  std::size_t groups = 0;
  std::array<std::int64_t, max_rank> dims{};
  std::array<std::array<std::int64_t, max_rank>, NIn> strides{};

  loop_geometry(const backend::rt_dims& out, const std::array<const backend::rt_dims*, NIn>& in) {
    const std::size_t R = out.rank;
    std::array<std::array<std::int64_t, max_rank>, NIn> raw{};
    for (std::size_t k = 0; k < NIn; ++k) {
      const auto& d = *in[k];
      std::int64_t s = 1;
      for (std::size_t a = R; a-- > 0;) {
        const std::ptrdiff_t ia =
            static_cast<std::ptrdiff_t>(a) - static_cast<std::ptrdiff_t>(R - d.rank);
        if (ia < 0) {
          raw[k][a] = 0;
        } else {
          raw[k][a] = (d.d[ia] == 1 && out.d[a] != 1) ? 0 : s;
          s *= d.d[ia];
        }
      }
    }
    // Coalesce from the innermost axis outwards, dropping extent-1 axes.
    std::array<std::int64_t, max_rank> gd{};
    std::array<std::array<std::int64_t, max_rank>, NIn> gs{};
    std::size_t g = 0;
    for (std::size_t a = R; a-- > 0;) {
      if (out.d[a] == 1)
        continue;
      bool merge = g > 0;
      for (std::size_t k = 0; k < NIn && merge; ++k)
        merge = raw[k][a] == gs[k][g - 1] * gd[g - 1];
      if (merge) {
        gd[g - 1] *= out.d[a];
      } else {
        gd[g] = out.d[a];
        for (std::size_t k = 0; k < NIn; ++k)
          gs[k][g] = raw[k][a];
        ++g;
      }
    }
    groups = g; // gd/gs are innermost-first; store outermost-first
    for (std::size_t i = 0; i < g; ++i) {
      dims[i] = gd[g - 1 - i];
      for (std::size_t k = 0; k < NIn; ++k)
        strides[k][i] = gs[k][g - 1 - i];
    }
  }
};

} // namespace typeflow::backend
