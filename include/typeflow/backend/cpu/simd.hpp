// Vector forms of the elementwise ops, for the CPU's fused loops (backend/cpu/fused.hpp), with
// xsimd (Debian's libxsimd-dev): `batch_op<Op>::eval` computes Op on a batch of lanes. An op
// without one (integer arithmetic, bool inputs, ...) keeps the scalar loop, which is the
// reference: the two agree exactly for arithmetic, comparisons and selects, and within xsimd's
// documented error (an ulp or two) for exp, log, sin, cos, tanh and pow.
//
// Off when xsimd is absent, when TYPEFLOW_NO_XSIMD is defined, and in translation units nvcc
// compiles (xsimd is host code that nvcc's front end need not parse): those use the scalar loop.
#pragma once
#if !defined(TYPEFLOW_NO_XSIMD) && !defined(__CUDACC__) && __has_include(<xsimd/xsimd.hpp>)
// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized on their own `_mm512_undefined_*`
// (GCC bug 105593, fixed in 13); the warning takes its setting from where the intrinsics header
// was first read, so it is read here, inside the suppression, when typeflow includes it first.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <xsimd/xsimd.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define TYPEFLOW_HAS_XSIMD 1
#endif

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <type_traits>
#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include "../../ops/elementwise.hpp"
#include "../../ops/nn.hpp"
#include "../../ops/state.hpp"

