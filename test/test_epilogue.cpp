// Epilogues (graph::epilogue_role, compile/plan.hpp fold_epilogues): `relu(bias_add(conv2d(..),
// b))` and `bias_add(matmul(..), b)` become one step on the CPU, the bias and relu applied as the
// producer writes its output (oneDNN post-ops for float32; the producer's own kernel and one
// pass elsewhere). Checked against naive double-precision loops, against the same model written
// with `+` (which the plan does not fold), bit for bit where the arithmetic is the same, through
// the gradient, and on 1 to 3 threads; and where the pattern must not fold. Prologues
// (fold_prologues): a reduction of a fused region that only it reads evaluates the region as it
// reduces, with the same bits as from a materialized buffer. Chains (fold_chains): a region that
// alone reads max_pool_grad is evaluated on each piece of it as the kernel finishes it, with the
// same bits as from a materialized buffer and as a double loop.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <typeflow/typeflow.hpp>
#include <vector>

namespace ty = typeflow;

namespace {

using i64 = std::int64_t;
using step_kind = ty::graph::step_kind;

template <class T>
std::vector<T> random_vector(std::uint64_t seed, i64 n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  std::uint64_t s = seed;
  for (auto& e : v) {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    e = static_cast<T>(-1 + 2 * static_cast<double>(z >> 11) * 0x1.0p-53);
  }
  return v;
}

template <class T>
ty::tensor<T> as_tensor(std::vector<i64> dims, const std::vector<T>& v) {
  return ty::tensor<T>(dims, std::span<const T>(v));
}

template <class T>
bool same_bits(const ty::tensor<T>& a, const ty::tensor<T>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
}

/// Elements where |got - ref| > tol * (1 + magnitude).
template <class T>
i64 violations(const ty::tensor<T>& got, const std::vector<double>& ref,
               const std::vector<double>& mag, double tol) {
  REQUIRE(static_cast<std::size_t>(got.size()) == ref.size());
  i64 bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    bad += !(std::abs(static_cast<double>(got.data()[i]) - ref[i]) <= tol * (1 + mag[i]));
  return bad;
}

/// relu?(conv(x, w) + b), stride 1, NHWC x [n, h, w, c], HWIO w [k, k, c, o], padding p before
/// (SAME: (k - 1) / 2, VALID: 0), output extents oh x ow; and the magnitudes (sums of |terms|).
template <class T>
void conv_reference(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& b,
                    i64 n, i64 h, i64 wd, i64 c, i64 k, i64 o, i64 p, i64 oh, i64 ow, bool relu,
                    std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(static_cast<std::size_t>(n * oh * ow * o), 0);
  mag = ref;
  for (i64 q = 0; q < n; ++q)
    for (i64 y = 0; y < oh; ++y)
      for (i64 xo = 0; xo < ow; ++xo)
        for (i64 co = 0; co < o; ++co) {
          double s = b[static_cast<std::size_t>(co)], m = std::abs(s);
          for (i64 ky = 0; ky < k; ++ky)
            for (i64 kx = 0; kx < k; ++kx) {
              const i64 iy = y - p + ky, ix = xo - p + kx;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                continue;
              for (i64 ci = 0; ci < c; ++ci) {
                const double t =
                    static_cast<double>(
                        x[static_cast<std::size_t>(((q * h + iy) * wd + ix) * c + ci)]) *
                    w[static_cast<std::size_t>(((ky * k + kx) * c + ci) * o + co)];
                s += t;
                m += std::abs(t);
              }
            }
          const auto i = static_cast<std::size_t>(((q * oh + y) * ow + xo) * o + co);
          ref[i] = relu && s < 0 ? 0 : s;
          mag[i] = m;
        }
}

/// The step kinds of the producer and the root, and the epilogue count, of plan P whose fetch F
/// is root(bias_add(producer, b)) or bias_add(producer, b).
template <class P, class Producer, class Root>
void check_folded(bool folded) {
  constexpr std::size_t k = P::template index_c<Producer>::value;
  constexpr std::size_t r = P::template index_c<Root>::value;
  if (folded) {
    CHECK(P::layout.step[k] == step_kind::deferred);
    CHECK(P::layout.step[r] == step_kind::epilogue);
    CHECK(P::layout.producer[r] == k);
    CHECK(P::layout.epilogues == 1);
    CHECK(P::describe().find("[epilogue of %" + std::to_string(k)) != std::string::npos);
  } else {
    CHECK(P::layout.step[k] == step_kind::kernel);
    CHECK(P::layout.epilogues == 0);
  }
}

/// relu's gradient through max pooling (relu -> pool, as in the seed model), by double loops:
/// dy goes to each window's first maximum of y = relu(x) (row-major window order), summed where
/// windows overlap, then masked where y > 0. SAME padding, window k, stride s.
std::vector<double> relu_pool_grad_ref(const std::vector<float>& x, const std::vector<float>& dy,
                                       i64 n, i64 h, i64 w, i64 c, i64 k, i64 s) {
  const i64 oh = (h + s - 1) / s, ow = (w + s - 1) / s;
  const i64 ph = std::max<i64>(0, (oh - 1) * s + k - h) / 2,
            pw = std::max<i64>(0, (ow - 1) * s + k - w) / 2;
  const auto y = [&](i64 b, i64 i, i64 j, i64 ch) {
    return std::max(0.0, double(x[static_cast<std::size_t>(((b * h + i) * w + j) * c + ch)]));
  };
  std::vector<double> dx(x.size(), 0.0);
  for (i64 b = 0; b < n; ++b)
    for (i64 oy = 0; oy < oh; ++oy)
      for (i64 ox = 0; ox < ow; ++ox)
        for (i64 ch = 0; ch < c; ++ch) {
          i64 bi = -1, bj = -1;
          double best = 0;
          for (i64 i = oy * s - ph; i < oy * s - ph + k; ++i)
            for (i64 j = ox * s - pw; j < ox * s - pw + k; ++j)
              if (i >= 0 && i < h && j >= 0 && j < w && (bi < 0 || y(b, i, j, ch) > best))
                bi = i, bj = j, best = y(b, i, j, ch);
          dx[static_cast<std::size_t>(((b * h + bi) * w + bj) * c + ch)] +=
              dy[static_cast<std::size_t>(((b * oh + oy) * ow + ox) * c + ch)];
        }
  for (std::size_t i = 0; i < dx.size(); ++i)
    if (!(x[i] > 0))
      dx[i] = 0;
  return dx;
}

template <class E>
struct second_operand;
template <class Op, class A, class B, class... R>
struct second_operand<ty::expr<Op, A, B, R...>> {
  using type = std::remove_cvref_t<B>;
};

template <i64 K, i64 S, i64 H, i64 W, i64 C>
void check_chain() {
  constexpr i64 N = 5, OH = (H + S - 1) / S, OW = (W + S - 1) / S;
  INFO("window " << K << ", stride " << S << ", [" << N << ", " << H << ", " << W << ", " << C
                 << "]");
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, H, W, C>>;
  constexpr auto dy = ty::placeholder<"dy", float, ty::shape<ty::dyn, OH, OW, C>>;
  constexpr auto y = ty::relu(x);
  constexpr auto gx = ty::grad(ty::max_pool<ty::padding::same, K, K, S, S>(y), x, dy);
  // The pool's gradient, where(y > 0, pg, zeros_like(pg))'s second operand: fetched too, it is
  // materialized.
  constexpr auto pg = typename second_operand<ty::def_t<std::remove_cvref_t<decltype(gx)>>>::type{};
  static_assert(
      std::is_same_v<typename decltype(pg)::op,
                     ty::ops::pool_grad<ty::ops::pool_kind::max, ty::padding::same, K, K, S, S>>);
  using P = ty::compile::plan<ty::type_list<decltype(gx)>>;
  static_assert(P::layout.chains == 1);
  CHECK(P::layout.step[P::template index_c<decltype(gx)>::value] == step_kind::chained);
  CHECK(P::layout.step[P::template index_c<decltype(pg)>::value] == step_kind::deferred);
  CHECK(P::describe().find("chained to %") != std::string::npos);
  static_assert(ty::compile::plan<ty::type_list<decltype(gx), decltype(pg)>>::layout.chains == 0);
  // Its other input not one of the pool's operands (a computed one): not chained.
  constexpr auto other = pg * ty::max_pool<ty::padding::same, 1>(x);
  static_assert(ty::compile::plan<ty::type_list<decltype(other)>>::layout.chains == 0);
  // A placeholder broadcast against it: chained, with the pool's output stored first as the
  // region's output is larger than it.
  constexpr auto z = ty::placeholder<"z", float, ty::shape<2, ty::dyn, H, W, C>>;
  constexpr auto wide = pg + z;
  static_assert(ty::compile::plan<ty::type_list<decltype(wide)>>::layout.chains == 1);

  const auto vx = random_vector<float>(31, N * H * W * C),
             vd = random_vector<float>(32, N * OH * OW * C),
             vz = random_vector<float>(33, 2 * N * H * W * C);
  const auto ref = relu_pool_grad_ref(vx, vd, N, H, W, C, K, S);
  for (int threads : {1, 2, 3}) {
    INFO("threads = " << threads);
    ty::session s(ty::session_options{.threads = threads});
    const auto feeds = [&](auto... f) {
      return s.run(ty::fetch(f...), ty::feed(x, as_tensor({N, H, W, C}, vx)),
                   ty::feed(dy, as_tensor({N, OH, OW, C}, vd)),
                   ty::feed(z, as_tensor({2, N, H, W, C}, vz)));
    };
    auto [g1] = feeds(gx);
    CHECK(s.stats().steps == 2); // relu, then the pool's gradient with the mask
    // relu's output dies with the chained step, which writes its result over it (in place)...
    CHECK(s.stats().buffers_in_place == 1);
    auto [g2, p2] = feeds(gx, pg);
    CHECK(s.stats().steps == 3);
    CHECK(same_bits(g1, g2));
    // ... unless it is fetched too: the same bits in a buffer of its own.
    auto [g3, y3] = feeds(gx, y);
    CHECK(s.stats().buffers_in_place == 0);
    CHECK(same_bits(g1, g3));
    // At most 4 overlapping windows add dy values in [-1, 1]: float sums within 1e-6.
    CHECK(violations(g1, ref, std::vector<double>(ref.size(), 1.0), 1e-6) == 0);
    i64 routed = 0;
    for (double v : ref)
      routed += v != 0;
    CHECK(routed > N * OH * OW * C / 4); // the mask and the routing both matter
    auto [w1] = feeds(wide);
    auto [w2, p3] = feeds(wide, pg);
    CHECK(same_bits(w1, w2));
    CHECK(same_bits(p2, p3));
  }
}

} // namespace

