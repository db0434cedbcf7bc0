// The all-reduce nodes of a replicated plan (device/replication.hpp), declared below the runtime
// and the backends: what a collective kernel gets of each tower, and the NCCL average of GPU
// towers, which the replicated session (runtime/replicate.hpp) calls and the CUDA backend defines
// (backend/cuda/nccl.cuh). The CPU's kernels are backend/cpu/collective.hpp; the reducer across
// processes gets the averaged values as replica_buffers (distributed/mpi.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace typeflow {

/// One tower's value of a node and its rows of the batch (0: the tower had none).
struct tower_part {
  const void* data;
  std::int64_t rows;
};

/// An all-reduce node's value in tower 0 after the in-process average, for a reducer across
/// processes.
struct replica_buffer {
  void* data;
  std::int64_t count;
  bool is_double; ///< else float32
};

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
