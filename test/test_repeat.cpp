// repeat<N, "block">(body, x): the forward against a naive double-precision loop over the stacked
// variables; the gradient (x and every stacked variable) against central finite differences in
// float64; stacked initialization per layer; training with float32 Adam; a deep repeat (1,000
// layers) runs; misuse is a compile error (test/compile_fail/repeat_*.cpp).
#include <doctest/doctest.h>

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

constexpr i64 width = 5;

template <class T, i64 N>
struct model {
  static constexpr auto x = ty::placeholder<"x", T, ty::shape<ty::dyn, width>>;
  static constexpr auto h = ty::repeat<N, "block">(
      [](auto h) {
        return h +
               ty::tanh(
                   ty::dense<"dense", width, ty::uniform<-0.6, 0.6>, ty::uniform<-0.2, 0.2>>(h));
      },
      x);
  static constexpr auto w = ty::find_variable<"block/dense/weights">(h);
  static constexpr auto b = ty::find_variable<"block/dense/biases">(h);
  static constexpr auto loss = ty::sum(ty::square(h)) * ty::constant<0.5>;
};

/// The forward in double precision: h = h + tanh(h W_l + b_l) for each layer l.
std::vector<double> reference(const std::vector<double>& x, i64 rows, i64 layers,
                              const std::vector<double>& w, const std::vector<double>& b) {
  std::vector<double> h = x, next(h.size());
  for (i64 l = 0; l < layers; ++l) {
    for (i64 r = 0; r < rows; ++r)
      for (i64 o = 0; o < width; ++o) {
        double acc = b[static_cast<std::size_t>(l * width + o)];
        for (i64 i = 0; i < width; ++i)
          acc += h[static_cast<std::size_t>(r * width + i)] *
                 w[static_cast<std::size_t>((l * width + i) * width + o)];
        next[static_cast<std::size_t>(r * width + o)] =
            h[static_cast<std::size_t>(r * width + o)] + std::tanh(acc);
      }
    h = next;
  }
  return h;
}

template <class T>
ty::tensor<T> inputs(i64 rows) {
  ty::tensor<T> x({rows, width});
  for (i64 i = 0; i < x.size(); ++i)
    x[i] = static_cast<T>(std::sin(0.7 * static_cast<double>(i) + 0.3));
  return x;
}

template <class T>
std::vector<double> as_double(const ty::tensor<T>& t) {
  return {t.data(), t.data() + t.size()};
}

} // namespace

TEST_CASE("repeat: stacked variables, one layer's initializer per slice") {
  using M = model<double, 7>;
  ty::session<> s(ty::session_options{.threads = 1, .seed = 3});
  auto w = s.read(M::w);
  auto b = s.read(M::b);
  CHECK(w.shape() == std::vector<i64>{7, width, width});
  CHECK(b.shape() == std::vector<i64>{7, width});
  // every layer drawn (no two layers equal), all within the initializer's bounds
  for (i64 l = 1; l < 7; ++l)
    CHECK(w[l * width * width] != w[(l - 1) * width * width]);
  for (i64 i = 0; i < w.size(); ++i)
    CHECK(std::abs(w[i]) <= 0.6);

  using G = model<double, 3>;
  ty::session<> g(ty::session_options{.threads = 1, .seed = 3});
  auto gw = g.read(ty::find_variable<"block/dense/weights">(
      ty::repeat<3, "block">([](auto h) { return ty::dense<"dense", width>(h); }, G::x)));
  // glorot_uniform sees a layer's fans (5, 5), not the stack's
  const double limit = std::sqrt(6.0 / (2.0 * width));
  double largest = 0;
  for (i64 i = 0; i < gw.size(); ++i)
    largest = std::max(largest, std::abs(gw[i]));
  CHECK(largest <= limit);
  CHECK(largest > 0.7 * limit);
}

TEST_CASE("repeat: the forward equals a naive loop over the layers (float64, 1 and 2 threads)") {
  using M = model<double, 6>;
  for (int threads : {1, 2}) {
    ty::session<> s(ty::session_options{.threads = threads, .seed = 5});
    const auto x = inputs<double>(9);
    auto [h] = s.run(ty::fetch(M::h), ty::feed(M::x, x));
    const auto ref =
        reference(as_double(x), 9, 6, as_double(s.read(M::w)), as_double(s.read(M::b)));
    REQUIRE(h.size() == static_cast<i64>(ref.size()));
    double worst = 0;
    for (i64 i = 0; i < h.size(); ++i)
      worst = std::max(worst, std::abs(h[i] - ref[static_cast<std::size_t>(i)]));
    CHECK(worst <= 1e-12);
  }
}

