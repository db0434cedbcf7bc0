// The all-reduce of GPU towers, declared below the runtime and the backends: the replicated
// session (runtime/replicate.hpp) calls it, the CUDA backend defines it (backend/cuda/nccl.cuh).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace typeflow {

/// A GPU tower's replica_mean value, for the NCCL average of GPU towers.
struct gpu_replica {
  int device;
  void* data;    ///< nullptr for a tower that had no rows
  void* context; ///< the tower's CUDA backend state on that GPU
  double weight; ///< the tower's share of the batch
};
/// Averages GPU towers' values in place (every tower's buffer ends with the batch-weighted mean):
/// defined by backend/cuda/nccl.cuh.
template <class T, class = void>
struct nccl_average {
  static_assert(
      !sizeof(T),
      "replicate: GPU towers need the NCCL reducer: include "
      "typeflow/typeflow.hpp in a translation unit nvcc compiles, where <nccl.h> is found");
  static void run(std::vector<gpu_replica>&, std::int64_t, std::shared_ptr<void>&) {}
};

} // namespace typeflow
