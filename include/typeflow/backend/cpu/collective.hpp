// The CPU backend's collectives: the kernels of a replicated session's all-reduce nodes when the
// towers are threads of one process (device/replication.hpp), and the combination of the towers'
// fetched values. The NCCL all-reduce of GPU towers is backend/cuda/nccl.cuh; MPI across
// processes is distributed/mpi.hpp.
//
// The mean is taken in tower order (0, 1, ...) with a double accumulator for floating-point
// values, each element by itself, so it does not depend on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "../common/allreduce.hpp"
#include "context.hpp"

namespace typeflow::cpu_backend {

/// The batch-weighted mean of the towers' values of one node, into `out` (n elements): tower k
/// weighs parts[k].rows / batch; a tower with no rows (data == nullptr or rows == 0) is skipped.
template <class T>
void tower_mean(thread_pool& pool, std::span<const tower_part> parts, std::int64_t batch, T* out,
                std::int64_t n) {
  using A = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  pool.parallel_for(n, 1 << 14, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      A acc = 0;
      for (const tower_part& p : parts)
        if (p.rows > 0 && p.data)
          acc += static_cast<A>(p.rows) * static_cast<A>(static_cast<const T*>(p.data)[i]);
      out[i] = static_cast<T>(acc / static_cast<A>(batch));
    }
  });
}

/// The all-reduce node's CPU kernel: the towers' values of one replica_mean node (each
/// `row_elements` long) averaged into a new buffer from the context's pool, which becomes `out`
/// (tower 0's value of the node).
template <class T>
void all_reduce_mean(context& ctx, std::span<const tower_part> parts, std::int64_t batch,
                     value& out) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "replicate: gradients are float32 or float64");
  value result;
  result.dims = out.dims;
  T* r = ctx.allocate<T>(result);
  tower_mean<T>(ctx.pool, parts, batch, r, out.dims.numel());
  out = std::move(result);
}

/// The towers' fetched values of a node with a batch axis, joined along it (tower order) into
/// `out`, which holds the whole batch.
template <class T>
void concat_rows(std::span<const tower_part> parts, std::int64_t row_elements, T* out) {
  std::int64_t at = 0;
  for (const tower_part& p : parts)
    if (p.rows > 0 && p.data) {
      const std::int64_t n = p.rows * row_elements;
      std::memcpy(out + at, p.data, sizeof(T) * static_cast<std::size_t>(n));
      at += n;
    }
}

} // namespace typeflow::cpu_backend