TEST_CASE("repeat: gradients of x and of every stacked variable match finite differences") {
  using M = model<double, 4>;
  ty::session<> s(ty::session_options{.threads = 1, .seed = 9});
  const auto x = inputs<double>(3);
  const auto gx = ty::grad(M::loss, M::x);
  const auto [gw, gb] = ty::grad(M::loss, M::w, M::b);
  auto [dx, dw, db] = s.run(ty::fetch(gx, gw, gb), ty::feed(M::x, x));
  CHECK(dw.shape() == std::vector<i64>{4, width, width});
  CHECK(db.shape() == std::vector<i64>{4, width});

  auto loss_at = [&](const ty::tensor<double>& xv) {
    auto [l] = s.run(ty::fetch(M::loss), ty::feed(M::x, xv));
    return l[0];
  };
  const double eps = 1e-6;
  double worst = 0;
  for (i64 i = 0; i < x.size(); ++i) {
    auto xp = x, xm = x;
    xp[i] += eps;
    xm[i] -= eps;
    worst = std::max(worst, std::abs((loss_at(xp) - loss_at(xm)) / (2 * eps) - dx[i]));
  }
  CHECK(worst <= 1e-7);
  // each stacked variable, element by element (every layer)
  auto check_var = [&](auto var, const ty::tensor<double>& grad) {
    auto v = s.read(var);
    double bad = 0;
    for (i64 i = 0; i < v.size(); ++i) {
      auto vp = v, vm = v;
      vp[i] += eps;
      vm[i] -= eps;
      s.write(var, vp);
      const double lp = loss_at(x);
      s.write(var, vm);
      const double lm = loss_at(x);
      bad = std::max(bad, std::abs((lp - lm) / (2 * eps) - grad[i]));
    }
    s.write(var, v);
    return bad;
  };
  CHECK(check_var(M::w, dw) <= 1e-7);
  CHECK(check_var(M::b, db) <= 1e-7);
}

TEST_CASE("repeat: float32 Adam trains a stacked model; its slots are stacked") {
  using M = model<float, 8>;
  static constexpr auto target = ty::placeholder<"target", float, ty::shape<ty::dyn, width>>;
  static constexpr auto loss = ty::mean(ty::square(M::h - target));
  static constexpr auto train = ty::adam(ty::constant<0.01>).minimize(loss);
  ty::session<> s(ty::session_options{.threads = 2, .seed = 1});
  const auto x = inputs<float>(16);
  ty::tensor<float> t({16, width});
  for (i64 i = 0; i < t.size(); ++i)
    t[i] = static_cast<float>(0.5 * std::cos(0.4 * static_cast<double>(i)));
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    auto [l] = s.run(ty::fetch(loss, train), ty::feed(M::x, x), ty::feed(target, t));
    (step == 0 ? first : last) = l[0];
  }
  CHECK(last < 0.5f * first);
  std::size_t stacked_slots = 0;
  s.for_each_variable([&](const auto& v) {
    if (std::string(v.name).starts_with("block/dense/weights") &&
        v.bytes == sizeof(float) * 8 * width * width)
      ++stacked_slots;
  });
  CHECK(stacked_slots == 3); // the weights, Adam's m and v
}

