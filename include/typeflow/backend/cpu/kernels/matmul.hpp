// CPU kernels of the matmul ops. Matrix products: oneDNN's matmul primitive for float32
// (backend/cpu/onednn.hpp), else the split BLAS/portable GEMM (backend/cpu/gemm.hpp).
#pragma once
#include "../../../ops/matmul.hpp"
#include "../context.hpp"
#include "../gemm.hpp"
#include "../onednn.hpp"

namespace typeflow::cpu_backend {

template <std::size_t I, bool TA, bool TB, class T, class A, class B>
void kernel(context& ctx, ops::matmul<TA, TB>*, T*, value* vals, void*, A*, B*) {
  const value &a = vals[A::index], &b = vals[B::index];
  value& o = vals[I];
  T* out = ctx.allocate<T>(o);
  const auto [m, n, k, batch] = backend::matmul_extents::of(a.dims, o.dims, TA);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
#if defined(TYPEFLOW_HAS_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0) {
      const auto serial = [&](bool ta, bool tb, std::int64_t m_, std::int64_t n_, std::int64_t k_,
                              const float* a_, std::int64_t lda, const float* b_, std::int64_t ldb,
                              float* c_, std::int64_t ldc) {
        onednn_gemm_serial(ctx.dnnl, ta, tb, m_, n_, k_, a_, lda, b_, ldb, c_, ldc);
      };
      for (std::int64_t i = 0; i < batch; ++i)
        gemm_split(ctx.pool, TA, TB, m, n, k, pa + i * m * k, pb + i * k * n, out + i * m * n,
                   serial);
      return;
    }
  }
#endif
  for (std::int64_t i = 0; i < batch; ++i)
    gemm<T>(ctx.pool, TA, TB, m, n, k, pa + i * m * k, pb + i * k * n, out + i * m * n);
}

} // namespace typeflow::cpu_backend
