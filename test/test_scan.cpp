// scan<"block">(body, init, xs): the forward against a naive double-precision loop over the
// steps; the gradients (init, xs and every shared variable) against central finite differences in
// float64, with static and run-time shapes (both layouts of the backward's packed result); a
// body whose gradients have no buffer of their own; float32 Adam trains through it; two CPU towers
// equal one; the loop moves to cpu<0> under a GPU placement; misuse is a compile error
// (test/compile_fail/scan_*.cpp). The lstm op against a naive LSTM and finite differences, and
// against lstm_scan (float32 and float64, several blocks of units, 1 and 2 threads).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

constexpr i64 in_width = 3, units = 4;

/// An Elman RNN over batch-major x [B, T, in_width]: h_{t+1} = tanh([x_t, h_t] W + b) + 0.5 h_t,
/// from h0 [B, units]; the value is [B, T, units].
template <class T, i64 Steps, i64 Batch = ty::dyn>
struct rnn {
  static constexpr auto x = ty::placeholder<"x", T, ty::shape<Batch, Steps, in_width>>;
  static constexpr auto h0 = ty::placeholder<"h0", T, ty::shape<Batch, units>>;
  static constexpr auto hs = ty::scan<"rnn">(
      [](auto h, auto xt) {
        return ty::tanh(ty::dense<"cell", units, ty::uniform<-0.7, 0.7>, ty::uniform<-0.3, 0.3>>(
                   ty::concat<-1>(xt, h))) +
               h * ty::constant<0.5>;
      },
      h0, ty::transpose<1, 0, 2>(x));
  static constexpr auto y = ty::transpose<1, 0, 2>(hs);
  static constexpr auto w = ty::find_variable<"cell/weights">(hs);
  static constexpr auto b = ty::find_variable<"cell/biases">(hs);
  // every step's output weighs in (not only the last)
  static constexpr auto loss = ty::sum(ty::square(y) * ty::constant<0.5>) + ty::sum(y);
};

/// The forward in double precision, [B, T, units].
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& h0,
                              i64 batch, i64 steps, const std::vector<double>& w,
                              const std::vector<double>& b) {
  std::vector<double> out(static_cast<std::size_t>(batch * steps * units));
  for (i64 r = 0; r < batch; ++r) {
    std::vector<double> h(h0.begin() + r * units, h0.begin() + (r + 1) * units), next(units);
    for (i64 t = 0; t < steps; ++t) {
      for (i64 o = 0; o < units; ++o) {
        double acc = b[static_cast<std::size_t>(o)];
        for (i64 i = 0; i < in_width; ++i)
          acc += x[static_cast<std::size_t>((r * steps + t) * in_width + i)] *
                 w[static_cast<std::size_t>(i * units + o)];
        for (i64 i = 0; i < units; ++i)
          acc += h[static_cast<std::size_t>(i)] *
                 w[static_cast<std::size_t>((in_width + i) * units + o)];
        next[static_cast<std::size_t>(o)] = std::tanh(acc) + 0.5 * h[static_cast<std::size_t>(o)];
      }
      h = next;
      for (i64 o = 0; o < units; ++o)
        out[static_cast<std::size_t>((r * steps + t) * units + o)] = h[static_cast<std::size_t>(o)];
    }
  }
  return out;
}

template <class T>
ty::tensor<T> wave(std::vector<i64> dims, double f, double phase) {
  ty::tensor<T> t(std::move(dims));
  for (i64 i = 0; i < t.size(); ++i)
    t[i] = static_cast<T>(std::sin(f * static_cast<double>(i) + phase));
  return t;
}

template <class T>
std::vector<double> as_double(const ty::tensor<T>& t) {
  return {t.data(), t.data() + t.size()};
}

/// Central differences of `loss_at` around `v`, element by element, against `grad`: the worst
/// absolute difference.
template <class F>
double worst_fd(ty::tensor<double> v, const ty::tensor<double>& grad, F loss_at) {
  const double eps = 1e-6;
  double worst = 0;
  for (i64 i = 0; i < v.size(); ++i) {
    auto vp = v, vm = v;
    vp[i] += eps;
    vm[i] -= eps;
    worst = std::max(worst, std::abs((loss_at(vp) - loss_at(vm)) / (2 * eps) - grad[i]));
  }
  return worst;
}

