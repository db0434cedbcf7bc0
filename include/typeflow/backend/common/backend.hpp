// What an executor and the backends of its devices share, below both: the session's state that
// backends may touch (host buffers, statistics, the run counter, one state slot per accelerator)
// and the backend interface of a device, `device_backend<D>`, which each backend specializes
// (the CPU's in backend/cpu/backend.hpp, CUDA's in backend/cuda/backend.cuh). A backend never
// sees the session; it gets a `session_state&`.
//
// The interface of device_backend<D>, the same for every device:
//   host_memory                        whether the device's memory is the host's
//   has_kernel<K, Op, T, Region, Operands...>   whether a step of kind K has a kernel here
//   vector_form<Region>                what a fused region needs (::missing, ::op)
//   step<K>(session_state&, Op*, T*, rt_value* frame, n, Region*, Operands*...)  one step
//   bind_variable(session_state&, variable_record&) -> void*    a variable's storage here
//   commit(session_state&, var, value, variable_record&, keep_source, bytes)  an assignment
//   receive<Src>(session_state&, src, dst, elem_bytes)           a transfer from device Src
//   synchronize(session_state&)                                  wait for the device's work
//   fetch<T>(session_state&, rt_value&) -> tensor<T>             a fetched value, on the host
//   read<T>(session_state&, const rt_value&, f)                  f(const T*) on a host copy
// and, where the device can capture a run's work as a graph (CUDA graphs):
//   begin_capture / end_capture(session_state&, ok) -> shared_ptr<void> / launch(state&, graph)
//   reserve(session_state&, src, dst, elem_bytes)   a transfer's buffer, without the copy
//   upload(session_state&, void* dst, const void* src, bytes)     host to device, queued
#pragma once
#include <array>
#include <cstdint>
#include <memory>

#include "../../core/dtype.hpp"
#include "value.hpp"

namespace typeflow::backend {

/// How a CUDA session runs float32 convolutions and their gradients (session_options::
/// convolutions): the faster of cuDNN and im2col + cuBLAS per geometry, timed once per process
/// (fastest); cuDNN wherever it takes the geometry, its heuristic's algorithm (cudnn); or
/// im2col + cuBLAS only (im2col). float64, and float32 under a 16-bit session precision, always
/// take im2col.
enum class gpu_convolutions { fastest, cudnn, im2col };

/// The part of a session that backends read and update.
struct session_state {
  std::shared_ptr<buffer_pool> host_mem = std::make_shared<buffer_pool>(); ///< host buffers
  run_stats stats;        ///< the current run's statistics
  std::uint64_t runs = 0; ///< runs started so far (seeds dropout masks)
  /// The CPU backend's state (its threads and oneDNN primitives, backend/cpu/backend.hpp),
  /// type-erased like an accelerator's slot.
  std::shared_ptr<void> host;
  /// What the running step's CPU kernel may write over (compile::plan's layout.dying; 0 outside
  /// a run's steps).
  std::uint64_t dying = 0;
  bool allow_tf32 = false;
  gpu_convolutions convolutions = gpu_convolutions::fastest; ///< session_options::convolutions
  /// session_options::precision: what a GPU's float32 convolutions and matrix products read
  /// their operands as (bfloat16 or float16 on the tensor cores, float32 sums and outputs).
  typeflow::precision precision = typeflow::precision::float32;
  /// One slot per accelerator (type-erased backend state, created on first use), so that the
  /// session's layout is the same in translation units compiled with and without a backend.
  std::array<std::shared_ptr<void>, 16> accelerators{};
  /// What each accelerator's backend does at the end of a run, set with its slot: after the
  /// steps (read device-side checks, throw what failed) and after the assignments (apply them).
  struct accelerator_hooks {
    void (*end_steps)(void*) = nullptr;
    void (*end_commits)(void*) = nullptr;
  };
  std::array<accelerator_hooks, 16> hooks{};
  bool capturing = false; ///< the run's device work is being captured as a graph
  bool replaying = false; ///< the run replays a captured graph (its assignments are in it)
};

/// The end of a run's steps on every accelerator in use: device-side checks are read (throws
/// typeflow::error naming what failed; the run's assignments are then not applied).
inline void end_steps(session_state& s) {
  for (std::size_t i = 0; i < s.accelerators.size(); ++i)
    if (s.accelerators[i] && s.hooks[i].end_steps)
      s.hooks[i].end_steps(s.accelerators[i].get());
}
/// The end of a run's assignments on every accelerator in use.
inline void end_commits(session_state& s) {
  for (std::size_t i = 0; i < s.accelerators.size(); ++i)
    if (s.accelerators[i] && s.hooks[i].end_commits)
      s.hooks[i].end_commits(s.accelerators[i].get());
}

/// The host copy of a variable made current (downloaded from the device that holds its value).
inline void sync_host(variable_record& rec) {
  if (!rec.host_valid) {
    rec.download(rec.download_context, rec);
    rec.host_valid = true;
  }
}

} // namespace typeflow::backend

namespace typeflow {

/// Whether device D has a backend in this translation unit: the CPU backend sets it for
/// `cpu<I>`, the CUDA backend for `gpu<N>`. A plan that places a step on a device without one is
/// rejected.
template <class D>
inline constexpr bool has_device_backend = false;

/// The backend of a device: specialized by that device's backend (backend/cpu/backend.hpp for
/// `cpu<I>`, backend/cuda/backend.cuh for `gpu<N>`). Without one, nothing can run there: the
/// primary template says which header to include.
template <class D>
struct device_backend {
  static_assert(!sizeof(D*), "session: no backend for this device: the CUDA backend comes with "
                             "typeflow/typeflow.hpp in a translation unit compiled by nvcc");
};

/// Whether device D's memory is the host's, as its backend says (false without a backend).
template <class D>
consteval bool on_host_memory() {
  if constexpr (has_device_backend<D>)
    return device_backend<D>::host_memory;
  else
    return false;
}
/// Whether device D's backend can capture a run's work as one graph and replay it (CUDA
/// graphs; false without a backend).
template <class D>
consteval bool captures_runs() {
  if constexpr (has_device_backend<D>)
    return device_backend<D>::captures_runs;
  else
    return false;
}

} // namespace typeflow
