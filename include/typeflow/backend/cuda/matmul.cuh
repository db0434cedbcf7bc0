// matmul on the GPU (compiled by nvcc): 2-D and batched, strided-batched cuBLAS calls, for
// float32 and float64. The convolutions (nn.cuh) use the same GEMM. Under a session precision of
// bfloat16 or float16, float32 products read their operands rounded to that type and run on the
// tensor cores (cublasGemmStridedBatchedEx, float32 sums, float32 output).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../core/half.hpp"
#include "../../ops/matmul.hpp"
#include "context.cuh"

namespace typeflow::cuda_backend {

/// V values of T, aligned for one load or store of up to 16 bytes: a thread's share of a
/// vectorized kernel (the rounding below, nn.cuh's window kernels).
template <class T, int V>
struct alignas(V * sizeof(T) < 16 ? V * sizeof(T) : 16) lanes {
  T v[V];
};
/// The V values at p (aligned as lanes<T, V>).
template <int V, class T>
__host__ __device__ lanes<T, V> load_lanes(const T* p) {
  return *reinterpret_cast<const lanes<T, V>*>(p);
}

/// Up to two float32 arrays to round to H in one launch (blockIdx.y picks the array).
template <class H>
struct round_job {
  const float* in[2];
  H* out[2];
  std::int64_t n[2];
};
/// out[i] = H(in[i]) (round to nearest even), four at a time (one 16-byte load, one 8-byte
/// store: four 2-byte stores per thread leave partly written sectors) where in and out are
/// aligned for it.
template <class H>
__global__ void round_kernel(round_job<H> job) {
  const bool second = blockIdx.y != 0; // (not job.in[blockIdx.y]: a dynamic index into the
                                       // parameters would copy them to local memory)
  const float* in = second ? job.in[1] : job.in[0];
  H* out = second ? job.out[1] : job.out[0];
  const std::int64_t n = second ? job.n[1] : job.n[0];
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool wide = reinterpret_cast<std::uintptr_t>(in) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(out) % (4 * sizeof(H)) == 0;
  const std::int64_t quads = wide ? n / 4 : 0;
  for (std::int64_t q = t; q < quads; q += stride) {
    const float4 v = reinterpret_cast<const float4*>(in)[q];
    reinterpret_cast<lanes<H, 4>*>(out)[q] = lanes<H, 4>{{H(v.x), H(v.y), H(v.z), H(v.w)}};
  }
  for (std::int64_t i = quads * 4 + t; i < n; i += stride)
    out[i] = H(in[i]);
}

/// na float32 values at a (and nb at b, where b is not null) rounded to H, in scratch buffers
/// that ha (hb) keep alive: one launch for both.
template <class H>
std::pair<const H*, const H*> rounded(context& ctx, const float* a, std::int64_t na, value& ha,
                                      const float* b = nullptr, std::int64_t nb = 0,
                                      value* hb = nullptr) {
  round_job<H> job{
      {a, b}, {ctx.scratch<H>(ha, na), b ? ctx.scratch<H>(*hb, nb) : nullptr}, {na, b ? nb : 0}};
  const std::int64_t most = std::max(job.n[0], job.n[1]);
  if (most > 0) {
    const std::int64_t blocks = std::min<std::int64_t>((most / 4 + 255) / 256 + 1, 4096);
    round_kernel<H>
        <<<dim3(static_cast<unsigned>(blocks), b ? 2u : 1u), 256, 0, ctx.stream()>>>(job);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }
  return {job.out[0], job.out[1]};
}

template <class H>
constexpr cudaDataType_t cuda_type() {
  return std::is_same_v<H, bfloat16> ? CUDA_R_16BF : CUDA_R_16F;
}

/// Row-major C[b] = op(A[b]) op(B[b]) with H operands on the tensor cores, float32 sums and a
/// float32 C (column-major cuBLAS as in gemm_strided_batched; A[b] at a + b sa, B[b] at b + b sb).
template <class H>
void gemm_half(cublasHandle_t h, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
               const H* a, const H* b, float* c, std::int64_t batch, std::int64_t sa = -1,
               std::int64_t sb = -1) {
  static_assert(std::is_same_v<H, bfloat16> || std::is_same_v<H, float16>,
                "CUDA backend: tensor-core products take bfloat16 or float16 operands");
  const float alpha = 1, beta = 0;
  const auto opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  TYPEFLOW_CUDA_CHECK(cublasGemmStridedBatchedEx(
      h, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
      cuda_type<H>(), ldb, sb < 0 ? k * n : sb, a, cuda_type<H>(), lda, sa < 0 ? m * k : sa, &beta,
      c, CUDA_R_32F, static_cast<int>(n), m * n, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

/// Whether the session's float32 products on this GPU read 16-bit operands.
inline bool half_products(const context& ctx) {
  return ctx.session.precision != precision::float32;
}
/// f(static_cast<H*>(nullptr)) with H the 16-bit type of the session's precision (half_products).
template <class F>
void with_half_type(const context& ctx, F f) {
  if (ctx.session.precision == precision::bfloat16)
    f(static_cast<bfloat16*>(nullptr));
  else
    f(static_cast<float16*>(nullptr));
}

/// Row-major C[b] = op(A[b]) op(B[b]) through column-major cuBLAS: C^T = op(B)^T op(A)^T. A[b]
/// starts at a + b sa and B[b] at b + b sb (contiguous matrices when not given; 0 reads one
/// matrix again for every product).
template <class T>
void gemm_strided_batched(cublasHandle_t h, bool ta, bool tb, std::int64_t m, std::int64_t n,
                          std::int64_t k, const T* a, const T* b, T* c, std::int64_t batch,
                          std::int64_t sa = -1, std::int64_t sb = -1) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "CUDA backend: matmul on the GPU takes float32 or float64");
  const T alpha = 1, beta = 0;
  const auto opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  sa = sa < 0 ? m * k : sa;
  sb = sb < 0 ? k * n : sb;
  if constexpr (std::is_same_v<T, float>)
    TYPEFLOW_CUDA_CHECK(cublasSgemmStridedBatched(
        h, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb,
        sb, a, lda, sa, &beta, c, static_cast<int>(n), m * n, static_cast<int>(batch)));
  else
    TYPEFLOW_CUDA_CHECK(cublasDgemmStridedBatched(
        h, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ldb,
        sb, a, lda, sa, &beta, c, static_cast<int>(n), m * n, static_cast<int>(batch)));
}

/// The float32 products C[i] = op(A[i]) op(B[i]) of a batch under the session's precision: a
/// and b (na and nb values) rounded to bfloat16 or float16 (scratch buffers, once for every
/// product) and multiplied on the tensor cores, or plain float32 (TF32 where allowed). `run(f)`
/// calls f(a, b, c) once per cuBLAS call, with the operands to read.
template <class Run>
void gemm_float(context& ctx, const float* a, std::int64_t na, const float* b, std::int64_t nb,
                Run run) {
  if (!half_products(ctx))
    return run(a, b, [&](auto... args) { gemm_strided_batched<float>(ctx.blas(), args...); });
  with_half_type(ctx, [&]<class H>(H*) {
    value ha, hb;
    const auto [a16, b16] = rounded<H>(ctx, a, na, ha, b, nb, &hb);
    run(a16, b16, [&](auto... args) { gemm_half<H>(ctx.blas(), args...); });
  });
}

/// matmul, 2-D or batched: one strided-batched cuBLAS call, or, where the batch dimensions
/// broadcast, one call per run along the last batch dimension (an operand broadcast along it
/// has stride 0 there).
template <std::size_t I, bool TA, bool TB, class T, class A, class B>
void kernel(context& ctx, ops::matmul<TA, TB>*, T*, value* vals, void*, A*, B*) {
  const value &a = vals[A::index], &b = vals[B::index];
  value& o = vals[I];
  const auto [m, n, k, batch] = backend::matmul_extents::of(a.dims, b.dims, o.dims, TA);
  T* out = ctx.output<T>(o);
  if (o.dims.numel() == 0)
    return;
  if (k == 0) {
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(
        out, 0, sizeof(T) * static_cast<std::size_t>(o.dims.numel()), ctx.stream()));
    return;
  }
  const auto at = backend::matmul_batch::of(a.dims, b.dims, o.dims);
  // gemm(pa, pb, c, count, sa, sb): one cuBLAS call over `count` products
  const auto products = [&](const auto* pa, const auto* pb, auto gemm) {
    if (!at.broadcast || batch == 1)
      return gemm(TA, TB, m, n, k, pa, pb, out, batch, std::int64_t{-1}, std::int64_t{-1});
    const std::int64_t inner = at.inner();
    for (std::int64_t q = 0; q < batch; q += inner)
      gemm(TA, TB, m, n, k, pa + at.a(q), pb + at.b(q), out + q * m * n, inner, at.inner_a(),
           at.inner_b());
  };
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  if constexpr (std::is_same_v<T, float>)
    gemm_float(ctx, pa, a.dims.numel(), pb, b.dims.numel(), products);
  else
    products(pa, pb, [&](auto... args) { gemm_strided_batched<T>(ctx.blas(), args...); });
}

} // namespace typeflow::cuda_backend