template <class M>
void check_gradients(i64 batch, i64 steps) {
  ty::session<> s(ty::session_options{.threads = 1, .seed = 9});
  const auto x = wave<double>({batch, steps, in_width}, 0.7, 0.3);
  const auto h0 = wave<double>({batch, units}, 1.3, 0.1);
  const auto [gx, gh] = ty::grad(M::loss, M::x, M::h0);
  const auto [gw, gb] = ty::grad(M::loss, M::w, M::b);
  auto [dx, dh, dw, db] = s.run(ty::fetch(gx, gh, gw, gb), ty::feed(M::x, x), ty::feed(M::h0, h0));
  CHECK(dx.shape() == x.shape());
  CHECK(dh.shape() == h0.shape());
  CHECK(dw.shape() == std::vector<i64>{in_width + units, units});

  auto loss_of = [&](const ty::tensor<double>& xv, const ty::tensor<double>& hv) {
    auto [l] = s.run(ty::fetch(M::loss), ty::feed(M::x, xv), ty::feed(M::h0, hv));
    return l[0];
  };
  CHECK(worst_fd(x, dx, [&](const auto& v) { return loss_of(v, h0); }) <= 1e-7);
  CHECK(worst_fd(h0, dh, [&](const auto& v) { return loss_of(x, v); }) <= 1e-7);
  auto check_var = [&](auto var, const ty::tensor<double>& grad) {
    const auto v = s.read(var);
    const double bad = worst_fd(v, grad, [&](const ty::tensor<double>& vv) {
      s.write(var, vv);
      return loss_of(x, h0);
    });
    s.write(var, v);
    return bad;
  };
  CHECK(check_var(M::w, dw) <= 1e-7);
  CHECK(check_var(M::b, db) <= 1e-7);
  // the gradients that are not zero somewhere are not all zero (the checks above could pass on
  // zeros only if the loss did not depend on them)
  double norm = 0;
  for (const auto* g : {&dx, &dh, &dw, &db})
    for (i64 i = 0; i < g->size(); ++i)
      norm += std::abs((*g)[i]);
  CHECK(norm > 1.0);
}

} // namespace

TEST_CASE("scan: the forward equals a naive loop over the steps (float64, 1 and 2 threads)") {
  using M = rnn<double, 7>;
  for (int threads : {1, 2}) {
    ty::session<> s(ty::session_options{.threads = threads, .seed = 5});
    const auto x = wave<double>({5, 7, in_width}, 0.7, 0.3);
    const auto h0 = wave<double>({5, units}, 1.3, 0.1);
    auto [y] = s.run(ty::fetch(M::y), ty::feed(M::x, x), ty::feed(M::h0, h0));
    CHECK(y.shape() == std::vector<i64>{5, 7, units});
    const auto ref = reference(as_double(x), as_double(h0), 5, 7, as_double(s.read(M::w)),
                               as_double(s.read(M::b)));
    REQUIRE(y.size() == static_cast<i64>(ref.size()));
    double worst = 0;
    for (i64 i = 0; i < y.size(); ++i)
      worst = std::max(worst, std::abs(y[i] - ref[static_cast<std::size_t>(i)]));
    CHECK(worst <= 1e-12);
  }
}

TEST_CASE("scan: gradients of x, h0 and the shared variables match finite differences") {
  SUBCASE("run-time batch: init's gradient and xs's come from two backward loops") {
    check_gradients<rnn<double, 5>>(3, 5);
  }
  SUBCASE("static shapes: one backward loop") {
    check_gradients<rnn<double, 4, 2>>(2, 4);
  }
  SUBCASE("one step") {
    check_gradients<rnn<double, 1>>(2, 1);
  }
}

