// build.simd_avx512_o0: typeflow's vector forms compile in an unoptimized g++ build for an
// AVX-512BW target (x86-64-v4), whatever CPU builds it. Debian's xsimd 8.1 does not compile
// `log`, `exp` or `pow` of doubles there with its AVX-512BW kernels (backend/cpu/simd.hpp), so
// a Debug build on such a CPU failed; this unit instantiates the transcendental vector forms of
// ops/ for float and double. Compile-only: the machine that builds it need not run AVX-512. It
// fails (8 errors) with the headers before the fix.
#include <typeflow/backend/cpu/simd.hpp>

namespace simd = typeflow::cpu_backend::simd;
namespace ops = typeflow::ops;

template <class F>
simd::vec<F> all_unary(simd::vec<F> x) {
  return simd::batch_op<ops::exp>::eval(x) + simd::batch_op<ops::log>::eval(x) +
         simd::batch_op<ops::tanh>::eval(x) + simd::batch_op<ops::sigmoid>::eval(x) +
         simd::batch_op<ops::erf>::eval(x) + simd::batch_op<ops::gelu>::eval(x) +
         simd::batch_op<ops::sin>::eval(x) + simd::batch_op<ops::cos>::eval(x) +
         simd::batch_op<ops::pow>::eval(x, x);
}

int main() {
  float f[64] = {};
  double d[64] = {};
  all_unary<float>(simd::vec<float>::load_unaligned(f)).store_unaligned(f);
  all_unary<double>(simd::vec<double>::load_unaligned(d)).store_unaligned(d);
  return static_cast<int>(f[0] + d[0]);
}
