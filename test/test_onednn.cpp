// The oneDNN engine (backend/cpu/onednn.hpp) against naive double-precision loops: convolutions
// forward, input and filter gradients over odd geometries (strides, dilations, VALID rows left
// unread, batches that do not split evenly into the fixed slabs), and matrix products with every
// transposition through a session; results bitwise independent of the thread count; primitives
// created once per geometry.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <typeflow/typeflow.hpp>
#include <vector>

#if defined(TYPEFLOW_HAS_ONEDNN)
#include <omp.h>
#endif

namespace ty = typeflow;
namespace cpu = typeflow::cpu_backend;

namespace {

using i64 = std::int64_t;

struct rng {
  std::uint64_t s;
  double uniform(double lo, double hi) {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1.0p-53;
  }
};

std::vector<float> random_vector(rng& r, i64 n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& e : v)
    e = static_cast<float>(r.uniform(-1, 1));
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// |got - ref| <= tol * (1 + sum of |products|) everywhere; returns the number of violations.
i64 violations(const std::vector<float>& got, const std::vector<double>& ref,
               const std::vector<double>& abs, double tol) {
  REQUIRE(got.size() == ref.size());
  i64 bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    bad += !(std::abs(got[i] - ref[i]) <= tol * (1 + abs[i]));
  return bad;
}

/// Geometry with `ph`/`pw` padding before and the output extents given.
cpu::window2d geo(i64 n, i64 h, i64 w, i64 c, i64 kh, i64 kw, i64 o, i64 oh, i64 ow, i64 sh, i64 sw,
                  i64 dh, i64 dw, i64 ph, i64 pw) {
  return {n, h, w, c, kh, kw, o, oh, ow, sh, sw, dh, dw, ph, pw};
}

struct conv_ref {
  std::vector<double> y, y_abs, dx, dx_abs, dw, dw_abs;
};

conv_ref reference(const cpu::window2d& g, const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& dy) {
  conv_ref r;
  r.y.assign(static_cast<std::size_t>(g.n * g.oh * g.ow * g.o), 0);
  r.y_abs = r.y;
  r.dx.assign(x.size(), 0);
  r.dx_abs = r.dx;
  r.dw.assign(w.size(), 0);
  r.dw_abs = r.dw;
  for (i64 b = 0; b < g.n; ++b)
    for (i64 oy = 0; oy < g.oh; ++oy)
      for (i64 ox = 0; ox < g.ow; ++ox)
        for (i64 ky = 0; ky < g.kh; ++ky)
          for (i64 kx = 0; kx < g.kw; ++kx) {
            const i64 iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
            if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
              continue;
            for (i64 ci = 0; ci < g.c; ++ci)
              for (i64 co = 0; co < g.o; ++co) {
                const auto xi = static_cast<std::size_t>(((b * g.h + iy) * g.w + ix) * g.c + ci);
                const auto wi = static_cast<std::size_t>(((ky * g.kw + kx) * g.c + ci) * g.o + co);
                const auto yi = static_cast<std::size_t>(((b * g.oh + oy) * g.ow + ox) * g.o + co);
                const double xv = x[xi], wv = w[wi], dv = dy[yi];
                r.y[yi] += xv * wv, r.y_abs[yi] += std::abs(xv * wv);
                r.dx[xi] += dv * wv, r.dx_abs[xi] += std::abs(dv * wv);
                r.dw[wi] += xv * dv, r.dw_abs[wi] += std::abs(xv * dv);
              }
          }
  return r;
}

struct conv_out {
  std::vector<float> y, dx, dw;
};

#if defined(TYPEFLOW_HAS_ONEDNN)
conv_out run_onednn(int threads, const cpu::window2d& g, const std::vector<float>& x,
                    const std::vector<float>& w, const std::vector<float>& dy) {
  cpu::thread_pool pool(threads);
  cpu::onednn_cache cache;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  conv_out o;
  o.y.assign(static_cast<std::size_t>(g.n * g.oh * g.ow * g.o), nan);
  o.dx.assign(x.size(), nan);
  o.dw.assign(w.size(), nan);
  std::vector<float> partial(static_cast<std::size_t>(cpu::conv_parts * g.patch() * g.o), nan);
  cpu::onednn_conv2d_forward(cache, pool, x.data(), w.data(), g, o.y.data());
  cpu::onednn_conv2d_backprop_input(cache, pool, dy.data(), w.data(), g, o.dx.data());
  cpu::onednn_conv2d_backprop_filter(cache, pool, x.data(), dy.data(), g, partial.data(),
                                     o.dw.data());
  return o;
}
#endif

void check_conv(const std::string& name, const cpu::window2d& g, std::uint64_t seed) {
#if defined(TYPEFLOW_HAS_ONEDNN)
  INFO(name << ": n=" << g.n << " " << g.h << "x" << g.w << "x" << g.c << ", filter " << g.kh << "x"
            << g.kw << "x" << g.o << ", out " << g.oh << "x" << g.ow << ", stride " << g.sh << "x"
            << g.sw << ", dilation " << g.dh << "x" << g.dw << ", pad " << g.ph << "x" << g.pw);
  rng r{seed};
  const auto x = random_vector(r, g.n * g.h * g.w * g.c);
  const auto w = random_vector(r, g.kh * g.kw * g.c * g.o);
  const auto dy = random_vector(r, g.n * g.oh * g.ow * g.o);
  const conv_ref ref = reference(g, x, w, dy);
  const conv_out one = run_onednn(1, g, x, w, dy);
  // float sums of at most a few thousand products (Winograd is not used: convolution_direct).
  constexpr double tol = 1e-5;
  CHECK(violations(one.y, ref.y, ref.y_abs, tol) == 0);
  CHECK(violations(one.dx, ref.dx, ref.dx_abs, tol) == 0);
  CHECK(violations(one.dw, ref.dw, ref.dw_abs, tol) == 0);
  for (int threads : {2, 3}) {
    INFO("threads = " << threads);
    const conv_out more = run_onednn(threads, g, x, w, dy);
    CHECK(same_bits(one.y, more.y));
    CHECK(same_bits(one.dx, more.dx));
    CHECK(same_bits(one.dw, more.dw));
  }
#else
  (void)name, (void)g, (void)seed;
#endif
}

} // namespace

