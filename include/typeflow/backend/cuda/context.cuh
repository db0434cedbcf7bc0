// The CUDA backend's context (compiled by nvcc): what a GPU kernel gets besides its operands.
// gpu_context is one GPU's long-lived state in a session (stream, caching allocator, pinned
// staging buffers, cuBLAS handle), kept in the session state's accelerator slot; `context` is
// the view a kernel receives: that GPU and the session state (statistics, run counter). A
// kernel never sees the session.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "../../core/error.hpp"
#include "../../device/device.hpp"
#include "../common/backend.hpp"
#include "kernels.hpp"
#include "runtime.hpp"

namespace typeflow::cuda_backend {

/// One GPU's state in a session: its stream, caching allocator, pinned staging buffers and
/// cuBLAS handle.
struct gpu_context {
  int device;
  stream s;
  caching_allocator mem;
  staging_buffers staging;
  cublasHandle_t blas = nullptr;
  gpu_context(int d, bool allow_tf32) : device(select(d)) {
    TYPEFLOW_CUDA_CHECK(cublasCreate(&blas));
    TYPEFLOW_CUDA_CHECK(cublasSetStream(blas, s.get()));
    TYPEFLOW_CUDA_CHECK(
        cublasSetMathMode(blas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  ~gpu_context() {
    if (blas)
      cublasDestroy(blas);
  }
  gpu_context(const gpu_context&) = delete;
  gpu_context& operator=(const gpu_context&) = delete;
  static int select(int d) {
    use_device(d);
    return d;
  }
};

/// What a CUDA kernel gets: its GPU's state and the session's.
struct context {
  std::shared_ptr<void> slot;      ///< the accelerator slot holding `gpu` (buffers keep it)
  gpu_context& gpu;                ///< stream, allocator, staging buffers, cuBLAS
  backend::session_state& session; ///< statistics, run counter, host buffers

  /// GPU N of the session, set up on first use (and made the current device).
  static context of(backend::session_state& st, int n) {
    if (n < 0 || n >= static_cast<int>(st.accelerators.size()))
      throw error("gpu:" + std::to_string(n) + ": at most " +
                  std::to_string(st.accelerators.size()) + " GPUs per session");
    auto& slot = st.accelerators[static_cast<std::size_t>(n)];
    if (!slot) {
      const int count = device_count();
      if (count <= n)
        throw error("gpu:" + std::to_string(n) + ": no such CUDA device (this machine has " +
                    std::to_string(count) + ")");
      slot = std::make_shared<gpu_context>(n, st.allow_tf32);
    }
    use_device(n);
    return {slot, *static_cast<gpu_context*>(slot.get()), st};
  }

  cudaStream_t stream() const { return gpu.s.get(); }
  cublasHandle_t blas() const { return gpu.blas; }
  /// How many runs the session has started (seeds dropout masks).
  std::uint64_t run() const { return session.runs; }

  /// A device buffer of `bytes` for v, back to the allocator when v's last reference goes.
  void* allocate(backend::rt_value& v, std::size_t bytes) {
    void* p = gpu.mem.allocate(bytes);
    std::shared_ptr<void> keep = slot;
    v.owner = std::shared_ptr<void>(p, [keep, bytes](void* q) {
      static_cast<gpu_context*>(keep.get())->mem.deallocate(q, bytes);
    });
    v.data = p;
    return p;
  }
  /// v's elements (its dims are set), at least one.
  template <class T>
  T* output(backend::rt_value& v) {
    const auto n = static_cast<std::size_t>(std::max<std::int64_t>(v.dims.numel(), 1));
    return static_cast<T*>(allocate(v, sizeof(T) * n));
  }
  /// A scratch buffer of `elements` T (at least one), kept alive by `holder`.
  template <class T>
  T* scratch(backend::rt_value& holder, std::int64_t elements) {
    return static_cast<T*>(allocate(
        holder, sizeof(T) * static_cast<std::size_t>(std::max<std::int64_t>(elements, 1))));
  }
};

} // namespace typeflow::cuda_backend