TEST_CASE("repeat: 1,000 layers, forward and gradient against a double loop") {
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, 2>>;
  static constexpr auto h = ty::repeat<1000, "deep">(
      [](auto h) {
        return h +
               ty::matmul(h, ty::variable<"w", double, ty::shape<2, 2>, ty::uniform<-1e-3, 1e-3>>);
      },
      x);
  static constexpr auto w = ty::find_variable<"deep/w">(h);
  static constexpr auto gw = ty::grad(ty::sum(h), w);
  ty::session<> s(ty::session_options{.threads = 1});
  ty::tensor<double> xv({1, 2});
  xv[0] = 1;
  xv[1] = -2;
  auto [hv, g] = s.run(ty::fetch(h, gw), ty::feed(x, xv));
  const auto wv = s.read(w);
  // forward: the row vector h_{l+1} = h_l + h_l W_l, every h_l kept
  std::vector<std::array<double, 2>> hs(1001);
  hs[0] = {1, -2};
  for (i64 l = 0; l < 1000; ++l) {
    const double* m = wv.data() + l * 4;
    const auto& a = hs[static_cast<std::size_t>(l)];
    hs[static_cast<std::size_t>(l + 1)] = {a[0] + a[0] * m[0] + a[1] * m[2],
                                           a[1] + a[0] * m[1] + a[1] * m[3]};
  }
  CHECK(std::abs(hv[0] - hs[1000][0]) <= 1e-12 * (1 + std::abs(hs[1000][0])));
  CHECK(std::abs(hv[1] - hs[1000][1]) <= 1e-12 * (1 + std::abs(hs[1000][1])));
  // backward: d/dh_{l+1} = u; dW_l = h_l^T u; d/dh_l = u + u W_l^T
  REQUIRE(g.shape() == std::vector<i64>{1000, 2, 2});
  std::array<double, 2> u{1, 1};
  double worst = 0;
  for (i64 l = 999; l >= 0; --l) {
    const double* m = wv.data() + l * 4;
    const auto& a = hs[static_cast<std::size_t>(l)];
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        worst =
            std::max(worst, std::abs(g[l * 4 + i * 2 + j] - a[static_cast<std::size_t>(i)] *
                                                                u[static_cast<std::size_t>(j)]));
    u = {u[0] + u[0] * m[0] + u[1] * m[1], u[1] + u[0] * m[2] + u[1] * m[3]};
  }
  CHECK(worst <= 1e-10);
}

TEST_CASE("repeat: a body whose gradients are the seed itself and a sum over the batch") {
  // h + b: the carry's gradient is the upstream gradient (a view of it), b's its column sums
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, 3>>;
  static constexpr auto h = ty::repeat<4, "shift">(
      [](auto h) { return h + ty::variable<"b", double, ty::shape<3>, ty::uniform<-1, 1>>; }, x);
  static constexpr auto b = ty::find_variable<"shift/b">(h);
  static constexpr auto loss = ty::sum(ty::square(h));
  const auto [gx, gb] = ty::grad(loss, x, b);
  ty::session<> s(ty::session_options{.seed = 2});
  ty::tensor<double> xv({2, 3});
  for (i64 i = 0; i < 6; ++i)
    xv[i] = 0.1 * static_cast<double>(i);
  auto [hv, dx, db] = s.run(ty::fetch(h, gx, gb), ty::feed(x, xv));
  const auto bv = s.read(b);
  for (i64 r = 0; r < 2; ++r)
    for (i64 c = 0; c < 3; ++c) {
      double ref = xv[r * 3 + c];
      for (i64 l = 0; l < 4; ++l)
        ref += bv[l * 3 + c];
      CHECK(std::abs(hv[r * 3 + c] - ref) <= 1e-12);
      CHECK(std::abs(dx[r * 3 + c] - 2 * ref) <= 1e-12);
    }
  for (i64 l = 0; l < 4; ++l)
    for (i64 c = 0; c < 3; ++c)
      CHECK(std::abs(db[l * 3 + c] - 2 * (hv[c] + hv[3 + c])) <= 1e-12);
}

TEST_CASE("repeat: nested repeats equal one repeat over all the layers") {
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, width>>;
  static constexpr auto body = [](auto h) {
    return h + ty::tanh(ty::dense<"dense", width, ty::uniform<-0.6, 0.6>>(h));
  };
  static constexpr auto nested =
      ty::repeat<3, "outer">([](auto h) { return ty::repeat<2, "inner">(body, h); }, x);
  static constexpr auto flat = ty::repeat<6, "flat">(body, x);
  static constexpr auto wn = ty::find_variable<"outer/inner/dense/weights">(nested);
  static constexpr auto bn = ty::find_variable<"outer/inner/dense/biases">(nested);
  static constexpr auto wf = ty::find_variable<"flat/dense/weights">(flat);
  static constexpr auto bf = ty::find_variable<"flat/dense/biases">(flat);
  ty::session<> s(ty::session_options{.seed = 6});
  s.initialize(nested, flat);
  const auto w = s.read(wn), b = s.read(bn);
  CHECK(w.shape() == std::vector<i64>{3, 2, width, width});
  ty::tensor<double> w6({6, width, width}), b6({6, width});
  std::copy(w.data(), w.data() + w.size(), w6.data());
  std::copy(b.data(), b.data() + b.size(), b6.data());
  s.write(wf, w6);
  s.write(bf, b6);
  const auto xv = inputs<double>(3);
  const auto [gn, gf] = std::pair{ty::grad(ty::sum(nested), wn), ty::grad(ty::sum(flat), wf)};
  auto [hn, hf, dn, df] = s.run(ty::fetch(nested, flat, gn, gf), ty::feed(x, xv));
  for (i64 i = 0; i < hn.size(); ++i)
    CHECK(std::abs(hn[i] - hf[i]) <= 1e-13);
  REQUIRE(dn.size() == df.size());
  for (i64 i = 0; i < dn.size(); ++i)
    CHECK(std::abs(dn[i] - df[i]) <= 1e-12);
}

