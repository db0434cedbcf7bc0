// The CPU backend as a device backend: device_backend<cpu<I>>, the interface an executor drives
// for every device (backend/common/backend.hpp), over the kernels of kernels.hpp. The CUDA
// backend's is in backend/cuda/backend.cuh; the executor asks both the same questions and never
// tests which device it runs on.
//
// Every CPU device of a session shares one host memory, one thread pool and one cache of oneDNN
// primitives: the backend's state (`host_state`), which the executor creates and keeps in the
// session state's `host` slot. A variable's storage is its record's host buffer; a transfer
// between two CPUs shares the buffer; an assignment hands its buffer to the variable when
// nothing else holds it.
#pragma once
#include <cstring>
#include <memory>
#include <type_traits>

#include "../../core/tensor.hpp"
#include "../../device/device.hpp"
#include "../../graph/flat.hpp"
#include "../common/backend.hpp"
#include "context.hpp"
#include "fused.hpp"
#include "kernels.hpp"

namespace typeflow::cpu_backend {

/// What a session's CPUs share: its threads and its oneDNN primitives (the session state's
/// `host` slot).
struct host_state {
  thread_pool pool;
  onednn_cache dnnl;
  host_state(int threads, bool bf16, bool f16) : pool(threads), dnnl(bf16, f16) {}
};

/// The CPU backend's state in a session state (created by the executor).
inline host_state& host_of(backend::session_state& s) {
  return *static_cast<host_state*>(s.host.get());
}
inline const host_state& host_of(const backend::session_state& s) {
  return *static_cast<const host_state*>(s.host.get());
}

/// Whether a fused region's ops all have the vector form the CPU's fused loop needs; `op` names
/// the first that does not.
template <class Region>
struct region_vector_form {
  static constexpr bool missing = false;
  using op = void;
};
template <class Out, class Ins, class Members, class IdxSeq, class Stores>
struct region_vector_form<graph::flat_region<Out, Ins, Members, IdxSeq, Stores>> {
  using fused = fused_kernel<Out, Ins, Members>;
  static constexpr bool missing = fused::lacks_a_vector_form;
  using op = typename fused::op_without_vector_form;
};
template <class Region>
struct region_vector_form<graph::prologue<Region>> : region_vector_form<Region> {};
template <class P, class Region, std::size_t In>
struct region_vector_form<graph::chained<P, Region, In>> : region_vector_form<Region> {};

} // namespace typeflow::cpu_backend

namespace typeflow {

template <int I>
inline constexpr bool has_device_backend<cpu<I>> = true;

template <int I>
struct device_backend<cpu<I>> {
  using state = backend::session_state;
  using value = backend::rt_value;

  /// The device's memory is the host's: the executor's loops read its values in place, and a
  /// step's result must fit in the machine's memory.
  static constexpr bool host_memory = true;
  /// A CPU run is not captured: its steps are calls already.
  static constexpr bool captures_runs = false;

  /// What a CPU kernel gets: the session's threads, host buffers, statistics and oneDNN
  /// primitives, and the running step's dying inputs (compile::plan's layout.dying).
  static cpu_backend::context context(state& s) {
    auto& h = cpu_backend::host_of(s);
    return cpu_backend::context{h.pool, *s.host_mem, s.stats, h.dnnl, s.runs, s.dying};
  }

  /// Whether a step of kind K has a kernel here (a plain kernel step: the op's CPU kernel;
  /// the folds always have theirs).
  template <graph::step_kind K, class Op, class T, class Region, class... Refs>
  static constexpr bool has_kernel =
      K != graph::step_kind::kernel || cpu_backend::has_kernel<0, Op, T, Region, Refs...>;
  /// A fused region here needs every op's vector form (see region_vector_form).
  template <class Region>
  using vector_form = cpu_backend::region_vector_form<Region>;

  /// One step of kind K on its frame `fr` of n values: an op's kernel, or one of the folds
  /// that the compiler makes on the CPU only (a matmul with its epilogue, a kernel chained
  /// into a fused loop, a reduction reading a fused prologue).
  template <graph::step_kind K, class Op, class T, class Region, class... Refs>
  static void step(state& s, Op* op, T* t, value* fr, std::size_t n, Region* region,
                   Refs*... refs) {
    auto ctx = context(s);
    if constexpr (K == graph::step_kind::epilogue) {
      cpu_backend::epilogue_kernel<0>(ctx, fr, region);
    } else if constexpr (K == graph::step_kind::chained) {
      ctx.frame = fr, ctx.frame_size = n;
      cpu_backend::chained_kernel<0>(ctx, fr, region);
    } else if constexpr (K == graph::step_kind::prologue) {
      static_assert(cpu_backend::has_prologue_kernel<0, Op, T, Region, Refs...>,
                    "a reduction that reads_fused_input needs a CPU kernel taking a prologue");
      cpu_backend::kernel<0>(ctx, op, t, fr, Region{}, refs...);
    } else {
      static_assert(K == graph::step_kind::kernel);
      ctx.frame = fr, ctx.frame_size = n;
      cpu_backend::kernel<0>(ctx, op, t, fr, region, refs...);
    }
  }

  /// A variable's storage: its host buffer, downloaded first if a GPU holds a newer value.
  static void* bind_variable(state&, backend::variable_record& rec) {
    backend::sync_host(rec);
    return rec.data.get();
  }
  /// An assignment's new value `v` becomes variable `var`'s: v's buffer, when nothing else holds
  /// it (`keep_source` false: not fetched) and the pool lets it go, becomes the variable's
  /// storage and the old storage goes to the pool; else the bytes are copied (also where v is a
  /// view into a larger buffer: a slice's block of rows).
  static void commit(state&, value& var, value& v, backend::variable_record& rec, bool keep_source,
                     std::size_t bytes) {
    if (keep_source || bytes != rec.bytes || v.data != v.owner.get() ||
        !backend::buffer_pool::adopt(v.owner, rec.data, rec.bytes))
      std::memmove(var.data, v.data, bytes);
    else
      v.data = nullptr;
    var.data = rec.data.get();
    rec.device_valid = false;
  }

  /// A value sent here from device Src: between CPUs (one host memory) the buffer is shared;
  /// from another device, that device's backend copies it to the host.
  template <class Src>
  static void receive(state& s, const value& src, value& dst, std::size_t elem_bytes) {
    if constexpr (Src::is_cpu)
      dst = src;
    else
      device_backend<Src>::to_host(s, src, dst, elem_bytes);
  }
  /// Nothing to wait for: a CPU step has finished when its kernel returns.
  static void synchronize(state&) {}

  /// A fetched value, copied.
  template <class T>
  static tensor<T> fetch(state&, const value& v) {
    tensor<T> t(tensor<T>::uninitialized, v.dims.vec());
    if (t.size() > 0)
      std::memcpy(t.data(), v.data, sizeof(T) * t.size());
    return t;
  }
  /// A fetched value: the run's own buffer, when nothing else holds it, is handed over rather
  /// than copied, and goes back to the pool when the tensor dies. (A second fetch of the same
  /// value then finds no owner, and copies.)
  template <class T>
  static tensor<T> fetch(state& s, value& v) {
    if (v.owner && v.owner.use_count() == 1)
      return tensor<T>(v.dims.vec(), std::move(v.owner), static_cast<T*>(v.data));
    return fetch<T>(s, std::as_const(v));
  }
  /// f(const T*) on the elements of v, in place.
  template <class T, class F>
  static void read(state&, const value& v, F&& f) {
    f(static_cast<const T*>(v.data));
  }
};

} // namespace typeflow
