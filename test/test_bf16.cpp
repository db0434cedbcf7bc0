// session_options::precision = bfloat16 and float16: convolutions (forward, input and filter
// gradients) and matrix products (plain and with the bias/relu epilogue) read their operands
// rounded to bfloat16 (float16) and accumulate in float32. Checked against naive double loops over
// the bfloat16-rounded operands (so the only error left is float32 accumulation), for bits
// independent of the thread count, and that float32 sessions are unaffected. On a CPU without
// native bfloat16 the session computes in float32, which the test then checks instead.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

constexpr i64 N = 3, H = 6, W = 5, C = 4, K = 3, O = 8;
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, H, W, C>>;
constexpr auto f = ty::placeholder<"f", float, ty::shape<K, K, C, O>>;
constexpr auto r = ty::placeholder<"r", float, ty::shape<ty::dyn, H, W, O>>;
constexpr auto y = ty::conv2d<ty::padding::same>(x, f);
constexpr auto conv_loss = ty::sum(y * r);

constexpr i64 M = 37, KK = 300, NN = 70;
constexpr auto a = ty::placeholder<"a", float, ty::shape<M, KK>>;
constexpr auto b = ty::placeholder<"b", float, ty::shape<KK, NN>>;
constexpr auto bias = ty::placeholder<"bias", float, ty::shape<NN>>;
constexpr auto prod = ty::matmul(a, b);
constexpr auto fused = ty::relu(ty::bias_add(ty::matmul(a, b), bias));

ty::tensor<float> random(std::vector<i64> shape, unsigned seed) {
  ty::tensor<float> t(shape);
  for (i64 i = 0; i < t.size(); ++i)
    t[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + seed) *
                              (1.0 + 0.5 * std::cos(0.011 * static_cast<double>(i * seed))));
  return t;
}
/// How the products read their operands.
enum class rounding { none, bf16, f16 };
/// The operand as the products read it.
std::vector<double> operand(const ty::tensor<float>& t, rounding round) {
  std::vector<double> v(static_cast<std::size_t>(t.size()));
  for (i64 i = 0; i < t.size(); ++i)
    v[static_cast<std::size_t>(i)] =
        round == rounding::bf16  ? static_cast<float>(ty::bfloat16(t[i]))
        : round == rounding::f16 ? static_cast<float>(ty::float16(t[i]))
                                 : t[i];
  return v;
}

struct results {
  ty::tensor<float> y, dx, df, prod, fused;
};
results run(ty::precision p, int threads) {
  ty::session<> s(ty::session_options{.threads = threads, .precision = p});
  const auto [gx, gf] = ty::grad(conv_loss, x, f);
  results out;
  std::tie(out.y, out.dx, out.df) =
      s.run(ty::fetch(y, gx, gf), ty::feed(x, random({N, H, W, C}, 1)),
            ty::feed(f, random({K, K, C, O}, 2)), ty::feed(r, random({N, H, W, O}, 3)));
  std::tie(out.prod, out.fused) =
      s.run(ty::fetch(prod, fused), ty::feed(a, random({M, KK}, 4)),
            ty::feed(b, random({KK, NN}, 5)), ty::feed(bias, random({NN}, 6)));
  return out;
}

/// Checks `got` against `ref` with float32 accumulation's error bound: 1e-5 of the sum of
/// the products' magnitudes (`mag`).
void check_close(const char* what, const ty::tensor<float>& got, const std::vector<double>& ref,
                 const std::vector<double>& mag) {
  INFO(what);
  REQUIRE(got.size() == static_cast<i64>(ref.size()));
  i64 bad = 0;
  for (i64 i = 0; i < got.size(); ++i) {
    const auto u = static_cast<std::size_t>(i);
    bad += std::abs(static_cast<double>(got[i]) - ref[u]) > 1e-5 * (mag[u] + 1e-30) ? 1 : 0;
  }
  CHECK(bad == 0);
}

