// CUDA runtime support (compiled by nvcc only): checked CUDA and cuBLAS calls that throw
// typeflow::cuda_error with the call, file, line and CUDA's message; device discovery that reports
// "no device" instead of failing where there is no GPU or driver; a caching device allocator
// (cudaMalloc once per size, reused afterwards); RAII streams and events; pinned host staging
// buffers.
#pragma once
#if !defined(__CUDACC__)
#error "typeflow/backend/cuda/runtime.hpp is compiled by nvcc (TYPEFLOW_CUDA)"
#endif
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../../core/error.hpp"

namespace typeflow {

/// A failed CUDA (or cuBLAS, NCCL) call: what was called, where, and the library's message.
class cuda_error : public error {
public:
  cuda_error(const std::string& call, const char* file, int line, const std::string& message)
      : error("CUDA call " + call + " failed at " + file + ":" + std::to_string(line) + ": " +
              message) {}
};

namespace cuda_backend {

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky-free error state for the next call
    throw cuda_error(call, file, line,
                     std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
  }
}

inline void check(cublasStatus_t e, const char* call, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(call, file, line, cublasGetStatusString(e));
}

} // namespace cuda_backend
} // namespace typeflow

/// Checks a CUDA runtime or cuBLAS call: `TYPEFLOW_CUDA_CHECK(cudaMalloc(&p, n));`
#define TYPEFLOW_CUDA_CHECK(call) ::typeflow::cuda_backend::check((call), #call, __FILE__, __LINE__)