TEST_CASE("scan: a body whose step gradients are the seed itself or no buffer at all") {
  // h_{t+1} = h_t + x_t: the value is the running sum, every gradient a sum of the seeds
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<6, 2>>;
  static constexpr auto h0 = ty::placeholder<"h0", double, ty::shape<2>>;
  static constexpr auto hs = ty::scan<"sum">([](auto h, auto xt) { return h + xt; }, h0, x);
  static constexpr auto loss = ty::sum(hs * ty::constant<2.0>);
  const auto [gx, gh] = ty::grad(loss, x, h0);
  ty::session<> s(ty::session_options{.threads = 1});
  const auto xv = wave<double>({6, 2}, 0.9, 0.2);
  const auto hv = wave<double>({2}, 0.5, 1.0);
  auto [y, dx, dh] = s.run(ty::fetch(hs, gx, gh), ty::feed(x, xv), ty::feed(h0, hv));
  for (i64 c = 0; c < 2; ++c) {
    double acc = hv[c];
    for (i64 t = 0; t < 6; ++t) {
      acc += xv[t * 2 + c];
      CHECK(y[t * 2 + c] == doctest::Approx(acc).epsilon(1e-14));
      CHECK(dx[t * 2 + c] == doctest::Approx(2.0 * static_cast<double>(6 - t)));
    }
    CHECK(dh[c] == doctest::Approx(12.0));
  }
  // a body that ignores its carry: h0's gradient is zero, x's flows from its own step only
  static constexpr auto ys = ty::scan<"last">([](auto, auto xt) { return xt * xt; }, h0, x);
  const auto [gx2, gh2] = ty::grad(ty::sum(ys), x, h0);
  auto [dx2, dh2] = s.run(ty::fetch(gx2, gh2), ty::feed(x, xv), ty::feed(h0, hv));
  for (i64 i = 0; i < dx2.size(); ++i)
    CHECK(dx2[i] == doctest::Approx(2.0 * xv[i]));
  CHECK(dh2[0] == 0.0);
  CHECK(dh2[1] == 0.0);
}

namespace {
struct policy_outcome {
  std::vector<ty::tensor<float>> values; ///< the loss, its gradients, the loss of a forward run
  std::size_t steps_grad, steps_forward; ///< steps run by the two runs
};
/// An Elman RNN with dropout on its carry under scan policy Policy, float32, static steps.
template <class Policy>
struct rnn_policy {
  static constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 5, in_width>>;
  static constexpr auto h0 = ty::placeholder<"h0", float, ty::shape<ty::dyn, units>>;
  // with dropout: a kept mask and a recomputed one must be the same draws
  static constexpr auto hs = ty::scan<"rnn", Policy>(
      [](auto h, auto xt) {
        return ty::tanh(ty::dense<"cell", units, ty::uniform<-0.7, 0.7>, ty::uniform<-0.3, 0.3>>(
                   ty::concat<-1>(xt, ty::dropout<7>(h, ty::constant<0.8>)))) +
               ty::sigmoid(h) * h;
      },
      h0, ty::transpose<1, 0, 2>(x));
  static constexpr auto loss = ty::sum(ty::square(hs)) + ty::sum(hs);
  static constexpr auto w = ty::find_variable<"cell/weights">(hs);
  static policy_outcome run() {
    const auto [gx, gh, gw] = ty::grad(loss, x, h0, w);
    ty::session<> s(ty::session_options{.threads = 2, .seed = 3});
    const auto xv = wave<float>({3, 5, in_width}, 0.7, 0.3);
    const auto hv = wave<float>({3, units}, 1.1, 0.2);
    auto [l, dx, dh, dw] = s.run(ty::fetch(loss, gx, gh, gw), ty::feed(x, xv), ty::feed(h0, hv));
    const std::size_t steps_grad = s.stats().steps;
    auto [l2] = s.run(ty::fetch(loss), ty::feed(x, xv), ty::feed(h0, hv));
    const std::size_t steps_forward = s.stats().steps;
    return {{l, dx, dh, dw, l2}, steps_grad, steps_forward};
  }
};
} // namespace