TEST_CASE("repeat: each layer draws its own dropout mask, and the gradient redraws the same") {
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, 64>>;
  static constexpr auto h =
      ty::repeat<2, "drop">([](auto h) { return ty::dropout<7>(h, ty::constant<0.5>); }, x);
  ty::session<> s;
  ty::tensor<double> ones({4, 64});
  for (i64 i = 0; i < ones.size(); ++i)
    ones[i] = 1;
  const auto gx = ty::grad(ty::sum(h), x);
  auto [hv, dx] = s.run(ty::fetch(h, gx), ty::feed(x, ones));
  i64 kept = 0;
  for (i64 i = 0; i < hv.size(); ++i) {
    kept += hv[i] != 0 ? 1 : 0;
    // both layers kept element i (scaled twice by 1/keep) or it is 0; its gradient the same
    CHECK((hv[i] == 0 || hv[i] == 4));
    CHECK(dx[i] == hv[i]);
  }
  // one mask for both layers would keep about half; two independent masks about a quarter
  CHECK(kept < 0.4 * static_cast<double>(hv.size()));
  CHECK(kept > 0.1 * static_cast<double>(hv.size()));
}

TEST_CASE("repeat: a layer that changes the batch extent is an error naming the layer") {
  static constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 2>>;
  static constexpr auto h =
      ty::repeat<3, "grow">([](auto h) { return ty::concat<0>(h, h) * ty::constant<0.5>; }, x);
  ty::session<> s;
  ty::tensor<float> xv({2, 2});
  CHECK_THROWS_WITH_AS(s.run(ty::fetch(h), ty::feed(x, xv)),
                       doctest::Contains("repeat: layer 0 returned [4,2]"), ty::error);
}

TEST_CASE("repeat: the body's variable attributes carry over to the stacked variables") {
  static constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
  static constexpr auto h = ty::repeat<2, "attr">(
      [](auto h) {
        return h + ty::dense<"d", 3, ty::glorot_uniform, ty::zeros, 0.004>(h) +
               ty::variable<"frozen", float, ty::shape<3>, ty::not_trainable<ty::zeros>>;
      },
      x);
  using W = std::remove_cvref_t<decltype(ty::find_variable<"attr/d/weights">(h))>;
  using F = std::remove_cvref_t<decltype(ty::find_variable<"attr/frozen">(h))>;
  CHECK(ty::detail::variable_traits<typename W::op>::weight_decay == 0.004);
  CHECK(ty::is_trainable_t<W>::value);
  CHECK_FALSE(ty::is_trainable_t<F>::value);
  CHECK(ty::trainable_variables_t<decltype(ty::sum(h))>::size == 2); // weights and biases
}

TEST_CASE("repeat: a GPU placement moves the loop to cpu<0> and says so") {
  using M = model<float, 3>;
  using H = std::remove_cvref_t<decltype(M::h)>;
  using P = ty::compile::plan<ty::type_list<H>, ty::on<ty::gpu<0>>>;
  constexpr std::size_t i = P::index_c<H>::value;
  CHECK(P::placement.device[i].is_cpu);
  CHECK(P::placement.fell_back[i]);
  const std::string listing = P::describe_placement();
  INFO(listing);
  CHECK(listing.find("repeat") != std::string::npos);
  CHECK(listing.find("(soft placement: no kernel on the requested device)") != std::string::npos);
}

