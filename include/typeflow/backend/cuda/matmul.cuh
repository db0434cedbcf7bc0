// matmul on the GPU (compiled by nvcc): 2-D and batched, one strided-batched cuBLAS call, for
// float32 and float64. The convolutions (nn.cuh) use the same GEMM.
#pragma once
#include <cstdint>
#include <type_traits>

#include "../../ops/matmul.hpp"
#include "context.cuh"

namespace typeflow::cuda_backend {

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

/// matmul, 2-D or batched.
template <std::size_t I, bool TA, bool TB, class T, class A, class B>
void kernel(context& ctx, ops::matmul<TA, TB>*, T*, value* vals, void*, A*, B*) {
  const value &a = vals[A::index], &b = vals[B::index];
  value& o = vals[I];
  const auto [m, n, k, batch] = backend::matmul_extents::of(a.dims, o.dims, TA);
  T* out = ctx.output<T>(o);
  if (o.dims.numel() == 0)
    return;
  if (k == 0) {
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(
        out, 0, sizeof(T) * static_cast<std::size_t>(o.dims.numel()), ctx.stream()));
    return;
  }
  gemm_strided_batched<T>(ctx.blas(), TA, TB, m, n, k, static_cast<const T*>(a.data),
                          static_cast<const T*>(b.data), out, batch);
}

} // namespace typeflow::cuda_backend