TEST_SUITE("onednn") {
  TEST_CASE("the engine is there, and on a real ISA") {
#if defined(TYPEFLOW_HAS_ONEDNN)
    CHECK(cpu::has_onednn);
    const std::string isa = cpu::onednn::isa_name();
    MESSAGE("oneDNN ISA: " << isa);
    CHECK(isa != "generic");
#else
    CHECK(!cpu::has_onednn);
    MESSAGE("skipped: built without oneDNN");
#endif
  }

  TEST_CASE("convolutions match naive loops, the same bits on 1 to 3 threads") {
    // The seed's layers (SAME 5x5, one and 32 channels), at a batch of 13: slabs of 1 and 2.
    check_conv("seed conv1", geo(13, 28, 28, 1, 5, 5, 32, 28, 28, 1, 1, 1, 1, 2, 2), 1);
    check_conv("seed conv2", geo(9, 14, 14, 32, 5, 5, 64, 14, 14, 1, 1, 1, 1, 2, 2), 2);
    // Fewer images than slabs.
    check_conv("batch 3", geo(3, 7, 7, 8, 3, 3, 16, 7, 7, 1, 1, 1, 1, 1, 1), 3);
    // Stride 2x1 and dilation 1x2 with padding before only.
    check_conv("stride, dilation", geo(11, 6, 5, 8, 3, 3, 70, 3, 5, 2, 1, 1, 2, 1, 2), 4);
    // VALID with stride 2 on 8 rows of a 3x3 filter: out 3, the input's last row is never read.
    check_conv("VALID, last row unread", geo(5, 8, 8, 4, 3, 3, 6, 3, 3, 2, 2, 1, 1, 0, 0), 5);
    // SAME with stride 2 on an odd extent: one more row of padding after than before.
    check_conv("SAME, stride 2", geo(4, 9, 9, 5, 3, 3, 7, 5, 5, 2, 2, 1, 1, 1, 1), 6);
    // Pointwise.
    check_conv("pointwise", geo(6, 14, 14, 40, 1, 1, 120, 14, 14, 1, 1, 1, 1, 0, 0), 7);
  }

  TEST_CASE("matmul through a session: every transposition, batched, thread-count independent") {
    constexpr i64 M = 150, K = 301, N = 260, B = 3;
    constexpr auto a = ty::placeholder<"a", float, ty::shape<M, K>>;
    constexpr auto at = ty::placeholder<"at", float, ty::shape<K, M>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<K, N>>;
    constexpr auto bt = ty::placeholder<"bt", float, ty::shape<N, K>>;
    constexpr auto a3 = ty::placeholder<"a3", float, ty::shape<B, M, K>>;
    constexpr auto b3 = ty::placeholder<"b3", float, ty::shape<B, K, N>>;
    rng r{42};
    const auto va = random_vector(r, M * K), vb = random_vector(r, K * N);
    const auto va3 = random_vector(r, B * M * K), vb3 = random_vector(r, B * K * N);
    std::vector<float> vat(va.size()), vbt(vb.size());
    for (i64 i = 0; i < M; ++i)
      for (i64 p = 0; p < K; ++p)
        vat[static_cast<std::size_t>(p * M + i)] = va[static_cast<std::size_t>(i * K + p)];
    for (i64 p = 0; p < K; ++p)
      for (i64 j = 0; j < N; ++j)
        vbt[static_cast<std::size_t>(j * K + p)] = vb[static_cast<std::size_t>(p * N + j)];
    const auto t = [](std::vector<i64> dims, const std::vector<float>& v) {
      return ty::tensor<float>(dims, std::span<const float>(v));
    };
    // Reference C = A B and the batched products, in double.
    std::vector<double> ref(static_cast<std::size_t>(M * N)), ref_abs(ref.size());
    for (i64 i = 0; i < M; ++i)
      for (i64 j = 0; j < N; ++j)
        for (i64 p = 0; p < K; ++p) {
          const double prod = static_cast<double>(va[static_cast<std::size_t>(i * K + p)]) *
                              vb[static_cast<std::size_t>(p * N + j)];
          ref[static_cast<std::size_t>(i * N + j)] += prod;
          ref_abs[static_cast<std::size_t>(i * N + j)] += std::abs(prod);
        }
    std::vector<double> ref3(static_cast<std::size_t>(B * M * N)), ref3_abs(ref3.size());
    for (i64 q = 0; q < B; ++q)
      for (i64 i = 0; i < M; ++i)
        for (i64 j = 0; j < N; ++j)
          for (i64 p = 0; p < K; ++p) {
            const double prod =
                static_cast<double>(va3[static_cast<std::size_t>((q * M + i) * K + p)]) *
                vb3[static_cast<std::size_t>((q * K + p) * N + j)];
            ref3[static_cast<std::size_t>((q * M + i) * N + j)] += prod;
            ref3_abs[static_cast<std::size_t>((q * M + i) * N + j)] += std::abs(prod);
          }
    std::vector<std::vector<float>> first;
    for (int threads : {1, 2, 3}) {
      INFO("threads = " << threads);
      ty::session s(ty::session_options{.threads = threads});
      auto [nn, tn, nt, tt, bb] =
          s.run(ty::fetch(ty::matmul(a, b), ty::matmul(ty::transpose<1, 0>(at), b),
                          ty::matmul(a, ty::transpose<1, 0>(bt)),
                          ty::matmul(ty::transpose<1, 0>(at), ty::transpose<1, 0>(bt)),
                          ty::matmul(a3, b3)),
                ty::feed(a, t({M, K}, va)), ty::feed(at, t({K, M}, vat)),
                ty::feed(b, t({K, N}, vb)), ty::feed(bt, t({N, K}, vbt)),
                ty::feed(a3, t({B, M, K}, va3)), ty::feed(b3, t({B, K, N}, vb3)));
      std::vector<std::vector<float>> got;
      for (const auto* c : {&nn, &tn, &nt, &tt, &bb})
        got.emplace_back(c->data(), c->data() + c->size());
      for (std::size_t v = 0; v < 4; ++v) {
        INFO("transposition " << v);
        CHECK(violations(got[v], ref, ref_abs, 1e-5) == 0);
      }
      CHECK(violations(got[4], ref3, ref3_abs, 1e-5) == 0);
      if (first.empty())
        first = got;
      else
        for (std::size_t v = 0; v < got.size(); ++v)
          CHECK(same_bits(first[v], got[v]));
    }
  }

  TEST_CASE("primitives are created once per geometry") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 12, 12, 3>>;
    constexpr auto w = ty::placeholder<"w", float, ty::shape<3, 3, 3, 8>>;
    constexpr auto m = ty::placeholder<"m", float, ty::shape<ty::dyn, 64>>;
    constexpr auto v = ty::placeholder<"v", float, ty::shape<300, 64>>; // B transposed: oneDNN's
    rng r{5};
    const auto vw = random_vector(r, 3 * 3 * 3 * 8), vv = random_vector(r, 64 * 300);
    ty::session s(ty::session_options{.threads = 2});
    const auto run = [&](i64 n) {
      const auto vx = random_vector(r, n * 12 * 12 * 3), vm = random_vector(r, n * 64);
      s.run(ty::fetch(ty::conv2d<ty::padding::same>(x, w), ty::matmul<false, true>(m, v)),
            ty::feed(x, ty::tensor<float>({n, 12, 12, 3}, std::span<const float>(vx))),
            ty::feed(w, ty::tensor<float>({3, 3, 3, 8}, std::span<const float>(vw))),
            ty::feed(m, ty::tensor<float>({n, 64}, std::span<const float>(vm))),
            ty::feed(v, ty::tensor<float>({300, 64}, std::span<const float>(vv))));
      return s.onednn_primitives();
    };
    const std::size_t after_first = run(16);
#if defined(TYPEFLOW_HAS_ONEDNN)
    CHECK(after_first > 0);
#else
    CHECK(after_first == 0);
#endif
    CHECK(run(16) == after_first); // same batch: nothing new
    CHECK(run(16) == after_first);
    const std::size_t other = run(20); // a new batch size: new primitives, kept too
#if defined(TYPEFLOW_HAS_ONEDNN)
    CHECK(other > after_first);
#endif
    CHECK(run(20) == other);
    CHECK(run(16) == other);
  }
}