void check_against_loops(const results& got, rounding round) {
  const auto xv = operand(random({N, H, W, C}, 1), round);
  const auto fv = operand(random({K, K, C, O}, 2), round);
  const auto rv = operand(random({N, H, W, O}, 3), round);
  // SAME, stride 1, 3x3: one pixel of padding on each side
  std::vector<double> yr(static_cast<std::size_t>(N * H * W * O)), ym(yr.size()), dxr(xv.size()),
      dxm(xv.size()), dfr(fv.size()), dfm(fv.size());
  for (i64 n = 0; n < N; ++n)
    for (i64 i = 0; i < H; ++i)
      for (i64 j = 0; j < W; ++j)
        for (i64 o = 0; o < O; ++o)
          for (i64 ki = 0; ki < K; ++ki)
            for (i64 kj = 0; kj < K; ++kj)
              for (i64 c = 0; c < C; ++c) {
                const i64 si = i + ki - 1, sj = j + kj - 1;
                if (si < 0 || si >= H || sj < 0 || sj >= W)
                  continue;
                const auto yi = static_cast<std::size_t>(((n * H + i) * W + j) * O + o);
                const auto xi = static_cast<std::size_t>(((n * H + si) * W + sj) * C + c);
                const auto fi = static_cast<std::size_t>(((ki * K + kj) * C + c) * O + o);
                yr[yi] += xv[xi] * fv[fi];
                ym[yi] += std::abs(xv[xi] * fv[fi]);
                dxr[xi] += rv[yi] * fv[fi];
                dxm[xi] += std::abs(rv[yi] * fv[fi]);
                dfr[fi] += xv[xi] * rv[yi];
                dfm[fi] += std::abs(xv[xi] * rv[yi]);
              }
  check_close("conv2d forward", got.y, yr, ym);
  check_close("conv2d input gradient", got.dx, dxr, dxm);
  check_close("conv2d filter gradient", got.df, dfr, dfm);

  const auto av = operand(random({M, KK}, 4), round), bv = operand(random({KK, NN}, 5), round);
  const auto cv = random({NN}, 6);
  std::vector<double> pr(static_cast<std::size_t>(M * NN)), pm(pr.size()), fr(pr.size());
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < NN; ++j) {
      double acc = 0, mag = 0;
      for (i64 k = 0; k < KK; ++k) {
        const double t =
            av[static_cast<std::size_t>(i * KK + k)] * bv[static_cast<std::size_t>(k * NN + j)];
        acc += t;
        mag += std::abs(t);
      }
      const auto u = static_cast<std::size_t>(i * NN + j);
      pr[u] = acc;
      pm[u] = mag + std::abs(static_cast<double>(cv[j]));
      fr[u] = std::max(0.0, acc + static_cast<double>(cv[j]));
    }
  check_close("matmul", got.prod, pr, pm);
  check_close("matmul + bias + relu", got.fused, fr, pm);
}

bool same_bits(const ty::tensor<float>& p, const ty::tensor<float>& q) {
  return p.size() == q.size() &&
         std::memcmp(p.data(), q.data(), sizeof(float) * static_cast<std::size_t>(p.size())) == 0;
}

} // namespace

TEST_CASE("bfloat16 products: conv2d, its gradients and matmul against double loops") {
  ty::session<> probe(ty::session_options{.precision = ty::precision::bfloat16});
  const bool native = probe.products_in_bfloat16();
  if (!native)
    MESSAGE("no native bfloat16 on this CPU: the bfloat16 session computes in float32");
  const results b1 = run(ty::precision::bfloat16, 1);
  check_against_loops(b1, native ? rounding::bf16 : rounding::none);
  // the thread count does not change a bit
  const results b2 = run(ty::precision::bfloat16, 2);
  CHECK(same_bits(b1.y, b2.y));
  CHECK(same_bits(b1.dx, b2.dx));
  CHECK(same_bits(b1.df, b2.df));
  CHECK(same_bits(b1.prod, b2.prod));
  CHECK(same_bits(b1.fused, b2.fused));
  // float32 sessions are unaffected, and the bfloat16 one really rounds its operands
  const results f = run(ty::precision::float32, 2);
  check_against_loops(f, rounding::none);
  if (native) {
    CHECK_FALSE(same_bits(f.y, b1.y));
    CHECK_FALSE(same_bits(f.prod, b1.prod));
  }
}