TEST_CASE("repeat: two CPU towers train as one tower on the whole batch") {
  using M = model<double, 4>;
  static constexpr auto target = ty::placeholder<"target", double, ty::shape<ty::dyn, width>>;
  static constexpr auto loss = ty::mean(ty::square(M::h - target));
  static constexpr auto train =
      ty::momentum(ty::constant<0.1>, ty::constant<0.9>, ty::nesterov).minimize(loss);
  ty::session<> one(ty::session_options{.threads = 1, .seed = 4});
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> two(
      ty::session_options{.threads = 2, .seed = 4});
  const auto x = inputs<double>(10);
  ty::tensor<double> t({10, width});
  for (i64 i = 0; i < t.size(); ++i)
    t[i] = std::cos(0.3 * static_cast<double>(i));
  for (int step = 0; step < 5; ++step) {
    auto [a] = one.run(ty::fetch(loss, train), ty::feed(M::x, x), ty::feed(target, t));
    auto [b] = two.run(ty::fetch(loss, train), ty::feed(M::x, x), ty::feed(target, t));
    CHECK(std::abs(a[0] - b[0]) <= 1e-12 * (1 + std::abs(a[0])));
  }
  auto wa = one.read(M::w), wb = two.read(M::w);
  double worst = 0;
  for (i64 i = 0; i < wa.size(); ++i)
    worst = std::max(worst, std::abs(wa[i] - wb[i]));
  CHECK(worst <= 1e-12);
  ty::session<> fresh(ty::session_options{.threads = 1, .seed = 4});
  CHECK(fresh.read(M::w)[0] != wa[0]); // the towers did train
}

TEST_CASE("repeat: a traced run records each loop as one step of the outer plan") {
  using M = model<float, 6>;
  const auto g = ty::grad(M::loss, M::w);
  ty::trace_recorder rec;
  ty::session<> s(ty::session_options{.threads = 1, .trace = &rec});
  const auto x = inputs<float>(4);
  auto [l, gw] = s.run(ty::fetch(M::loss, g), ty::feed(M::x, x));
  CHECK(std::isfinite(l[0]));
  std::size_t loops = 0, grads = 0, steps = 0;
  for (const auto& e : rec.events()) {
    if (e.what != ty::trace_event::type::step)
      continue;
    ++steps;
    const std::string& k = e.plan->kernel[e.node];
    loops += k == "repeat" ? 1 : 0;
    grads += k == "repeat_grad" ? 1 : 0;
  }
  CHECK(loops == 1);
  CHECK(grads == 1);
  CHECK(steps < 30); // the body's steps (6 layers of them, twice) are not recorded one by one
}

