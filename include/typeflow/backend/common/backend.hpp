// What an executor and the backends of its devices share, below both: the session's state that
// backends may touch (host buffers, statistics, the run counter, one state slot per accelerator)
// and the backend interface of a device other than the CPU, `device_backend<D>`, which each such
// backend specializes. A backend never sees the session; it gets a `session_state&`.
//
// The interface of device_backend<D> (the CUDA backend's is in backend/cuda/backend.cuh):
//   kernel<I>(session_state&, Op*, T*, rt_value* values, Region*, Operands*...)  one step
//   bind_variable(session_state&, variable_record&) -> void*    a variable's device copy
//   commit(session_state&, void* dst, const void* src, bytes)    an assignment's new value
//   to_device / to_host / from_device(session_state&, ...)       transfers (Send/Recv)
//   fetch<T>(session_state&, const rt_value&) -> tensor<T>       a fetched value, on the host
#pragma once
#include <array>
#include <cstdint>
#include <memory>

#include "value.hpp"

namespace typeflow::backend {

/// The part of a session that backends read and update.
struct session_state {
  std::shared_ptr<buffer_pool> host_mem = std::make_shared<buffer_pool>(); ///< host buffers
  run_stats stats;        ///< the current run's statistics
  std::uint64_t runs = 0; ///< runs started so far (seeds dropout masks)
  bool allow_tf32 = false;
  /// One slot per accelerator (type-erased backend state, created on first use), so that the
  /// session's layout is the same in translation units compiled with and without a backend.
  std::array<std::shared_ptr<void>, 16> accelerators{};
};

/// The host copy of a variable made current (downloaded from the device that holds its value).
inline void sync_host(variable_record& rec) {
  if (!rec.host_valid) {
    rec.download(rec.download_context, rec);
    rec.host_valid = true;
  }
}

} // namespace typeflow::backend

namespace typeflow {

/// The backend of a device other than the CPU: specialized by that device's backend (the CUDA
/// backend specializes it for gpu<N>). Without one, nothing can run there: the primary template
/// says which header to include.
template <class D>
struct device_backend {
  static_assert(!sizeof(D*), "session: no backend for this device: the CUDA backend comes with "
                             "typeflow/typeflow.hpp in a translation unit compiled by nvcc");
};

} // namespace typeflow