TEST_CASE("scan: ty::store keeps the steps' activations for the gradient, bit for bit the same") {
  const auto stored = rnn_policy<ty::store>::run();
  const auto recomputed = rnn_policy<ty::recompute>::run();
  const auto fits = rnn_policy<ty::memory_budget<(1u << 20)>>::run();
  const auto over = rnn_policy<ty::memory_budget<64>>::run(); // not one step's activations
  for (const auto* o : {&recomputed, &fits, &over}) {
    REQUIRE(o->values.size() == stored.values.size());
    for (std::size_t k = 0; k < stored.values.size(); ++k) {
      REQUIRE(o->values[k].shape() == stored.values[k].shape());
      for (i64 i = 0; i < stored.values[k].size(); ++i)
        CHECK(o->values[k][i] == stored.values[k][i]);
    }
  }
  // the forward alone runs the same steps under every policy (nothing is kept without a
  // gradient to keep it for)
  CHECK(stored.steps_forward == recomputed.steps_forward);
  CHECK(over.steps_forward == recomputed.steps_forward);
  // with the gradient, a kept step is one the backward loop does not run again
  CHECK(stored.steps_grad < recomputed.steps_grad);
  CHECK(fits.steps_grad == stored.steps_grad);
  CHECK(over.steps_grad == recomputed.steps_grad);
}

TEST_CASE("scan: a body without a gradient (argmax) compiles and runs under the default policy") {
  // greedy decoding: the next carry is the one-hot of the step's argmax; nothing to keep, since
  // nothing can differentiate it, so ty::store falls back to recomputing
  static constexpr auto x = ty::placeholder<"x", float, ty::shape<4, 2, units>>;
  static constexpr auto h0 = ty::placeholder<"h0", float, ty::shape<2, units>>;
  static constexpr auto hs = ty::scan<"greedy">(
      [](auto h, auto xt) { return ty::one_hot<units, float>(ty::argmax<1>(h + xt)); }, h0, x);
  ty::session<> s(ty::session_options{.threads = 1});
  const auto xv = wave<float>({4, 2, units}, 0.9, 0.2);
  const auto hv = wave<float>({2, units}, 0.5, 1.0);
  auto [y] = s.run(ty::fetch(hs), ty::feed(x, xv), ty::feed(h0, hv));
  std::vector<float> h(hv.data(), hv.data() + 2 * units);
  for (i64 t = 0; t < 4; ++t)
    for (i64 b = 0; b < 2; ++b) {
      i64 best = 0;
      for (i64 j = 1; j < units; ++j)
        if (h[b * units + j] + xv[(t * 2 + b) * units + j] >
            h[b * units + best] + xv[(t * 2 + b) * units + best])
          best = j;
      for (i64 j = 0; j < units; ++j) {
        h[b * units + j] = j == best ? 1.0f : 0.0f;
        CHECK(y[(t * 2 + b) * units + j] == h[b * units + j]);
      }
    }
}

TEST_CASE("scan: float32 Adam trains through the loop") {
  using M = rnn<float, 6>;
  static constexpr auto target = ty::placeholder<"target", float, ty::shape<ty::dyn, 6, units>>;
  static constexpr auto loss = ty::mean(ty::square(M::y - target));
  static constexpr auto train = ty::adam(ty::constant<0.02>).minimize(loss);
  ty::session<> s(ty::session_options{.threads = 2, .seed = 1});
  const auto x = wave<float>({8, 6, in_width}, 0.7, 0.3);
  const auto h0 = wave<float>({8, units}, 0.0, 0.0);
  auto t = wave<float>({8, 6, units}, 0.37, 0.5);
  for (i64 i = 0; i < t.size(); ++i)
    t[i] *= 0.5f;
  float first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    auto [l] =
        s.run(ty::fetch(loss, train), ty::feed(M::x, x), ty::feed(M::h0, h0), ty::feed(target, t));
    (step == 0 ? first : last) = l[0];
  }
  CHECK(last < 0.5f * first);
}

