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
#include <vector>

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
  /// Device-side checks (a label out of range): a kernel sets flags[k] and the run reads them
  /// all once, after its work (end_run): no step waits for the host. checks[k] says what flag k
  /// means; flags are zero between runs.
  static constexpr std::size_t max_checks = 64;
  int* flags = nullptr;
  int* host_flags = nullptr; ///< pinned
  std::vector<std::string> checks;
  /// cudnn.cuh's state (its handle, the convolutions' plans), made by the first convolution
  /// that runs on cuDNN.
  std::shared_ptr<void> cudnn;

  gpu_context(int d, bool allow_tf32) : device(select(d)) {
    TYPEFLOW_CUDA_CHECK(cublasCreate(&blas));
    TYPEFLOW_CUDA_CHECK(cublasSetStream(blas, s.get()));
    TYPEFLOW_CUDA_CHECK(
        cublasSetMathMode(blas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    TYPEFLOW_CUDA_CHECK(cudaMalloc(&flags, sizeof(int) * max_checks));
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(int) * max_checks, s.get()));
    s.synchronize(); // the stream does not wait for the legacy default stream
    TYPEFLOW_CUDA_CHECK(cudaMallocHost(&host_flags, sizeof(int) * max_checks));
  }
  ~gpu_context() {
    if (blas)
      cublasDestroy(blas);
    cudaFree(flags);
    cudaFreeHost(host_flags);
  }
  /// The run's assignments, applied by one kernel after its steps (flush_commits), unless a
  /// check failed: the kernel reads the flags itself, so no step waits for the host and a bad
  /// batch changes no variable, in a captured graph too.
  struct commit_entry {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  std::vector<commit_entry> commits;
  void flush_commits();

  /// A flag for a kernel to set when `message` holds (read after the run).
  int* check_flag(std::string message) {
    if (checks.size() == max_checks)
      return flags + max_checks - 1; // shares the last flag (and reports its message)
    checks.push_back(std::move(message));
    return flags + checks.size() - 1;
  }
  /// After a run's work: throws the first set check's message (the flags are reset first).
  void end_run() {
    if (checks.empty())
      return;
    const std::size_t n = checks.size();
    TYPEFLOW_CUDA_CHECK(
        cudaMemcpyAsync(host_flags, flags, sizeof(int) * n, cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    std::vector<std::string> pending;
    pending.swap(checks);
    for (std::size_t k = 0; k < n; ++k)
      if (host_flags[k]) {
        TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(int) * n, s.get()));
        s.synchronize();
        throw error(pending[k]);
      }
  }
  gpu_context(const gpu_context&) = delete;
  gpu_context& operator=(const gpu_context&) = delete;
  static int select(int d) {
    use_device(d);
    return d;
  }
};

/// Up to 32 copies in one launch (blockIdx.y: the copy), skipped when any of the first
/// `checks` flags is set.
struct commit_batch {
  static constexpr int max = 32;
  void* dst[max];
  const void* src[max];
  std::size_t bytes[max];
  const int* flags;
  int checks;
};
template <int = 0> // a template: one definition however many translation units include this
__global__ void commit_kernel(commit_batch b) {
  for (int k = 0; k < b.checks; ++k)
    if (b.flags[k])
      return;
  const int c = static_cast<int>(blockIdx.y);
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  const std::size_t t = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto d = reinterpret_cast<std::uintptr_t>(b.dst[c]);
  const auto s = reinterpret_cast<std::uintptr_t>(b.src[c]);
  if ((d | s) % 16 == 0) {
    const std::size_t chunks = b.bytes[c] / 16;
    auto* d16 = static_cast<uint4*>(b.dst[c]);
    const auto* s16 = static_cast<const uint4*>(b.src[c]);
    for (std::size_t i = t; i < chunks; i += stride)
      d16[i] = s16[i];
    for (std::size_t i = chunks * 16 + t; i < b.bytes[c]; i += stride)
      static_cast<char*>(b.dst[c])[i] = static_cast<const char*>(b.src[c])[i];
  } else {
    for (std::size_t i = t; i < b.bytes[c]; i += stride)
      static_cast<char*>(b.dst[c])[i] = static_cast<const char*>(b.src[c])[i];
  }
}
inline void gpu_context::flush_commits() {
  for (std::size_t at = 0; at < commits.size(); at += commit_batch::max) {
    commit_batch b{};
    b.flags = flags;
    b.checks = static_cast<int>(checks.size());
    std::size_t largest = 0;
    const std::size_t n = std::min<std::size_t>(commit_batch::max, commits.size() - at);
    for (std::size_t k = 0; k < n; ++k) {
      b.dst[k] = commits[at + k].dst;
      b.src[k] = commits[at + k].src;
      b.bytes[k] = commits[at + k].bytes;
      largest = std::max(largest, commits[at + k].bytes);
    }
    const std::size_t blocks = std::min<std::size_t>((largest / 16 + 255) / 256 + 1, 1024);
    commit_kernel<>
        <<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(n)), 256, 0, s.get()>>>(b);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }
  commits.clear();
}

/// A run's device work captured as a CUDA graph, with the buffers it writes (kept from the
/// caching allocator while it lives) and its checks.
struct captured_graph {
  std::shared_ptr<void> slot; ///< the gpu_context
  std::vector<std::pair<void*, std::size_t>> buffers;
  std::vector<std::string> checks;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  captured_graph(std::shared_ptr<void> s, std::vector<std::pair<void*, std::size_t>> b,
                 std::vector<std::string> c)
      : slot(std::move(s)), buffers(std::move(b)), checks(std::move(c)) {}
  ~captured_graph() {
    if (exec)
      cudaGraphExecDestroy(exec);
    if (graph)
      cudaGraphDestroy(graph);
    static_cast<gpu_context*>(slot.get())->mem.release_graph(buffers);
  }
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;
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
      st.hooks[static_cast<std::size_t>(n)] = {
          [](void* g) { static_cast<gpu_context*>(g)->end_run(); },
          [](void* g) { static_cast<gpu_context*>(g)->flush_commits(); }};
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
