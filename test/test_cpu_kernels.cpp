// The CPU backend's kernels against independent double-precision loops: the fused elementwise
// loops (vectorized with xsimd where they can be, ragged ends included), the pool-split GEMM,
// the convolutions (direct small-filter loops, im2col + GEMM image by image, pointwise GEMM) with
// their thread-count independence, max-pool's gradient with ties, and a session leaving BLAS
// single-threaded.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <typeflow/backend/cpu/fused.hpp>
#include <typeflow/backend/cpu/gemm.hpp>
#include <typeflow/backend/cpu/nn.hpp>
#include <typeflow/backend/cpu/thread_pool.hpp>
#include <typeflow/typeflow.hpp>
#include <utility>
#include <vector>

namespace ty = typeflow;
namespace cpu = typeflow::cpu_backend;

constexpr bool built_with_openblas =
#if defined(TYPEFLOW_HAS_CBLAS) && defined(OPENBLAS_VERSION)
    true;
#else
    false;
#endif

namespace {

using i64 = std::int64_t;

/// splitmix64: a fixed, platform-independent stream.
struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  i64 integer(i64 lo, i64 hi) { // [lo, hi]
    return lo + static_cast<i64>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
};

template <class T>
std::vector<T> random_vector(rng& r, i64 n, double lo, double hi) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (auto& e : v)
    e = static_cast<T>(r.uniform(lo, hi));
  return v;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// The worst element of a comparison |got - ref| <= tol * scale (NaN counts as a failure).
struct worst {
  double ratio = 0; // max |got - ref| / (tol * scale), or infinity
  i64 at = -1;
  double got = 0, ref = 0, scale = 0;
  void add(i64 i, double g, double r, double s, double tol) {
    const double err = std::abs(g - r);
    double q;
    if (!(err == err))
      q = std::numeric_limits<double>::infinity();
    else if (err == 0)
      q = 0;
    else
      q = tol * s > 0 ? err / (tol * s) : std::numeric_limits<double>::infinity();
    if (at < 0 || q > ratio) {
      ratio = q;
      at = i;
      got = g;
      ref = r;
      scale = s;
    }
  }
  bool ok() const { return ratio <= 1.0; }
};

#define CHECK_WORST(w)                                                                             \
  do {                                                                                             \
    INFO("worst element " << (w).at << ": got " << (w).got << ", reference " << (w).ref            \
                          << ", scale " << (w).scale << ", error / tolerance " << (w).ratio);      \
    CHECK((w).ok());                                                                               \
  } while (0)

// ---------------------------------------------------------------------------------------------
// 1. Fused elementwise loops.
// ---------------------------------------------------------------------------------------------
template <class T>
ty::tensor<T> tensor_of(const std::vector<T>& v, std::vector<i64> shape) {
  return ty::tensor<T>(std::move(shape), std::span<const T>(v.data(), v.size()));
}
template <class T>
ty::tensor<T> prefix(const std::vector<T>& v, i64 n) {
  return ty::tensor<T>(std::vector<i64>{n},
                       std::span<const T>(v.data(), static_cast<std::size_t>(n)));
}

/// The fused kernel of the region rooted at the last node of E's plan (E itself).
template <class R>
struct kernel_of;
template <class Out, class Ins, class Ms, class Idx>
struct kernel_of<ty::graph::flat_region<Out, Ins, Ms, Idx>> {
  using type = cpu::fused_kernel<Out, Ins, Ms>;
};
template <class E>
using root_kernel = typename kernel_of<typename ty::compile::plan<
    ty::type_list<E>>::template region<ty::compile::plan<ty::type_list<E>>::size - 1>>::type;

constexpr auto fa = ty::placeholder<"a", float, ty::shape<ty::dyn>>;
constexpr auto fb = ty::placeholder<"b", float, ty::shape<ty::dyn>>;
constexpr auto fc = ty::placeholder<"c", float, ty::shape<ty::dyn>>;
constexpr auto fd = ty::placeholder<"d", float, ty::shape<ty::dyn>>;
constexpr auto e_arith = fa * fb + fc * ty::sin(fd);
constexpr auto e_select = ty::where(fa > fb, ty::relu(fa), fb* fb);
constexpr auto e_trans = ty::exp(fa) - ty::tanh(fb) / (ty::constant<1.5> + ty::sqrt(ty::abs(fc)));

constexpr auto da = ty::placeholder<"a", double, ty::shape<ty::dyn>>;
constexpr auto db = ty::placeholder<"b", double, ty::shape<ty::dyn>>;
constexpr auto dc = ty::placeholder<"c", double, ty::shape<ty::dyn>>;
constexpr auto dd = ty::placeholder<"d", double, ty::shape<ty::dyn>>;
constexpr auto e_arith64 = da * db + dc * ty::sin(dd);

constexpr auto ia = ty::placeholder<"a", std::int32_t, ty::shape<ty::dyn>>;
constexpr auto ib = ty::placeholder<"b", std::int32_t, ty::shape<ty::dyn>>;
constexpr auto e_int = ia + ib;
constexpr auto e_int2 = (ia - ib) * ib;

constexpr auto ba = ty::placeholder<"a", float, ty::shape<5, 1>>;
constexpr auto bb = ty::placeholder<"b", float, ty::shape<1, 37>>;
constexpr auto e_bcast = ba * bb + ty::sin(bb);

#if defined(TYPEFLOW_HAS_XSIMD)
static_assert(cpu::fused_kernel<
              float, ty::type_list<float, float>,
              ty::type_list<ty::graph::member<ty::ops::add, float, float, ty::graph::ref_input<0>,
                                              ty::graph::ref_input<1>>>>::vectorized);
static_assert(
    !cpu::fused_kernel<std::int32_t, ty::type_list<std::int32_t, std::int32_t>,
                       ty::type_list<ty::graph::member<ty::ops::add, std::int32_t, std::int32_t,
                                                       ty::graph::ref_input<0>,
                                                       ty::graph::ref_input<1>>>>::vectorized);
// The regions the session runs below: every float/double one on batches, integers scalar.
static_assert(root_kernel<decltype(e_arith)>::vectorized);
static_assert(root_kernel<decltype(e_select)>::vectorized);
static_assert(root_kernel<decltype(e_trans)>::vectorized);
static_assert(root_kernel<decltype(e_arith64)>::vectorized);
static_assert(root_kernel<decltype(e_bcast)>::vectorized);
#endif
static_assert(!root_kernel<decltype(e_int)>::vectorized);
static_assert(!root_kernel<decltype(e_int2)>::vectorized);

// ---------------------------------------------------------------------------------------------
// 2. GEMM reference.
// ---------------------------------------------------------------------------------------------
/// ref[i, j] = sum_p op(A)[i, p] op(B)[p, j] and abs[i, j] = sum_p |op(A)[i, p] op(B)[p, j]|,
/// with row strides lda/ldb.
template <class T>
void gemm_ref(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, i64 lda, const T* b, i64 ldb,
              std::vector<double>& ref, std::vector<double>& abs) {
  ref.assign(static_cast<std::size_t>(m * n), 0.0);
  abs.assign(static_cast<std::size_t>(m * n), 0.0);
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < n; ++j) {
      double s = 0, sa = 0;
      for (i64 p = 0; p < k; ++p) {
        const double x = static_cast<double>(ta ? a[p * lda + i] : a[i * lda + p]);
        const double y = static_cast<double>(tb ? b[j * ldb + p] : b[p * ldb + j]);
        s += x * y;
        sa += std::abs(x * y);
      }
      ref[static_cast<std::size_t>(i * n + j)] = s;
      abs[static_cast<std::size_t>(i * n + j)] = sa;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Convolutions.
// ---------------------------------------------------------------------------------------------
/// Explicit padding ph/pw before (and as much after as the output needs).
cpu::window2d conv_geo(i64 n, i64 h, i64 w, i64 c, i64 kh, i64 kw, i64 o, i64 sh, i64 sw, i64 dh,
                       i64 dw, i64 ph, i64 pw) {
  const i64 ekh = (kh - 1) * dh + 1, ekw = (kw - 1) * dw + 1;
  return cpu::window2d{.n = n,
                       .h = h,
                       .w = w,
                       .c = c,
                       .kh = kh,
                       .kw = kw,
                       .o = o,
                       .oh = (h + 2 * ph - ekh) / sh + 1,
                       .ow = (w + 2 * pw - ekw) / sw + 1,
                       .sh = sh,
                       .sw = sw,
                       .dh = dh,
                       .dw = dw,
                       .ph = ph,
                       .pw = pw};
}
/// TensorFlow's SAME: out = ceil(in / stride), padding before = total / 2.
cpu::window2d conv_same(i64 n, i64 h, i64 w, i64 c, i64 kh, i64 kw, i64 o, i64 sh, i64 sw, i64 dh,
                        i64 dw) {
  const i64 ekh = (kh - 1) * dh + 1, ekw = (kw - 1) * dw + 1;
  const i64 oh = (h + sh - 1) / sh, ow = (w + sw - 1) / sw;
  const i64 pth = std::max<i64>((oh - 1) * sh + ekh - h, 0),
            ptw = std::max<i64>((ow - 1) * sw + ekw - w, 0);
  // conv_geo's extents assume as much padding after as before; SAME may pad one more after.
  cpu::window2d g = conv_geo(n, h, w, c, kh, kw, o, sh, sw, dh, dw, pth / 2, ptw / 2);
  g.oh = oh;
  g.ow = ow;
  return g;
}

/// Naive double loops over (b, oy, ox, ky, kx, ci, co); NHWC x/y, HWIO w. Each result comes with
/// the sum of the absolute values of its products.
struct conv_ref {
  std::vector<double> y, y_abs, dx, dx_abs, dw, dw_abs;
};
conv_ref conv_reference(const cpu::window2d& g, const std::vector<float>& x,
                        const std::vector<float>& w, const std::vector<float>& dy) {
  conv_ref r;
  const auto sz = [](i64 v) { return static_cast<std::size_t>(v); };
  r.y.assign(sz(g.n * g.oh * g.ow * g.o), 0.0);
  r.y_abs = r.y;
  r.dx.assign(sz(g.n * g.h * g.w * g.c), 0.0);
  r.dx_abs = r.dx;
  r.dw.assign(sz(g.kh * g.kw * g.c * g.o), 0.0);
  r.dw_abs = r.dw;
  for (i64 b = 0; b < g.n; ++b)
    for (i64 oy = 0; oy < g.oh; ++oy)
      for (i64 ox = 0; ox < g.ow; ++ox)
        for (i64 ky = 0; ky < g.kh; ++ky)
          for (i64 kx = 0; kx < g.kw; ++kx) {
            const i64 iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
              continue; // zero outside
            for (i64 ci = 0; ci < g.c; ++ci)
              for (i64 co = 0; co < g.o; ++co) {
                const std::size_t xi = sz(((b * g.h + iy) * g.w + ix) * g.c + ci),
                                  wi = sz(((ky * g.kw + kx) * g.c + ci) * g.o + co),
                                  yi = sz(((b * g.oh + oy) * g.ow + ox) * g.o + co);
                const double xv = x[xi], wv = w[wi], dv = dy[yi];
                r.y[yi] += xv * wv;
                r.y_abs[yi] += std::abs(xv * wv);
                r.dx[xi] += dv * wv;
                r.dx_abs[xi] += std::abs(dv * wv);
                r.dw[wi] += xv * dv;
                r.dw_abs[wi] += std::abs(xv * dv);
              }
          }
  return r;
}

struct conv_out {
  std::vector<float> y, dx, dw;
};
conv_out conv_run(int threads, const cpu::window2d& g, const std::vector<float>& x,
                  const std::vector<float>& w, const std::vector<float>& dy) {
  cpu::thread_pool pool(threads);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // NaN everywhere the kernels write, scratch included: nothing may be read before written.
  std::vector<float> scratch(static_cast<std::size_t>(cpu::conv_scratch(g)), nan);
  conv_out o;
  o.y.assign(static_cast<std::size_t>(g.n * g.oh * g.ow * g.o), nan);
  o.dx.assign(x.size(), nan);
  o.dw.assign(w.size(), nan);
  cpu::conv2d_forward(pool, x.data(), w.data(), g, scratch.data(), o.y.data());
  std::fill(scratch.begin(), scratch.end(), nan);
  cpu::conv2d_backprop_input(pool, dy.data(), w.data(), g, scratch.data(), o.dx.data());
  std::fill(scratch.begin(), scratch.end(), nan);
  cpu::conv2d_backprop_filter(pool, x.data(), dy.data(), g, scratch.data(), o.dw.data());
  return o;
}

worst compare(const std::vector<float>& got, const std::vector<double>& ref,
              const std::vector<double>& abs, double tol) {
  worst w;
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    w.add(static_cast<i64>(i), got[i], ref[i], abs[i], tol);
  return w;
}

void check_conv(const std::string& name, const cpu::window2d& g, bool small, bool pointwise,
                std::uint64_t seed) {
  INFO(name << ": n=" << g.n << " " << g.h << "x" << g.w << "x" << g.c << ", filter " << g.kh << "x"
            << g.kw << "x" << g.o << ", out " << g.oh << "x" << g.ow << ", stride " << g.sh << "x"
            << g.sw << ", dilation " << g.dh << "x" << g.dw << ", pad " << g.ph << "x" << g.pw);
  CHECK(cpu::conv_is_small(g) == small);
  CHECK(cpu::conv_is_pointwise(g) == pointwise);
  rng r{seed};
  const auto x = random_vector<float>(r, g.n * g.h * g.w * g.c, -1, 1);
  const auto w = random_vector<float>(r, g.kh * g.kw * g.c * g.o, -1, 1);
  const auto dy = random_vector<float>(r, g.n * g.oh * g.ow * g.o, -1, 1);
  const conv_ref ref = conv_reference(g, x, w, dy);
  const conv_out one = conv_run(1, g, x, w, dy);
  // float accumulation over at most a few hundred products: a few hundred ulps of the sum of
  // |products| in the worst case, far less in practice; exact zeros where no product lands.
  constexpr double tol = 1e-4;
  {
    INFO("conv2d_forward");
    CHECK_WORST(compare(one.y, ref.y, ref.y_abs, tol));
  }
  {
    INFO("conv2d_backprop_input");
    CHECK_WORST(compare(one.dx, ref.dx, ref.dx_abs, tol));
  }
  {
    INFO("conv2d_backprop_filter");
    CHECK_WORST(compare(one.dw, ref.dw, ref.dw_abs, tol));
  }
  // The batch, and a GEMM, are cut into parts fixed by the shape: the thread count changes
  // nothing.
  for (int threads : {2, 3}) {
    INFO("threads = " << threads);
    const conv_out more = conv_run(threads, g, x, w, dy);
    CHECK(bitwise_equal(one.y, more.y));
    CHECK(bitwise_equal(one.dx, more.dx));
    CHECK(bitwise_equal(one.dw, more.dw));
  }
}

/// Pointwise and past the small-filter limit: the forward GEMM has 1176 rows and m n k > 2^22, so
/// gemm splits it across 2 or 3 threads.
cpu::window2d pointwise_gemm_geo() {
  return conv_geo(6, 14, 14, 40, 1, 1, 120, 1, 1, 1, 1, 0, 0);
}

} // namespace

TEST_SUITE("cpu_kernels") {
  TEST_CASE("fused loops run on SIMD batches and agree with double-precision loops") {
#if defined(TYPEFLOW_HAS_XSIMD)
    MESSAGE("xsimd: float batches of " << cpu::simd::vec<float>::size << " lanes, double of "
                                       << cpu::simd::vec<double>::size);
#else
    MESSAGE("xsimd not available: the fused loops are scalar");
#endif
    ty::session s(ty::session_options{.threads = 2});
    rng r{20240611};
    constexpr i64 full = 1000;
    const auto a = random_vector<float>(r, full, -2, 2), b = random_vector<float>(r, full, -2, 2),
               c = random_vector<float>(r, full, -2, 2), d = random_vector<float>(r, full, -2, 2);
    // The full-length results: an element's value must not depend on where it lies in the
    // loop (a full batch, the padded ragged end, a 256-element block boundary).
    const auto ta = prefix(a, full), tb = prefix(b, full), tc = prefix(c, full),
               td = prefix(d, full);
    auto [full1] = s.run(ty::fetch(e_arith), ty::feed(fa, ta), ty::feed(fb, tb), ty::feed(fc, tc),
                         ty::feed(fd, td));
    CHECK(s.stats().steps == 1); // one fused loop
    auto [full2] = s.run(ty::fetch(e_select), ty::feed(fa, ta), ty::feed(fb, tb));
    auto [full3] = s.run(ty::fetch(e_trans), ty::feed(fa, ta), ty::feed(fb, tb), ty::feed(fc, tc));
    CHECK(s.stats().steps == 1);

    for (i64 n : {1, 15, 16, 17, 255, 256, 257, 1000}) {
      INFO("length " << n);
      const auto pa = prefix(a, n), pb = prefix(b, n), pc = prefix(c, n), pd = prefix(d, n);
      auto [r1] = s.run(ty::fetch(e_arith), ty::feed(fa, pa), ty::feed(fb, pb), ty::feed(fc, pc),
                        ty::feed(fd, pd));
      auto [r2] = s.run(ty::fetch(e_select), ty::feed(fa, pa), ty::feed(fb, pb));
      auto [r3] = s.run(ty::fetch(e_trans), ty::feed(fa, pa), ty::feed(fb, pb), ty::feed(fc, pc));
      REQUIRE(r1.size() == n);
      REQUIRE(r2.size() == n);
      REQUIRE(r3.size() == n);
      worst w1, w3;
      i64 select_mismatches = 0, moved = 0;
      for (i64 i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const double x = a[k], y = b[k], z = c[k], v = d[k];
        // a*b + c*sin(d): the rounding of a*b, c*sin(d) and the sum (half an ulp each) plus
        // xsimd's sin (an ulp or two) is about 4 ulps (2^-23 each) of |a b| + |c sin d|, ~5e-7;
        // 1e-6 leaves a factor of two.
        w1.add(i, r1[i], x * y + z * std::sin(v), std::abs(x * y) + std::abs(z * std::sin(v)),
               1e-6);
        // where(a > b, relu(a), b*b): a select and one product, exact (the product of two floats
        // is exact in double, so rounding it to float is float's own b*b).
        const float ref2 = a[k] > b[k] ? std::max(a[k], 0.0f) : static_cast<float>(y * y);
        select_mismatches += r2[i] != ref2;
        // exp(a) - tanh(b) / (1.5 + sqrt|c|): xsimd's exp and tanh (an ulp or two each) and four
        // roundings, about 6 ulps of |exp a| + |tanh(b) / (1.5 + sqrt|c|)|, ~7e-7; 2e-6 allowed.
        const double q = std::tanh(y) / (1.5 + std::sqrt(std::abs(z)));
        w3.add(i, r3[i], std::exp(x) - q, std::exp(x) + std::abs(q), 2e-6);
        moved += std::bit_cast<std::uint32_t>(r1[i]) != std::bit_cast<std::uint32_t>(full1[i]);
        moved += std::bit_cast<std::uint32_t>(r2[i]) != std::bit_cast<std::uint32_t>(full2[i]);
        moved += std::bit_cast<std::uint32_t>(r3[i]) != std::bit_cast<std::uint32_t>(full3[i]);
      }
      {
        INFO("a * b + c * sin(d)");
        CHECK_WORST(w1);
      }
      CHECK(select_mismatches == 0);
      {
        INFO("exp(a) - tanh(b) / (1.5 + sqrt(abs(c)))");
        CHECK_WORST(w3);
      }
      CHECK(moved == 0); // same bits as at the same position of the length-1000 run
    }
  }

  TEST_CASE("fused loops larger than the last-level cache stream their result, same bits") {
    // 4 inputs and the result of n floats exceed the cache: the loop writes with non-temporal
    // stores (when the build has them). Every element must still match the double reference,
    // and the bits must equal those of the same expression on a short, cached prefix.
    constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<ty::dyn>>;
    constexpr auto c = ty::placeholder<"c", float, ty::shape<ty::dyn>>;
    constexpr auto d = ty::placeholder<"d", float, ty::shape<ty::dyn>>;
    const i64 n = static_cast<i64>(cpu::simd::last_level_cache_bytes() / 16) + 13;
    rng r{31};
    std::vector<std::vector<float>> in;
    for (int k = 0; k < 4; ++k)
      in.push_back(random_vector<float>(r, n, -2, 2));
    auto feed = [&](auto p, int k, i64 len) {
      return ty::feed(p, ty::tensor_view<float>(in[static_cast<std::size_t>(k)].data(), {len}));
    };
    ty::session s(ty::session_options{.threads = 2});
    constexpr auto e = a * b + c * ty::sin(d);
    auto [big] = s.run(ty::fetch(e), feed(a, 0, n), feed(b, 1, n), feed(c, 2, n), feed(d, 3, n));
    auto [small] =
        s.run(ty::fetch(e), feed(a, 0, 1000), feed(b, 1, 1000), feed(c, 2, 1000), feed(d, 3, 1000));
    i64 bad = 0;
    for (i64 i = 0; i < n; ++i) {
      const auto at = static_cast<std::size_t>(i);
      const double ab = double(in[0][at]) * in[1][at], cs = double(in[2][at]) * std::sin(in[3][at]);
      bad += !(std::abs(big[i] - (ab + cs)) <= 1e-6 * (std::abs(ab) + std::abs(cs)) + 1e-30);
    }
    CHECK(bad == 0);
    for (i64 i = 0; i < 1000; ++i)
      CHECK(std::bit_cast<std::uint32_t>(big[i]) == std::bit_cast<std::uint32_t>(small[i]));
  }

  TEST_CASE("fused loops broadcast [5,1] x [1,37], in double, and on integers") {
    ty::session s(ty::session_options{.threads = 2});
    rng r{77};
    SUBCASE("broadcasting") {
      const auto a = random_vector<float>(r, 5, -2, 2), b = random_vector<float>(r, 37, -2, 2);
      const auto ta = tensor_of(a, {5, 1}), tb = tensor_of(b, {1, 37});
      auto [y] = s.run(ty::fetch(e_bcast), ty::feed(ba, ta), ty::feed(bb, tb));
      REQUIRE(y.shape() == std::vector<i64>{5, 37});
      worst w;
      for (i64 i = 0; i < 5; ++i)
        for (i64 j = 0; j < 37; ++j) {
          const double x = a[static_cast<std::size_t>(i)], v = b[static_cast<std::size_t>(j)];
          // three roundings and xsimd's sin: ~3 ulps of |a b| + |sin b|.
          w.add(i * 37 + j, y(i, j), x * v + std::sin(v), std::abs(x * v) + std::abs(std::sin(v)),
                1e-6);
        }
      CHECK_WORST(w);
    }
    SUBCASE("float64") {
      for (i64 n : {1, 7, 8, 9, 257, 1000}) {
        INFO("length " << n);
        const auto a = random_vector<double>(r, n, -2, 2), b = random_vector<double>(r, n, -2, 2),
                   c = random_vector<double>(r, n, -2, 2), d = random_vector<double>(r, n, -2, 2);
        const auto ta = prefix(a, n), tb = prefix(b, n), tc = prefix(c, n), td = prefix(d, n);
        auto [y] = s.run(ty::fetch(e_arith64), ty::feed(da, ta), ty::feed(db, tb), ty::feed(dc, tc),
                         ty::feed(dd, td));
        worst w;
        for (i64 i = 0; i < n; ++i) {
          const auto k = static_cast<std::size_t>(i);
          // double rounding (2^-53) and xsimd's sin: a few 1e-16 of the terms; 1e-13 is loose.
          w.add(i, y[i], a[k] * b[k] + c[k] * std::sin(d[k]),
                std::abs(a[k] * b[k]) + std::abs(c[k] * std::sin(d[k])), 1e-13);
        }
        CHECK_WORST(w);
      }
    }
    SUBCASE("int32 (the scalar loop), exact") {
      for (i64 n : {1, 17, 300}) {
        INFO("length " << n);
        std::vector<std::int32_t> a(static_cast<std::size_t>(n)), b(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
          a[i] = static_cast<std::int32_t>(r.integer(-30000, 30000));
          b[i] = static_cast<std::int32_t>(r.integer(-30000, 30000));
        }
        const auto ta = prefix(a, n), tb = prefix(b, n);
        auto [y1] = s.run(ty::fetch(e_int), ty::feed(ia, ta), ty::feed(ib, tb));
        auto [y2] = s.run(ty::fetch(e_int2), ty::feed(ia, ta), ty::feed(ib, tb));
        i64 bad = 0;
        for (i64 i = 0; i < n; ++i) {
          const auto k = static_cast<std::size_t>(i);
          const std::int64_t x = a[k], v = b[k];
          bad += y1[i] != x + v;
          bad += y2[i] != (x - v) * v; // |(x - v) v| <= 1.8e9 < 2^31
        }
        CHECK(bad == 0);
      }
    }
  }

  TEST_CASE("gemm splits across threads and matches a double reference") {
    // A session would have done this: the pool splits the product, BLAS runs on one thread.
    cpu::set_blas_single_threaded();
    struct shape3 {
      i64 m, n, k;
      std::string what;
    };
    // gemm splits into min(threads, larger side / 128, m n k / 2^21) parts: on 2 or 3 threads
    // (600, 40, 200) is cut by rows into 2 (304 and 296), (40, 600, 200) by columns,
    // (260, 777, 30) by columns into 2 (400 and 377, not a multiple of 16).
    const shape3 shapes[] = {{600, 40, 200, "split by rows"},
                             {40, 600, 200, "split by columns"},
                             {260, 777, 30, "split by columns, ragged"},
                             {300, 40, 50, "serial (m n k < 2^21)"},
                             {130, 131, 7, "serial"},
                             {1, 1, 1, "1x1x1"},
                             {0, 5, 3, "m = 0"},
                             {5, 4, 0, "k = 0"}};
    cpu::thread_pool pool1(1), pool2(2), pool3(3);
    rng r{5};
    SUBCASE("float, all four transpositions, 1 to 3 threads") {
      for (const auto& sh : shapes)
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          INFO(sh.what << ": m=" << sh.m << " n=" << sh.n << " k=" << sh.k << " ta=" << ta
                       << " tb=" << tb);
          const auto a = random_vector<float>(r, sh.m * sh.k, -1, 1);
          const auto b = random_vector<float>(r, sh.k * sh.n, -1, 1);
          std::vector<double> ref, abs;
          gemm_ref(ta, tb, sh.m, sh.n, sh.k, a.data(), ta ? sh.m : sh.k, b.data(), tb ? sh.k : sh.n,
                   ref, abs);
          for (auto* pool : {&pool1, &pool2, &pool3}) {
            INFO("threads = " << pool->size());
            std::vector<float> c(static_cast<std::size_t>(sh.m * sh.n),
                                 std::numeric_limits<float>::quiet_NaN());
            cpu::gemm<float>(*pool, ta, tb, sh.m, sh.n, sh.k, a.data(), b.data(), c.data());
            // float rounding in BLAS's accumulation: ~k ulps of sum |a b| at worst.
            worst w;
            for (std::size_t i = 0; i < c.size(); ++i)
              w.add(static_cast<i64>(i), c[i], ref[i], 1 + abs[i], 1e-5);
            CHECK_WORST(w);
          }
        }
    }

    SUBCASE("double and int32") {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const i64 m = 70, n = 150, k = 120; // split by columns
        INFO("ta=" << ta << " tb=" << tb);
        const auto a = random_vector<double>(r, m * k, -1, 1);
        const auto b = random_vector<double>(r, k * n, -1, 1);
        std::vector<double> ref, abs;
        gemm_ref(ta, tb, m, n, k, a.data(), ta ? m : k, b.data(), tb ? k : n, ref, abs);
        std::vector<double> c(static_cast<std::size_t>(m * n),
                              std::numeric_limits<double>::quiet_NaN());
        cpu::gemm<double>(pool2, ta, tb, m, n, k, a.data(), b.data(), c.data());
        worst w;
        for (std::size_t i = 0; i < c.size(); ++i)
          w.add(static_cast<i64>(i), c[i], ref[i], 1 + abs[i], 1e-13);
        CHECK_WORST(w);

        std::vector<std::int32_t> ai(a.size()), bi(b.size());
        for (auto& e : ai)
          e = static_cast<std::int32_t>(r.integer(-50, 50));
        for (auto& e : bi)
          e = static_cast<std::int32_t>(r.integer(-50, 50));
        std::vector<std::int32_t> ci(c.size(), -1);
        cpu::gemm<std::int32_t>(pool2, ta, tb, m, n, k, ai.data(), bi.data(), ci.data());
        gemm_ref(ta, tb, m, n, k, ai.data(), ta ? m : k, bi.data(), tb ? k : n, ref, abs);
        i64 bad = 0;
        for (std::size_t i = 0; i < ci.size(); ++i)
          bad += static_cast<double>(ci[i]) != ref[i];
        CHECK(bad == 0);
      }
    }

