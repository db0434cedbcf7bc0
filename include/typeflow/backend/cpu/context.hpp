// The CPU backend's context: what a CPU kernel gets besides its operands (Eigen's device
// object). A session owns one per run of its executor and hands it to every CPU kernel; a
// kernel never sees the session.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>

#include "../common/value.hpp"
#include "onednn.hpp"
#include "thread_pool.hpp"

namespace typeflow::cpu_backend {

using value = backend::rt_value;

namespace detail {
/// same_types<T, type_list<In...>>::value[k]: whether the k-th input's dtype is T.
template <class T, class L>
struct same_types;
template <class T, class... In>
struct same_types<T, type_list<In...>> {
  static constexpr std::array<bool, sizeof...(In)> value{std::is_same_v<In, T>...};
};
} // namespace detail

struct context {
  thread_pool& pool;         ///< the session's threads (the caller included)
  backend::buffer_pool& mem; ///< buffers of intermediate values and scratch
  backend::run_stats& stats; ///< the current run's statistics
  onednn_cache& dnnl;        ///< oneDNN primitives by geometry
  std::uint64_t run = 0;     ///< how many runs the session has started (seeds dropout masks)
  /// Bit k: the step's k-th region input dies with the step (compile::plan's layout.dying).
  std::uint64_t dying = 0;
  /// The step's frame (the values its kernel gets, copies of the run's): who else holds a
  /// buffer that allocate_in_place would take.
  const value* frame = nullptr;
  std::size_t frame_size = 0;

  int threads() const { return pool.size(); }

  /// A pool buffer for `v`'s elements (its dims are set), owned by `v`.
  template <class T>
  T* allocate(value& v) {
    v.owner = mem.acquire(sizeof(T) * static_cast<std::size_t>(v.dims.numel()), stats);
    v.data = v.owner.get();
    return static_cast<T*>(v.data);
  }

  /// A buffer for `v`'s elements (its dims are set) for a loop that writes each element after
  /// reading the inputs' elements at the same index (a fused elementwise loop): the buffer of
  /// region input in[k] when it dies with the step (bit k of `dying`), has v's dims and
  /// dtype (`same[k]`), is not yet `taken` and is held by nothing else (not a view, a variable,
  /// a fed tensor or a transfer's: only by the run's value and its copies in the frame): the loop
  /// then writes over it, in place, as TensorFlow forwards an input's buffer to the output. Else a
  /// new pool buffer.
  template <class T, std::size_t N>
  T* allocate_in_place(value& v, const std::array<value*, N>& in, const std::array<bool, N>& same,
                       std::uint64_t& taken) {
    for (std::size_t k = 0; k < N && k < 64; ++k) {
      value& x = *in[k];
      if (!same[k] || !((dying >> k) & 1u) || ((taken >> k) & 1u) || !(x.dims == v.dims) ||
          !x.owner)
        continue;
      long copies = 0;
      for (std::size_t j = 0; j < frame_size; ++j)
        copies += frame[j].owner == x.owner ? 1 : 0;
      if (copies == 0 || !backend::buffer_pool::pool_buffer_held_by(x.owner, copies + 1))
        continue;
      taken |= std::uint64_t{1} << k;
      v.owner = std::move(x.owner);
      v.data = x.data;
      ++stats.buffers_in_place;
      return static_cast<T*>(v.data);
    }
    return allocate<T>(v);
  }

  /// A scratch buffer of `elements` T (at least one), back to the pool when released.
  template <class T>
  std::shared_ptr<void> scratch(std::int64_t elements) {
    return mem.acquire(sizeof(T) * static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)),
                       stats);
  }
};

} // namespace typeflow::cpu_backend