TEST_CASE("scan: two CPU towers train as one tower on the whole batch") {
  using M = rnn<double, 4>;
  static constexpr auto target = ty::placeholder<"target", double, ty::shape<ty::dyn, 4, units>>;
  static constexpr auto loss = ty::mean(ty::square(M::y - target));
  static constexpr auto train = ty::gradient_descent(ty::constant<0.3>).minimize(loss);
  ty::session<> one(ty::session_options{.threads = 1, .seed = 4});
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> two(
      ty::session_options{.threads = 2, .seed = 4});
  const auto x = wave<double>({6, 4, in_width}, 0.7, 0.3);
  const auto h0 = wave<double>({6, units}, 1.1, 0.0);
  const auto t = wave<double>({6, 4, units}, 0.3, 0.9);
  for (int step = 0; step < 4; ++step) {
    auto [a] = one.run(ty::fetch(loss, train), ty::feed(M::x, x), ty::feed(M::h0, h0),
                       ty::feed(target, t));
    auto [b] = two.run(ty::fetch(loss, train), ty::feed(M::x, x), ty::feed(M::h0, h0),
                       ty::feed(target, t));
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

TEST_CASE("scan: a GPU placement moves the loop to cpu<0> and says so") {
  using M = rnn<float, 3>;
  using H = std::remove_cvref_t<decltype(M::hs)>;
  using P = ty::compile::plan<ty::type_list<H>, ty::on<ty::gpu<0>>>;
  constexpr std::size_t i = P::index_c<H>::value;
  CHECK(P::placement.device[i].is_cpu);
  CHECK(P::placement.fell_back[i]);
  const std::string listing = P::describe_placement();
  INFO(listing);
  CHECK(listing.find("scan") != std::string::npos);
}

TEST_CASE("scan: a sequence of length zero gives an empty value and zero gradients") {
  using M = rnn<double, ty::dyn, 2>; // (every dyn extent of a feed is one value: the batch)
  ty::session<> s(ty::session_options{.threads = 1});
  const auto x = wave<double>({2, 0, in_width}, 0.7, 0.3);
  const auto h0 = wave<double>({2, units}, 1.3, 0.1);
  const auto [gh, gw] = ty::grad(ty::sum(M::y), M::h0, M::w);
  auto [y, dh, dw] = s.run(ty::fetch(M::y, gh, gw), ty::feed(M::x, x), ty::feed(M::h0, h0));
  CHECK(y.shape() == std::vector<i64>{2, 0, units});
  for (i64 i = 0; i < dh.size(); ++i)
    CHECK(dh[i] == 0.0);
  for (i64 i = 0; i < dw.size(); ++i)
    CHECK(dw[i] == 0.0);
}

namespace {

constexpr i64 lstm_units = 3;

/// An LSTM in double precision over x [B, T, E] from zeros: [B, T, units] (PyTorch's gate order
/// i, f, g, o; forget bias `fb`); W [E + units, 4 units], b [4 units].
std::vector<double> lstm_reference(const std::vector<double>& x, i64 batch, i64 steps, i64 e,
                                   const std::vector<double>& w, const std::vector<double>& b,
                                   double fb) {
  const i64 u = lstm_units;
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<double> out(static_cast<std::size_t>(batch * steps * u));
  for (i64 r = 0; r < batch; ++r) {
    std::vector<double> h(u, 0.0), c(u, 0.0), z(4 * u);
    for (i64 t = 0; t < steps; ++t) {
      for (i64 o = 0; o < 4 * u; ++o) {
        double acc = b[static_cast<std::size_t>(o)];
        for (i64 k = 0; k < e; ++k)
          acc += x[static_cast<std::size_t>((r * steps + t) * e + k)] *
                 w[static_cast<std::size_t>(k * 4 * u + o)];
        for (i64 k = 0; k < u; ++k)
          acc += h[static_cast<std::size_t>(k)] * w[static_cast<std::size_t>((e + k) * 4 * u + o)];
        z[static_cast<std::size_t>(o)] = acc;
      }
      for (i64 k = 0; k < u; ++k) {
        const auto at = [&](i64 gate) { return z[static_cast<std::size_t>(gate * u + k)]; };
        auto& ck = c[static_cast<std::size_t>(k)];
        ck = sig(at(1) + fb) * ck + sig(at(0)) * std::tanh(at(2));
        h[static_cast<std::size_t>(k)] = sig(at(3)) * std::tanh(ck);
        out[static_cast<std::size_t>((r * steps + t) * u + k)] = h[static_cast<std::size_t>(k)];
      }
    }
  }
  return out;
}

} // namespace

/// The LSTM layer as the lstm op (Op) or as a scan of lstm_cell.
template <bool Op, i64 Units, class X>
consteval auto lstm_layer_of(X x) {
  if constexpr (Op)
    return ty::lstm<"lstm", Units>(x);
  else
    return ty::lstm_scan<"lstm", Units>(x);
}

TEST_CASE_TEMPLATE(
    "lstm: the layer equals a naive LSTM, and its gradients match finite differences", Form,
    std::true_type, std::false_type) {
  static constexpr i64 e = 2, steps = 4;
  static constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, steps, e>>;
  static constexpr auto y = lstm_layer_of<Form::value, lstm_units>(x);
  static constexpr auto w = ty::find_variable<"lstm/weights">(y);
  static constexpr auto b = ty::find_variable<"lstm/biases">(y);
  static constexpr auto loss = ty::sum(y * y) + ty::sum(y);
  ty::session<> s(ty::session_options{.threads = 1, .seed = 2});
  CHECK(s.read(w).shape() == std::vector<i64>{e + lstm_units, 4 * lstm_units});
  // biases drawn away from zero so that every gate's path is exercised
  s.write(b, wave<double>({4 * lstm_units}, 1.7, 0.4));
  const auto xv = wave<double>({3, steps, e}, 0.8, 0.2);
  auto [yv] = s.run(ty::fetch(y), ty::feed(x, xv));
  CHECK(yv.shape() == std::vector<i64>{3, steps, lstm_units});
  const auto ref =
      lstm_reference(as_double(xv), 3, steps, e, as_double(s.read(w)), as_double(s.read(b)), 1.0);
  double worst = 0;
  for (i64 i = 0; i < yv.size(); ++i)
    worst = std::max(worst, std::abs(yv[i] - ref[static_cast<std::size_t>(i)]));
  CHECK(worst <= 1e-12);

  const auto gx = ty::grad(loss, x);
  const auto [gw, gb] = ty::grad(loss, w, b);
  auto [dx, dw, db] = s.run(ty::fetch(gx, gw, gb), ty::feed(x, xv));
  auto loss_at = [&](const ty::tensor<double>& v) {
    auto [l] = s.run(ty::fetch(loss), ty::feed(x, v));
    return l[0];
  };
  CHECK(worst_fd(xv, dx, loss_at) <= 1e-7);
  auto check_var = [&](auto var, const ty::tensor<double>& grad) {
    const auto v = s.read(var);
    const double bad = worst_fd(v, grad, [&](const ty::tensor<double>& vv) {
      s.write(var, vv);
      return loss_at(xv);
    });
    s.write(var, v);
    return bad;
  };
  CHECK(check_var(w, dw) <= 1e-7);
  CHECK(check_var(b, db) <= 1e-7);
}

namespace {

/// The lstm op and lstm_scan on one x, sharing their variables (the same names): the op's
/// value and its gradients of x, w and b against the scan's, for 37 units (a block of 32 and a
/// partial one: vector lanes and their tail, full and partial panels of the packed products).
template <class T>
struct lstm_pair {
  static constexpr i64 e = 5, steps = 6, units = 37;
  static constexpr auto x = ty::placeholder<"x", T, ty::shape<ty::dyn, steps, e>>;
  static constexpr auto y_op = ty::lstm<"lstm", units>(x);
  static constexpr auto y_scan = ty::lstm_scan<"lstm", units>(x);
  static constexpr auto w = ty::find_variable<"lstm/weights">(y_op);
  static constexpr auto b = ty::find_variable<"lstm/biases">(y_op);
  // every step's h weighs in, each element differently
  static constexpr auto weigh = ty::placeholder<"weigh", T, ty::shape<ty::dyn, steps, units>>;
  static constexpr auto loss_op = ty::sum(y_op * weigh + y_op * y_op);
  static constexpr auto loss_scan = ty::sum(y_scan * weigh + y_scan * y_scan);
};

template <class T>
double worst_gap(const ty::tensor<T>& a, const ty::tensor<T>& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (i64 i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])) /
                                (1.0 + std::abs(static_cast<double>(b[i]))));
  return worst;
}

} // namespace