TEST_CASE("float16 products: conv2d, its gradients and matmul against double loops") {
  const bool on =
      ty::session<>(ty::session_options{.precision = ty::precision::float16}).products_in_float16();
  if (!on)
    MESSAGE("a build without oneDNN: the float16 session computes in float32");
  const results h1 = run(ty::precision::float16, 1);
  check_against_loops(h1, on ? rounding::f16 : rounding::none);
  const results h2 = run(ty::precision::float16, 2);
  CHECK(same_bits(h1.y, h2.y));
  CHECK(same_bits(h1.dx, h2.dx));
  CHECK(same_bits(h1.df, h2.df));
  CHECK(same_bits(h1.prod, h2.prod));
  CHECK(same_bits(h1.fused, h2.fused));
  if (on) { // it rounds, and not as bfloat16 does
    const results f = run(ty::precision::float32, 2);
    CHECK_FALSE(same_bits(f.y, h1.y));
    CHECK_FALSE(same_bits(f.df, h1.df));
    CHECK_FALSE(same_bits(f.prod, h1.prod));
    const results b = run(ty::precision::bfloat16, 2);
    CHECK_FALSE(same_bits(b.prod, h1.prod));
  }
}

namespace {
/// One product of the bigger shapes, [batch, m, k] x [batch, k, n] (transposed as asked), with
/// and without the bias/relu epilogue, against double loops over the rounded operands.
template <bool TA, bool TB, i64 Batch, i64 Mm, i64 Kk, i64 Nn>
void big_product(rounding round, ty::precision p, int threads,
                 std::vector<ty::tensor<float>>& out) {
  using SA = std::conditional_t<TA, ty::shape<Batch, Kk, Mm>, ty::shape<Batch, Mm, Kk>>;
  using SB = std::conditional_t<TB, ty::shape<Batch, Nn, Kk>, ty::shape<Batch, Kk, Nn>>;
  static constexpr auto pa = ty::placeholder<"pa", float, SA>;
  static constexpr auto pb = ty::placeholder<"pb", float, SB>;
  static constexpr auto pc = ty::placeholder<"pc", float, ty::shape<Nn>>;
  static constexpr auto plain = ty::matmul<TA, TB>(pa, pb);
  static constexpr auto epi = ty::relu(ty::bias_add(ty::matmul<TA, TB>(pa, pb), pc));
  const auto at = random({Batch, TA ? Kk : Mm, TA ? Mm : Kk}, 7);
  const auto bt = random({Batch, TB ? Nn : Kk, TB ? Kk : Nn}, 8);
  const auto ct = random({Nn}, 9);
  ty::session<> s(ty::session_options{.threads = threads, .precision = p});
  auto [y, z] = s.run(ty::fetch(plain, epi), ty::feed(pa, at), ty::feed(pb, bt), ty::feed(pc, ct));
  const auto av = operand(at, round), bv = operand(bt, round);
  std::vector<double> ref(static_cast<std::size_t>(Batch * Mm * Nn)), mag(ref.size()),
      fref(ref.size());
  for (i64 q = 0; q < Batch; ++q)
    for (i64 i = 0; i < Mm; ++i)
      for (i64 j = 0; j < Nn; ++j) {
        double acc = 0, m = 0;
        for (i64 k = 0; k < Kk; ++k) {
          const double x =
              av[static_cast<std::size_t>(q * Mm * Kk + (TA ? k * Mm + i : i * Kk + k))];
          const double w =
              bv[static_cast<std::size_t>(q * Kk * Nn + (TB ? j * Kk + k : k * Nn + j))];
          acc += x * w;
          m += std::abs(x * w);
        }
        const auto u = static_cast<std::size_t>((q * Mm + i) * Nn + j);
        ref[u] = acc;
        mag[u] = m + std::abs(static_cast<double>(ct[j]));
        fref[u] = std::max(0.0, acc + static_cast<double>(ct[j]));
      }
  check_close("big matmul", y, ref, mag);
  check_close("big matmul + bias + relu", z, fref, mag);
  out = {std::move(y), std::move(z)};
}

template <bool TA, bool TB, i64 Batch, i64 Mm, i64 Kk, i64 Nn>
void big_case(rounding round, ty::precision p) {
  INFO("ta " << TA << " tb " << TB << " batch " << Batch << " m " << Mm << " k " << Kk << " n "
             << Nn);
  std::vector<ty::tensor<float>> one, two;
  big_product<TA, TB, Batch, Mm, Kk, Nn>(round, p, 1, one);
  big_product<TA, TB, Batch, Mm, Kk, Nn>(round, p, 2, two);
  CHECK(same_bits(one[0], two[0]));
  CHECK(same_bits(one[1], two[1]));
}
} // namespace

