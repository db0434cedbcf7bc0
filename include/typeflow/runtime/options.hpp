// session_options: what a session is built with (threads, seed, tracing, placement log, GPU
// precision and capture, replication buckets, check_numerics), shared by the session, its
// executor and replication.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "../backend/common/backend.hpp"
#include "../core/dtype.hpp"
#include "trace.hpp"

namespace typeflow {

using backend::gpu_convolutions;

/// What a session is built with: `ty::session s(ty::session_options{.threads = 2});`
struct session_options {
  int threads = 0;        ///< worker threads, BLAS included; 0: all hardware threads
  std::uint64_t seed = 0; ///< seeds every variable's initializer (with the variable's name)
  /// A step trace (runtime/trace.hpp): each run this recorder keeps records every executed
  /// step, transfer and all-reduce (kernel, node, device, start, duration, bytes, FLOPs, thread)
  /// for io/trace.hpp's Chrome trace and profile. A traced run on a GPU synchronizes after each
  /// step (the times are the GPU's) and is not replayed as a CUDA graph. nullptr: nothing is
  /// timed. The recorder must outlive the session's runs.
  trace_recorder* trace = nullptr;
  /// TensorFlow's log_device_placement: the first run of each plan prints every node's device,
  /// and the send and receive of each transfer, as `%7 = conv2d(%3, conv1/weights): (conv2d):
  /// /job:localhost/replica:0/task:0/device:CPU:0`, to `log` (std::clog when null).
  bool log_device_placement = false;
  std::ostream* log = nullptr; ///< where log_device_placement writes (std::clog when null)
  /// CUDA backend: let float32 matmul and convolutions use TF32 tensor cores (about 1e-3
  /// relative error instead of 1e-6; off by default, as in PyTorch's matmul). A 16-bit
  /// `precision` takes precedence.
  bool allow_tf32 = false;
  /// CUDA backend: how float32 convolutions and their gradients run, where CMake found cuDNN
  /// (TYPEFLOW_HAS_CUDNN): the faster of cuDNN and im2col + cuBLAS for each geometry, timed
  /// the first time it runs (fastest), cuDNN wherever it takes the geometry (cudnn), or
  /// im2col + cuBLAS (im2col). cuDNN cannot take an odd SAME padding (the extra row after).
  /// Under a 16-bit `precision`, convolutions take im2col (cuDNN's write 16-bit outputs).
  gpu_convolutions convolutions = gpu_convolutions::fastest;
  /// CUDA backend: a run whose plan lies wholly on one GPU (fed from placeholders) is captured
  /// as one CUDA graph the second time it runs with given feed extents (the first warms up
  /// kernel by kernel), and replayed by later runs with the same extents (one launch per step).
  /// Off: every step is launched by the host.
  bool cuda_graphs = true;
  /// Replication across processes (distributed/mpi.hpp): gradients are packed into buckets of
  /// this many bytes per all-reduce (Horovod's tensor fusion) ...
  std::size_t fusion_bytes = std::size_t{16} << 20;
  /// ... summed in rank order when deterministic (bitwise identical runs; an all-gather),
  /// else by MPI_Allreduce ...
  bool deterministic = false;
  /// ... and a collective that has not completed after this many seconds (a rank died or
  /// hangs) throws typeflow::error and aborts the job.
  double collective_timeout = 120;
  /// TensorFlow's check_numerics for a whole run: a NaN or Inf in a fetched floating value or in
  /// the new value of an assignment (a variable update, which a NaN gradient makes NaN) is an
  /// error naming the node, thrown before anything is committed. Off: nothing is checked or
  /// instantiated. On a GPU the checked values are copied to the host (a debugging aid), and a
  /// run is not replayed as a CUDA graph.
  bool check_numerics = false;
  /// The precision of the float32 convolutions and matrix products, forward and gradients
  /// alike (everything else, variables and activations included, stays in its own dtype).
  /// On the CPU, precision::bfloat16 takes effect where oneDNN runs bfloat16 natively; elsewhere
  /// the session computes in float32 (session::products_in_bfloat16() says which).
  /// precision::float16 rounds the operands in every oneDNN build
  /// (session::products_in_float16()), at float32's speed or a little under (the rounding is a
  /// pass over the operands). On a GPU both run on the tensor cores (cublasGemmStridedBatchedEx,
  /// float32 sums and outputs; convolutions as im2col + GEMM), and take precedence over
  /// allow_tf32.
  typeflow::precision precision = typeflow::precision::float32;
};

using backend::run_stats;

} // namespace typeflow