TEST_CASE_TEMPLATE("lstm: the op equals lstm_scan over two blocks of units, value and gradients, "
                   "on 1 and 2 threads",
                   T, float, double) {
  using M = lstm_pair<T>;
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  // 13 sequences: tiles of 6 rows and one of 1 in the loop's products
  const auto xv = wave<T>({13, M::steps, M::e}, 0.9, 0.2);
  const auto weigh = wave<T>({13, M::steps, M::units}, 0.37, 1.1);
  static constexpr auto g_op = ty::grad(M::loss_op, M::x, M::w, M::b);
  static constexpr auto g_scan = ty::grad(M::loss_scan, M::x, M::w, M::b);
  std::vector<ty::tensor<T>> first; // the op's results on one thread
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ty::session<> s(ty::session_options{.threads = threads, .seed = 5});
    s.write(M::b, wave<T>({4 * M::units}, 1.3, 0.5)); // every gate's path away from zero
    const auto run = [&](auto y, auto g) {
      const auto [gx, gw, gb] = g;
      auto [yv, dx, dw, db] =
          s.run(ty::fetch(y, gx, gw, gb), ty::feed(M::x, xv), ty::feed(M::weigh, weigh));
      return std::vector<ty::tensor<T>>{yv, dx, dw, db};
    };
    const auto op = run(M::y_op, g_op);
    const auto scan = run(M::y_scan, g_scan);
    const char* what[] = {"y", "dx", "dw", "db"};
    for (std::size_t i = 0; i < op.size(); ++i) {
      CAPTURE(what[i]);
      CHECK(worst_gap(op[i], scan[i]) <= tol);
    }
    if (first.empty()) {
      first = op;
    } else { // the same bits on any thread count
      for (std::size_t i = 0; i < op.size(); ++i) {
        CAPTURE(what[i]);
        CHECK(worst_gap(op[i], first[i]) == 0.0);
      }
    }
  }
}