TEST_CASE("bfloat16 and float16 products: cut into slabs (rows, columns), transposed, batched") {
  const bool native = ty::session<>(ty::session_options{.precision = ty::precision::bfloat16})
                          .products_in_bfloat16();
  const bool half =
      ty::session<>(ty::session_options{.precision = ty::precision::float16}).products_in_float16();
  for (const auto p : {ty::precision::bfloat16, ty::precision::float16}) {
    const rounding r = p == ty::precision::bfloat16 ? (native ? rounding::bf16 : rounding::none)
                                                    : (half ? rounding::f16 : rounding::none);
    big_case<false, false, 1, 512, 256, 64>(r, p); // cut by rows
    big_case<false, false, 1, 64, 256, 512>(r, p); // cut by columns (the bias offset per slab)
    big_case<true, false, 1, 512, 256, 64>(r, p);
    big_case<false, true, 1, 64, 256, 512>(r, p);
    big_case<true, true, 3, 256, 128, 200>(r, p); // batched
  }
}

TEST_CASE("describe_placement names each step's compute dtype: the session's precision") {
  constexpr auto lin = ty::relu(ty::matmul(a, b));
  constexpr auto d = ty::placeholder<"d", double, ty::shape<4, 4>>;
  constexpr auto dprod = ty::matmul(d, d);
  using P = ty::compile::plan<ty::type_list<decltype(conv_loss), decltype(lin), decltype(dprod)>>;
  // One line per step; a step is named by its op, its dtype follows its device.
  const auto line_of = [](const std::string& listing, std::string_view head) {
    const std::size_t at = listing.find(head);
    REQUIRE(at != std::string::npos);
    return listing.substr(at, listing.find('\n', at) - at);
  };
  const auto ends_with = [](const std::string& s, std::string_view tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  const std::string plain = P::describe_placement();
  INFO(plain);
  CHECK(ends_with(line_of(plain, "= nn conv2d("), "  [float32]"));
  CHECK(ends_with(line_of(plain, "= matmul matmul(a, b)"), "  [float32]"));
  CHECK(ends_with(line_of(plain, "= matmul matmul(d, d)"), "  [float64]"));
  CHECK(plain.find("leaf x  @/job:localhost/replica:0/task:0/device:CPU:0\n") !=
        std::string::npos); // leaves have none
  for (const auto p : {ty::precision::bfloat16, ty::precision::float16}) {
    const char* products = p == ty::precision::bfloat16 ? "  [bfloat16 products, float32 sums]"
                                                        : "  [float16 products, float32 sums]";
    const std::string low = P::describe_placement(p);
    INFO(low);
    CHECK(ends_with(line_of(low, "= nn conv2d("), products));
    CHECK(ends_with(line_of(low, "= matmul matmul(a, b)"), products));
    CHECK(ends_with(line_of(low, "= matmul matmul(d, d)"), "  [float64]")); // float32 only
    CHECK(ends_with(line_of(low, "= reduce sum("), "  [float32]"));         // not a product
    // A session names what it runs: bfloat16 only where the CPU has it natively.
    ty::session<> s(ty::session_options{.precision = p});
    const bool lowered =
        p == ty::precision::bfloat16 ? s.products_in_bfloat16() : s.products_in_float16();
    const std::string mine = s.describe_placement(conv_loss, lin, dprod);
    CHECK(mine == (lowered ? low : plain));
  }
}

namespace {
// A two-layer net whose second product reads a forward activation h = relu(x w1).
constexpr auto sx = ty::placeholder<"sx", float, ty::shape<4, 3>>;
constexpr auto sw1 = ty::placeholder<"sw1", float, ty::shape<3, 5>>;
constexpr auto sw2 = ty::placeholder<"sw2", float, ty::shape<5, 2>>;
constexpr auto sh = ty::relu(ty::matmul(sx, sw1));
constexpr auto sloss = ty::sum(ty::matmul(sh, sw2));
} // namespace

TEST_CASE("saved_in<bfloat16>: gradients read the forward activations rounded to bfloat16") {
  constexpr auto exact = ty::grad(sloss, sw1, sw2);
  constexpr auto saved = ty::grad<ty::saved_in<ty::bfloat16>>(sloss, sw1, sw2);
  ty::session<> s;
  ty::tensor<float> xv({4, 3}), w1v({3, 5}), w2v({5, 2});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(0.3 + 0.71 * std::sin(1.3 * static_cast<double>(i)));
  for (i64 i = 0; i < w1v.size(); ++i)
    w1v[i] = static_cast<float>(0.917 * std::cos(0.9 * static_cast<double>(i)));
  for (i64 i = 0; i < w2v.size(); ++i)
    w2v[i] = static_cast<float>(0.5 - 0.13 * static_cast<double>(i));
  auto [hv, e1, e2, s1, s2] = s.run(
      ty::fetch(sh, ty::get<0>(exact), ty::get<1>(exact), ty::get<0>(saved), ty::get<1>(saved)),
      ty::feed(sx, xv), ty::feed(sw1, w1v), ty::feed(sw2, w2v));
  // d/dw2 = h^T ones: each column sums h's column, h read rounded to bfloat16 (double sums of
  // the fetched float32 h, rounded as the policy rounds, are the reference).
  int differs = 0;
  for (i64 i = 0; i < 5; ++i)
    for (i64 j = 0; j < 2; ++j) {
      double rounded = 0, plain = 0;
      for (i64 n = 0; n < 4; ++n) {
        rounded += static_cast<float>(ty::bfloat16(hv[n * 5 + i]));
        plain += hv[n * 5 + i];
      }
      CHECK(s2[i * 2 + j] == doctest::Approx(rounded).epsilon(1e-6));
      CHECK(e2[i * 2 + j] == doctest::Approx(plain).epsilon(1e-6));
      differs += std::abs(rounded - plain) > 1e-5 * std::abs(plain) ? 1 : 0;
    }
  CHECK(differs > 0); // the rounding is visible in these values
  // d/dw1 reads h only for relu's mask, whose signs rounding keeps: the same bits.
  for (i64 i = 0; i < e1.size(); ++i)
    CHECK(std::memcmp(&e1[i], &s1[i], sizeof(float)) == 0);
}

namespace {
// A small convolutional net (batch 64), trained with and without the policy.
constexpr auto mx = ty::placeholder<"mx", float, ty::shape<64, 28, 28, 1>>;
constexpr auto my = ty::placeholder<"my", std::int32_t, ty::shape<64>>;
constexpr auto mc1 =
    ty::max_pool<ty::padding::same, 2>(ty::relu(ty::conv2d_layer<"m_conv1", 5, 5, 16>(mx)));
constexpr auto mc2 =
    ty::max_pool<ty::padding::same, 2>(ty::relu(ty::conv2d_layer<"m_conv2", 5, 5, 16>(mc1)));
constexpr auto mlogits = ty::dense<"m_out", 10>(ty::reshape<-1, 7 * 7 * 16>(mc2));
constexpr auto mloss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(mlogits, my));
constexpr auto mopt = ty::momentum(ty::constant<0.05>, ty::constant<0.9>);
constexpr auto mtrain = mopt.minimize(mloss);
constexpr auto mtrain16 = ty::mixed_precision<ty::bfloat16>(mopt).minimize(mloss);
// Loss scaling around the policy, wrapped in either order: the same optimizer.
static_assert(std::is_same_v<decltype(ty::mixed_precision<ty::bfloat16>(ty::loss_scaled(mopt))),
                             decltype(ty::loss_scaled(ty::mixed_precision<ty::bfloat16>(mopt)))>);
constexpr auto mtrain16_scaled =
    ty::mixed_precision<ty::bfloat16>(ty::loss_scaled(mopt)).minimize(mloss);

// Eight tanh layers of [512, 256] activations, differentiated by their input: the backward pass
// starts with every activation kept, so they set the peak.
constexpr auto dx = ty::placeholder<"dx", float, ty::shape<512, 256>>;
constexpr auto dw = ty::placeholder<"dw", float, ty::shape<256, 256>>;
constexpr auto layer = [](auto h) { return ty::tanh(ty::matmul(h, dw)); };
constexpr auto deep = layer(layer(layer(layer(layer(layer(layer(layer(dx))))))));
constexpr auto dloss = ty::sum(deep * deep);
} // namespace