TEST_SUITE("epilogue") {
  TEST_CASE("conv2d + bias + relu, SAME and VALID, float and double, against naive loops") {
    constexpr i64 N = 13, H = 9, W = 9, C = 3, K = 3, O = 8;
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, H, W, C>>;
    constexpr auto w = ty::placeholder<"w", float, ty::shape<K, K, C, O>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<O>>;
    constexpr auto conv_s = ty::conv2d<ty::padding::same>(x, w);
    constexpr auto conv_v = ty::conv2d<ty::padding::valid>(x, w);
    constexpr auto y_relu = ty::relu(ty::bias_add(conv_s, b));
    constexpr auto y_bias = ty::bias_add(conv_v, b);
    check_folded<ty::compile::plan<ty::type_list<decltype(y_relu)>>, decltype(conv_s),
                 decltype(y_relu)>(true);
    check_folded<ty::compile::plan<ty::type_list<decltype(y_bias)>>, decltype(conv_v),
                 decltype(y_bias)>(true);
    // Written with `+`, or with the producer fetched too, nothing folds.
    constexpr auto y_add = ty::relu(conv_s + b);
    check_folded<ty::compile::plan<ty::type_list<decltype(y_add)>>, decltype(conv_s),
                 decltype(y_add)>(false);
    check_folded<ty::compile::plan<ty::type_list<decltype(y_relu), decltype(conv_s)>>,
                 decltype(conv_s), decltype(y_relu)>(false);

    const auto vx = random_vector<float>(1, N * H * W * C),
               vw = random_vector<float>(2, K * K * C * O), vb = random_vector<float>(3, O);
    std::vector<double> ref_s, mag_s, ref_v, mag_v;
    conv_reference(vx, vw, vb, N, H, W, C, K, O, 1, H, W, true, ref_s, mag_s);
    conv_reference(vx, vw, vb, N, H, W, C, K, O, 0, H - 2, W - 2, false, ref_v, mag_v);
    ty::tensor<float> first_s, first_v;
    for (int threads : {1, 2, 3}) {
      INFO("threads = " << threads);
      ty::session s(ty::session_options{.threads = threads});
      const auto feeds = [&](auto... f) {
        return s.run(ty::fetch(f...), ty::feed(x, as_tensor({N, H, W, C}, vx)),
                     ty::feed(w, as_tensor({K, K, C, O}, vw)), ty::feed(b, as_tensor({O}, vb)));
      };
      auto [ys, yv] = feeds(y_relu, y_bias);
      CHECK(s.stats().steps == 2); // two epilogue steps, no separate bias or relu pass
      CHECK(violations(ys, ref_s, mag_s, 1e-5) == 0);
      CHECK(violations(yv, ref_v, mag_v, 1e-5) == 0);
      auto [ya] = feeds(y_add);
      CHECK(s.stats().steps == 2); // conv, then the fused add + relu
      CHECK(violations(ya, ref_s, mag_s, 1e-5) == 0);
      if (threads == 1) {
        first_s = ys, first_v = yv;
      } else {
        CHECK(same_bits(first_s, ys));
        CHECK(same_bits(first_v, yv));
      }
    }

    // float64: the producer's own kernel and one pass, the same arithmetic as bias_add + relu's
    // loop, so the same bits as the unfolded `+` form.
    constexpr auto xd = ty::placeholder<"xd", double, ty::shape<ty::dyn, H, W, C>>;
    constexpr auto wdv = ty::placeholder<"wd", double, ty::shape<K, K, C, O>>;
    constexpr auto bd = ty::placeholder<"bd", double, ty::shape<O>>;
    constexpr auto yd = ty::relu(ty::bias_add(ty::conv2d<ty::padding::same>(xd, wdv), bd));
    constexpr auto yd_add = ty::relu(ty::conv2d<ty::padding::same>(xd, wdv) + bd);
    std::vector<double> vxd(vx.begin(), vx.end()), vwd(vw.begin(), vw.end()),
        vbd(vb.begin(), vb.end());
    ty::session s(ty::session_options{.threads = 2});
    auto [d1, d2] =
        s.run(ty::fetch(yd, yd_add), ty::feed(xd, as_tensor({N, H, W, C}, vxd)),
              ty::feed(wdv, as_tensor({K, K, C, O}, vwd)), ty::feed(bd, as_tensor({O}, vbd)));
    CHECK(violations(d1, ref_s, mag_s, 1e-12) == 0);
    CHECK(same_bits(d1, d2));
  }

  TEST_CASE("matmul + bias (+ relu): row and column slabs, batched, the bias's offset per slab") {
    // [40, 300] x [300, 600] on 2 threads is cut by columns (the second slab starts at column
    // 304, so its bias starts there too); [300, 70] x [70, 200] by rows.
    constexpr i64 M = 40, K = 300, N = 600, B = 3;
    constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn, K>>;
    constexpr auto wm = ty::placeholder<"wm", float, ty::shape<K, N>>;
    constexpr auto bm = ty::placeholder<"bm", float, ty::shape<N>>;
    constexpr auto a3 = ty::placeholder<"a3", float, ty::shape<B, M, K>>;
    constexpr auto w3 = ty::placeholder<"w3", float, ty::shape<B, K, N>>;
    constexpr auto y_cols = ty::relu(ty::bias_add(ty::matmul(a, wm), bm));
    constexpr auto y_batched = ty::bias_add(ty::matmul(a3, w3), bm);
    check_folded<ty::compile::plan<ty::type_list<decltype(y_cols)>>, decltype(ty::matmul(a, wm)),
                 decltype(y_cols)>(true);
    const auto va = random_vector<float>(4, 300 * K), vw = random_vector<float>(5, K * N),
               vb = random_vector<float>(6, N), va3 = random_vector<float>(7, B * M * K),
               vw3 = random_vector<float>(8, B * K * N);
    const auto reference = [&](i64 rows, const float* pa, const float* pw, bool relu,
                               std::vector<double>& ref, std::vector<double>& mag) {
      ref.assign(static_cast<std::size_t>(rows * N), 0);
      mag = ref;
      for (i64 i = 0; i < rows; ++i)
        for (i64 j = 0; j < N; ++j) {
          double s = vb[static_cast<std::size_t>(j)], m = std::abs(s);
          for (i64 p = 0; p < K; ++p) {
            const double t = static_cast<double>(pa[i * K + p]) * pw[p * N + j];
            s += t;
            m += std::abs(t);
          }
          ref[static_cast<std::size_t>(i * N + j)] = relu && s < 0 ? 0 : s;
          mag[static_cast<std::size_t>(i * N + j)] = m;
        }
    };
    for (i64 rows : {M, i64{300}}) {
      INFO("rows = " << rows);
      std::vector<double> ref, mag;
      reference(rows, va.data(), vw.data(), true, ref, mag);
      ty::tensor<float> first;
      for (int threads : {1, 2, 3}) {
        INFO("threads = " << threads);
        ty::session s(ty::session_options{.threads = threads});
        auto [y] =
            s.run(ty::fetch(y_cols),
                  ty::feed(a, as_tensor({rows, K},
                                        std::vector<float>(va.begin(), va.begin() + rows * K))),
                  ty::feed(wm, as_tensor({K, N}, vw)), ty::feed(bm, as_tensor({N}, vb)));
        CHECK(s.stats().steps == 1);
        CHECK(violations(y, ref, mag, 1e-5) == 0);
        if (threads == 1)
          first = y;
        else
          CHECK(same_bits(first, y));
      }
    }
    std::vector<double> ref3, mag3;
    ty::session s(ty::session_options{.threads = 2});
    auto [y3] = s.run(ty::fetch(y_batched), ty::feed(a3, as_tensor({B, M, K}, va3)),
                      ty::feed(w3, as_tensor({B, K, N}, vw3)), ty::feed(bm, as_tensor({N}, vb)));
    for (i64 q = 0; q < B; ++q) {
      INFO("batch " << q);
      std::vector<double> ref, mag;
      reference(M, va3.data() + q * M * K, vw3.data() + q * K * N, false, ref, mag);
      ty::tensor<float> part(
          {M, N}, std::span<const float>(y3.data() + q * M * N, static_cast<std::size_t>(M * N)));
      CHECK(violations(part, ref, mag, 1e-5) == 0);
    }
  }

  TEST_CASE("gradients through a folded layer equal the unfolded model's") {
    // The seed's first layer and a dense layer on top; the loss weighs each output differently.
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 8, 8, 2>>;
    constexpr auto w = ty::variable<"w", float, ty::shape<3, 3, 2, 4>, ty::truncated_normal<0.3>>;
    constexpr auto b = ty::variable<"b", float, ty::shape<4>, ty::truncated_normal<0.3>>;
    constexpr auto v = ty::variable<"v", float, ty::shape<256, 5>, ty::truncated_normal<0.1>>;
    constexpr auto c = ty::variable<"c", float, ty::shape<5>, ty::truncated_normal<0.3>>;
    constexpr auto h = ty::relu(ty::bias_add(ty::conv2d<ty::padding::same>(x, w), b));
    constexpr auto o = ty::relu(ty::bias_add(ty::matmul(ty::reshape<-1, 256>(h), v), c));
    constexpr auto loss = ty::sum(o * o);
    constexpr auto h2 = ty::relu(ty::conv2d<ty::padding::same>(x, w) + b);
    constexpr auto o2 = ty::relu(ty::matmul(ty::reshape<-1, 256>(h2), v) + c);
    constexpr auto loss2 = ty::sum(o2 * o2);
    constexpr auto g = ty::grad(loss, w, b, v, c);
    constexpr auto g2 = ty::grad(loss2, w, b, v, c);
    using P = ty::compile::plan<
        ty::type_list<decltype(loss), decltype(ty::get<0>(g)), decltype(ty::get<1>(g)),
                      decltype(ty::get<2>(g)), decltype(ty::get<3>(g))>>;
    static_assert(P::layout.epilogues == 2);
    const auto vx = random_vector<float>(9, 6 * 8 * 8 * 2);
    ty::session s(ty::session_options{.threads = 2, .seed = 11});
    s.initialize(loss);
    auto r1 = s.run(ty::fetch(loss, ty::get<0>(g), ty::get<1>(g), ty::get<2>(g), ty::get<3>(g)),
                    ty::feed(x, as_tensor({6, 8, 8, 2}, vx)));
    auto r2 =
        s.run(ty::fetch(loss2, ty::get<0>(g2), ty::get<1>(g2), ty::get<2>(g2), ty::get<3>(g2)),
              ty::feed(x, as_tensor({6, 8, 8, 2}, vx)));
    const auto close = [](const ty::tensor<float>& p, const ty::tensor<float>& q) {
      REQUIRE(p.shape() == q.shape());
      double scale = 0;
      for (std::int64_t i = 0; i < q.size(); ++i)
        scale = std::max(scale, std::abs(static_cast<double>(q.data()[i])));
      i64 bad = 0;
      for (std::int64_t i = 0; i < q.size(); ++i)
        bad += !(std::abs(static_cast<double>(p.data()[i]) - q.data()[i]) <= 1e-5 * (1 + scale));
      return bad;
    };
    CHECK(std::get<0>(r1).item() > 0);
    CHECK(close(std::get<0>(r1), std::get<0>(r2)) == 0);
    CHECK(close(std::get<1>(r1), std::get<1>(r2)) == 0);
    CHECK(close(std::get<2>(r1), std::get<2>(r2)) == 0);
    CHECK(close(std::get<3>(r1), std::get<3>(r2)) == 0);
    CHECK(close(std::get<4>(r1), std::get<4>(r2)) == 0);
  }

  TEST_CASE("a reduction reads the fused region it alone reads: every pattern, the same bits") {
    constexpr i64 R = 300, C = 700; // 210,000 elements: a full sum takes several 65,536 pieces
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, C>>;
    constexpr auto m = ty::placeholder<"m", float, ty::shape<ty::dyn, 1>>;
    constexpr auto sq = ty::square(x - m); // m broadcast along rows: a splatted input
    constexpr auto full = ty::sum(sq);
    constexpr auto rows = ty::mean<1>(sq);
    constexpr auto cols = ty::sum<0>(sq);               // across rows: evaluated first
    constexpr auto arg = ty::argmax<1>(ty::sin(x) * m); // argmax: evaluated first
    using P = ty::compile::plan<ty::type_list<decltype(full)>>;
    static_assert(P::layout.prologues == 1);
    CHECK(P::layout.step[P::index_c<decltype(sq)>::value] == step_kind::deferred);
    CHECK(P::layout.step[P::index_c<decltype(full)>::value] == step_kind::prologue);
    CHECK(P::describe().find("[reads %") != std::string::npos);
    // Two readers, or the region fetched: materialized as before.
    static_assert(
        ty::compile::plan<ty::type_list<decltype(full), decltype(rows)>>::layout.prologues == 0);
    static_assert(
        ty::compile::plan<ty::type_list<decltype(full), decltype(sq)>>::layout.prologues == 0);
    const auto vx = random_vector<float>(21, R * C), vm = random_vector<float>(22, R);
    for (int threads : {1, 2, 3}) {
      INFO("threads = " << threads);
      ty::session s(ty::session_options{.threads = threads});
      const auto feeds = [&](auto... f) {
        return s.run(ty::fetch(f...), ty::feed(x, as_tensor({R, C}, vx)),
                     ty::feed(m, as_tensor({R, 1}, vm)));
      };
      // Each alone (folded) and then with the region fetched too (materialized).
      auto [f1] = feeds(full);
      CHECK(s.stats().steps == 1);
      auto [r1] = feeds(rows);
      auto [c1] = feeds(cols);
      auto [a1] = feeds(arg);
      auto [f2, r2, c2, sqv] = feeds(full, rows, cols, sq);
      auto [a2, pv] = feeds(arg, ty::sin(x) * m);
      CHECK(same_bits(f1, f2));
      CHECK(same_bits(r1, r2));
      CHECK(same_bits(c1, c2));
      CHECK(same_bits(a1, a2));
      // And against a double loop.
      double total = 0, mag = 0;
      for (i64 i = 0; i < R; ++i)
        for (i64 j = 0; j < C; ++j) {
          const double d = static_cast<double>(vx[static_cast<std::size_t>(i * C + j)]) -
                           vm[static_cast<std::size_t>(i)];
          total += d * d;
          mag += d * d;
        }
      CHECK(std::abs(f1.item() - total) <= 1e-5 * mag);
    }
  }

  TEST_CASE("a region that alone reads max_pool_grad runs on its pieces: the same bits") {
    check_chain<2, 2, 9, 8, 32>(); // tiled windows, vectors of channels, a clipped last row
    check_chain<2, 2, 6, 6, 3>();  // tiled, channels one by one
    check_chain<3, 2, 7, 7, 16>(); // overlapping windows: whole images are the pieces
  }
}