#if defined(TYPEFLOW_HAS_ONEDNN)
TEST_SUITE("onednn") {
  TEST_CASE("oneDNN starts no threads of its own, whatever the caller's OpenMP setting") {
    // oneDNN sizes a primitive's OpenMP team when it creates it, from the creating thread's
    // setting. A fresh thread is a fresh OpenMP master with its own team; it asks for four
    // threads, as a user's OpenMP code might, then a one-thread session creates and runs a
    // convolution's and a product's primitives on it. Extra OpenMP threads would spin beside the
    // session's and outlive the run: the process must have as many threads after as before.
    const auto threads_now = [] {
      std::size_t n = 0;
      for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
        ++n;
      return n;
    };
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 12, 12, 3>>;
    constexpr auto w = ty::placeholder<"w", float, ty::shape<3, 3, 3, 8>>;
    constexpr auto m = ty::placeholder<"m", float, ty::shape<ty::dyn, 64>>;
    constexpr auto v = ty::placeholder<"v", float, ty::shape<300, 64>>; // B transposed: oneDNN's
    rng r{9};
    const auto vx = random_vector(r, 16 * 12 * 12 * 3), vw = random_vector(r, 3 * 3 * 3 * 8);
    const auto vm = random_vector(r, 16 * 64), vv = random_vector(r, 64 * 300);
    std::size_t before = 0, after = 0, primitives = 0;
    std::thread t([&] {
      omp_set_num_threads(4);
      ty::session s(ty::session_options{.threads = 1});
      before = threads_now();
      for (int i = 0; i < 2; ++i)
        s.run(ty::fetch(ty::conv2d<ty::padding::same>(x, w), ty::matmul<false, true>(m, v)),
              ty::feed(x, ty::tensor<float>({16, 12, 12, 3}, std::span<const float>(vx))),
              ty::feed(w, ty::tensor<float>({3, 3, 3, 8}, std::span<const float>(vw))),
              ty::feed(m, ty::tensor<float>({16, 64}, std::span<const float>(vm))),
              ty::feed(v, ty::tensor<float>({300, 64}, std::span<const float>(vv))));
      after = threads_now();
      primitives = s.onednn_primitives();
    });
    t.join();
    CHECK(primitives > 0); // the run went through oneDNN
    CHECK(after == before);
  }
}
#endif