    SUBCASE("gemm_serial on sub-blocks (leading dimensions wider than the rows), accumulating") {
      const i64 m = 19, n = 23, k = 17;
      for (int t = 0; t < 8; ++t) {
        const bool ta = t & 1, tb = t & 2, acc = t & 4;
        INFO("ta=" << ta << " tb=" << tb << " accumulate=" << acc);
        const i64 lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
        const i64 arows = ta ? k : m, brows = tb ? n : k;
        const auto a = random_vector<float>(r, arows * lda, -1, 1);
        const auto b = random_vector<float>(r, brows * ldb, -1, 1);
        std::vector<double> ref, abs;
        gemm_ref(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, ref, abs);
        const float sentinel = -12345.0f;
        std::vector<float> c(static_cast<std::size_t>(m * ldc), sentinel);
        for (i64 i = 0; i < m; ++i)
          for (i64 j = 0; j < n; ++j)
            c[static_cast<std::size_t>(i * ldc + j)] =
                acc ? 1.0f : std::numeric_limits<float>::quiet_NaN();
        cpu::gemm_serial<float>(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, acc);
        worst w;
        i64 touched = 0;
        for (i64 i = 0; i < m; ++i) {
          for (i64 j = 0; j < n; ++j) {
            const auto e = static_cast<std::size_t>(i * n + j);
            w.add(i * n + j, c[static_cast<std::size_t>(i * ldc + j)], (acc ? 1.0 : 0.0) + ref[e],
                  1 + abs[e], 1e-5);
          }
          for (i64 j = n; j < ldc; ++j)
            touched += c[static_cast<std::size_t>(i * ldc + j)] != sentinel;
        }
        CHECK_WORST(w);
        CHECK(touched == 0); // the padding columns of C are left alone
      }
    }
  }

  TEST_CASE("convolutions image by image match naive loops") {
    cpu::set_blas_single_threaded();
    SUBCASE("forward, input and filter gradients, 1 to 3 threads") {
      // (a) direct small-filter loops, vectorized (o a multiple of the batch width): a row of 13
      // output pixels is one 8-pixel tile and 5 single pixels; SAME padding 2 on each side.
      {
        const auto g = conv_same(3, 9, 13, 1, 5, 5, 32, 1, 1, 1, 1);
        REQUIRE(g.oh == 9);
        REQUIRE(g.ow == 13);
        REQUIRE(g.ph == 2);
        REQUIRE(g.pw == 2);
        check_conv("small, o = 32", g, true, false, 11);
      }
      // (b) small, o = 5: the scalar loops; stride 2, dilation 2 along x (gather_patch's per-tap
      // branch), SAME (pad 0 before rows, 2 before columns).
      {
        const auto g = conv_same(2, 8, 9, 3, 3, 3, 5, 2, 2, 1, 2);
        REQUIRE(g.oh == 4);
        REQUIRE(g.ow == 5);
        check_conv("small, o = 5", g, true, false, 12);
      }
      // (c) im2col + GEMM per image: [patch, o] = [72, 70] is past the small-filter limit
      // (72 * 70 > 4096). n = 3 < conv_parts leaves parts empty; n = 11 gives parts of 1 and 2.
      for (i64 n : {3, 11}) {
        const auto g = conv_geo(n, 6, 5, 8, 3, 3, 70, 2, 1, 1, 2, 1, 2);
        REQUIRE(g.oh == 3);
        REQUIRE(g.ow == 5);
        check_conv("im2col, stride 2x1, dilation 1x2", g, false, false,
                   13 + static_cast<std::uint64_t>(n));
      }
      // (c') im2col with dilation 1 (gather_patch's contiguous rows, clipped at both borders).
      check_conv("im2col, 3x3 SAME", conv_same(5, 7, 7, 8, 3, 3, 64, 1, 1, 1, 1), false, false, 14);
      // (d) pointwise (1x1, stride 1, no padding) with a small filter: the forward pass takes the
      // direct loops (conv_is_small is checked first), the gradients the pointwise GEMMs.
      check_conv("pointwise, small", conv_geo(2, 6, 7, 20, 1, 1, 24, 1, 1, 1, 1, 0, 0), true, true,
                 15);
      // (e) pointwise, large: the forward and input-gradient GEMMs are split across threads.
      check_conv("pointwise, GEMM", pointwise_gemm_geo(), false, true, 16);
    }

    SUBCASE("im2col_image and col2im_image are a copy and its adjoint") {
      const auto g = conv_geo(2, 6, 5, 3, 3, 3, 4, 2, 1, 1, 2, 1, 2);
      rng r{99};
      const auto x = random_vector<float>(r, g.n * g.h * g.w * g.c, -1, 1);
      const auto col_in = random_vector<float>(r, g.oh * g.ow * g.patch(), -1, 1);
      std::vector<float> col(static_cast<std::size_t>(g.oh * g.ow * g.patch()),
                             std::numeric_limits<float>::quiet_NaN());
      std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());
      for (i64 b = 0; b < g.n; ++b) {
        cpu::im2col_image(x.data(), g, b, col.data());
        cpu::col2im_image(col_in.data(), g, b, dx.data());
        i64 bad = 0;
        double lhs = 0, rhs = 0; // <im2col(x), col_in> == <x, col2im(col_in)>
        for (i64 oy = 0; oy < g.oh; ++oy)
          for (i64 ox = 0; ox < g.ow; ++ox)
            for (i64 ky = 0; ky < g.kh; ++ky)
              for (i64 kx = 0; kx < g.kw; ++kx)
                for (i64 ci = 0; ci < g.c; ++ci) {
                  const i64 iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                  const bool in = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
                  const float want =
                      in ? x[static_cast<std::size_t>(((b * g.h + iy) * g.w + ix) * g.c + ci)]
                         : 0.0f;
                  const auto at = static_cast<std::size_t>((oy * g.ow + ox) * g.patch() +
                                                           (ky * g.kw + kx) * g.c + ci);
                  bad += col[at] != want;
                  lhs += static_cast<double>(want) * col_in[at];
                }
        const i64 img = g.h * g.w * g.c;
        for (i64 i = 0; i < img; ++i)
          rhs += static_cast<double>(x[static_cast<std::size_t>(b * img + i)]) *
                 dx[static_cast<std::size_t>(b * img + i)];
        CHECK(bad == 0);
        CHECK(rhs == doctest::Approx(lhs).epsilon(1e-5));
      }
    }
  }

  TEST_CASE("max-pool gradient goes to the first maximum, all channels at once") {
    struct pool_case {
      i64 k, s, ph, pw, oh, ow;
    };
    // 2x2 stride 2 on 5x5 (TF SAME: out 3, total padding 1, none before: the last window is
    // clipped to one row/column); 3x3 stride 2 SAME (out 3, padding 1 before and after).
    // 17 channels take the scalar loop, 32 the vector one (whole batches of channels);
    // 2x2 stride 2 on 4x4 tiles the input exactly, so the vector loop stores without a zero fill.
    for (const i64 channels : {17, 32})
      for (const pool_case pc : {pool_case{2, 2, 0, 0, 3, 3}, pool_case{3, 2, 1, 1, 3, 3},
                                 pool_case{2, 2, 0, 0, 2, 2}}) {
        const i64 side = pc.oh == 2 ? 4 : 5;
        INFO("window " << pc.k << ", stride " << pc.s << ", pad " << pc.ph << ", channels "
                       << channels << ", input " << side << "x" << side);
        const cpu::window2d g{.n = 2,
                              .h = side,
                              .w = side,
                              .c = channels,
                              .kh = pc.k,
                              .kw = pc.k,
                              .o = channels,
                              .oh = pc.oh,
                              .ow = pc.ow,
                              .sh = pc.s,
                              .sw = pc.s,
                              .dh = 1,
                              .dw = 1,
                              .ph = pc.ph,
                              .pw = pc.pw};
        rng r{31};
        std::vector<float> x(static_cast<std::size_t>(g.n * g.h * g.w * g.c)),
            dy(static_cast<std::size_t>(g.n * g.oh * g.ow * g.c));
        for (auto& v : x)
          v = static_cast<float>(r.integer(0, 2)); // many ties
        for (auto& v : dy)
          v = static_cast<float>(r.integer(1, 1000)); // integers: sums are exact
        std::vector<double> ref(x.size(), 0.0);
        std::vector<float> ref_y(dy.size());
        for (i64 b = 0; b < g.n; ++b)
          for (i64 oy = 0; oy < g.oh; ++oy)
            for (i64 ox = 0; ox < g.ow; ++ox)
              for (i64 ci = 0; ci < g.c; ++ci) {
                i64 best = -1;
                float best_v = 0;
                for (i64 ky = 0; ky < g.kh; ++ky) // row-major window order, clipped at borders
                  for (i64 kx = 0; kx < g.kw; ++kx) {
                    const i64 iy = oy * g.sh - g.ph + ky, ix = ox * g.sw - g.pw + kx;
                    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                      continue;
                    const i64 at = ((b * g.h + iy) * g.w + ix) * g.c + ci;
                    if (best < 0 || x[static_cast<std::size_t>(at)] > best_v) {
                      best = at;
                      best_v = x[static_cast<std::size_t>(at)];
                    }
                  }
                REQUIRE(best >= 0);
                const auto yi = static_cast<std::size_t>(((b * g.oh + oy) * g.ow + ox) * g.c + ci);
                ref[static_cast<std::size_t>(best)] += dy[yi];
                ref_y[yi] = best_v;
              }
        for (int threads : {1, 2}) {
          INFO("threads = " << threads);
          cpu::thread_pool pool(threads);
          std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());
          cpu::pool_backward<true, float>(pool, x.data(), dy.data(), g, dx.data());
          i64 bad = 0;
          for (std::size_t i = 0; i < dx.size(); ++i)
            bad += static_cast<double>(dx[i]) != ref[i];
          CHECK(bad == 0);
          std::vector<float> y(dy.size(), std::numeric_limits<float>::quiet_NaN());
          cpu::pool_forward<true, float>(pool, x.data(), g, y.data());
          CHECK(y == ref_y);
        }
      }
  }

  TEST_CASE("max-pool forward: the vector loop takes NaN and -inf as the scalar loop does") {
    // A window's maximum starts at -inf and takes an element only where it is strictly greater:
    // NaN is never taken (a window of NaNs gives -inf). 17 channels take the scalar loop, 32
    // the vector one; both must give the same bits.
    for (const i64 channels : {17, 32}) {
      INFO("channels " << channels);
      const cpu::window2d g{.n = 1,
                            .h = 2,
                            .w = 2,
                            .c = channels,
                            .kh = 2,
                            .kw = 2,
                            .o = channels,
                            .oh = 1,
                            .ow = 1,
                            .sh = 2,
                            .sw = 2,
                            .dh = 1,
                            .dw = 1,
                            .ph = 0,
                            .pw = 0};
      const float nan = std::numeric_limits<float>::quiet_NaN();
      const float inf = std::numeric_limits<float>::infinity();
      std::vector<float> x(static_cast<std::size_t>(4 * channels));
      for (i64 ci = 0; ci < channels; ++ci)
        for (i64 p = 0; p < 4; ++p) {
          float v = 0;
          switch (ci % 4) {
          case 0:
            v = nan;
            break; // all NaN: -inf
          case 1:
            v = p == 0 ? nan : static_cast<float>(p);
            break; // NaN first: 3
          case 2:
            v = p == 3 ? nan : -inf;
            break; // -inf and NaN: -inf
          default:
            v = p == 2 ? -0.0f : (p == 1 ? 0.0f : -1.0f); // 0 before -0: +0
          }
          x[static_cast<std::size_t>(p * channels + ci)] = v;
        }
      cpu::thread_pool pool(1);
      std::vector<float> y(static_cast<std::size_t>(channels), 7.0f);
      cpu::pool_forward<true, float>(pool, x.data(), g, y.data());
      for (i64 ci = 0; ci < channels; ++ci) {
        const float v = y[static_cast<std::size_t>(ci)];
        switch (ci % 4) {
        case 0:
        case 2:
          CHECK(v == -inf);
          break;
        case 1:
          CHECK(v == 3.0f);
          break;
        default:
          CHECK((v == 0.0f && !std::signbit(v)));
        }
      }
    }
  }

  // With OpenBLAS 0.3.21 (DYNAMIC_ARCH, Cooperlake kernels) an untransposed sgemm of
  // M*N*K <= 100^3 takes a small-matrix kernel that rounds differently from the blocked one, so
  // a split into slabs below that size changed bits ([300,100] x [100,40] split in two: about
  // 17% of the elements differed, by up to ~2e-7 of sum |a b|). gemm's slabs are now products
  // of at least 2^21 m n k, all on the blocked kernel, whose bits do not depend on the cut.
  TEST_CASE("gemm gives the same bits on any thread count") {
    cpu::set_blas_single_threaded();
    struct shape3 {
      i64 m, n, k;
    };
    cpu::thread_pool pool1(1), pool2(2), pool3(3);
    rng r{6};
    i64 differing = 0;
    for (const shape3 sh :
         {shape3{300, 40, 100}, shape3{600, 40, 200}, shape3{40, 600, 200}, shape3{260, 777, 30},
          shape3{1100, 64, 200}, shape3{2000, 100, 90}, shape3{512, 512, 512}})
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        INFO("m=" << sh.m << " n=" << sh.n << " k=" << sh.k << " ta=" << ta << " tb=" << tb);
        const auto a = random_vector<float>(r, sh.m * sh.k, -1, 1);
        const auto b = random_vector<float>(r, sh.k * sh.n, -1, 1);
        std::vector<float> c1;
        for (auto* pool : {&pool1, &pool2, &pool3}) {
          INFO("threads = " << pool->size());
          std::vector<float> c(static_cast<std::size_t>(sh.m * sh.n));
          cpu::gemm<float>(*pool, ta, tb, sh.m, sh.n, sh.k, a.data(), b.data(), c.data());
          if (pool->size() == 1) {
            c1 = c;
            continue;
          }
          i64 diff = 0;
          for (std::size_t i = 0; i < c.size(); ++i)
            diff += std::bit_cast<std::uint32_t>(c[i]) != std::bit_cast<std::uint32_t>(c1[i]);
          INFO(diff << " of " << c.size() << " elements differ from one thread's");
          CHECK(diff == 0);
          differing += diff;
        }
      }
    const auto g = pointwise_gemm_geo();
    rng rc{16};
    const auto x = random_vector<float>(rc, g.n * g.h * g.w * g.c, -1, 1);
    const auto w = random_vector<float>(rc, g.kh * g.kw * g.c * g.o, -1, 1);
    const auto dy = random_vector<float>(rc, g.n * g.oh * g.ow * g.o, -1, 1);
    const conv_out one = conv_run(1, g, x, w, dy);
    for (int threads : {2, 3}) {
      INFO("pointwise conv, threads = " << threads);
      const conv_out more = conv_run(threads, g, x, w, dy);
      CHECK(bitwise_equal(one.y, more.y));
      CHECK(bitwise_equal(one.dx, more.dx));
    }
    MESSAGE("gemm: " << differing << " elements differ between 1 and 2 or 3 threads");
  }

  TEST_CASE("reductions: vector max/min with NaN, and column sums split over row parts") {
    // [3, 100, 300] reduced over axis 1: few outer slices, many rows, wide rows, the path that
    // splits the rows into fixed parts; and a contiguous max over rows of ragged lengths.
    constexpr auto p = ty::placeholder<"p", float, ty::shape<3, 100, 300>>;
    const i64 A = 3, R = 100, C = 300;
    rng r{21};
    auto v = random_vector<float>(r, A * R * C, -4, 4);
    // NaNs in each place a vector or scalar combine meets one: the part of rows 37..49 (of 8
    // fixed parts) combines rows 37-40 and 41-44 four at a time and row 49 alone, and a NaN in
    // the row accumulator (row 37) must survive the non-NaN rows after it. Columns 5, 40, 100
    // and 200 are in 16-wide vectors, 295 in the scalar tail.
    for (const auto& [row, col] : std::initializer_list<std::pair<i64, i64>>{
             {37, 5}, {38, 40}, {39, 100}, {40, 200}, {49, 17}, {37, 295}, {44, 296}, {0, 297}})
      v[static_cast<std::size_t>((1 * R + row) * C + col)] =
          std::numeric_limits<float>::quiet_NaN();
    ty::tensor<float> in({A, R, C}, std::span<const float>(v));
    for (int threads : {1, 2}) {
      INFO("threads = " << threads);
      ty::session s(ty::session_options{.threads = threads});
      auto [sum1, max1, min1, max2] = s.run(
          ty::fetch(ty::sum<1>(p), ty::max<1>(p), ty::min<1>(p), ty::max<2>(p)), ty::feed(p, in));
      for (i64 a = 0; a < A; ++a)
        for (i64 c = 0; c < C; ++c) {
          double sm = 0, mx = -INFINITY, mn = INFINITY, sabs = 0;
          bool nan = false;
          for (i64 q = 0; q < R; ++q) {
            const float x = v[static_cast<std::size_t>((a * R + q) * C + c)];
            nan |= x != x;
            sm += x, sabs += std::abs(x), mx = std::max<double>(mx, x),
                                          mn = std::min<double>(mn, x);
          }
          const i64 o = a * C + c;
          if (nan) {
            CHECK(std::isnan(sum1[o]));
            CHECK(std::isnan(max1[o]));
            CHECK(std::isnan(min1[o]));
          } else {
            CHECK(std::abs(sum1[o] - sm) <= 1e-6 * (1 + sabs));
            CHECK(max1[o] == mx);
            CHECK(min1[o] == mn);
          }
        }
      for (i64 q = 0; q < A * R; ++q) {
        double mx = -INFINITY;
        bool nan = false;
        for (i64 c = 0; c < C; ++c) {
          const float x = v[static_cast<std::size_t>(q * C + c)];
          nan |= x != x;
          mx = std::max<double>(mx, x);
        }
        if (nan)
          CHECK(std::isnan(max2[q]));
        else
          CHECK(max2[q] == mx);
      }
    }
    // Ties keep the first value (combine()'s rule), so a max or min over zeros of both signs has
    // the first zero's sign, whichever path and lane an element takes: [64, 40] over rows (the
    // row parts, 4 rows a pass; vector and tail columns) and over columns (independent lanes).
    {
      constexpr auto z = ty::placeholder<"z", float, ty::shape<64, 40>>;
      std::vector<float> zs(64 * 40);
      for (i64 q = 0; q < 64; ++q)
        for (i64 c = 0; c < 40; ++c) // column c starts with -0 when c is odd, then the other sign
          zs[static_cast<std::size_t>(q * 40 + c)] = ((c % 2 == 1) == (q == 0)) ? -0.0f : 0.0f;
      ty::tensor<float> tz({64, 40}, std::span<const float>(zs));
      ty::session s(ty::session_options{.threads = 2});
      auto [mx0, mn0, mx1, mn1] = s.run(
          ty::fetch(ty::max<0>(z), ty::min<0>(z), ty::max<1>(z), ty::min<1>(z)), ty::feed(z, tz));
      for (i64 c = 0; c < 40; ++c) {
        INFO("column ", c);
        CHECK(std::signbit(mx0[c]) == (c % 2 == 1));
        CHECK(std::signbit(mn0[c]) == (c % 2 == 1));
      }
      for (i64 q = 0; q < 64; ++q) { // row 0 starts with +0, the others with -0
        INFO("row ", q);
        CHECK(std::signbit(mx1[q]) == (q != 0));
        CHECK(std::signbit(mn1[q]) == (q != 0));
      }
    }
    // The same over rows long enough for the vector lanes (and their pairwise combine), and a
    // scalar tail: [4, 200] over columns, row q starting with -0 when q is odd.
    {
      constexpr auto z = ty::placeholder<"z", float, ty::shape<4, 200>>;
      std::vector<float> zs(4 * 200);
      for (i64 q = 0; q < 4; ++q)
        for (i64 c = 0; c < 200; ++c)
          zs[static_cast<std::size_t>(q * 200 + c)] = ((q % 2 == 1) == (c == 0)) ? -0.0f : 0.0f;
      ty::tensor<float> tz({4, 200}, std::span<const float>(zs));
      ty::session s;
      auto [mx, mn] = s.run(ty::fetch(ty::max<1>(z), ty::min<1>(z)), ty::feed(z, tz));
      for (i64 q = 0; q < 4; ++q) {
        INFO("row ", q);
        CHECK(std::signbit(mx[q]) == (q % 2 == 1));
        CHECK(std::signbit(mn[q]) == (q % 2 == 1));
      }
    }
    // Rows of 16, 32 and 128 floats (whole vectors that divide eight, with 16- or 8-wide
    // vectors) over axis 0: each row part keeps eight vector accumulators in registers, and
    // 777 rows leave rows that do not fill the eight. Sums within 1e-6 of the double-precision
    // sum's magnitude and the same bits on 1 and 2 threads; max exact; a NaN (column 3)
    // propagates; a column of zeros whose first row is -0 keeps that sign (ties keep the first).
    const auto narrow = [&]<i64 C>(std::integral_constant<i64, C>, i64 rows) {
      INFO("[" << rows << ", " << C << "]");
      constexpr auto q = ty::placeholder<"n", float, ty::shape<ty::dyn, C>>;
      auto qs = random_vector<float>(r, rows * C, -1, 1);
      qs[static_cast<std::size_t>((rows / 2) * C + 3)] = std::numeric_limits<float>::quiet_NaN();
      for (i64 k = 0; k < rows; ++k)
        qs[static_cast<std::size_t>(k * C + C - 1)] = k == 0 ? -0.0f : 0.0f;
      ty::tensor<float> tq({rows, C}, std::span<const float>(qs));
      ty::session s1(ty::session_options{.threads = 1}), s2(ty::session_options{.threads = 2});
      auto [sum1, max1] = s1.run(ty::fetch(ty::sum<0>(q), ty::max<0>(q)), ty::feed(q, tq));
      auto [sum2, max2] = s2.run(ty::fetch(ty::sum<0>(q), ty::max<0>(q)), ty::feed(q, tq));
      for (i64 c = 0; c < C; ++c) {
        INFO("column " << c);
        double sm = 0, sabs = 0, mx = -INFINITY;
        for (i64 k = 0; k < rows; ++k) {
          const float x = qs[static_cast<std::size_t>(k * C + c)];
          sm += x, sabs += std::abs(x), mx = std::max<double>(mx, x);
        }
        if (c == 3) {
          CHECK(std::isnan(sum1[c]));
          CHECK(std::isnan(max1[c]));
          CHECK(std::isnan(max2[c]));
          continue;
        }
        CHECK(std::abs(sum1[c] - sm) <= 1e-6 * (1 + sabs));
        CHECK(std::bit_cast<std::uint32_t>(sum1[c]) == std::bit_cast<std::uint32_t>(sum2[c]));
        CHECK(max1[c] == mx);
        CHECK(max2[c] == mx);
        if (c == C - 1) {
          CHECK(std::signbit(max1[c]));
          CHECK(std::signbit(max2[c]));
        }
      }
    };
    narrow(std::integral_constant<i64, 16>{}, 777);
    narrow(std::integral_constant<i64, 32>{}, 777);
    narrow(std::integral_constant<i64, 32>{}, 20000);
    narrow(std::integral_constant<i64, 128>{}, 300);
    // Short rows (a bias gradient's shape): [500, 7] over axis 0 also takes the row parts.
    {
      constexpr auto q = ty::placeholder<"q", float, ty::shape<500, 7>>;
      auto qs = random_vector<float>(r, 500 * 7, -1, 1);
      ty::tensor<float> tq({500, 7}, std::span<const float>(qs));
      ty::session s1(ty::session_options{.threads = 1}), s2(ty::session_options{.threads = 2});
      auto [sum1, max1] = s1.run(ty::fetch(ty::sum<0>(q), ty::max<0>(q)), ty::feed(q, tq));
      auto [sum2, max2] = s2.run(ty::fetch(ty::sum<0>(q), ty::max<0>(q)), ty::feed(q, tq));
      for (i64 c = 0; c < 7; ++c) {
        double sm = 0, sabs = 0, mx = -INFINITY;
        for (i64 k = 0; k < 500; ++k) {
          const float x = qs[static_cast<std::size_t>(k * 7 + c)];
          sm += x, sabs += std::abs(x), mx = std::max<double>(mx, x);
        }
        CHECK(std::abs(sum1[c] - sm) <= 1e-6 * (1 + sabs));
        CHECK(max1[c] == mx);
        CHECK(std::bit_cast<std::uint32_t>(sum1[c]) == std::bit_cast<std::uint32_t>(sum2[c]));
        CHECK(max2[c] == mx);
      }
    }
    // Ragged contiguous lengths around the vector loop's 4 batches, a NaN in the tail.
    constexpr auto f = ty::placeholder<"f", float, ty::shape<ty::dyn>>;
    ty::session s;
    for (i64 n : {1, 15, 63, 64, 65, 200}) {
      INFO("n = " << n);
      auto xs = random_vector<float>(r, n, -1, 1);
      ty::tensor<float> t({n}, std::span<const float>(xs));
      auto [mx, mn] = s.run(ty::fetch(ty::max(f), ty::min(f)), ty::feed(f, t));
      CHECK(mx.item() == *std::max_element(xs.begin(), xs.end()));
      CHECK(mn.item() == *std::min_element(xs.begin(), xs.end()));
      xs[static_cast<std::size_t>(n - 1)] = std::numeric_limits<float>::quiet_NaN();
      ty::tensor<float> tn({n}, std::span<const float>(xs));
      auto [mx2] = s.run(ty::fetch(ty::max(f)), ty::feed(f, tn));
      CHECK(std::isnan(mx2.item()));
    }
    // Long sums: the vector lanes flush into wide accumulators every 4096 elements (a whole
    // number of chunks, a ragged last one, more than one task's 65536), within 1e-6 of the
    // double-precision sum's magnitude and the same bits on one thread as on the default pool.
    ty::session s2(ty::session_options{.threads = 1});
    for (i64 n : {4096, 4096 * 3 + 77, 200000}) {
      INFO("n = " << n);
      auto xs = random_vector<float>(r, n, -1, 1);
      ty::tensor<float> t({n}, std::span<const float>(xs));
      double ref = 0, sabs = 0;
      for (float x : xs)
        ref += x, sabs += std::abs(x);
      auto [s1] = s.run(ty::fetch(ty::sum(f)), ty::feed(f, t));
      auto [t2] = s2.run(ty::fetch(ty::sum(f)), ty::feed(f, t));
      CHECK(std::abs(s1.item() - ref) <= 1e-6 * sabs);
      CHECK(std::bit_cast<std::uint32_t>(s1.item()) == std::bit_cast<std::uint32_t>(t2.item()));
    }
  }

  TEST_CASE("fused comparisons treat NaN as C++ does") {
    // xsimd's != is an ordered compare; the vector loop must still give NaN != x == true.
    constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<ty::dyn>>;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> xs(40, 1.f), ys(40, 1.f);
    xs[3] = nan, ys[20] = nan, xs[33] = nan, ys[33] = nan, ys[7] = 2.f;
    ty::tensor<float> ta({40}, std::span<const float>(xs)), tb({40}, std::span<const float>(ys));
    ty::session s;
    auto [ne, eq, w] = s.run(ty::fetch(ty::cast<float>(a != b), ty::cast<float>(a == b),
                                       ty::where(a != b, a + b, a * b)),
                             ty::feed(a, ta), ty::feed(b, tb));
    for (i64 i = 0; i < 40; ++i) {
      const float x = xs[static_cast<std::size_t>(i)], y = ys[static_cast<std::size_t>(i)];
      INFO("i = " << i);
      CHECK(ne[i] == (x != y ? 1.f : 0.f));
      CHECK(eq[i] == (x == y ? 1.f : 0.f));
      const float ref = x != y ? x + y : x * y;
      CHECK(std::bit_cast<std::uint32_t>(w[i]) == std::bit_cast<std::uint32_t>(ref));
    }
  }

  // Skipped (doctest counts it) in a build without OpenBLAS.
  TEST_CASE("a session leaves BLAS single-threaded" * doctest::skip(!built_with_openblas)) {
#if defined(TYPEFLOW_HAS_CBLAS) && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(2);
    REQUIRE(openblas_get_num_threads() == 2);
    ty::session s(ty::session_options{.threads = 2});
    CHECK(openblas_get_num_threads() == 1);
#endif
  }
}