TEST_CASE("a fused loop writes over an input that dies with it, with the same bits") {
  constexpr i64 M = 67, K = 40, N = 33;
  constexpr auto a = ty::placeholder<"a", float, ty::shape<M, K>>;
  constexpr auto b = ty::placeholder<"b", float, ty::shape<K, N>>;
  constexpr auto c = ty::placeholder<"c", float, ty::shape<N>>;
  constexpr auto u = ty::matmul(a, b);
  constexpr auto v = ty::relu(u * ty::constant<2.0f> + c); // u's last reader
  constexpr auto view = ty::reshape<N, M>(u);              // shares u's buffer
  const auto va = random_vector<float>(41, M * K), vb = random_vector<float>(42, K * N),
             vc = random_vector<float>(43, N);
  ty::session s(ty::session_options{.threads = 2});
  const auto feeds = [&](auto... f) {
    return s.run(ty::fetch(f...), ty::feed(a, as_tensor({M, K}, va)),
                 ty::feed(b, as_tensor({K, N}, vb)), ty::feed(c, as_tensor({N}, vc)));
  };
  auto [v1] = feeds(v);
  CHECK(s.stats().buffers_in_place == 1);
  auto [v2, u2] = feeds(v, u); // u fetched: it outlives the loop
  CHECK(s.stats().buffers_in_place == 0);
  CHECK(same_bits(v1, v2));
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < N; ++j)
      CHECK(v1[i * N + j] == std::max(0.0f, u2[i * N + j] * 2.0f + vc[j]));
  auto [v3, w3] = feeds(v, view); // a view of u is fetched: its buffer has another holder
  CHECK(s.stats().buffers_in_place == 0);
  CHECK(same_bits(v1, v3));
  // An input of another shape (row, broadcast) is never written over; u is.
  constexpr auto row = ty::sum<0>(u);                                 // [N]
  constexpr auto outer = ty::relu(ty::expand_dims<0>(row) + u * row); // [M, N]
  auto [o1] = feeds(outer);
  CHECK(s.stats().buffers_in_place == 1);
  auto [o2, r2, u3] = feeds(outer, row, u);
  CHECK(s.stats().buffers_in_place == 0);
  CHECK(same_bits(o1, o2));
}