TEST_SUITE("machine") {
  TEST_CASE("describe_machine names the CPU and each engine's ISA") {
    const ty::machine_info m = ty::describe_machine();
    MESSAGE(m.str());
    std::ifstream f("/proc/cpuinfo");
    std::string line, name;
    while (std::getline(f, line))
      if (line.rfind("model name", 0) == 0) {
        name = line.substr(line.find(':') + 2);
        break;
      }
    if (!name.empty())
      CHECK(m.cpu.rfind(name, 0) == 0);
    CHECK(m.str().find(m.cpu) != std::string::npos);
    CHECK(!m.fused_isa.empty());
#if defined(TYPEFLOW_HAS_ONEDNN)
    CHECK(m.onednn_isa == cpu::onednn::isa_name());
    CHECK(m.str().find("oneDNN " + m.onednn_isa) != std::string::npos);
    CHECK(m.str().find(m.bf16_products ? "bfloat16 products: native"
                                       : "bfloat16 products: not native") != std::string::npos);
#if defined(__x86_64__)
    // bfloat16 products are native where the CPU reports AVX512-BF16 (cpuid, independently of
    // oneDNN) and oneDNN runs AVX-512 kernels (not capped by ONEDNN_MAX_CPU_ISA)
    if (m.onednn_isa.rfind("avx512", 0) == 0)
      CHECK(m.bf16_products == (__builtin_cpu_supports("avx512bf16") != 0));
    else
      CHECK_FALSE(m.bf16_products);
#endif
#endif
    for (const auto& w : m.warnings)
      CHECK(m.str().find("warning: " + w) != std::string::npos);
  }

  TEST_CASE("OpenBLAS's generic cores are recognized") {
    CHECK(ty::detail::blas_core_is_generic("Prescott"));
    CHECK(ty::detail::blas_core_is_generic("Core2"));
    CHECK(!ty::detail::blas_core_is_generic("SkylakeX"));
    CHECK(!ty::detail::blas_core_is_generic("Zen"));
    CHECK(!ty::detail::blas_core_is_generic("Haswell"));
  }
}

