// Symbolic differentiation: every gradient rule against central differences (ty::gradcheck, in
// double, on deterministic pseudo-random inputs kept away from kinks), second order against
// analytic Hessian-vector products, type-level folding on the printed form, one evaluation per
// forward node when a loss and its gradient are fetched together, custom gradients, seeded
// vector-Jacobian products and the conventions at non-differentiable points.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <typeflow/typeflow.hpp>
#include <vector>

#include "gradcheck_support.hpp"

namespace ty = typeflow;

namespace {

using i64 = std::int64_t;
using namespace test_support;

template <ty::fixed_string Name, i64... D>
inline constexpr auto var = ty::variable<Name, double, ty::shape<D...>>;

// ---------------------------------------------------------------------------------------------
// Inputs.
// ---------------------------------------------------------------------------------------------

/// Values on two interleaved grids: any "even" value differs from any "odd" one by >= 0.08, so
/// maximum/minimum of an even and an odd operand never tie, whatever the broadcasting.
struct separated_gen {
  std::mt19937 rng;
  bool odd;
  separated_gen(unsigned seed, bool o) : rng(seed), odd(o) {}
  double operator()() {
    std::uniform_int_distribution<int> k(-6, 6);
    std::uniform_real_distribution<double> noise(0.0, 0.02);
    return 0.2 * k(rng) + (odd ? 0.1 : 0.0) + noise(rng);
  }
};

template <class V>
ty::tensor<double> set_values(session_t& s, V v, std::vector<double> values) {
  ty::tensor<double> t(dims_of(v), std::span<const double>(values));
  s.write(v, t);
  return t;
}

// ---------------------------------------------------------------------------------------------
// The variables of the gradcheck tests (all float64; the r* are fixed random weights, never
// differentiated, so that the upstream gradient is not uniform).
// ---------------------------------------------------------------------------------------------
constexpr auto a34 = var<"a34", 3, 4>;
constexpr auto b34 = var<"b34", 3, 4>;
constexpr auto b4 = var<"b4", 4>;
constexpr auto c31 = var<"c31", 3, 1>;
constexpr auto d14 = var<"d14", 1, 4>;
constexpr auto s0 = var<"s0">;
constexpr auto x234 = var<"x234", 2, 3, 4>;

constexpr auto r34 = var<"r34", 3, 4>;
constexpr auto r3 = var<"r3", 3>;
constexpr auto r35 = var<"r35", 3, 5>;
constexpr auto r62 = var<"r62", 6, 2>;
constexpr auto r214 = var<"r214", 2, 1, 4>;
constexpr auto r24 = var<"r24", 2, 4>;
constexpr auto r234 = var<"r234", 2, 3, 4>;
constexpr auto r235 = var<"r235", 2, 3, 5>;
constexpr auto r423 = var<"r423", 4, 2, 3>;

void set_weights(session_t& s) {
  uniform_gen g(99, -1.5, 1.5);
  set(s, r34, g);
  set(s, r3, g);
  set(s, r35, g);
  set(s, r62, g);
  set(s, r214, g);
  set(s, r24, g);
  set(s, r234, g);
  set(s, r235, g);
  set(s, r423, g);
}

} // namespace

