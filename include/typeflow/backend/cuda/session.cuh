// The CUDA backend of the session (compiled by nvcc; include it in every translation unit that
// runs sessions on GPUs, before their first use, so that every plan sees the same kernels).
//
// What runs on a GPU: fused elementwise regions (one kernel each, from the same functor types as
// the CPU loop; assignments included), matmul (cuBLAS), the reductions (sum/mean/max/min, argmax),
// conv2d and its gradients (im2col + cuBLAS), pooling and its gradients, the fused cross-entropy,
// the layout ops (transpose, slice, pad, concat; layout.cuh), dropout masks, and the views.
// Variables placed on a GPU stay there between runs. Ops without a GPU kernel (debug probes) fall
// back to cpu<0> by soft placement; transfers between host and device are copies on the device's
// stream through pinned staging buffers, and fetched values come back to the host. Device
// buffers come from a caching allocator per GPU.
#pragma once
#include <cstring>
#include <memory>
#include <string_view>

#include "../../runtime/session.hpp"
#include "fused.cuh"
#include "layout.cuh"
#include "nn.cuh"
#include "reduce.cuh"
#include "runtime.hpp"

namespace typeflow {

/// GPU kernels of the elementwise ops: everything fusable (assignments included: they are
/// committed on their variable's device), except debug probes (which count in a host atomic).
template <class Op>
requires(Op::kind == node_kind::elementwise &&
         Op::name != std::string_view("probe")) struct has_gpu_kernel<Op> : std::true_type {
};

/// Variables live on the GPU their policy names, between runs too.
template <class Name, dtype T, class Shape, class Init>
struct has_gpu_kernel<ops::variable<Name, T, Shape, Init>> : std::true_type {};

/// matmul (2-D and batched) runs on cuBLAS, for float32 and float64.
template <bool TA, bool TB>
struct has_gpu_kernel<ops::matmul<TA, TB>> : std::true_type {};

/// sum, mean, max and min run as CUDA reductions (argmax: layout.cuh).
template <class Rd, bool K, std::int64_t... Ax>
requires(
    !std::is_same_v<Rd, ops::reducers::argmax>) struct has_gpu_kernel<ops::reduce<Rd, K, Ax...>>
    : std::true_type {
};

/// The neural-network ops and the view-only layout ops.
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct has_gpu_kernel<ops::conv2d<P, SH, SW, DH, DW>> : std::true_type {};
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct has_gpu_kernel<ops::conv2d_backprop_input<P, SH, SW, DH, DW>> : std::true_type {};
template <padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH, std::int64_t DW>
struct has_gpu_kernel<ops::conv2d_backprop_filter<P, SH, SW, DH, DW>> : std::true_type {};
template <ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW, std::int64_t SH,
          std::int64_t SW>
struct has_gpu_kernel<ops::pool<K, P, KH, KW, SH, SW>> : std::true_type {};
template <ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW, std::int64_t SH,
          std::int64_t SW>
struct has_gpu_kernel<ops::pool_grad<K, P, KH, KW, SH, SW>> : std::true_type {};
template <>
struct has_gpu_kernel<ops::sparse_softmax_xent> : std::true_type {};
template <>
struct has_gpu_kernel<ops::sparse_softmax_xent_grad> : std::true_type {};
template <std::int64_t... D>
struct has_gpu_kernel<ops::reshape<D...>> : std::true_type {};
template <std::int64_t... A>
struct has_gpu_kernel<ops::expand_dims<A...>> : std::true_type {};
template <>
struct has_gpu_kernel<ops::reshape_like> : std::true_type {};
template <>
struct has_gpu_kernel<ops::replica_mean> : std::true_type {};

namespace cuda_backend {

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

/// Row-major C[b] = op(A[b]) op(B[b]) through column-major cuBLAS: C^T = op(B)^T op(A)^T.
template <class T>
void gemm_strided_batched(cublasHandle_t h, bool ta, bool tb, std::int64_t m, std::int64_t n,
                          std::int64_t k, const T* a, const T* b, T* c, std::int64_t batch) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "CUDA backend: matmul on the GPU takes float32 or float64");
  const T alpha = 1, beta = 0;
  const auto opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  if constexpr (std::is_same_v<T, float>)
    TYPEFLOW_CUDA_CHECK(cublasSgemmStridedBatched(
        h, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb,
        k * n, a, lda, m * k, &beta, c, static_cast<int>(n), m * n, static_cast<int>(batch)));
  else
    TYPEFLOW_CUDA_CHECK(cublasDgemmStridedBatched(
        h, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb,
        k * n, a, lda, m * k, &beta, c, static_cast<int>(n), m * n, static_cast<int>(batch)));
}

} // namespace cuda_backend