namespace {
template <class Shape>
void check_empty_lstm(std::vector<i64> dims) {
  static constexpr auto x = ty::placeholder<"x", double, Shape>;
  static constexpr auto y = ty::lstm<"lstm", 5>(x);
  static constexpr auto w = ty::find_variable<"lstm/weights">(y);
  static constexpr auto b = ty::find_variable<"lstm/biases">(y);
  static constexpr auto g = ty::grad(ty::sum(y), x, w, b);
  const auto [gx, gw, gb] = g;
  ty::session<> s(ty::session_options{.threads = 2});
  auto [yv, dx, dw, db] = s.run(ty::fetch(y, gx, gw, gb), ty::feed(x, ty::tensor<double>(dims)));
  CHECK(yv.shape() == std::vector<i64>{dims[0], dims[1], 5});
  CHECK(dx.shape() == dims);
  CHECK(dw.shape() == std::vector<i64>{7, 20});
  for (i64 i = 0; i < dw.size(); ++i)
    CHECK(dw[i] == 0.0);
  for (i64 i = 0; i < db.size(); ++i)
    CHECK(db[i] == 0.0);
}
} // namespace

TEST_CASE("lstm: the op over an empty batch or no steps gives an empty value and zero gradients") {
  check_empty_lstm<ty::shape<ty::dyn, 3, 2>>({0, 3, 2});
  check_empty_lstm<ty::shape<2, ty::dyn, 2>>({2, 0, 2});
}

TEST_CASE("lstm: a GPU placement runs the op on cpu<0> and says so") {
  using M = lstm_pair<float>;
  using Y = std::remove_cvref_t<decltype(M::y_op)>;
  using P = ty::compile::plan<ty::type_list<Y>, ty::on<ty::gpu<0>>>;
  constexpr std::size_t i = P::index_c<Y>::value;
  CHECK(P::placement.device[i].is_cpu);
  CHECK(P::placement.fell_back[i]);
  const std::string listing = P::describe_placement();
  INFO(listing);
  CHECK(listing.find("lstm") != std::string::npos);
}