TEST_CASE("saved_in<bfloat16>: the activations kept for the backward pass take half the bytes") {
  ty::tensor<float> xv({512, 256}), wv({256, 256});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  for (i64 i = 0; i < wv.size(); ++i)
    wv[i] = static_cast<float>(0.07 * std::cos(0.91 * static_cast<double>(i)));
  const auto peak = [&](auto g) {
    ty::session<> s(ty::session_options{.threads = 2});
    auto [gv] = s.run(ty::fetch(g), ty::feed(dx, xv), ty::feed(dw, wv));
    return std::pair{s.stats().peak_bytes, gv};
  };
  const auto [p32, g32] = peak(ty::grad(dloss, dx));
  const auto [p16, g16] = peak(ty::grad<ty::saved_in<ty::bfloat16>>(dloss, dx));
  MESSAGE("peak bytes: float32 ", p32, ", bfloat16-saved ", p16);
  // float32: 8 activations of 512 KB kept, and two gradient buffers; saved in bfloat16: 8 of
  // 256 KB (tanh's gradient widens its copy in its own loop). Measured 4.72 -> 2.88 MB.
  CHECK(static_cast<double>(p16) < 0.7 * static_cast<double>(p32));
  double err = 0, scale = 0; // squared norms
  for (i64 i = 0; i < g32.size(); ++i) {
    err += (double(g16[i]) - g32[i]) * (double(g16[i]) - g32[i]);
    scale += double(g32[i]) * g32[i];
  }
  MESSAGE("relative difference ", std::sqrt(err / scale));
  CHECK(scale > 0);
  CHECK(err < 1e-3 * scale); // bfloat16's 8 bits of mantissa in the saved activations
  CHECK(err > 0);            // and they are the ones read
}