namespace typeflow::cuda_backend {

/// How many CUDA devices this process can use: 0 when there is no GPU, no driver, or a driver
/// too old for the runtime (never throws).
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/// Makes d the calling thread's current device, calling cudaSetDevice only when it differs
/// (cudaGetDevice is a cheap query; the user may have changed the device in between).
inline void use_device(int d) {
  int current = -1;
  TYPEFLOW_CUDA_CHECK(cudaGetDevice(&current));
  if (current != d)
    TYPEFLOW_CUDA_CHECK(cudaSetDevice(d));
}

/// The message tests and examples print when they cannot run: CTest counts it as skipped.
inline constexpr const char* no_device_message = "skipped: no CUDA device";

/// A stream on the current device, destroyed with its owner.
class stream {
public:
  stream() { TYPEFLOW_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~stream() {
    if (s_)
      cudaStreamDestroy(s_);
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  cudaStream_t get() const { return s_; }
  void synchronize() const { TYPEFLOW_CUDA_CHECK(cudaStreamSynchronize(s_)); }

private:
  cudaStream_t s_ = nullptr;
};

/// An event, for ordering streams and timing kernels.
class event {
public:
  event() { TYPEFLOW_CUDA_CHECK(cudaEventCreate(&e_)); }
  ~event() {
    if (e_)
      cudaEventDestroy(e_);
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  void record(cudaStream_t s) { TYPEFLOW_CUDA_CHECK(cudaEventRecord(e_, s)); }
  float milliseconds_since(const event& start) const {
    float ms = 0;
    TYPEFLOW_CUDA_CHECK(cudaEventSynchronize(e_));
    TYPEFLOW_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }
  cudaEvent_t get() const { return e_; }

private:
  cudaEvent_t e_ = nullptr;
};

/// Caching allocator for one device: buffers are rounded up to a size class and kept on release,
/// so steady-state training steps call cudaMalloc never. Device or pinned host memory.
class caching_allocator {
public:
  enum class kind { device, pinned_host };
  explicit caching_allocator(kind k = kind::device) : kind_(k) {}
  ~caching_allocator() { release_cached(); }
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  void* allocate(std::size_t bytes) {
    bytes = size_class(bytes);
    {
      std::lock_guard lock(mu_);
      if (void* p = take(capturing_ ? capture_free_ : free_, bytes)) {
        ++reused_;
        return p;
      }
      if (capturing_) // a buffer from the cache becomes the graph's
        if (void* p = take(free_, bytes)) {
          ++reused_;
          captured_.emplace(p, bytes);
          return p;
        }
    }
    void* p = nullptr;
    if (kind_ == kind::device)
      TYPEFLOW_CUDA_CHECK(cudaMalloc(&p, bytes));
    else
      TYPEFLOW_CUDA_CHECK(cudaMallocHost(&p, bytes));
    ++allocated_;
    std::lock_guard lock(mu_);
    if (capturing_)
      captured_.emplace(p, bytes);
    return p;
  }
  /// A buffer the capture must not share with any of its steps: it is written before each
  /// launch (a feed's device copy), so no step of the graph may reuse it.
  void* allocate_exclusive(std::size_t bytes) {
    std::unique_lock lock(mu_);
    const bool capturing = capturing_;
    lock.unlock();
    if (!capturing)
      return allocate(bytes);
    bytes = size_class(bytes);
    lock.lock();
    void* p = take(free_, bytes);
    lock.unlock();
    if (p)
      ++reused_;
    else if (kind_ == kind::device)
      TYPEFLOW_CUDA_CHECK(cudaMalloc(&p, bytes));
    else
      TYPEFLOW_CUDA_CHECK(cudaMallocHost(&p, bytes));
    lock.lock();
    captured_.emplace(p, bytes);
    exclusive_.insert(p);
    return p;
  }
  void deallocate(void* p, std::size_t bytes) {
    std::lock_guard lock(mu_);
    if (captured_.count(p)) { // a captured graph's buffer: kept for its replays
      if (capturing_ && !exclusive_.count(p))
        capture_free_[size_class(bytes)].push_back(p); // later steps of the capture reuse it
      return;
    }
    free_[size_class(bytes)].push_back(p);
  }

  /// Stream capture: every buffer allocated from now until end_capture belongs to the graph
  /// being captured (its replays write them), reused only by later steps of the same capture.
  void begin_capture() {
    std::lock_guard lock(mu_);
    capturing_ = true;
    capture_free_.clear();
  }
  /// The buffers of the capture that ends: the caller gives them back with release_graph.
  std::vector<std::pair<void*, std::size_t>> end_capture() {
    std::lock_guard lock(mu_);
    capturing_ = false;
    capture_free_.clear();
    std::vector<std::pair<void*, std::size_t>> out;
    for (auto& [p, bytes] : captured_)
      if (!owned_.count(p))
        out.emplace_back(p, bytes);
    for (auto& [p, bytes] : out)
      owned_.insert(p);
    return out;
  }
  /// A graph's buffers back to the cache (the graph is destroyed; nothing else holds them).
  void release_graph(const std::vector<std::pair<void*, std::size_t>>& buffers) {
    std::lock_guard lock(mu_);
    for (auto& [p, bytes] : buffers) {
      captured_.erase(p);
      owned_.erase(p);
      exclusive_.erase(p);
      free_[bytes].push_back(p);
    }
  }
  /// Returns every cached buffer to CUDA.
  void release_cached() {
    std::lock_guard lock(mu_);
    for (auto& [bytes, list] : free_)
      for (void* p : list)
        kind_ == kind::device ? (void)cudaFree(p) : (void)cudaFreeHost(p);
    free_.clear();
  }
  std::size_t allocations() const { return allocated_; }
  std::size_t reuses() const { return reused_; }

  /// Size classes: multiples of 512 bytes up to 1 MiB, then powers of two.
  static std::size_t size_class(std::size_t bytes) {
    if (bytes <= (std::size_t{1} << 20))
      return (bytes + 511) / 512 * 512;
    std::size_t c = std::size_t{1} << 20;
    while (c < bytes)
      c <<= 1;
    return c;
  }

private:
  static void* take(std::map<std::size_t, std::vector<void*>>& from, std::size_t bytes) {
    auto it = from.find(bytes);
    if (it == from.end() || it->second.empty())
      return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  kind kind_;
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;
  bool capturing_ = false;
  std::map<std::size_t, std::vector<void*>> capture_free_; ///< freed during the capture
  std::map<void*, std::size_t> captured_;                  ///< graphs' buffers (size classes)
  std::set<void*> owned_;                                  ///< ... handed to a graph
  std::set<void*> exclusive_;                              ///< ... never shared in it
  std::size_t allocated_ = 0, reused_ = 0;
};

/// Pinned host buffers for staging host-device copies. A buffer handed to an asynchronous copy
/// is reused only once an event recorded after that copy has completed.
class staging_buffers {
public:
  staging_buffers() = default;
  ~staging_buffers() {
    for (auto& f : busy_) {
      cudaEventSynchronize(f.done);
      mem_.deallocate(f.p, f.bytes);
      cudaEventDestroy(f.done);
    }
    for (auto e : spare_)
      cudaEventDestroy(e);
  }
  staging_buffers(const staging_buffers&) = delete;
  staging_buffers& operator=(const staging_buffers&) = delete;

  void* acquire(std::size_t bytes) {
    reap();
    return mem_.allocate(bytes);
  }
  /// p is read by work queued on s: reuse it once that work is done.
  void release_after(void* p, std::size_t bytes, cudaStream_t s) {
    cudaEvent_t e = nullptr;
    if (!spare_.empty()) {
      e = spare_.back();
      spare_.pop_back();
    } else {
      TYPEFLOW_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    TYPEFLOW_CUDA_CHECK(cudaEventRecord(e, s));
    busy_.push_back({p, bytes, e});
  }
  /// p is no longer used by any queued work.
  void release_now(void* p, std::size_t bytes) { mem_.deallocate(p, bytes); }
  std::size_t in_flight() const { return busy_.size(); }
  std::size_t allocations() const { return mem_.allocations(); }

private:
  struct flight {
    void* p;
    std::size_t bytes;
    cudaEvent_t done;
  };
  void reap() {
    std::size_t keep = 0;
    for (auto& f : busy_) {
      const cudaError_t q = cudaEventQuery(f.done);
      if (q == cudaErrorNotReady) {
        busy_[keep++] = f;
        continue;
      }
      TYPEFLOW_CUDA_CHECK(q);
      mem_.deallocate(f.p, f.bytes);
      spare_.push_back(f.done);
    }
    busy_.resize(keep);
  }
  caching_allocator mem_{caching_allocator::kind::pinned_host};
  std::vector<flight> busy_;
  std::vector<cudaEvent_t> spare_;
};

} // namespace typeflow::cuda_backend