TEST_CASE("repeat: stacked variables go through a checkpoint like any variable") {
  using M = model<double, 3>;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("typeflow_test_repeat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "stacked.safetensors";
  ty::session<> a(ty::session_options{.seed = 1});
  a.initialize(M::h);
  ty::save_checkpoint(a, file);
  ty::session<> b(ty::session_options{.seed = 2});
  b.initialize(M::h);
  CHECK(b.read(M::w)[0] != a.read(M::w)[0]);
  ty::restore_checkpoint(b, file);
  const auto wa = a.read(M::w), wb = b.read(M::w);
  CHECK(wb.shape() == std::vector<i64>{3, width, width});
  CHECK(std::memcmp(wa.data(), wb.data(), sizeof(double) * static_cast<std::size_t>(wa.size())) ==
        0);
  const auto x = inputs<double>(2);
  auto [ha] = a.run(ty::fetch(M::h), ty::feed(M::x, x));
  auto [hb] = b.run(ty::fetch(M::h), ty::feed(M::x, x));
  CHECK(std::memcmp(ha.data(), hb.data(), sizeof(double) * static_cast<std::size_t>(ha.size())) ==
        0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("repeat: ty::store gives ty::recompute's value and gradients, with fewer steps") {
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, width>>;
  auto body = [](auto h) {
    return h + ty::tanh(ty::dense<"dense", width, ty::uniform<-0.6, 0.6>, ty::uniform<-0.2, 0.2>>(
                   ty::dropout<3>(h, ty::constant<0.75>)));
  };
  static constexpr auto hr = ty::repeat<6, "block">(body, x);
  static constexpr auto hs = ty::repeat<6, "block", ty::store>(body, x);
  static_assert(std::is_same_v<typename decltype(hs)::shape_type, ty::shape<ty::dyn, width>>);
  // one name, one variable: the two repeats share theirs
  static constexpr auto w = ty::find_variable<"block/dense/weights">(hs);
  static constexpr auto b = ty::find_variable<"block/dense/biases">(hs);
  static constexpr auto lr = ty::sum(ty::square(hr)) * ty::constant<0.5>;
  static constexpr auto ls = ty::sum(ty::square(hs)) * ty::constant<0.5>;
  const auto [gxr, gwr, gbr] = ty::grad(lr, x, w, b);
  const auto [gxs, gws, gbs] = ty::grad(ls, x, w, b);
  ty::session<> s(ty::session_options{.threads = 1, .seed = 11});
  const auto xv = inputs<double>(4);
  // one run: the same layers draw the same dropout masks in both
  auto [ya, dxa, dwa, dba, yb, dxb, dwb, dbb] =
      s.run(ty::fetch(hr, gxr, gwr, gbr, hs, gxs, gws, gbs), ty::feed(x, xv));
  auto worst = [](const ty::tensor<double>& a, const ty::tensor<double>& c) {
    REQUIRE(a.shape() == c.shape());
    double d = 0;
    for (i64 i = 0; i < a.size(); ++i)
      d = std::max(d, std::abs(a[i] - c[i]) / (1 + std::abs(a[i])));
    return d;
  };
  CHECK(dwb.shape() == std::vector<i64>{6, width, width});
  CHECK(worst(ya, yb) <= 1e-15);
  CHECK(worst(dxa, dxb) <= 1e-15);
  CHECK(worst(dwa, dwb) <= 1e-15);
  CHECK(worst(dba, dbb) <= 1e-15);
  double norm = 0;
  for (i64 i = 0; i < dwb.size(); ++i)
    norm += std::abs(dwb[i]);
  CHECK(norm > 0.1);
  // the stored forward spares the gradient a pass over the layers: fewer kernel steps
  (void)s.run(ty::fetch(gxr, gwr, gbr), ty::feed(x, xv));
  const std::size_t steps_recompute = s.stats().steps;
  (void)s.run(ty::fetch(gxs, gws, gbs), ty::feed(x, xv));
  const std::size_t steps_store = s.stats().steps;
  INFO("recompute " << steps_recompute << " steps, store " << steps_store);
  CHECK(steps_store < steps_recompute);
}

TEST_CASE("repeat: checkpoint_every and memory_budget give recompute's gradients, holding less") {
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, width>>;
  auto body = [](auto h) {
    return h + ty::tanh(ty::dense<"dense", width, ty::uniform<-0.6, 0.6>, ty::uniform<-0.2, 0.2>>(
                   ty::dropout<5>(h, ty::constant<0.75>)));
  };
  constexpr i64 n = 9, rows = 512;
  constexpr std::size_t carry = rows * width * sizeof(double);
  // the budget's compile-time half: store where x's shape is static and N + 1 carries fit
  using xs = ty::expr<ty::ops::placeholder<ty::static_name<'s'>, double, ty::shape<rows, width>>>;
  static_assert(
      std::is_same_v<ty::detail::resolved_policy<n, xs, ty::memory_budget<10 * carry>>::type,
                     ty::store>);
  static_assert(
      std::is_same_v<ty::detail::resolved_policy<n, xs, ty::memory_budget<9 * carry>>::type,
                     ty::ops::hold_budget<9 * carry>>);
  static_assert(
      std::is_same_v<ty::detail::resolved_policy<n, decltype(x), ty::memory_budget<1u << 30>>::type,
                     ty::ops::hold_budget<1u << 30>>);
  static constexpr auto h_all = ty::repeat<n, "block">(body, x);
  static constexpr auto h_every = ty::repeat<n, "block", ty::checkpoint_every<3>>(body, x);
  // 4 carries: nothing fits (the fewest held is 4, at k = 3: checkpoints 3 and 6, two inputs)
  static constexpr auto h_tight = ty::repeat<n, "block", ty::memory_budget<3 * carry>>(body, x);
  static constexpr auto h_roomy = ty::repeat<n, "block", ty::memory_budget<100 * carry>>(body, x);
  static constexpr auto h_store = ty::repeat<n, "block", ty::store>(body, x);
  static constexpr auto w = ty::find_variable<"block/dense/weights">(h_all);
  auto grads = [](auto h) {
    constexpr auto loss = ty::sum(ty::square(h)) * ty::constant<0.5>;
    return ty::grad(loss, x, w);
  };
  static constexpr auto g_all = grads(h_all);
  static constexpr auto g_every = grads(h_every);
  static constexpr auto g_tight = grads(h_tight);
  static constexpr auto g_roomy = grads(h_roomy);
  static constexpr auto g_store = grads(h_store);
  const auto xv = inputs<double>(rows);
  struct outcome {
    ty::tensor<double> dx, dw;
    std::size_t steps, peak;
  };
  auto run = [&](auto g) {
    ty::session<> s(ty::session_options{.threads = 1, .seed = 11});
    const auto& [gx, gw] = g;
    auto [dx, dw] = s.run(ty::fetch(gx, gw), ty::feed(x, xv));
    return outcome{dx, dw, s.stats().steps, s.stats().peak_bytes};
  };
  const outcome all = run(g_all), every = run(g_every), tight = run(g_tight), roomy = run(g_roomy),
                stored = run(g_store);
  auto same = [](const ty::tensor<double>& a, const ty::tensor<double>& c) {
    REQUIRE(a.shape() == c.shape());
    for (i64 i = 0; i < a.size(); ++i)
      if (a[i] != c[i])
        return false;
    return true;
  };
  double norm = 0;
  for (i64 i = 0; i < all.dw.size(); ++i)
    norm += std::abs(all.dw[i]);
  CHECK(norm > 0.1);
  for (const outcome* o : {&every, &tight, &roomy, &stored}) {
    CHECK(same(all.dx, o->dx)); // the same layers, the same dropout masks: the same bits
    CHECK(same(all.dw, o->dw));
  }
  INFO("peak bytes: all " << all.peak << ", every 3 " << every.peak << ", budget of 3 carries "
                          << tight.peak << ", of 100 " << roomy.peak << ", stored " << stored.peak
                          << "; carry " << carry);
  INFO("steps: all " << all.steps << ", every 3 " << every.steps);
  // segments of 3 recompute layers 1, 2, 4 and 5 again: 4 more layer evaluations
  CHECK(every.steps > all.steps);
  CHECK((every.steps - all.steps) % 4 == 0);
  // held at once: 8 carries against 4 (checkpoints 3 and 6, and one segment's two inputs); the
  // rest of the peak is the same
  CHECK(all.peak - every.peak == 4 * carry);
  // the budget chose k = 3 where nothing fits, and holding all where everything does
  CHECK(tight.peak == every.peak);
  CHECK(tight.steps == every.steps);
  CHECK(roomy.peak == all.peak);
  CHECK(roomy.steps == all.steps);
  // ty::store holds its 10 carries and each layer's activations (its dropout mask and output,
  // the dense layer's, the tanh's: at most 4 carries a layer), which its gradient reads instead
  // of recomputing them: fewer steps. Its gradient reads the last row's gradient alone: the
  // zero-padded gradient of all 10 rows is never made.
  INFO("stored steps " << stored.steps);
  CHECK(stored.steps < all.steps);
  CHECK(stored.peak > all.peak);
  CHECK(stored.peak <= all.peak + 2 * carry + n * 4 * carry);
}

TEST_CASE("repeat: a memory_budget bounds the stored carries and the kept activations together") {
  // Under memory_budget<Bytes> a stored repeat (x's shape static, its N + 1 carries within Bytes)
  // keeps its layers' activations only in what the carries leave of Bytes.
  constexpr i64 n = 9, rows = 64;
  constexpr std::size_t carry = rows * width * sizeof(double);
  using xs = ty::expr<ty::ops::placeholder<ty::static_name<'m'>, double, ty::shape<rows, width>>>;
  static_assert(ty::detail::repeat_keep_budget<n, xs, ty::memory_budget<25 * carry>> == 15 * carry);
  static_assert(ty::detail::repeat_keep_budget<n, xs, ty::memory_budget<10 * carry>> == 0);
  static_assert(ty::detail::repeat_keep_budget<n, xs, ty::store> == ~std::uint64_t{0});
  static constexpr auto x = ty::placeholder<"mx", double, ty::shape<rows, width>>;
  auto body = [](auto h) {
    return h +
           ty::tanh(ty::dense<"dense", width, ty::uniform<-0.6, 0.6>, ty::uniform<-0.2, 0.2>>(h));
  };
  static constexpr auto h_store = ty::repeat<n, "mb", ty::store>(body, x);
  // the 10 carries take the whole budget: nothing is left for the activations
  static constexpr auto h_exact = ty::repeat<n, "mb", ty::memory_budget<10 * carry>>(body, x);
  static constexpr auto h_roomy = ty::repeat<n, "mb", ty::memory_budget<1000 * carry>>(body, x);
  static constexpr auto w = ty::find_variable<"mb/dense/weights">(h_store);
  auto grads = [](auto h) { return ty::grad(ty::sum(ty::square(h)), x, w); };
  static constexpr auto g_store = grads(h_store);
  static constexpr auto g_exact = grads(h_exact);
  static constexpr auto g_roomy = grads(h_roomy);
  const auto xv = inputs<double>(rows);
  struct outcome {
    ty::tensor<double> dx, dw;
    std::size_t steps;
  };
  auto run = [&](auto g) {
    ty::session<> s(ty::session_options{.threads = 1, .seed = 13});
    const auto& [gx, gw] = g;
    auto [dx, dw] = s.run(ty::fetch(gx, gw), ty::feed(x, xv));
    return outcome{dx, dw, s.stats().steps};
  };
  const outcome stored = run(g_store), exact = run(g_exact), roomy = run(g_roomy);
  for (const outcome* o : {&exact, &roomy}) {
    REQUIRE(o->dx.size() == stored.dx.size());
    REQUIRE(o->dw.size() == stored.dw.size());
    for (i64 i = 0; i < stored.dx.size(); ++i)
      CHECK(o->dx[i] == stored.dx[i]);
    for (i64 i = 0; i < stored.dw.size(); ++i)
      CHECK(o->dw[i] == stored.dw[i]);
  }
  INFO("steps: stored " << stored.steps << ", budget of the carries " << exact.steps
                        << ", roomy budget " << roomy.steps);
  CHECK(roomy.steps == stored.steps); // everything fits: the activations are kept
  CHECK(exact.steps > stored.steps);  // the gradient recomputes each layer's activations
}

TEST_CASE("remat: the same value and gradients as the block itself, holding only its input") {
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, width>>;
  // a block whose inside (8 * width wide) outweighs its input
  constexpr auto block = []<int L>(auto h) {
    if constexpr (L == 0)
      return h + ty::dense<"b0/out", width>(ty::tanh(ty::dense<"b0/in", 8 * width>(h)));
    else
      return h + ty::dense<"b1/out", width>(ty::tanh(ty::dense<"b1/in", 8 * width>(h)));
  };
  static constexpr auto plain = block.template operator()<1>(block.template operator()<0>(x));
  static constexpr auto rematted =
      ty::remat<"b1">([=](auto h) { return block.template operator()<1>(h); },
                      ty::remat<"b0">([=](auto h) { return block.template operator()<0>(h); }, x));
  // the variables are the model's own: the same four, by name
  static constexpr auto w0 = ty::find_variable<"b0/in/weights">(plain);
  static constexpr auto w1 = ty::find_variable<"b1/out/weights">(plain);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(w0)>,
                               decltype(ty::find_variable<"b0/in/weights">(rematted))>);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(w1)>,
                               decltype(ty::find_variable<"b1/out/weights">(rematted))>);
  auto grads = [](auto h) {
    constexpr auto loss = ty::sum(ty::square(h)) * ty::constant<0.5>;
    return ty::grad(loss, x, w0, w1);
  };
  static constexpr auto gp = grads(plain);
  static constexpr auto gr = grads(rematted);
  constexpr i64 rows = 256;
  const auto xv = inputs<double>(rows);
  auto run = [&](auto g, auto y) {
    ty::session<> s(ty::session_options{.threads = 1, .seed = 3});
    const auto& [gx, gw0, gw1] = g;
    auto [v, dx, dw0, dw1] = s.run(ty::fetch(y, gx, gw0, gw1), ty::feed(x, xv));
    return std::tuple{std::vector<ty::tensor<double>>{v, dx, dw0, dw1}, s.stats().peak_bytes};
  };
  const auto [p, peak_plain] = run(gp, plain);
  const auto [r, peak_remat] = run(gr, rematted);
  for (std::size_t k = 0; k < p.size(); ++k) {
    REQUIRE(p[k].shape() == r[k].shape());
    double worst = 0, norm = 0;
    for (i64 i = 0; i < p[k].size(); ++i) {
      worst = std::max(worst, std::abs(p[k][i] - r[k][i]) / (1 + std::abs(p[k][i])));
      norm += std::abs(p[k][i]);
    }
    INFO("output " << k);
    CHECK(worst <= 1e-13);
    CHECK(norm > 0.1);
  }
  // the plain gradient keeps both blocks' [rows, 8 * width] insides from the forward, remat
  // makes one block's at a time: one inside fewer at the peak, less what the loop holds itself
  // (the block inputs, and its packed gradient of the block's variables and input)
  const std::size_t inside = rows * 8 * width * sizeof(double);
  INFO("peak bytes: plain " << peak_plain << ", remat " << peak_remat << "; inside " << inside);
  CHECK(peak_remat + inside / 2 <= peak_plain);
}