TEST_CASE("mixed_precision<bfloat16>(opt): the same forward pass, and it trains") {
  ty::tensor<float> xv({64, 28, 28, 1});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(0.5 + 0.5 * std::sin(0.013 * static_cast<double>(i)));
  ty::tensor<std::int32_t> yv({64});
  for (i64 i = 0; i < 64; ++i)
    yv[i] = static_cast<std::int32_t>((i * 7) % 10);
  const auto train = [&](auto op) {
    ty::session<> s(ty::session_options{.threads = 2, .seed = 3});
    s.initialize(op);
    std::vector<float> losses;
    for (int step = 0; step < 6; ++step) {
      auto [l] = s.run(ty::fetch(mloss, op), ty::feed(mx, xv), ty::feed(my, yv));
      losses.push_back(l.item());
    }
    return losses;
  };
  const auto l32 = train(mtrain);
  const auto l16 = train(mtrain16);
  CHECK(l16.front() == l32.front()); // the forward pass is exact
  CHECK(l16.back() < l16.front());   // and it learns
  CHECK(l16.back() == doctest::Approx(l32.back()).epsilon(1e-2));
  // Scaling by 2^16 before differentiation and back after is exact here (no gradient over- or
  // underflows), so the loss-scaled policy takes the same steps, bit for bit.
  const auto l16s = train(mtrain16_scaled);
  for (std::size_t i = 0; i < l16.size(); ++i)
    CHECK(l16s[i] == l16[i]);
}

TEST_CASE("weight and bias gradients run right after their operands") {
  // In node order a layer's weight and bias gradients come after the whole input-gradient chain
  // below them, keeping what they read alive through it; the plan runs them first (on this net
  // the float32 step's peak fell 5.82 -> 5.08 MB, bench/run's peak_MB reports the seed's).
  using P = ty::compile::plan<ty::type_list<decltype(mloss), decltype(mtrain)>>;
  constexpr auto& L = P::layout;
  const auto find = [](std::string_view prefix, std::string_view part) {
    for (std::size_t i = 0; i < P::size; ++i) {
      const std::string label = P::node_label(i);
      if (label.starts_with(prefix) && label.find(part) != std::string::npos)
        return i;
    }
    return P::size;
  };
  const std::size_t input = find("conv2d_backprop_input(", "m_conv2/weights");
  const std::size_t filter = find("conv2d_backprop_filter(", "m_conv2/weights");
  REQUIRE(input < P::size);
  REQUIRE(filter < P::size);
  CHECK(filter > input);                         // node order
  CHECK(L.position[filter] < L.position[input]); // run order
  const std::string dy = P::node_label(input).substr(22, P::node_label(input).find(',') - 22);
  const std::size_t bias = find("sum(" + dy + ",", "axes=[0,1,2]");
  REQUIRE(bias < P::size);
  CHECK(bias > input);
  CHECK(L.position[bias] < L.position[input]);
}