#if defined(TYPEFLOW_HAS_ONEDNN) && defined(TYPEFLOW_HAS_CBLAS)
TEST_SUITE("onednn") {
  TEST_CASE("a slab on BLAS with a bias (and relu): the bias first, the product added onto it") {
    // float_slab with blas = true is what small_nn_on_blas picks where oneDNN has only AVX2
    // kernels; called directly here so that every CPU runs it: a 5 x 7 slab of a C 10 wide
    // (the columns beyond the slab untouched), k = 9, against a double loop.
    cpu::thread_pool pool(1);
    const auto mem = std::make_shared<ty::backend::buffer_pool>();
    ty::backend::run_stats stats;
    cpu::onednn_cache dnnl;
    cpu::context ctx{pool, *mem, stats, dnnl};
    constexpr std::int64_t m = 5, n = 7, k = 9, ldc = 10;
    std::vector<float> a(m * k), b(k * n), bias(n);
    for (std::size_t i = 0; i < a.size(); ++i)
      a[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
    for (std::size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i)));
    for (std::size_t j = 0; j < bias.size(); ++j)
      bias[j] = 0.5f - 0.25f * static_cast<float>(j);
    for (const bool relu : {false, true}) {
      INFO("relu: " << relu);
      std::vector<float> c(m * ldc, 42.0f);
      cpu::float_slab(ctx, true, false, false, m, n, k, a.data(), k, b.data(), n, c.data(), ldc,
                      bias.data(),
                      relu ? cpu::onednn::epilogue::bias_relu : cpu::onednn::epilogue::bias);
      int wrong = 0;
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < ldc; ++j) {
          const float got = c[static_cast<std::size_t>(i * ldc + j)];
          if (j >= n) {
            wrong += got != 42.0f;
            continue;
          }
          double want = bias[static_cast<std::size_t>(j)];
          for (std::int64_t p = 0; p < k; ++p)
            want += static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) *
                    static_cast<double>(b[static_cast<std::size_t>(p * n + j)]);
          if (relu)
            want = std::max(want, 0.0);
          wrong += std::abs(got - want) > 1e-5 * (1 + std::abs(want));
        }
      CHECK(wrong == 0);
    }
  }
}
#endif