TEST_SUITE("autodiff") {
  TEST_CASE("unary ops pass gradcheck") {
    ty::session s;
    set_weights(s);
    auto smooth = [&] { set(s, a34, uniform_gen(1, -2.0, 2.0)); };
    auto kinked = [&] { set(s, a34, uniform_gen(2, -2.0, 2.0, 0.05)); };
    auto positive = [&] { set(s, a34, uniform_gen(3, 0.5, 2.0)); };
    constexpr auto w = ty::wrt(a34);

    smooth();
    expect_gradcheck(s, ty::sum(-a34 * r34), w);
    expect_gradcheck(s, ty::sum(ty::square(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::exp(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::sin(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::cos(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::tanh(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::sigmoid(a34) * r34), w);
    kinked();
    expect_gradcheck(s, ty::sum(ty::abs(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::relu(a34) * r34), w);
    positive();
    expect_gradcheck(s, ty::sum(ty::log(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::sqrt(a34) * r34), w);
    expect_gradcheck(s, ty::sum(ty::rsqrt(a34) * r34), w);
  }

  TEST_CASE("binary ops pass gradcheck, same shape and broadcast") {
    ty::session s;
    set_weights(s);
    constexpr auto w = ty::wrt(a34, b34);
    constexpr auto wb = ty::wrt(a34, b4);
    constexpr auto wc = ty::wrt(c31, d14);
    constexpr auto ws = ty::wrt(s0, a34);

    SUBCASE("add sub mul div pow") {
      set(s, a34, uniform_gen(10, 0.5, 2.0));
      set(s, b34, uniform_gen(11, 0.5, 2.0));
      set(s, b4, uniform_gen(12, 0.5, 2.0));
      set(s, c31, uniform_gen(13, 0.5, 2.0));
      set(s, d14, uniform_gen(14, -1.5, 1.5));
      set(s, s0, uniform_gen(15, 0.5, 2.0));
      expect_gradcheck(s, ty::sum((a34 + b34) * r34), w);
      expect_gradcheck(s, ty::sum((a34 - b34) * r34), w);
      expect_gradcheck(s, ty::sum(a34 * b34 * r34), w);
      expect_gradcheck(s, ty::sum(a34 / b34 * r34), w);
      expect_gradcheck(s, ty::sum(ty::pow(a34, b34 - ty::constant<1>) * r34), w);
      // [3,4] op [4]
      expect_gradcheck(s, ty::sum((a34 + b4) * r34), wb);
      expect_gradcheck(s, ty::sum((b4 - a34) * r34), wb);
      expect_gradcheck(s, ty::sum(a34 * b4 * r34), wb);
      expect_gradcheck(s, ty::sum(a34 / b4 * r34), wb);
      expect_gradcheck(s, ty::sum(ty::pow(b4, a34) * r34), wb);
      // [3,1] op [1,4]
      expect_gradcheck(s, ty::sum((c31 - d14) * r34), wc);
      expect_gradcheck(s, ty::sum(c31 * d14 * r34), wc);
      expect_gradcheck(s, ty::sum(d14 / c31 * r34), wc);
      expect_gradcheck(s, ty::sum(ty::pow(c31, d14) * r34), wc);
      // scalar op tensor
      expect_gradcheck(s, ty::sum((s0 + a34) * r34), ws);
      expect_gradcheck(s, ty::sum(s0 * a34 * r34), ws);
      expect_gradcheck(s, ty::sum(s0 / a34 * r34), ws);
      expect_gradcheck(s, ty::sum(ty::pow(a34, s0) * r34), ws);
    }

    SUBCASE("maximum minimum") {
      set(s, a34, separated_gen(20, false));
      set(s, b34, separated_gen(21, true));
      set(s, b4, separated_gen(22, true));
      set(s, c31, separated_gen(23, false));
      set(s, d14, separated_gen(24, true));
      set(s, s0, separated_gen(25, true));
      expect_gradcheck(s, ty::sum(ty::maximum(a34, b34) * r34), w);
      expect_gradcheck(s, ty::sum(ty::minimum(a34, b34) * r34), w);
      expect_gradcheck(s, ty::sum(ty::maximum(a34, b4) * r34), wb);
      expect_gradcheck(s, ty::sum(ty::minimum(b4, a34) * r34), wb);
      expect_gradcheck(s, ty::sum(ty::maximum(c31, d14) * r34), wc);
      expect_gradcheck(s, ty::sum(ty::minimum(c31, d14) * r34), wc);
      expect_gradcheck(s, ty::sum(ty::maximum(s0, a34) * r34), ws);
      expect_gradcheck(s, ty::sum(ty::minimum(a34, s0) * r34), ws);
    }
  }

  TEST_CASE("where, cast and broadcast_to pass gradcheck") {
    ty::session s;
    set_weights(s);
    set(s, a34, uniform_gen(30, -2.0, 2.0));
    set(s, b34, uniform_gen(31, -2.0, 2.0));
    set(s, b4, uniform_gen(32, -2.0, 2.0));
    set(s, c31, uniform_gen(33, -2.0, 2.0));
    // A fixed condition (the weights are not differentiated), true and false both present.
    constexpr auto cond = r34 > ty::constant<0>;
    expect_gradcheck(s, ty::sum(ty::where(cond, ty::sin(a34), b34 * b34) * r34), ty::wrt(a34, b34));
    expect_gradcheck(s, ty::sum(ty::where(cond, a34, ty::exp(b4)) * r34), ty::wrt(a34, b4));
    expect_gradcheck(s, ty::sum(ty::broadcast_to<ty::shape<3, 4>>(b4) * r34), ty::wrt(b4));
    expect_gradcheck(s, ty::sum(ty::broadcast_to<ty::shape<2, 3, 4>>(ty::sin(c31)) * r234),
                     ty::wrt(c31));
    // float64 -> float32 -> float64: the rounding to float needs a larger step and tolerance
    // (a quadratic, so that the central difference is exact apart from rounding).
    ty::gradcheck_options loose;
    loose.eps = 1e-2;
    loose.atol = 1e-4;
    expect_gradcheck(
        s, ty::sum(ty::square(ty::cast<double>(ty::cast<float>(a34) * ty::constant<3>)) * r34),
        ty::wrt(a34), loose);
  }

  TEST_CASE("reductions pass gradcheck") {
    ty::session s;
    set_weights(s);
    // Distinct values: max/min have a unique winner per slice (no ties within 1e-6).
    set(s, x234, uniform_gen(40, -2.0, 2.0));
    constexpr auto w = ty::wrt(x234);
    expect_gradcheck(s, ty::sum(x234 * r234), w);
    expect_gradcheck(s, ty::sum(ty::sum<0, 2>(x234) * r3), w);
    expect_gradcheck(s, ty::sum(ty::sum<0, 1>(x234, ty::keepdims) * r214), w);
    expect_gradcheck(s, ty::sum(ty::mean<1>(x234, ty::keepdims) * r214), w);
    expect_gradcheck(s, ty::sum(ty::mean<-1>(x234) * r3) + ty::mean(ty::square(x234)), w);
    expect_gradcheck(s, ty::sum(ty::max<0>(x234) * r34), w);
    expect_gradcheck(s, ty::sum(ty::min<1>(x234) * r24), w);
    expect_gradcheck(s, ty::sum(ty::max<0, 2>(x234, ty::keepdims) * r234), w);
    expect_gradcheck(s, ty::max(x234) - ty::min(x234 * r234), w);
  }

  TEST_CASE("matmul passes gradcheck for every transpose combination, 2-D and batched") {
    ty::session s;
    set_weights(s);
    constexpr auto m34 = var<"m34", 3, 4>;
    constexpr auto m43 = var<"m43", 4, 3>;
    constexpr auto m45 = var<"m45", 4, 5>;
    constexpr auto m54 = var<"m54", 5, 4>;
    constexpr auto t243 = var<"t243", 2, 4, 3>;
    constexpr auto t245 = var<"t245", 2, 4, 5>;
    constexpr auto t254 = var<"t254", 2, 5, 4>;
    uniform_gen g(50, -1.5, 1.5);
    set(s, m34, g);
    set(s, m43, g);
    set(s, m45, g);
    set(s, m54, g);
    set(s, x234, g);
    set(s, t243, g);
    set(s, t245, g);
    set(s, t254, g);
    expect_gradcheck(s, ty::sum(ty::matmul(m34, m45) * r35), ty::wrt(m34, m45));
    expect_gradcheck(s, ty::sum(ty::matmul<false, true>(m34, m54) * r35), ty::wrt(m34, m54));
    expect_gradcheck(s, ty::sum(ty::matmul<true, false>(m43, m45) * r35), ty::wrt(m43, m45));
    expect_gradcheck(s, ty::sum(ty::matmul<true, true>(m43, m54) * r35), ty::wrt(m43, m54));
    expect_gradcheck(s, ty::sum(ty::matmul(x234, t245) * r235), ty::wrt(x234, t245));
    expect_gradcheck(s, ty::sum(ty::matmul<false, true>(x234, t254) * r235), ty::wrt(x234, t254));
    expect_gradcheck(s, ty::sum(ty::matmul<true, false>(t243, t245) * r235), ty::wrt(t243, t245));
    expect_gradcheck(s, ty::sum(ty::matmul<true, true>(t243, t254) * r235), ty::wrt(t243, t254));
  }

  TEST_CASE("layout ops pass gradcheck") {
    ty::session s;
    set_weights(s);
    set(s, a34, uniform_gen(60, -2.0, 2.0));
    set(s, c31, uniform_gen(61, -2.0, 2.0));
    set(s, x234, uniform_gen(62, -2.0, 2.0));
    expect_gradcheck(s, ty::sum(ty::reshape<6, 2>(ty::sin(a34)) * r62), ty::wrt(a34));
    expect_gradcheck(s, ty::sum(ty::reshape<3, -1>(x234) * ty::reshape<3, 8>(r234)), ty::wrt(x234));
    expect_gradcheck(s, ty::sum(ty::transpose<2, 0, 1>(x234) * r423), ty::wrt(x234));
    expect_gradcheck(s, ty::sum(ty::transpose(ty::square(a34)) * ty::transpose(r34)), ty::wrt(a34));
    expect_gradcheck(s, ty::sum(ty::concat<1>(a34, ty::tanh(c31)) * r35), ty::wrt(a34, c31));
    expect_gradcheck(s, ty::sum(ty::concat<0>(x234, x234 * x234) * ty::concat<0>(r234, r234)),
                     ty::wrt(x234));
    expect_gradcheck(s, ty::sum(ty::expand_dims<0>(a34) * r234), ty::wrt(a34));
    // slice (its gradient pads with zeros), and a slice of a slice.
    expect_gradcheck(s, ty::sum(ty::square(ty::slice<ty::ints<1, 1>, ty::ints<2, -1>>(a34))),
                     ty::wrt(a34));
    expect_gradcheck(s,
                     ty::sum(ty::slice<ty::ints<0, 1, 0>, ty::ints<-1, 2, 3>>(ty::sin(x234)) *
                             ty::slice<ty::ints<0, 0, 1>, ty::ints<-1, 2, 3>>(r234)),
                     ty::wrt(x234));
  }

  TEST_CASE("second order through concat and slice (pad_like and slice_like)") {
    ty::session s;
    set_weights(s);
    set(s, a34, uniform_gen(63, -1.0, 1.0));
    set(s, c31, uniform_gen(64, -1.0, 1.0));
    // y = sum(concat(a^3, c^3)): the gradient is 3 a^2 on a's block; its gradient along v, as a
    // function of a, is checked by gradcheck of y' = sum(grad(y, a) * r34).
    constexpr auto y = ty::sum(ty::concat<1>(a34 * a34 * a34, c31 * c31 * c31) * r35);
    expect_gradcheck(s, ty::sum(ty::grad(y, a34) * r34), ty::wrt(a34));
    constexpr auto z = ty::sum(ty::square(ty::slice<ty::ints<1, 0>, ty::ints<2, 3>>(a34)) *
                               ty::slice<ty::ints<0, 1>, ty::ints<2, 3>>(r34));
    expect_gradcheck(s, ty::sum(ty::grad(z, a34) * ty::sin(a34)), ty::wrt(a34));
  }

  TEST_CASE("a large variable is checked along random directions") {
    ty::session s;
    constexpr auto big = var<"big", 40, 40>;
    constexpr auto m403 = var<"m403", 40, 3>;
    constexpr auto r403 = var<"r403", 40, 3>;
    set(s, big, uniform_gen(70, -0.3, 0.3));
    set(s, m403, uniform_gen(71, -1.0, 1.0));
    set(s, r403, uniform_gen(72, -1.0, 1.0));
    const auto r =
        expect_gradcheck(s, ty::sum(ty::sin(ty::matmul(big, m403)) * r403), ty::wrt(big, m403));
    CHECK(r.checked == 12 + 120); // 12 directions of big, every element of m403
  }

  TEST_CASE("a fed dyn batch through matmul + bias + tanh + mean (a typical loss)") {
    ty::session s;
    constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, 5>>;
    constexpr auto target = ty::placeholder<"target", double, ty::shape<ty::dyn, 3>>;
    constexpr auto W = var<"W", 5, 3>;
    constexpr auto bias = var<"bias", 3>;
    set(s, W, uniform_gen(80, -1.0, 1.0));
    set(s, bias, uniform_gen(81, -0.5, 0.5));
    ty::tensor<double> xs({7, 5}), ts({7, 3});
    uniform_gen g(82, -1.0, 1.0);
    for (i64 i = 0; i < xs.size(); ++i)
      xs[i] = g();
    for (i64 i = 0; i < ts.size(); ++i)
      ts[i] = g();
    constexpr auto h = ty::tanh(ty::matmul(x, W) + bias);
    expect_gradcheck(s, ty::mean(h * target), ty::wrt(W, bias), ty::feed(x, xs),
                     ty::feed(target, ts));
    expect_gradcheck(s, ty::mean(ty::square(h - target)), ty::wrt(W, bias), ty::feed(x, xs),
                     ty::feed(target, ts));
  }

  TEST_CASE("gradcheck fails for a wrong gradient and names the variable") {
    ty::session s;
    set_weights(s);
    set(s, a34, uniform_gen(90, -1.0, 1.0));
    set(s, b34, uniform_gen(91, -1.0, 1.0));
    constexpr auto doubled =
        ty::custom_gradient(a34, [](auto g, auto) { return g * ty::constant<2>; });
    const auto r = ty::gradcheck(s, ty::sum((doubled + b34) * r34), ty::wrt(b34, a34),
                                 ty::gradcheck_options{});
    INFO(r.report());
    CHECK_FALSE(r.ok);
    CHECK(r.checked == 24);
    CHECK(r.worst_ratio > 1.0);
    CHECK(r.worst.rfind("a34[", 0) == 0);
    CHECK(r.report().find("FAILED") != std::string::npos);
  }

  TEST_CASE("Hessian-vector product of a quadratic form equals A v") {
    ty::session s;
    constexpr auto A = var<"A", 4, 4>;
    constexpr auto x = var<"x", 4, 1>;
    constexpr auto v = var<"v", 4, 1>;
    std::mt19937 rng(100);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    double a[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j <= i; ++j)
        a[i][j] = a[j][i] = u(rng);
    std::vector<double> av;
    for (auto& row : a)
      for (double e : row)
        av.push_back(e);
    set_values(s, A, av);
    set(s, x, uniform_gen(101, -1.0, 1.0));
    const auto vt = set(s, v, uniform_gen(102, -1.0, 1.0));

    constexpr auto y = ty::constant<0.5> * ty::sum(x * ty::matmul(A, x));
    constexpr auto hvp = ty::grad(ty::sum(ty::grad(y, x) * v), x);
    static_assert(std::is_same_v<decltype(hvp)::shape_type, ty::shape<4, 1>>);
    auto [h] = s.run(ty::fetch(hvp));
    REQUIRE(h.shape() == std::vector<i64>{4, 1});
    for (int i = 0; i < 4; ++i) {
      double expected = 0;
      for (int j = 0; j < 4; ++j)
        expected += a[i][j] * vt[j];
      CHECK(h[i] == doctest::Approx(expected).epsilon(1e-12));
    }
    // The gradient is itself differentiable: the first-order gradient passes gradcheck.
    expect_gradcheck(s, ty::sum(ty::grad(y, x) * v), ty::wrt(x));
  }

  TEST_CASE("Hessian-vector product of sum(tanh(W x)) equals W^T diag(-2t(1-t^2)) W v") {
    ty::session s;
    constexpr auto W = var<"W", 3, 4>;
    constexpr auto x = var<"x", 4, 1>;
    constexpr auto v = var<"v", 4, 1>;
    const auto wt = set(s, W, uniform_gen(110, -1.0, 1.0));
    const auto xt = set(s, x, uniform_gen(111, -1.0, 1.0));
    const auto vt = set(s, v, uniform_gen(112, -1.0, 1.0));

    constexpr auto y = ty::sum(ty::tanh(ty::matmul(W, x)));
    constexpr auto hvp = ty::grad(ty::sum(ty::grad(y, x) * v), x);
    auto [h] = s.run(ty::fetch(hvp));
    REQUIRE(h.shape() == std::vector<i64>{4, 1});

    double d[3], wv[3];
    for (int i = 0; i < 3; ++i) {
      double z = 0;
      wv[i] = 0;
      for (int j = 0; j < 4; ++j) {
        z += wt(i, j) * xt[j];
        wv[i] += wt(i, j) * vt[j];
      }
      const double t = std::tanh(z);
      d[i] = -2 * t * (1 - t * t);
    }
    for (int j = 0; j < 4; ++j) {
      double expected = 0;
      for (int i = 0; i < 3; ++i)
        expected += wt(i, j) * d[i] * wv[i];
      CHECK(std::abs(h[j] - expected) <= 1e-10);
    }
  }

  TEST_CASE("folding: the printed gradients are folded at the type level") {
    constexpr auto x = ty::placeholder<"x", double, ty::shape<>>;
    constexpr auto z = ty::placeholder<"z", double, ty::shape<>>;
    CHECK(ty::to_string(ty::grad(ty::sin(x), x)) == "cos(x)");
    CHECK(ty::to_string(ty::grad(-(-x), x)) == "full(1, float64, [])");
    CHECK(ty::to_string(ty::grad(x * x, x)) == "add(x, x)");
    CHECK(ty::to_string(ty::grad(ty::sin(x) + ty::stop_gradient(ty::cos(x)), x)) == "cos(x)");
    CHECK(ty::to_string(ty::grad(ty::sin(x), z)) == "zeros_like(z)");
    CHECK(ty::to_string(ty::grad(x, x)) == "full(1, float64, [])");
    const auto [gx, gz] = ty::grad(ty::sin(x), x, z);
    CHECK(ty::to_string(gx) == "cos(x)");
    CHECK(ty::to_string(gz) == "zeros_like(z)");

    ty::session s;
    ty::tensor<double> xv({}, {0.5}), zv({}, {2.0});
    auto [g1, g2, g3] =
        s.run(ty::fetch(ty::grad(x * x, x), ty::grad(-(-x), x), ty::grad(ty::sin(x), z)),
              ty::feed(x, xv), ty::feed(z, zv));
    CHECK(g1.item() == 1.0);
    CHECK(g2.item() == 1.0);
    CHECK(g3.item() == 0.0);
  }

  TEST_CASE("one run of a loss and its gradient evaluates each forward node once") {
    ty::session s;
    constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, 5>>;
    constexpr auto W = var<"W", 5, 3>;
    set(s, W, uniform_gen(120, -1.0, 1.0));
    ty::tensor<double> xs({6, 5});
    uniform_gen g(121, -1.0, 1.0);
    for (i64 i = 0; i < xs.size(); ++i)
      xs[i] = g();
    constexpr auto h = ty::debug::probe<"fwd">(ty::tanh(ty::matmul(x, W)));
    constexpr auto loss = ty::mean(ty::square(h));
    auto& count = ty::debug::probe_count<"fwd">;
    const auto before = count.load();
    auto [l, gW] = s.run(ty::fetch(loss, ty::grad(loss, W)), ty::feed(x, xs));
    CHECK(count.load() - before == 6 * 3);
    CHECK(gW.shape() == std::vector<i64>{5, 3});
    // The values: dloss/dW = x^T (2 h (1 - h^2) / numel(h)).
    const auto wt = s.read(W);
    double hv[6][3], expected_loss = 0;
    for (int i = 0; i < 6; ++i)
      for (int k = 0; k < 3; ++k) {
        double zz = 0;
        for (int j = 0; j < 5; ++j)
          zz += xs(i, j) * wt(j, k);
        hv[i][k] = std::tanh(zz);
        expected_loss += hv[i][k] * hv[i][k] / 18;
      }
    CHECK(l.item() == doctest::Approx(expected_loss).epsilon(1e-12));
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 3; ++k) {
        double e = 0;
        for (int i = 0; i < 6; ++i)
          e += xs(i, j) * 2 * hv[i][k] * (1 - hv[i][k] * hv[i][k]) / 18;
        CHECK(gW(j, k) == doctest::Approx(e).epsilon(1e-12));
      }
  }

  TEST_CASE("the upstream gradient of a non-scalar y may be given plain or as seed(g)") {
    constexpr auto x = ty::placeholder<"x", double, ty::shape<3>>;
    constexpr auto g = ty::placeholder<"g", double, ty::shape<3>>;
    constexpr auto y = ty::sin(x) * x;
    static_assert(
        std::is_same_v<decltype(ty::grad(y, x, g)), decltype(ty::grad(y, x, ty::seed(g)))>);
    ty::session s;
    ty::tensor<double> xv({3}, {0.5, -1.0, 2.0}), gv({3}, {1.0, 2.0, -3.0});
    auto [vjp] = s.run(ty::fetch(ty::grad(y, x, g)), ty::feed(x, xv), ty::feed(g, gv));
    for (i64 i = 0; i < 3; ++i)
      CHECK(vjp[i] == doctest::Approx(gv[i] * (std::cos(xv[i]) * xv[i] + std::sin(xv[i]))));
  }

  TEST_CASE("custom_gradient clips the gradient; a seeded grad is a vector-Jacobian product") {
    ty::session s;
    constexpr auto x = var<"x", 6>;
    constexpr auto r = var<"r", 6>;
    set_values(s, x, {0.1, -0.2, 0.3, -0.4, 0.5, -0.6});
    set_values(s, r, {-3.0, -1.0, -0.25, 0.0, 0.75, 2.5});
    constexpr auto clipped = ty::custom_gradient(x, [](auto g, auto) {
      return ty::minimum(ty::maximum(g, ty::constant<-1>), ty::constant<1>);
    });
    // The forward value is x itself.
    auto [y, gx] = s.run(ty::fetch(ty::sum(clipped * r), ty::grad(ty::sum(clipped * r), x)));
    CHECK(y.item() == doctest::Approx(-0.3 + 0.2 - 0.075 + 0.0 + 0.375 - 1.5).epsilon(1e-12));
    const double expected[6] = {-1.0, -1.0, -0.25, 0.0, 0.75, 1.0};
    for (int i = 0; i < 6; ++i)
      CHECK(gx[i] == expected[i]);

    // grad(y, x, seed(g)) for an elementwise y = sin(x) * x: J is diagonal, J^T g = g y'(x).
    constexpr auto a = var<"a", 3, 4>;
    constexpr auto up = ty::placeholder<"up", double, ty::shape<3, 4>>;
    const auto at = set(s, a, uniform_gen(130, -2.0, 2.0));
    ty::tensor<double> ut({3, 4});
    uniform_gen g(131, -1.0, 1.0);
    for (i64 i = 0; i < ut.size(); ++i)
      ut[i] = g();
    constexpr auto ya = ty::sin(a) * a;
    auto [vjp] = s.run(ty::fetch(ty::grad(ya, a, ty::seed(up))), ty::feed(up, ut));
    REQUIRE(vjp.shape() == std::vector<i64>{3, 4});
    for (i64 i = 0; i < 12; ++i) {
      const double e = ut[i] * (std::cos(at[i]) * at[i] + std::sin(at[i]));
      CHECK(std::abs(vjp[i] - e) <= 1e-12);
    }
    // A non-elementwise y: y = W a (matmul), J^T g = W^T g.
    constexpr auto W = var<"W", 2, 3>;
    constexpr auto g2 = ty::placeholder<"g2", double, ty::shape<2, 4>>;
    const auto wt = set(s, W, uniform_gen(132, -1.0, 1.0));
    ty::tensor<double> gt({2, 4}, {1, 2, 3, 4, -1, -2, 0.5, 0.25});
    auto [ja] = s.run(ty::fetch(ty::grad(ty::matmul(W, a), a, ty::seed(g2))), ty::feed(g2, gt));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        double e = 0;
        for (int k = 0; k < 2; ++k)
          e += wt(k, i) * gt(k, j);
        CHECK(std::abs(ja(i, j) - e) <= 1e-12);
      }
  }

  TEST_CASE("conventions at kinks: relu'(0) = 0, abs'(0) = 0, ties go to the first operand") {
    ty::session s;
    constexpr auto x = ty::placeholder<"x", double, ty::shape<5>>;
    ty::tensor<double> xv({5}, {-1.0, 0.0, -0.0, 2.0, 0.5});
    auto [gr, ga] =
        s.run(ty::fetch(ty::grad(ty::sum(ty::relu(x)), x), ty::grad(ty::sum(ty::abs(x) * x), x)),
              ty::feed(x, xv));
    // d/dx relu: 0 at 0 (and -0).
    const double relu_expected[5] = {0, 0, 0, 1, 1};
    // d/dx (|x| x) = sign(x) x + |x| with sign(0) = 0.
    const double abs_expected[5] = {2, 0, 0, 4, 1};
    for (i64 i = 0; i < 5; ++i) {
      CHECK(gr[i] == relu_expected[i]);
      CHECK(ga[i] == abs_expected[i]);
    }
    auto [gab] = s.run(ty::fetch(ty::grad(ty::sum(ty::abs(x)), x)), ty::feed(x, xv));
    const double sign_expected[5] = {-1, 0, 0, 1, 1};
    for (i64 i = 0; i < 5; ++i)
      CHECK(gab[i] == sign_expected[i]);

    constexpr auto a = ty::placeholder<"a", double, ty::shape<4>>;
    constexpr auto b = ty::placeholder<"b", double, ty::shape<4>>;
    ty::tensor<double> av({4}, {1.0, 2.0, 3.0, -1.0}), bv({4}, {1.0, 0.0, 3.0, 5.0});
    const auto [gmax_a, gmax_b] = ty::grad(ty::sum(ty::maximum(a, b)), a, b);
    const auto [gmin_a, gmin_b] = ty::grad(ty::sum(ty::minimum(a, b)), a, b);
    auto [xa, xb, na, nb] =
        s.run(ty::fetch(gmax_a, gmax_b, gmin_a, gmin_b), ty::feed(a, av), ty::feed(b, bv));
    const double max_a[4] = {1, 1, 1, 0}, max_b[4] = {0, 0, 0, 1};
    const double min_a[4] = {1, 0, 1, 1}, min_b[4] = {0, 1, 0, 0};
    for (i64 i = 0; i < 4; ++i) {
      CHECK(xa[i] == max_a[i]);
      CHECK(xb[i] == max_b[i]);
      CHECK(na[i] == min_a[i]);
      CHECK(nb[i] == min_b[i]);
    }

    // Reduce max/min share the gradient equally among tied extrema.
    ty::tensor<double> tv({4}, {1.0, 3.0, 3.0, 2.0}), uv({4}, {0.5, 0.5, 0.5, 2.0});
    auto [gm, gn] = s.run(ty::fetch(ty::grad(ty::max(a), a), ty::grad(ty::min(b), b)),
                          ty::feed(a, tv), ty::feed(b, uv));
    const double share_max[4] = {0, 0.5, 0.5, 0}, share_min[4] = {1.0 / 3, 1.0 / 3, 1.0 / 3, 0};
    for (i64 i = 0; i < 4; ++i) {
      CHECK(gm[i] == share_max[i]);
      CHECK(gn[i] == doctest::Approx(share_min[i]).epsilon(1e-15));
    }
  }

  TEST_CASE("the gradient with respect to an unrelated variable is zero") {
    ty::session s;
    constexpr auto p = var<"p", 2, 2>;
    constexpr auto q = var<"q", 3>;
    set_values(s, p, {1, 2, 3, 4});
    const auto [gp, gq] = ty::grad(ty::sum(ty::exp(p)), p, q);
    CHECK(ty::to_string(gq) == "zeros_like(q)");
    auto [vp, vq] = s.run(ty::fetch(gp, gq));
    CHECK(vq.shape() == std::vector<i64>{3});
    for (i64 i = 0; i < 3; ++i)
      CHECK(vq[i] == 0.0);
    for (i64 i = 0; i < 4; ++i)
      CHECK(vp[i] == doctest::Approx(std::exp(static_cast<double>(i + 1))).epsilon(1e-14));
  }

  // A dyn extent broadcast against a static one (dyn = 1 against 5 gives [5]): the axes to sum
  // are decided when fed (sum_to_like).
  TEST_CASE("a dyn operand broadcast at run time gets the summed gradient") {
    ty::session s;
    constexpr auto a = ty::placeholder<"a", double, ty::shape<ty::dyn>>;
    constexpr auto b = var<"b", 5>;
    set_values(s, b, {1, 2, 3, 4, 5});
    ty::tensor<double> av({1}, {3.0});
    auto [y] = s.run(ty::fetch(a * b), ty::feed(a, av));
    REQUIRE(y.shape() == std::vector<i64>{5});
    auto [ga] = s.run(ty::fetch(ty::grad(ty::sum(a * b), a)), ty::feed(a, av));
    REQUIRE(ga.shape() == std::vector<i64>{1});
    CHECK(ga[0] == 15.0);
    // The same graph fed with the dyn extent equal to 5: no broadcasting, elementwise gradient.
    ty::tensor<double> a5({5}, {1, 1, 1, 1, 1});
    auto [g5] = s.run(ty::fetch(ty::grad(ty::sum(a * b), a)), ty::feed(a, a5));
    REQUIRE(g5.shape() == std::vector<i64>{5});
    for (i64 i = 0; i < 5; ++i)
      CHECK(g5[i] == static_cast<double>(i + 1));
  }
}