namespace {
// tanh before a max pool: the pool's gradient is chained into tanh's, whose widening of the
// saved copy must run before the pool's gradient infers its shape.
constexpr auto tx = ty::placeholder<"tx", float, ty::shape<2, 4, 4, 1>>;
constexpr auto tf = ty::placeholder<"tf", float, ty::shape<3, 3, 1, 2>>;
constexpr auto tt = ty::tanh(ty::conv2d<ty::padding::same>(tx, tf));
constexpr auto tloss = ty::sum(ty::max_pool<ty::padding::same, 2>(tt));
// A gradient penalty: the gradient of a saved_in gradient (the two-layer net above, with tanh).
constexpr auto hloss = ty::sum(ty::matmul(ty::tanh(ty::matmul(sx, sw1)), sw2));
} // namespace

TEST_CASE("saved_in<bfloat16>: chained pool gradients, and gradients of gradients") {
  ty::session<> s;
  ty::tensor<float> xv({2, 4, 4, 1}), fv({3, 3, 1, 2});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  for (i64 i = 0; i < fv.size(); ++i)
    fv[i] = static_cast<float>(std::cos(0.3 * static_cast<double>(i)));
  auto [l, e, g] =
      s.run(ty::fetch(tloss, ty::grad(tloss, tf), ty::grad<ty::saved_in<ty::bfloat16>>(tloss, tf)),
            ty::feed(tx, xv), ty::feed(tf, fv));
  for (i64 i = 0; i < e.size(); ++i)
    CHECK(g[i] == doctest::Approx(e[i]).epsilon(2e-2).scale(1.0));

  // d/dw1 of |d loss / d w2|^2: the saved copies pass the gradient on (straight through),
  // so it is the exact one's up to the rounding of the activations it reads.
  constexpr auto g2 = ty::grad<ty::saved_in<ty::bfloat16>>(hloss, sw2);
  constexpr auto g2e = ty::grad(hloss, sw2);
  ty::tensor<float> hxv({4, 3}), a({3, 5}), b({5, 2});
  for (i64 i = 0; i < 12; ++i)
    hxv[i] = 0.1f * static_cast<float>(i);
  for (i64 i = 0; i < 15; ++i)
    a[i] = 0.05f * static_cast<float>(i) - 0.3f;
  for (i64 i = 0; i < 10; ++i)
    b[i] = 0.2f;
  auto [p, q] = s.run(ty::fetch(ty::grad(ty::sum(g2 * g2), sw1), ty::grad(ty::sum(g2e * g2e), sw1)),
                      ty::feed(sx, hxv), ty::feed(sw1, a), ty::feed(sw2, b));
  double largest = 0;
  for (i64 i = 0; i < q.size(); ++i)
    largest = std::max(largest, std::abs(double(q[i])));
  CHECK(largest > 1.0); // a gradient that is not zero
  for (i64 i = 0; i < q.size(); ++i)
    CHECK(p[i] == doctest::Approx(q[i]).epsilon(2e-2).scale(largest));
}

