// The CUDA backend (compiled by nvcc; runtime/session.hpp includes it in every translation unit
// nvcc compiles): device_backend<gpu<N>>, the interface a session drives (backend/common/
// backend.hpp), over the kernels of attention.cuh, fused.cuh, index.cuh, matmul.cuh, reduce.cuh,
// nn.cuh, norm.cuh and layout.cuh.
//
// What runs on a GPU is what kernels.hpp declares: fused elementwise regions (assignments
// included), matmul (cuBLAS), the reductions, conv2d and its gradients (im2col + cuBLAS),
// pooling and its gradients, the fused cross-entropy, the layout ops, dropout masks and the
// views. Variables placed on a GPU stay there between runs. Ops without a GPU kernel (debug
// probes) fall back to cpu<0> by soft placement, listed by describe_placement(); transfers
// between host and device are copies on the device's stream through pinned staging buffers,
// and fetched values come back to the host. Device buffers come from a caching allocator per GPU.
#pragma once
#include <algorithm>
#include <cstring>
#include <memory>

#include "../../core/tensor.hpp"
#include "../../graph/flat.hpp"
#include "../common/backend.hpp"
#include "attention.cuh"
#include "context.cuh"
#include "fused.cuh"
#include "index.cuh"
#include "layout.cuh"
#include "matmul.cuh"
#include "nn.cuh"
#include "norm.cuh"
#include "reduce.cuh"
#include "runtime.hpp"

namespace typeflow {

template <int N>
inline constexpr bool has_device_backend<gpu<N>> = true;

template <int N>
struct device_backend<gpu<N>> {
  static_assert(N >= 0 && N < 16, "gpu<N>: at most 16 GPUs per session");
  using state = backend::session_state;
  using value = backend::rt_value;

  /// A GPU's memory is its own: values reach the host by fetch, read or a transfer.
  static constexpr bool host_memory = false;
  /// A run whose every step is on this GPU can be captured as one CUDA graph and replayed
  /// (begin_capture, end_capture, launch, reserve, upload).
  static constexpr bool captures_runs = true;

  static cuda_backend::context context(state& s) { return cuda_backend::context::of(s, N); }

  /// The compiler places a step on a GPU only where kernels.hpp declares its kernel, and folds
  /// (epilogues, chains, prologues) on the CPU only.
  template <graph::step_kind K, class Op, class T, class Region, class... Refs>
  static constexpr bool has_kernel = K == graph::step_kind::kernel;
  /// A fused region here is one generated kernel (fused.cuh): no vector form is needed.
  template <class Region>
  struct vector_form {
    static constexpr bool missing = false;
    using op = void;
  };

  /// One step: the op's kernel (kernels.hpp), given this GPU's context.
  template <std::size_t I, class Op, class T, class Region, class... Refs>
  static void kernel(state& s, Op* op, T* t, value* vals, Region* region, Refs*... refs) {
    auto ctx = context(s);
    cuda_backend::kernel<I>(ctx, op, t, vals, region, refs...);
  }
  /// One step of kind K on its frame (the executor's interface; only kernel steps come here).
  template <graph::step_kind K, class Op, class T, class Region, class... Refs>
  static void step(state& s, Op* op, T* t, value* frame, std::size_t, Region* region,
                   Refs*... refs) {
    static_assert(K == graph::step_kind::kernel, "folds are made on the CPU only");
    kernel<0>(s, op, t, frame, region, refs...);
  }

  // ---- variables: kept on this GPU between runs -------------------------------------------

  /// The device copy of a variable, uploaded when the host (or another GPU) holds the value.
  static void* bind_variable(state& s, backend::variable_record& rec) {
    if (rec.device_valid && rec.gpu == N)
      return rec.device_data.get();
    backend::sync_host(rec); // the value may be on another GPU
    auto ctx = context(s);
    if (rec.gpu != N || !rec.device_data) {
      value holder;
      ctx.allocate(holder, rec.bytes);
      rec.device_data = std::move(holder.owner);
      rec.gpu = N;
    }
    upload(ctx.gpu, rec.device_data.get(), rec.data.get(), rec.bytes);
    rec.device_valid = true;
    rec.download = &download;
    rec.download_context = &ctx.gpu;
    return rec.device_data.get();
  }
  static void download(void* gpu, backend::variable_record& rec) {
    auto& g = *static_cast<cuda_backend::gpu_context*>(gpu);
    cuda_backend::use_device(g.device);
    download_into(g, rec.data.get(), rec.device_data.get(), rec.bytes);
  }
  /// An assignment's new value becomes the variable's (both on this GPU), with the run's other
  /// assignments in one kernel at the end of the run, unless a device-side check failed.
  static void commit(state& s, void* dst, const void* src, std::size_t bytes) {
    if (bytes && dst != src)
      context(s).gpu.commits.push_back({dst, src, bytes});
  }
  /// An assignment's new value `v` becomes variable `var`'s (the executor's interface): queued
  /// as above, unless a replayed graph makes its own commits; the host copy is then stale.
  static void commit(state& s, value& var, value& v, backend::variable_record& rec, bool,
                     std::size_t bytes) {
    if (!s.replaying)
      commit(s, var.data, v.data, bytes);
    rec.host_valid = false;
  }

  // ---- a run's work as one CUDA graph ----------------------------------------------------------

