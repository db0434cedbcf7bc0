// The CPU backend's context: what a CPU kernel gets besides its operands (Eigen's device
// object). A session owns one per run of its executor and hands it to every CPU kernel; a
// kernel never sees the session.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>

#include "../common/value.hpp"
#include "onednn.hpp"
#include "thread_pool.hpp"

namespace typeflow::cpu_backend {

using value = backend::rt_value;

struct context {
  thread_pool& pool;         ///< the session's threads (the caller included)
  backend::buffer_pool& mem; ///< buffers of intermediate values and scratch
  backend::run_stats& stats; ///< the current run's statistics
  onednn_cache& dnnl;        ///< oneDNN primitives by geometry
  std::uint64_t run = 0;     ///< how many runs the session has started (seeds dropout masks)

  int threads() const { return pool.size(); }

  /// A pool buffer for `v`'s elements (its dims are set), owned by `v`.
  template <class T>
  T* allocate(value& v) {
    v.owner = mem.acquire(sizeof(T) * static_cast<std::size_t>(v.dims.numel()), stats);
    v.data = v.owner.get();
    return static_cast<T*>(v.data);
  }

  /// A scratch buffer of `elements` T (at least one), back to the pool when released.
  template <class T>
  std::shared_ptr<void> scratch(std::int64_t elements) {
    return mem.acquire(sizeof(T) * static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)),
                       stats);
  }
};

} // namespace typeflow::cpu_backend