namespace {
// max_pool's gradient under saved_in<bfloat16>: t = tanh(x) pooled 2x2, each pooled value
// weighted by c. In every channel, window 0 holds two values that round alike (0.2501 first,
// 0.2503 second): pooled in bfloat16 the first wins, pooled exactly the second.
template <int C>
struct pool_case {
  static constexpr auto x = ty::placeholder<"px", float, ty::shape<1, 2, 4, C>>;
  static constexpr auto c = ty::placeholder<"pc", float, ty::shape<1, 1, 2, C>>;
  static constexpr auto t = ty::tanh(x);
  static constexpr auto loss = ty::sum(ty::max_pool<ty::padding::same, 2>(t) * c);
  static constexpr auto g16 = ty::grad<ty::saved_in<ty::bfloat16>>(loss, x);
  static constexpr auto g32 = ty::grad(loss, x);
};

template <int C>
void check_pool_reads_copy() {
  using K = pool_case<C>;
  using P = ty::compile::plan<ty::type_list<decltype(K::g16)>>;
  const std::string d = P::describe();
  CHECK(d.find("max_pool_grad") != std::string::npos);
  CHECK(d.find("widen") == std::string::npos); // the pool's gradient reads the copy itself
  ty::tensor<float> xv({1, 2, 4, C}), cv({1, 1, 2, C});
  const double window0[4] = {0.2501, 0.2503, 0.1, -0.3}; // (0,0) (0,1) (1,0) (1,1)
  const double window1[4] = {-0.2, 0.05, 0.3, 0.7};
  for (int ch = 0; ch < C; ++ch) {
    for (int k = 0; k < 4; ++k) {
      const int y = k / 2, xo = k % 2;
      xv[(y * 4 + xo) * C + ch] = static_cast<float>(std::atanh(window0[k]));
      xv[(y * 4 + 2 + xo) * C + ch] = static_cast<float>(std::atanh(window1[k] - 0.01 * ch));
    }
    cv[ch] = 1.0f + 0.25f * static_cast<float>(ch);
    cv[C + ch] = -0.5f - 0.125f * static_cast<float>(ch);
  }
  ty::session<> s(ty::session_options{.threads = 2});
  auto [tv, g16, g32] =
      s.run(ty::fetch(K::t, K::g16, K::g32), ty::feed(K::x, xv), ty::feed(K::c, cv));
  // Reference: route each window's weight to the first maximum of the bfloat16-rounded t, times
  // tanh's derivative at the rounded value (what the policy reads), in double.
  std::vector<double> ref(static_cast<std::size_t>(xv.size()), 0.0);
  for (int ch = 0; ch < C; ++ch)
    for (int w = 0; w < 2; ++w) {
      int best = -1;
      double best_v = 0;
      for (int k = 0; k < 4; ++k) {
        const int at = ((k / 2) * 4 + 2 * w + k % 2) * C + ch;
        const double v = static_cast<float>(ty::bfloat16(tv[at]));
        if (best < 0 || v > best_v) {
          best = at;
          best_v = v;
        }
      }
      ref[static_cast<std::size_t>(best)] = cv[w * C + ch] * (1.0 - best_v * best_v);
    }
  int moved = 0;
  for (i64 i = 0; i < xv.size(); ++i) {
    CHECK(g16[i] == doctest::Approx(ref[static_cast<std::size_t>(i)]).epsilon(1e-6));
    moved += (g16[i] == 0) != (g32[i] == 0) ? 1 : 0;
  }
  CHECK(moved == 2 * C); // window 0 of each channel: routed to the first value, not the second
}
} // namespace

TEST_CASE("saved_in<bfloat16>: max_pool's gradient reads the bfloat16 copy, pooled in bfloat16") {
  check_pool_reads_copy<16>(); // whole vectors of channels, chained into tanh's gradient
  check_pool_reads_copy<3>();  // the scalar loop

  // A pool gradient read by a kernel (conv2d's), not chained: the plain kernel.
  constexpr auto loss =
      ty::sum(ty::max_pool<ty::padding::same, 2>(ty::conv2d<ty::padding::same>(tx, tf)));
  constexpr auto g16 = ty::grad<ty::saved_in<ty::bfloat16>>(loss, tf);
  using P = ty::compile::plan<ty::type_list<decltype(g16)>>;
  CHECK(P::describe().find("save(") != std::string::npos); // the conv's output, for the pool
  CHECK(P::describe().find("widen") == std::string::npos);
  CHECK(P::describe().find("max_pool_grad(save(") != std::string::npos);
  ty::tensor<float> xv({2, 4, 4, 1}), fv({3, 3, 1, 2});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  for (i64 i = 0; i < fv.size(); ++i)
    fv[i] = static_cast<float>(std::cos(0.3 * static_cast<double>(i)));
  ty::session<> s;
  auto [e, g] = s.run(ty::fetch(ty::grad(loss, tf), g16), ty::feed(tx, xv), ty::feed(tf, fv));
  double largest = 0;
  for (i64 i = 0; i < e.size(); ++i)
    largest = std::max(largest, std::abs(double(e[i])));
  CHECK(largest > 0.5);
  for (i64 i = 0; i < e.size(); ++i)
    CHECK(g[i] == doctest::Approx(e[i]).epsilon(2e-2).scale(largest));
}