namespace typeflow::cpu_backend::simd {

/// The vector form of Op, when it has one (the primary template has none, and says so: a fused
/// region of one floating type whose op lacks a vector form does not compile unless the op
/// declares `static constexpr bool scalar_only = true;`).
template <class Op>
struct batch_op {
  static constexpr bool missing = true;
};

#if defined(TYPEFLOW_HAS_XSIMD)
/// The instruction set of typeflow's vectors: the best the target has, except that an
/// unoptimized g++ build for AVX-512BW takes AVX-512DQ (the same 512-bit vectors of float and
/// double). In Debian's xsimd 8.1, `select` on AVX-512BW for 8-byte integers, which `log`,
/// `exp` and `pow` of doubles call, names an 8-bit blend that g++ defines as a macro at -O0,
/// whose cast of an xsimd batch does not compile: a Debug build (or CI's -O0 unit tests) for
/// any AVX-512BW target failed in xsimd's header (seen on an Intel Rocket Lake).
#if defined(__AVX512BW__) && !defined(__OPTIMIZE__) && defined(__GNUC__) && !defined(__clang__)
using arch = xsimd::avx512dq;
#else
using arch = xsimd::default_arch;
#endif
template <class F>
using vec = xsimd::batch<F, arch>;
template <class F>
using mask = xsimd::batch_bool<F, arch>;

/// erfc to a few ulps: xsimd's erfc in double is off by up to about 3e-12 relative (x near
/// 2.5, measured against libm), so doubles take libm's erfc lane by lane; floats keep xsimd's.
template <class F>
vec<F> erfc(vec<F> x) {
  if constexpr (std::is_same_v<F, double>) {
    alignas(vec<F>::arch_type::alignment()) F lanes[vec<F>::size];
    x.store_aligned(lanes);
    for (F& v : lanes)
      v = std::erfc(v);
    return vec<F>::load_aligned(lanes);
  } else {
    return xsimd::erfc(x);
  }
}

#define TYPEFLOW_SIMD_UNARY(OP, EXPR)                                                              \
  template <>                                                                                      \
  struct batch_op<ops::OP> {                                                                       \
    template <class F>                                                                             \
    static vec<F> eval(vec<F> x) {                                                                 \
      return EXPR;                                                                                 \
    }                                                                                              \
  };
TYPEFLOW_SIMD_UNARY(neg, -x)
TYPEFLOW_SIMD_UNARY(abs, xsimd::abs(x))
TYPEFLOW_SIMD_UNARY(square, x* x)
TYPEFLOW_SIMD_UNARY(relu, xsimd::select(x < vec<F>(F(0)), vec<F>(F(0)), x))
TYPEFLOW_SIMD_UNARY(exp, xsimd::exp(x))
TYPEFLOW_SIMD_UNARY(log, xsimd::log(x))
TYPEFLOW_SIMD_UNARY(sqrt, xsimd::sqrt(x))
TYPEFLOW_SIMD_UNARY(rsqrt, vec<F>(F(1)) / xsimd::sqrt(x))
TYPEFLOW_SIMD_UNARY(sin, xsimd::sin(x))
TYPEFLOW_SIMD_UNARY(cos, xsimd::cos(x))
TYPEFLOW_SIMD_UNARY(tanh, xsimd::tanh(x))
TYPEFLOW_SIMD_UNARY(sigmoid, vec<F>(F(1)) / (vec<F>(F(1)) + xsimd::exp(-x)))
TYPEFLOW_SIMD_UNARY(erf, xsimd::erf(x))
TYPEFLOW_SIMD_UNARY(gelu, vec<F>(F(0.5)) * x * simd::erfc(x * vec<F>(F(-0.70710678118654752440))))
TYPEFLOW_SIMD_UNARY(gelu_tanh,
                    vec<F>(F(0.5)) * x *
                        (vec<F>(F(1)) + xsimd::tanh(vec<F>(F(0.79788456080286535588)) *
                                                    (x + vec<F>(F(0.044715)) * x * x * x))))
#undef TYPEFLOW_SIMD_UNARY

#define TYPEFLOW_SIMD_BINARY(OP, RESULT, EXPR)                                                     \
  template <>                                                                                      \
  struct batch_op<OP> {                                                                            \
    template <class F>                                                                             \
    static RESULT<F> eval(vec<F> a, vec<F> b) {                                                    \
      return EXPR;                                                                                 \
    }                                                                                              \
  };
TYPEFLOW_SIMD_BINARY(ops::add, vec, a + b)
TYPEFLOW_SIMD_BINARY(ops::bias_add, vec, a + b)
TYPEFLOW_SIMD_BINARY(ops::sub, vec, a - b)
TYPEFLOW_SIMD_BINARY(ops::mul, vec, a* b)
TYPEFLOW_SIMD_BINARY(ops::div, vec, a / b)
TYPEFLOW_SIMD_BINARY(ops::pow, vec, xsimd::pow(a, b))
TYPEFLOW_SIMD_BINARY(ops::maximum, vec, xsimd::select(a < b, b, a))
TYPEFLOW_SIMD_BINARY(ops::minimum, vec, xsimd::select(b < a, b, a))
TYPEFLOW_SIMD_BINARY(ops::equal, mask, a == b)
// xsimd's != is an ordered compare (false when either is NaN); C++'s is not: !(a == b).
TYPEFLOW_SIMD_BINARY(ops::not_equal, mask, !(a == b))
TYPEFLOW_SIMD_BINARY(ops::less, mask, a < b)
TYPEFLOW_SIMD_BINARY(ops::less_equal, mask, a <= b)
TYPEFLOW_SIMD_BINARY(ops::greater, mask, a > b)
TYPEFLOW_SIMD_BINARY(ops::greater_equal, mask, a >= b)
TYPEFLOW_SIMD_BINARY(ops::assign_op<ops::assign_mode::add>, vec, a + b)
TYPEFLOW_SIMD_BINARY(ops::assign_op<ops::assign_mode::sub>, vec, a - b)
TYPEFLOW_SIMD_BINARY(ops::assign_op<ops::assign_mode::set>, vec, (void(a), b))
TYPEFLOW_SIMD_BINARY(ops::broadcast_like, vec, (void(b), a))
TYPEFLOW_SIMD_BINARY(
    ops::gelu_grad, vec,
    b*(vec<F>(F(0.5)) * (vec<F>(F(1)) + xsimd::erf(a * vec<F>(F(0.70710678118654752440)))) +
       a * vec<F>(F(0.39894228040143267794)) * xsimd::exp(vec<F>(F(-0.5)) * a * a)))
TYPEFLOW_SIMD_BINARY(
    ops::gelu_tanh_grad, vec,
    b* typeflow::detail::gelu_tanh_slope(a, xsimd::tanh(vec<F>(F(0.79788456080286535588)) *
                                                        (a + vec<F>(F(0.044715)) * a * a * a))))
#undef TYPEFLOW_SIMD_BINARY

// The optimizers' update ops (ops/state.hpp), with their optional `ok` mask last.
template <class F, class... K>
vec<F> keep_unless(vec<F> next, vec<F> old, K... ok) {
  if constexpr (sizeof...(K) == 0)
    return next;
  else
    return xsimd::select(ok..., next, old);
}
template <class F>
vec<F> adam_moment(vec<F> m, vec<F> g, vec<F> b) {
  return m * b + g * (vec<F>(F(1)) - b);
}
template <class F>
vec<F> adam_second_moment(vec<F> v, vec<F> g, vec<F> b) {
  return v * b + g * g * (vec<F>(F(1)) - b);
}
template <>
struct batch_op<ops::adam_m> {
  template <class F, class... K>
  static vec<F> eval(vec<F> m, vec<F> g, vec<F> b1, K... ok) {
    return simd::keep_unless(adam_moment(m, g, b1), m, ok...);
  }
};
template <>
struct batch_op<ops::adam_v> {
  template <class F, class... K>
  static vec<F> eval(vec<F> v, vec<F> g, vec<F> b2, K... ok) {
    return simd::keep_unless(adam_second_moment(v, g, b2), v, ok...);
  }
};
template <>
struct batch_op<ops::apply_adam> {
  template <class F, class... K>
  static vec<F> eval(vec<F> w, vec<F> m, vec<F> v, vec<F> g, vec<F> rate, vec<F> b1, vec<F> b2,
                     vec<F> eps, K... ok) {
    const vec<F> next =
        w - rate * adam_moment(m, g, b1) / (xsimd::sqrt(adam_second_moment(v, g, b2)) + eps);
    return simd::keep_unless(next, w, ok...);
  }
};

template <>
struct batch_op<ops::moving_average> {
  template <class F, class... K>
  static vec<F> eval(vec<F> v, vec<F> x, vec<F> decay, K... ok) {
    return simd::keep_unless(adam_moment(v, x, decay), v, ok...);
  }
};
template <>
struct batch_op<ops::momentum_accum> {
  template <class F, class... K>
  static vec<F> eval(vec<F> accum, vec<F> g, vec<F> m, K... ok) {
    return simd::keep_unless(accum * m + g, accum, ok...);
  }
};
template <bool Nesterov>
struct batch_op<ops::apply_momentum<Nesterov>> {
  template <class F, class... K>
  static vec<F> eval(vec<F> w, vec<F> accum, vec<F> g, vec<F> lr, vec<F> m, K... ok) {
    const vec<F> a = accum * m + g;
    if constexpr (Nesterov)
      return simd::keep_unless(w - (g + a * m) * lr, w, ok...);
    else
      return simd::keep_unless(w - a * lr, w, ok...);
  }
};

template <>
struct batch_op<ops::where> {
  template <class F>
  static vec<F> eval(mask<F> c, vec<F> a, vec<F> b) {
    return xsimd::select(c, a, b);
  }
};
template <>
struct batch_op<ops::zeros_like> {
  template <class F>
  static vec<F> eval(vec<F>) {
    return vec<F>(F(0));
  }
};
template <class Shape>
struct batch_op<ops::broadcast_to<Shape>> {
  template <class F>
  static vec<F> eval(vec<F> x) {
    return x;
  }
};
/// cast between the loop's float type and bool (a cast to the same type is the identity).
template <dtype U>
struct batch_op<ops::cast<U>> {
  template <class F>
  requires std::is_same_v<U, F>
  static vec<F> eval(vec<F> x) { return x; }
  template <class F>
  requires std::is_same_v<U, F>
  static vec<F> eval(mask<F> c) { return xsimd::select(c, vec<F>(F(1)), vec<F>(F(0))); }
  template <class F>
  requires std::is_same_v<U, bool>
  static mask<F> eval(vec<F> x) { return !(x == vec<F>(F(0))); } // NaN is true, as in C++
};
/// Ops whose value is their operand's (stop_gradient, custom_gradient).
template <class Op>
requires std::is_base_of_v<ops::identity_base, Op>
struct batch_op<Op> {
  template <class F>
  static vec<F> eval(vec<F> x) {
    return x;
  }
};

/// Whether `stream_store` bypasses the caches for batches of F (AVX-512 or AVX builds; F a
/// float32 or float64, the only element types with vectors here).
template <class F>
constexpr bool stream_store_for() {
  if constexpr (!std::is_floating_point_v<F>)
    return false;
  else
#if defined(__AVX512F__)
    return sizeof(vec<F>) == 64 || sizeof(vec<F>) == 32;
#elif defined(__AVX__)
    return sizeof(vec<F>) == 32;
#else
    return false;
#endif
}
template <class F>
inline constexpr bool has_stream_store = stream_store_for<F>();

/// Stores a batch at p (aligned to the batch) with a non-temporal hint: the line is written
/// without being read first, which saves a sixth of the traffic of a loop that reads four
/// arrays and writes one. Only for results too large to stay in cache; stream_fence() must
/// follow before another thread reads them.
template <class F>
inline void stream_store(F* p, vec<F> v) {
#if defined(__AVX512F__)
  if constexpr (sizeof(vec<F>) == 64) {
    if constexpr (std::is_same_v<F, float>)
      _mm512_stream_ps(p, v);
    else
      _mm512_stream_pd(p, v);
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (sizeof(vec<F>) == 32) {
    if constexpr (std::is_same_v<F, float>)
      _mm256_stream_ps(p, v);
    else
      _mm256_stream_pd(p, v);
    return;
  }
#endif
  v.store_aligned(p);
}

inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}
#endif

/// A hand-written kernel's loop runs by lanes: `simd::vec<T>` where xsimd has a vector of T,
/// and one T for the tail (or for every element where it has none). The helpers below take
/// either, so one loop body serves both.
template <class T>
struct lane_of {
  using type = T;
};
#if defined(TYPEFLOW_HAS_XSIMD)
template <class T>
requires std::is_same_v<T, float> || std::is_same_v<T, double>
struct lane_of<T> {
  using type = vec<T>;
};
#endif
template <class T>
using lane_t = typename lane_of<T>::type;

/// Loads a lane V (a vector, or one T) from p, unaligned; V defaults to T's widest lane.
template <class V = void, class T>
auto lane_load(const T* p) {
  using L = std::conditional_t<std::is_void_v<V>, lane_t<T>, V>;
  if constexpr (std::is_same_v<L, T>)
    return *p;
  else
    return L::load_unaligned(p);
}
template <class V, class T>
void lane_store(T* p, const V& v) {
  if constexpr (std::is_same_v<V, T>)
    *p = v;
  else
    v.store_unaligned(p);
}
/// Op (an elementwise op of ops/elementwise.hpp) on a lane: its vector form on a vector, its
/// scalar `eval` on one value, so that the two agree as the fused loops' do.
template <class Op, class V>
V lane_apply(const V& v) {
  if constexpr (requires { typename V::arch_type; }) // an xsimd batch
    return batch_op<Op>::eval(v);
  else
    return Op::template eval<V>(v);
}

/// The size of the last-level cache that CPU 0 sees, from Linux's sysfs (what lscpu reports),
/// else sysconf, else 32 MiB. sysfs first: on some virtual machines sysconf reports a whole
/// socket's L3 (every core complex's: 256 MiB on an 8-complex AMD EPYC) where a thread's share
/// is its own complex's (32 MiB).
inline std::size_t last_level_cache_bytes() {
  static const std::size_t bytes = [] {
    for (int index = 4; index >= 2; --index) { // the highest level Linux lists
      char path[64];
      std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
      std::FILE* f = std::fopen(path, "r");
      if (f == nullptr)
        continue;
      unsigned long long n = 0;
      char unit = 0;
      const int got = std::fscanf(f, "%llu%c", &n, &unit);
      std::fclose(f);
      if (got >= 1 && n > 0)
        return static_cast<std::size_t>(n) << (unit == 'K' ? 10 : unit == 'M' ? 20 : 0);
    }
    long b = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    b = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return b > 0 ? static_cast<std::size_t>(b) : std::size_t{32} << 20;
  }();
  return bytes;
}

} // namespace typeflow::cpu_backend::simd