  /// From here until end_capture the stream's work is recorded, not run; every buffer allocated
  /// meanwhile belongs to the graph.
  static void begin_capture(state& s) {
    auto ctx = context(s);
    ctx.gpu.checks.clear();
    ctx.gpu.commits.clear();
    ctx.gpu.mem.begin_capture();
    TYPEFLOW_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeRelaxed));
  }
  /// The captured work, instantiated (ok: the capture ran to its end; else it is discarded: the
  /// graph is not instantiated, and only holds the capture's buffers).
  static std::shared_ptr<void> end_capture(state& s, bool ok) {
    auto ctx = context(s);
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(ctx.stream(), &graph);
    auto g = std::make_shared<cuda_backend::captured_graph>(ctx.slot, ctx.gpu.mem.end_capture(),
                                                            std::move(ctx.gpu.checks));
    ctx.gpu.checks.clear();
    ctx.gpu.commits.clear();
    g->graph = graph;
    if (!ok) {
      (void)cudaGetLastError();
      return g;
    }
    TYPEFLOW_CUDA_CHECK(e);
    TYPEFLOW_CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
    return g;
  }
  /// Waits for this GPU's stream: a traced step's time is then the GPU's.
  static void synchronize(state& s) { context(s).gpu.s.synchronize(); }
  /// One launch of a captured run (after the uploads of its feeds, on the same stream).
  static void launch(state& s, void* graph) {
    auto ctx = context(s);
    auto& g = *static_cast<cuda_backend::captured_graph*>(graph);
    ctx.gpu.checks = g.checks;
    TYPEFLOW_CUDA_CHECK(cudaGraphLaunch(g.exec, ctx.stream()));
  }
  /// A transfer's device buffer without its copy (a captured run's feeds are uploaded into it
  /// before each launch).
  static void reserve(state& s, const value& src, value& dst, std::size_t elem_bytes) {
    dst.dims = src.dims;
    auto ctx = context(s);
    const std::size_t bytes =
        std::max<std::size_t>(elem_bytes * static_cast<std::size_t>(src.dims.numel()), 1);
    void* p =
        ctx.gpu.mem.allocate_exclusive(bytes); // written before each launch: no step shares it
    std::shared_ptr<void> keep = ctx.slot;
    dst.owner = std::shared_ptr<void>(p, [keep, bytes](void* q) {
      static_cast<cuda_backend::gpu_context*>(keep.get())->mem.deallocate(q, bytes);
    });
    dst.data = p;
  }
  static void upload(state& s, void* dst, const void* src, std::size_t bytes) {
    upload(context(s).gpu, dst, src, bytes);
  }

  // ---- host <-> device copies through pinned staging buffers --------------------------------

  /// Host to device, asynchronous: the bytes go through a pinned buffer, so the caller's memory
  /// is free again on return and the copy overlaps the work queued before it.
  static void upload(cuda_backend::gpu_context& g, void* dst, const void* src, std::size_t bytes) {
    if (!bytes)
      return;
    void* pinned = g.staging.acquire(bytes);
    std::memcpy(pinned, src, bytes);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, g.s.get()));
    g.staging.release_after(pinned, bytes, g.s.get());
  }
  /// Device to host, after the work queued before it: the host reads dst on return.
  static void download_into(cuda_backend::gpu_context& g, void* dst, const void* src,
                            std::size_t bytes) {
    if (!bytes)
      return;
    void* pinned = g.staging.acquire(bytes);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(pinned, src, bytes, cudaMemcpyDeviceToHost, g.s.get()));
    g.s.synchronize();
    std::memcpy(dst, pinned, bytes);
    g.staging.release_now(pinned, bytes);
  }

  static void to_device(state& s, const value& src, value& dst, std::size_t elem_bytes) {
    if (s.capturing)
      return reserve(s, src, dst, elem_bytes);
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(src.dims.numel());
    dst.dims = src.dims;
    auto ctx = context(s);
    void* p = ctx.allocate(dst, bytes);
    upload(ctx.gpu, p, src.data, bytes);
  }

  static void to_host(state& s, const value& src, value& dst, std::size_t elem_bytes) {
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(src.dims.numel());
    dst.dims = src.dims;
    dst.owner = s.host_mem->acquire(bytes, s.stats);
    dst.data = dst.owner.get();
    download_into(context(s).gpu, dst.data, src.data, bytes); // the host reads it next
  }

  static void from_device(state& s, int src_device, const value& src, value& dst,
                          std::size_t elem_bytes) {
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(src.dims.numel());
    cuda_backend::context::of(s, src_device).gpu.s.synchronize();
    auto ctx = context(s);
    dst.dims = src.dims;
    void* p = ctx.allocate(dst, bytes);
    if (bytes)
      TYPEFLOW_CUDA_CHECK(cudaMemcpyPeerAsync(p, N, src.data, src_device, bytes, ctx.stream()));
  }

  /// A value sent here from device Src: uploaded from the host, or copied from another GPU.
  template <class Src>
  static void receive(state& s, const value& src, value& dst, std::size_t elem_bytes) {
    if constexpr (Src::is_cpu)
      to_device(s, src, dst, elem_bytes);
    else
      from_device(s, Src::index, src, dst, elem_bytes);
  }

  template <class T>
  static tensor<T> fetch(state& s, const value& v) {
    tensor<T> t(v.dims.vec());
    download_into(context(s).gpu, t.data(), v.data, sizeof(T) * static_cast<std::size_t>(t.size()));
    return t;
  }
  /// f(const T*) on a host copy of v's elements.
  template <class T, class F>
  static void read(state& s, const value& v, F&& f) {
    f(fetch<T>(s, v).data());
  }
};

} // namespace typeflow

#if __has_include(<nccl.h>)
#include "nccl.cuh" // GPU towers of replicated sessions
#endif
