// CPU kernels of the matmul ops. Matrix products: oneDNN's matmul primitive for float32
// (backend/cpu/onednn.hpp), else the split BLAS/portable GEMM (backend/cpu/gemm.hpp).
#pragma once
#include <algorithm>
#include <optional>

#include "../../../graph/flat.hpp"
#include "../../../ops/matmul.hpp"
#include "../context.hpp"
#include "../gemm.hpp"
#include "../onednn.hpp"

namespace typeflow::cpu_backend {

#if defined(TYPEFLOW_HAS_ONEDNN)
/// A product's operands rounded to bfloat16 (na and nb elements), in buffers of the context's
/// pool, for a bfloat16 cache's primitives: each operand converted once, not once per slab.
struct bf16_operands {
  std::shared_ptr<void> a_buf, b_buf;
  const bfloat16 *a, *b;
  bf16_operands(context& ctx, const float* pa, std::int64_t na, const float* pb, std::int64_t nb)
      : a_buf(ctx.scratch<bfloat16>(na)), b_buf(ctx.scratch<bfloat16>(nb)),
        a(static_cast<const bfloat16*>(a_buf.get())), b(static_cast<const bfloat16*>(b_buf.get())) {
    onednn::to_bf16(ctx.pool, pa, na, static_cast<bfloat16*>(a_buf.get()));
    onednn::to_bf16(ctx.pool, pb, nb, static_cast<bfloat16*>(b_buf.get()));
  }
};
/// A product's operands rounded to float16 values (na and nb elements) for a float16 cache,
/// whose primitives are float32: float16 products, emulated.
struct f16_operands {
  std::shared_ptr<void> a_buf, b_buf;
  const float *a, *b;
  f16_operands(context& ctx, const float* pa, std::int64_t na, const float* pb, std::int64_t nb)
      : a_buf(ctx.scratch<float>(na)), b_buf(ctx.scratch<float>(nb)),
        a(static_cast<const float*>(a_buf.get())), b(static_cast<const float*>(b_buf.get())) {
    round(ctx, pa, na, static_cast<float*>(a_buf.get()));
    round(ctx, pb, nb, static_cast<float*>(b_buf.get()));
  }
  static void round(context& ctx, const float* src, std::int64_t n, float* dst) {
    ctx.pool.parallel_for(n, std::int64_t{1} << 16, [&](std::int64_t b, std::int64_t e) {
      onednn::round_to_f16(src + b, e - b, dst + b);
    });
  }
};
#endif

#if defined(TYPEFLOW_HAS_ONEDNN)
/// Whether a float32 product with neither operand transposed and at most `blas_rows_max` rows
/// runs on BLAS instead of oneDNN: where oneDNN runs AVX2 kernels (no AVX-512), which were slower
/// than OpenBLAS's on such products (an LSTM step's cell, the seed's local3 forward; the figures,
/// with the CPU, in bench/README.md, *Small-m and NN products*). Taller products and transposed
/// operands stay on oneDNN, which was as fast or faster there. Decided per product, not per slab,
/// so that its bits do not depend on the thread count.
inline constexpr std::int64_t blas_rows_max = 128;
inline bool small_nn_on_blas(bool ta, bool tb, std::int64_t m) {
  static const bool avx2_kernels = has_blas && onednn::isa_name().rfind("avx512", 0) != 0;
  return !ta && !tb && m <= blas_rows_max && avx2_kernels;
}
/// One slab of a float32 product on oneDNN, or on BLAS (`blas`: small_nn_on_blas of the whole
/// product), plus `bias` over its columns (and relu) under an epilogue.
inline void float_slab(context& ctx, bool blas, bool ta, bool tb, std::int64_t m, std::int64_t n,
                       std::int64_t k, const float* a, std::int64_t lda, const float* b,
                       std::int64_t ldb, float* c, std::int64_t ldc, const float* bias = nullptr,
                       onednn::epilogue epi = onednn::epilogue::none) {
  if (blas) {
    if (epi == onednn::epilogue::none) {
      gemm_serial(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
      return;
    }
    // The bias first, then the product added to it: BLAS then neither clears C (its beta pass)
    // nor leaves a second pass over C for the bias, only the relu's.
    for (std::int64_t i = 0; i < m; ++i)
      std::copy_n(bias, n, c + i * ldc);
    gemm_serial(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, /*accumulate=*/true);
    if (epi == onednn::epilogue::bias_relu)
      for (std::int64_t i = 0; i < m; ++i) {
        float* row = c + i * ldc;
        for (std::int64_t j = 0; j < n; ++j)
          row[j] = std::max(row[j], 0.0f);
      }
    return;
  }
  onednn_gemm_serial(ctx.dnnl, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, bias, epi);
}
#endif

template <std::size_t I, bool TA, bool TB, class T, class A, class B>
void kernel(context& ctx, ops::matmul<TA, TB>*, T*, value* vals, void*, A*, B*) {
  const value &a = vals[A::index], &b = vals[B::index];
  value& o = vals[I];
  T* out = ctx.allocate<T>(o);
  const auto [m, n, k, batch] = backend::matmul_extents::of(a.dims, b.dims, o.dims, TA);
  const auto at = backend::matmul_batch::of(a.dims, b.dims, o.dims);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
#if defined(TYPEFLOW_HAS_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    const std::int64_t na = a.dims.numel(), nb = b.dims.numel();
    if (k > 0 && m > 0 && n > 0 && ctx.dnnl.bf16()) { // bfloat16 operands, float32 result
      const bf16_operands ab(ctx, pa, na, pb, nb);
      const bfloat16 *a_16 = ab.a, *b_16 = ab.b;
      const auto serial = [&](bool ta, bool tb, std::int64_t m_, std::int64_t n_, std::int64_t k_,
                              const bfloat16* a_, std::int64_t lda, const bfloat16* b_,
                              std::int64_t ldb, float* c_, std::int64_t ldc) {
        onednn_gemm_serial(ctx.dnnl, ta, tb, m_, n_, k_, a_, lda, b_, ldb, c_, ldc);
      };
      for (std::int64_t i = 0; i < batch; ++i)
        gemm_split(ctx.pool, TA, TB, m, n, k, a_16 + at.a(i), b_16 + at.b(i), out + i * m * n,
                   serial);
      return;
    }
    std::optional<f16_operands> rounded; // float16 products: the operands rounded first
    if (k > 0 && m > 0 && n > 0 && ctx.dnnl.f16()) {
      rounded.emplace(ctx, pa, na, pb, nb);
      pa = rounded->a;
      pb = rounded->b;
    }
    if (k > 0 && m > 0 && n > 0) { // oneDNN divides by empty extents
      const bool blas = small_nn_on_blas(TA, TB, m);
      const auto serial = [&](bool ta, bool tb, std::int64_t m_, std::int64_t n_, std::int64_t k_,
                              const float* a_, std::int64_t lda, const float* b_, std::int64_t ldb,
                              float* c_, std::int64_t ldc) {
        if (rounded) // float16 products emulated: oneDNN's float32 primitives, as cached
          onednn_gemm_serial(ctx.dnnl, ta, tb, m_, n_, k_, a_, lda, b_, ldb, c_, ldc);
        else
          float_slab(ctx, blas, ta, tb, m_, n_, k_, a_, lda, b_, ldb, c_, ldc);
      };
      for (std::int64_t i = 0; i < batch; ++i)
        gemm_split(ctx.pool, TA, TB, m, n, k, pa + at.a(i), pb + at.b(i), out + i * m * n, serial);
      return;
    }
  }
#endif
  for (std::int64_t i = 0; i < batch; ++i)
    gemm<T>(ctx.pool, TA, TB, m, n, k, pa + at.a(i), pb + at.b(i), out + i * m * n);
}

#if defined(TYPEFLOW_HAS_ONEDNN)
/// matmul with its epilogue (bias over the last axis, relu) as oneDNN post-ops, float32: each
/// slab of the product adds its columns' share of the bias.
template <std::size_t I, bool TA, bool TB, class F, class B, bool Relu, class A, class Bm>
bool kernel(context& ctx, ops::matmul<TA, TB>*, float*, value* vals,
            const graph::epilogue<F, B, Relu>&, A*, Bm*) {
  const value &a = vals[A::index], &b = vals[Bm::index];
  value& o = vals[I];
  const auto [m, n, k, batch] = backend::matmul_extents::of(a.dims, b.dims, o.dims, TA);
  const auto at = backend::matmul_batch::of(a.dims, b.dims, o.dims);
  const std::int64_t na = a.dims.numel(), nb = b.dims.numel();
  if (k <= 0 || m == 0 || n == 0)
    return false;
  float* out = ctx.allocate<float>(o);
  const float* pa = static_cast<const float*>(a.data);
  const float* pb = static_cast<const float*>(b.data);
  const float* bias = static_cast<const float*>(vals[B::index].data);
  std::optional<f16_operands> rounded; // float16 products: the operands rounded first
  if (ctx.dnnl.f16()) {
    rounded.emplace(ctx, pa, na, pb, nb);
    pa = rounded->a;
    pb = rounded->b;
  }
  if (ctx.dnnl.bf16()) { // bfloat16 operands, float32 result and bias
    const bf16_operands ab(ctx, pa, na, pb, nb);
    const bfloat16 *a_16 = ab.a, *b_16 = ab.b;
    for (std::int64_t i = 0; i < batch; ++i) {
      float* c = out + i * m * n;
      const auto serial = [&](bool ta, bool tb, std::int64_t m_, std::int64_t n_, std::int64_t k_,
                              const bfloat16* a_, std::int64_t lda, const bfloat16* b_,
                              std::int64_t ldb, float* c_, std::int64_t ldc) {
        onednn_gemm_serial(ctx.dnnl, ta, tb, m_, n_, k_, a_, lda, b_, ldb, c_, ldc,
                           bias + (c_ - c) % n,
                           Relu ? onednn::epilogue::bias_relu : onednn::epilogue::bias);
      };
      gemm_split(ctx.pool, TA, TB, m, n, k, a_16 + at.a(i), b_16 + at.b(i), c, serial);
    }
    return true;
  }
  const bool blas = small_nn_on_blas(TA, TB, m);
  for (std::int64_t i = 0; i < batch; ++i) {
    float* c = out + i * m * n;
    const auto serial = [&](bool ta, bool tb, std::int64_t m_, std::int64_t n_, std::int64_t k_,
                            const float* a_, std::int64_t lda, const float* b_, std::int64_t ldb,
                            float* c_, std::int64_t ldc) {
      const auto epi = Relu ? onednn::epilogue::bias_relu : onednn::epilogue::bias;
      if (rounded)
        onednn_gemm_serial(ctx.dnnl, ta, tb, m_, n_, k_, a_, lda, b_, ldb, c_, ldc,
                           bias + (c_ - c) % n, epi);
      else
        float_slab(ctx, blas, ta, tb, m_, n_, k_, a_, lda, b_, ldb, c_, ldc, bias + (c_ - c) % n,
                   epi);
    };
    gemm_split(ctx.pool, TA, TB, m, n, k, pa + at.a(i), pb + at.b(i), c, serial);
  }
  return true;
}
#endif

} // namespace typeflow::cpu_backend