template <int N>
struct device_backend<gpu<N>> : cuda_backend::layout_steps<N> {
  using cuda_backend::layout_steps<N>::kernel;
  /// The session's run counter (dropout's masks depend on it).
  template <class Session>
  static std::uint64_t run_count(const Session& s) {
    return s.runs_;
  }

  template <class Session>
  static cuda_backend::gpu_context& context(Session& s) {
    static_assert(N >= 0 && N < 16, "gpu<N>: at most 16 GPUs per session");
    auto& slot = s.gpu_states_[N];
    if (!slot) {
      const int n = cuda_backend::device_count();
      if (n <= N)
        throw error(gpu<N>::name() + ": no such CUDA device (this machine has " +
                    std::to_string(n) + ")");
      slot = std::make_shared<cuda_backend::gpu_context>(N, s.opts_.allow_tf32);
    }
    cuda_backend::use_device(N);
    return *static_cast<cuda_backend::gpu_context*>(slot.get());
  }

  // ---- variables: kept on this GPU between runs -------------------------------------------

  /// The device copy of a variable, uploaded when the host (or another GPU) holds the value.
  template <class Session, class Record>
  static void* bind_variable(Session& s, Record& rec) {
    if (rec.device_valid && rec.gpu == N)
      return rec.device_data.get();
    s.sync_host(rec); // the value may be on another GPU
    auto& ctx = context(s);
    if (rec.gpu != N || !rec.device_data) {
      runtime::rt_value holder;
      allocate(s, holder, rec.bytes);
      rec.device_data = std::move(holder.owner);
      rec.gpu = N;
    }
    upload(ctx, rec.device_data.get(), rec.data.get(), rec.bytes);
    rec.device_valid = true;
    rec.download = &download;
    rec.download_context = &ctx;
    return rec.device_data.get();
  }
  static void download(void* ctx, runtime::variable_record& rec) {
    auto& c = *static_cast<cuda_backend::gpu_context*>(ctx);
    cuda_backend::use_device(c.device);
    download_into(c, rec.data.get(), rec.device_data.get(), rec.bytes);
  }
  /// An assignment's new value becomes the variable's (both on this GPU).
  template <class Session>
  static void commit(Session& s, void* dst, const void* src, std::size_t bytes) {
    if (bytes && dst != src)
      TYPEFLOW_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, context(s).s.get()));
  }

  // ---- host <-> device copies through pinned staging buffers --------------------------------

  /// Host to device, asynchronous: the bytes go through a pinned buffer, so the caller's memory
  /// is free again on return and the copy overlaps the work queued before it.
  static void upload(cuda_backend::gpu_context& ctx, void* dst, const void* src,
                     std::size_t bytes) {
    if (!bytes)
      return;
    void* pinned = ctx.staging.acquire(bytes);
    std::memcpy(pinned, src, bytes);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, ctx.s.get()));
    ctx.staging.release_after(pinned, bytes, ctx.s.get());
  }
  /// Device to host, after the work queued before it: the host reads dst on return.
  static void download_into(cuda_backend::gpu_context& ctx, void* dst, const void* src,
                            std::size_t bytes) {
    if (!bytes)
      return;
    void* pinned = ctx.staging.acquire(bytes);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(pinned, src, bytes, cudaMemcpyDeviceToHost, ctx.s.get()));
    ctx.s.synchronize();
    std::memcpy(dst, pinned, bytes);
    ctx.staging.release_now(pinned, bytes);
  }

  /// A device buffer for v, returned to the allocator when v's last reference goes.
  template <class Session>
  static void* allocate(Session& s, runtime::rt_value& v, std::size_t bytes) {
    auto& ctx = context(s);
    void* p = ctx.mem.allocate(bytes);
    std::shared_ptr<void> keep = s.gpu_states_[N];
    v.owner = std::shared_ptr<void>(p, [keep, bytes](void* q) {
      static_cast<cuda_backend::gpu_context*>(keep.get())->mem.deallocate(q, bytes);
    });
    v.data = p;
    return p;
  }

  /// A fused elementwise region: one kernel.
  template <std::size_t I, class Session, class Op, class T, class Out, class Ins, class Members,
            class IdxSeq, class... Refs>
  static void kernel(Session& s, Op*, T*, runtime::rt_value* vals,
                     graph::flat_region<Out, Ins, Members, IdxSeq>*, Refs*...) {
    constexpr auto idx = graph::index_array<IdxSeq>::value;
    std::array<const runtime::rt_value*, idx.size()> inputs{};
    for (std::size_t k = 0; k < idx.size(); ++k)
      inputs[k] = &vals[idx[k]];
    auto& ctx = context(s);
    T* out = static_cast<T*>(
        allocate(s, vals[I], sizeof(T) * static_cast<std::size_t>(vals[I].dims.numel())));
    cuda_backend::fused_kernel<Out, Ins, Members>::run(ctx.s.get(), out, vals[I].dims, inputs);
    s.stats_.fused_nodes += Members::size - 1;
  }
  /// matmul, 2-D or batched: one strided-batched cuBLAS call.
  template <std::size_t I, class Session, bool TA, bool TB, class T, class A, class B>
  static void kernel(Session& s, ops::matmul<TA, TB>*, T*, runtime::rt_value* vals, void*, A*, B*) {
    const runtime::rt_value &a = vals[A::index], &b = vals[B::index];
    runtime::rt_value& o = vals[I];
    const auto [m, n, k, batch] = runtime::matmul_extents::of(a.dims, o.dims, TA);
    T* out = static_cast<T*>(allocate(s, o, sizeof(T) * static_cast<std::size_t>(o.dims.numel())));
    if (o.dims.numel() == 0)
      return;
    if (k == 0) {
      TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(
          out, 0, sizeof(T) * static_cast<std::size_t>(o.dims.numel()), context(s).s.get()));
      return;
    }
    cuda_backend::gemm_strided_batched<T>(context(s).blas, TA, TB, m, n, k,
                                          static_cast<const T*>(a.data),
                                          static_cast<const T*>(b.data), out, batch);
  }

  /// sum, mean, max, min over any axes.
  template <std::size_t I, class Session, class Rd, bool K, std::int64_t... Ax, class T, class A>
  static void kernel(Session& s, ops::reduce<Rd, K, Ax...>*, T*, runtime::rt_value* vals, void*,
                     A*) {
    const runtime::rt_value& in = vals[A::index];
    runtime::rt_value& o = vals[I];
    T* out = static_cast<T*>(allocate(s, o, sizeof(T) * static_cast<std::size_t>(o.dims.numel())));
    cuda_backend::reduce<Rd>(context(s).s.get(),
                             static_cast<const typename A::value_type*>(in.data), in.dims,
                             ops::reduce<Rd, K, Ax...>::template mask<A::rank>(), out);
  }

  // ---- views: share the input's device buffer ----------------------------------------------
  template <std::size_t I, class Session, std::int64_t... D, class T, class A>
  static void kernel(Session&, ops::reshape<D...>*, T*, runtime::rt_value* vals, void*, A*) {
    vals[I].owner = vals[A::index].owner;
    vals[I].data = vals[A::index].data;
  }
  template <std::size_t I, class Session, std::int64_t... Ax, class T, class A>
  static void kernel(Session&, ops::expand_dims<Ax...>*, T*, runtime::rt_value* vals, void*, A*) {
    vals[I].owner = vals[A::index].owner;
    vals[I].data = vals[A::index].data;
  }
  template <std::size_t I, class Session, class T, class A>
  static void kernel(Session&, ops::replica_mean*, T*, runtime::rt_value* vals, void*, A*) {
    vals[I].owner = vals[A::index].owner;
    vals[I].data = vals[A::index].data;
  }
  template <std::size_t I, class Session, class T, class A, class X>
  static void kernel(Session&, ops::reshape_like*, T*, runtime::rt_value* vals, void*, A*, X*) {
    if (vals[A::index].dims.numel() != vals[I].dims.numel())
      throw error("reshape_like: element counts differ: " + vals[A::index].dims.str() + " x " +
                  vals[I].dims.str());
    vals[I].owner = vals[A::index].owner;
    vals[I].data = vals[A::index].data;
  }

  // ---- convolutions: im2col + cuBLAS ---------------------------------------------------------
  template <class T, class Session>
  static T* scratch(Session& s, runtime::rt_value& holder, std::int64_t elements) {
    return static_cast<T*>(
        allocate(s, holder, sizeof(T) * static_cast<std::size_t>(elements > 0 ? elements : 1)));
  }
  /// The patches of x, in a scratch buffer that `holder` keeps alive.
  template <class T, class Session>
  static const T* im2col(Session& s, const T* x, const cuda_backend::window2d& g,
                         runtime::rt_value& holder) {
    T* col = scratch<T>(s, holder, g.rows() * g.patch());
    cuda_backend::
        im2col_kernel<<<cuda_backend::grid_for(g.rows() * g.patch()), 256, 0, context(s).s.get()>>>(
            x, g, col);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
    return col;
  }

  template <std::size_t I, class Session, padding P, std::int64_t SH, std::int64_t SW,
            std::int64_t DH, std::int64_t DW, class T, class X, class W>
  static void kernel(Session& s, ops::conv2d<P, SH, SW, DH, DW>*, T*, runtime::rt_value* vals,
                     void*, X*, W*) {
    const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                        vals[W::index].dims);
    auto& ctx = context(s);
    T* y = scratch<T>(s, vals[I], g.rows() * g.o);
    runtime::rt_value tmp;
    const T* col = im2col(s, static_cast<const T*>(vals[X::index].data), g, tmp);
    cuda_backend::gemm_strided_batched<T>(ctx.blas, false, false, g.rows(), g.o, g.patch(), col,
                                          static_cast<const T*>(vals[W::index].data), y, 1);
  }
  template <std::size_t I, class Session, padding P, std::int64_t SH, std::int64_t SW,
            std::int64_t DH, std::int64_t DW, class T, class G, class W, class X>
  static void kernel(Session& s, ops::conv2d_backprop_input<P, SH, SW, DH, DW>*, T*,
                     runtime::rt_value* vals, void*, G*, W*, X*) {
    const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                        vals[W::index].dims);
    auto& ctx = context(s);
    T* dx = scratch<T>(s, vals[I], g.n * g.h * g.w * g.c);
    runtime::rt_value tmp;
    T* col = scratch<T>(s, tmp, g.rows() * g.patch());
    cuda_backend::gemm_strided_batched<T>(ctx.blas, false, true, g.rows(), g.patch(), g.o,
                                          static_cast<const T*>(vals[G::index].data),
                                          static_cast<const T*>(vals[W::index].data), col, 1);
    cuda_backend::
        col2im_kernel<<<cuda_backend::grid_for(g.n * g.h * g.w * g.c), 256, 0, ctx.s.get()>>>(
            col, g, dx);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }
  template <std::size_t I, class Session, padding P, std::int64_t SH, std::int64_t SW,
            std::int64_t DH, std::int64_t DW, class T, class X, class G, class W>
  static void kernel(Session& s, ops::conv2d_backprop_filter<P, SH, SW, DH, DW>*, T*,
                     runtime::rt_value* vals, void*, X*, G*, W*) {
    const auto g = backend::conv_window<ops::conv2d<P, SH, SW, DH, DW>>(vals[X::index].dims,
                                                                        vals[W::index].dims);
    auto& ctx = context(s);
    T* dw = scratch<T>(s, vals[I], g.patch() * g.o);
    runtime::rt_value tmp;
    const T* col = im2col(s, static_cast<const T*>(vals[X::index].data), g, tmp);
    cuda_backend::gemm_strided_batched<T>(ctx.blas, true, false, g.patch(), g.o, g.rows(), col,
                                          static_cast<const T*>(vals[G::index].data), dw, 1);
  }

  // ---- pooling ----------------------------------------------------------------------------
  template <std::size_t I, class Session, ops::pool_kind K, padding P, std::int64_t KH,
            std::int64_t KW, std::int64_t SH, std::int64_t SW, class T, class X>
  static void kernel(Session& s, ops::pool<K, P, KH, KW, SH, SW>*, T*, runtime::rt_value* vals,
                     void*, X*) {
    const auto g = backend::pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
    const std::int64_t n = g.n * g.oh * g.ow * g.c;
    T* y = scratch<T>(s, vals[I], n);
    cuda_backend::pool_forward_kernel<K == ops::pool_kind::max>
        <<<cuda_backend::grid_for(n), 256, 0, context(s).s.get()>>>(
            static_cast<const T*>(vals[X::index].data), g, y);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }
  template <std::size_t I, class Session, ops::pool_kind K, padding P, std::int64_t KH,
            std::int64_t KW, std::int64_t SH, std::int64_t SW, class T, class X, class G>
  static void kernel(Session& s, ops::pool_grad<K, P, KH, KW, SH, SW>*, T*, runtime::rt_value* vals,
                     void*, X*, G*) {
    const auto g = backend::pool_window<ops::pool<K, P, KH, KW, SH, SW>>(vals[X::index].dims);
    const std::int64_t n = g.n * g.h * g.w * g.c;
    T* dx = scratch<T>(s, vals[I], n);
    cuda_backend::pool_backward_kernel<K == ops::pool_kind::max>
        <<<cuda_backend::grid_for(n), 256, 0, context(s).s.get()>>>(
            static_cast<const T*>(vals[X::index].data), static_cast<const T*>(vals[G::index].data),
            g, dx);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }

  // ---- the fused cross-entropy ------------------------------------------------------------
  template <bool Grad, class T, class Session, class L, class Y>
  static void xent(Session& s, runtime::rt_value* vals, std::size_t i) {
    const auto& ld = vals[L::index].dims;
    const std::int64_t n = ld.d[0], k = ld.d[1];
    auto& ctx = context(s);
    T* out = scratch<T>(s, vals[i], Grad ? n * k : n);
    runtime::rt_value flag_holder;
    int* bad = scratch<int>(s, flag_holder, 1);
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), ctx.s.get()));
    cuda_backend::sparse_xent_kernel<Grad><<<cuda_backend::grid_for(n), 256, 0, ctx.s.get()>>>(
        static_cast<const T*>(vals[L::index].data),
        static_cast<const typename Y::value_type*>(vals[Y::index].data), n, k, out, bad);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
    int flag = 0;
    TYPEFLOW_CUDA_CHECK(
        cudaMemcpyAsync(&flag, bad, sizeof(int), cudaMemcpyDeviceToHost, ctx.s.get()));
    ctx.s.synchronize();
    if (flag)
      throw error("sparse_softmax_cross_entropy_with_logits: a label is outside [0, " +
                  std::to_string(k) + ")");
  }
  template <std::size_t I, class Session, class T, class L, class Y>
  static void kernel(Session& s, ops::sparse_softmax_xent*, T*, runtime::rt_value* vals, void*, L*,
                     Y*) {
    xent<false, T, Session, L, Y>(s, vals, I);
  }
  template <std::size_t I, class Session, class T, class L, class Y>
  static void kernel(Session& s, ops::sparse_softmax_xent_grad*, T*, runtime::rt_value* vals, void*,
                     L*, Y*) {
    xent<true, T, Session, L, Y>(s, vals, I);
  }

  /// Any other op: placement never puts one here (has_gpu_kernel is false for it).
  template <std::size_t I, class Session, class Op, class... A>
  static void kernel(Session&, Op*, A...) {
    static_assert(!sizeof(Op*), "CUDA backend: this op has no GPU kernel yet");
  }

  template <class Session>
  static void to_device(Session& s, const runtime::rt_value& src, runtime::rt_value& dst,
                        std::size_t elem_bytes) {
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(src.dims.numel());
    dst.dims = src.dims;
    void* p = allocate(s, dst, bytes);
    upload(context(s), p, src.data, bytes);
  }

  template <class Session>
  static void to_host(Session& s, const runtime::rt_value& src, runtime::rt_value& dst,
                      std::size_t elem_bytes) {
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(src.dims.numel());
    dst.dims = src.dims;
    dst.owner = s.mem_->acquire(bytes, s.stats_);
    dst.data = dst.owner.get();
    download_into(context(s), dst.data, src.data, bytes); // the host reads it next
  }

  template <class Session>
  static void from_device(Session& s, int src_device, const runtime::rt_value& src,
                          runtime::rt_value& dst, std::size_t elem_bytes) {
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(src.dims.numel());
    device_backend<gpu<N>>::context(s); // make sure this GPU is set up
    auto& from = *static_cast<cuda_backend::gpu_context*>(s.gpu_states_[src_device].get());
    from.s.synchronize();
    dst.dims = src.dims;
    void* p = allocate(s, dst, bytes);
    if (bytes)
      TYPEFLOW_CUDA_CHECK(
          cudaMemcpyPeerAsync(p, N, src.data, src_device, bytes, context(s).s.get()));
  }

  template <class T, class Session>
  static tensor<T> fetch(Session& s, const runtime::rt_value& v) {
    tensor<T> t(v.dims.vec());
    download_into(context(s), t.data(), v.data, sizeof(T) * static_cast<std::size_t>(t.size()));
    return t;
  }
};

} // namespace typeflow

#if __has_include(<nccl.h>)
#include "nccl.cuh" // GPU towers of replicated sessions
#endif
