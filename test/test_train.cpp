// Training: optimizers against hand-computed updates, hyper-parameters changed at run time,
// layers and the losses collection, checkpoints of a training state, and the seed's model
// lowering its loss on a 512-example subset.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "../examples/mnist/model.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

// loss(w) = 0.5 * sum(a * w^2), so dloss/dw = a * w.
constexpr auto w = ty::variable<"w", double, ty::shape<3>, ty::fill<1.0>>;
constexpr auto a = ty::placeholder<"a", double, ty::shape<3>>;
constexpr auto quad = ty::sum(a * ty::square(w)) * ty::constant<0.5>;
constexpr auto lr = ty::hyperparameter<"lr", double, 0.1>;

const std::vector<double> A = {1.0, 2.0, -0.5};
const std::vector<double> W0 = {0.5, -1.5, 2.0};

ty::tensor<double> vec(const std::vector<double>& v) {
  return ty::tensor<double>({static_cast<i64>(v.size())}, std::span<const double>(v));
}

template <class S>
void start(S& s) {
  s.initialize(w, lr);
  s.write(w, vec(W0));
}

template <class S, class Train>
void step(S& s, Train train) {
  s.run(ty::fetch(train), ty::feed(a, vec(A)));
}

void check_close(const ty::tensor<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == static_cast<i64>(want.size()));
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (tol == 0)
      CHECK(got[static_cast<i64>(i)] == want[i]);
    else
      CHECK(got[static_cast<i64>(i)] == doctest::Approx(want[i]).epsilon(tol));
  }
}

} // namespace

TEST_CASE("gradient descent: one step is w - lr * g, and global_step counts") {
  constexpr auto train = ty::gradient_descent(lr).minimize(quad);
  ty::session<> s;
  start(s);
  step(s, train);
  std::vector<double> want(3);
  for (int i = 0; i < 3; ++i)
    want[i] = W0[i] - 0.1 * A[i] * W0[i];
  check_close(s.read(w), want, 1e-15);
  CHECK(s.read(ty::global_step)[0] == 1);
  step(s, train);
  CHECK(s.read(ty::global_step)[0] == 2);
}

TEST_CASE("momentum with Nesterov: two steps against a hand computation") {
  constexpr auto train = ty::momentum(lr, ty::constant<0.9>, ty::nesterov).minimize(quad);
  ty::session<> s;
  start(s);
  step(s, train);
  step(s, train);
  // By hand, TensorFlow's formulas: accum = m * accum + g; w -= lr * g + lr * m * accum.
  std::vector<double> wv = W0, acc(3, 0.0);
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 3; ++i) {
      const double g = A[i] * wv[i];
      acc[i] = 0.9 * acc[i] + g;
      wv[i] -= 0.1 * g + 0.1 * 0.9 * acc[i];
    }
  check_close(s.read(w), wv, 1e-14);
  // The slot is named after its variable.
  constexpr auto slot = ty::slot_variable<decltype(w), "/momentum">;
  static_assert(decltype(slot)::op::name == "w/momentum");
  check_close(s.read(slot), acc, 1e-14);
  CHECK(s.read(ty::global_step)[0] == 2);
}

TEST_CASE("a variable's update and its slot's are one loop storing both, with the same bits") {
  // 1000 weights: whole vector blocks and a ragged end.
  constexpr i64 n = 1000;
  constexpr auto mw = ty::variable<"mw", float, ty::shape<n>, ty::fill<0.0>>;
  constexpr auto ma = ty::placeholder<"ma", float, ty::shape<n>>;
  constexpr auto loss = ty::sum(ma * ty::square(mw)) * ty::constant<0.5>;
  constexpr auto train =
      ty::momentum(ty::constant<0.1>, ty::constant<0.9>, ty::nesterov).minimize(loss);
  using P = ty::compile::plan<ty::type_list<decltype(train)>>;
  static_assert(P::layout.merged_outputs == 1); // mw/momentum's, in mw's loop
  CHECK(P::describe().find("also stores %") != std::string::npos);
  // The same arithmetic as plain expressions (nothing to merge), fetched before each step.
  constexpr auto g = ty::replica_mean(ty::grad(loss, mw));
  constexpr auto accum = ty::slot_variable<decltype(mw), "/momentum">;
  constexpr auto next = ty::add(ty::mul(accum, ty::constant<0.9>), g);
  constexpr auto neww =
      ty::sub(mw, ty::mul(ty::add(g, ty::mul(next, ty::constant<0.9>)), ty::constant<0.1>));
  static_assert(
      ty::compile::plan<ty::type_list<decltype(next), decltype(neww)>>::layout.merged_outputs == 0);
  // An assignment that something other than a group reads is not merged.
  constexpr auto read_back = ty::group(ty::mul(ty::assign(accum, next), ty::constant<2.0>),
                                       ty::assign_sub(mw, ty::mul(next, ty::constant<0.1>)));
  static_assert(ty::compile::plan<ty::type_list<decltype(read_back)>>::layout.merged_outputs == 0);
  // Nor an assignment that reads no all-reduced gradient (it would run in the towers of a
  // replicated session, the update after them), though it shares a member with the update.
  constexpr auto ema = ty::variable<"ema", float, ty::shape<n>, ty::fill<0.0>>;
  constexpr auto with_ema = ty::group(train, ty::assign(ema, ty::mul(accum, ty::constant<0.9>)));
  static_assert(ty::compile::plan<ty::type_list<decltype(with_ema)>>::layout.merged_outputs == 1);
  // Two variables of one shape: each merges with its own slot, not with the other through the
  // hyper-parameters they share.
  constexpr auto mw2 = ty::variable<"mw2", float, ty::shape<n>, ty::fill<0.0>>;
  constexpr auto two = ty::momentum(ty::constant<0.1>, ty::constant<0.9>, ty::nesterov)
                           .minimize(loss + ty::sum(ma * ty::square(mw2)));
  static_assert(ty::compile::plan<ty::type_list<decltype(two)>>::layout.merged_outputs == 2);
  // Nor are assignments of different shapes.
  constexpr auto other = ty::variable<"other", float, ty::shape<n / 2>, ty::fill<0.0>>;
  constexpr auto shapes = ty::group(ty::assign(other, ty::constant<1.0>), ty::assign(mw, g));
  static_assert(ty::compile::plan<ty::type_list<decltype(shapes)>>::layout.merged_outputs == 0);

  std::vector<float> av(n), w0(n);
  for (i64 i = 0; i < n; ++i) {
    av[static_cast<std::size_t>(i)] = 0.25f + 0.125f * static_cast<float>(i % 7);
    w0[static_cast<std::size_t>(i)] = static_cast<float>(i % 5) - 2.0f + 0.5f;
  }
  for (int threads : {1, 2}) {
    INFO("threads = " << threads);
    ty::session s(ty::session_options{.threads = threads});
    s.initialize(train);
    s.write(mw, ty::tensor<float>({n}, std::span<const float>(w0)));
    const ty::tensor<float> at({n}, std::span<const float>(av));
    for (int k = 0; k < 3; ++k) {
      auto [nx, nw] = s.run(ty::fetch(next, neww), ty::feed(ma, at));
      s.run(ty::fetch(train), ty::feed(ma, at));
      const auto gw = s.read(mw), ga = s.read(accum);
      CHECK(std::memcmp(gw.data(), nw.data(), sizeof(float) * n) == 0);
      CHECK(std::memcmp(ga.data(), nx.data(), sizeof(float) * n) == 0);
      CHECK(gw[1] != w0[1]);
    }
  }
}

TEST_CASE("momentum without Nesterov differs from Nesterov as the formulas say") {
  constexpr auto train = ty::momentum(lr, ty::constant<0.9>).minimize(quad);
  ty::session<> s;
  start(s);
  step(s, train);
  step(s, train);
  std::vector<double> wv = W0, acc(3, 0.0);
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < 3; ++i) {
      acc[i] = 0.9 * acc[i] + A[i] * wv[i];
      wv[i] -= 0.1 * acc[i];
    }
  check_close(s.read(w), wv, 1e-14);
}

TEST_CASE("adam: three steps against a hand computation (bias-corrected rate)") {
  constexpr auto train = ty::adam(lr).minimize(quad);
  ty::session<> s;
  start(s);
  for (int k = 0; k < 3; ++k)
    step(s, train);
  std::vector<double> wv = W0, m(3, 0.0), v(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const double rate = 0.1 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (int i = 0; i < 3; ++i) {
      const double g = A[i] * wv[i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      wv[i] -= rate * m[i] / (std::sqrt(v[i]) + 1e-8);
    }
  }
  check_close(s.read(w), wv, 1e-12);
  check_close(s.read(ty::slot_variable<decltype(w), "/adam_m">), m, 1e-12);
  check_close(s.read(ty::slot_variable<decltype(w), "/adam_v">), v, 1e-12);
}

TEST_CASE("adam's update is three nodes per variable (adam_m, adam_v, apply_adam)") {
  // One variable more adds its gradient's nodes under any optimizer; under Adam also its two
  // slots and three update nodes, where gradient descent's update is one assign_sub.
  constexpr auto u = ty::variable<"u", double, ty::shape<3>, ty::fill<1.0>>;
  constexpr auto two = quad + ty::sum(ty::square(u));
  constexpr auto size_of = [](auto train) { return ty::graph::node_table<decltype(train)>::size; };
  constexpr std::size_t adam_added =
      size_of(ty::adam(lr).minimize(two)) - size_of(ty::adam(lr).minimize(quad));
  constexpr std::size_t sgd_added = size_of(ty::gradient_descent(lr).minimize(two)) -
                                    size_of(ty::gradient_descent(lr).minimize(quad));
  CHECK(adam_added - sgd_added == 2 + 3 - 1);
  // The three run as one loop storing all three values (reading the gradient, the variable and
  // its slots once): two merged outputs in the variable's loop.
  using P = ty::compile::plan<ty::type_list<decltype(ty::adam(lr).minimize(quad))>>;
  CHECK(P::layout.merged_outputs == 2);
}

TEST_CASE("literal-only subexpressions are weakly typed: folded, or adopting the dtype they meet") {
  // Folded at construction where the functor is a constant expression ...
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(ty::constant<1> - ty::constant<0.9>)>,
                               std::remove_cvref_t<decltype(ty::constant<1.0 - 0.9>)>>);
  // ... and weakly typed in any case, unless an op sets the dtype (cast) or changes it (a
  // comparison gives bool).
  static_assert(ty::detail::weak_t<decltype(ty::constant<2> * ty::constant<3>)>::value);
  static_assert(ty::detail::weak_t<decltype(-(ty::constant<2> + ty::constant<0.5>))>::value);
  static_assert(!ty::detail::weak_t<decltype(ty::cast<double>(ty::constant<2>))>::value);
  static_assert(!ty::detail::weak_t<decltype(ty::constant<2> < ty::constant<3>)>::value);
  // A float32 formula with a literal-only factor stays float32 and computes it.
  constexpr auto x = ty::placeholder<"x32", float, ty::shape<5>>;
  constexpr auto y = x * (ty::constant<1> - ty::constant<0.25>)+ty::sqrt(ty::constant<4>);
  static_assert(std::is_same_v<decltype(y)::value_type, float>);
  ty::session<> s;
  auto [r] = s.run(ty::fetch(y), ty::feed(x, ty::tensor<float>({5}, {1, 2, -4, 8, 0.5f})));
  const float xs[] = {1, 2, -4, 8, 0.5f};
  for (i64 i = 0; i < 5; ++i)
    CHECK(r[i] == doctest::Approx(xs[i] * 0.75 + 2.0).epsilon(1e-7));
  // A literal-only expression that cannot be folded (a probe counts at run time) is a fused
  // region with no inputs; it compiles without a warning (-Wall -Wextra -Werror here) and runs.
  constexpr auto lit = ty::debug::probe<"literal">(ty::constant<2>) * ty::constant<3>;
  static_assert(ty::detail::weak_t<std::remove_cvref_t<decltype(lit)>>::value);
  auto [l] = s.run(ty::fetch(lit));
  CHECK(l[0] == 6.0);
}

TEST_CASE("adam in float32, as the README writes it, against a double-precision loop") {
  // 37 weights: the vector loops' full batches and their ragged end.
  constexpr i64 n = 37;
  constexpr auto w32 = ty::variable<"w32", float, ty::shape<n>, ty::fill<0.0>>;
  constexpr auto a32 = ty::placeholder<"a32", float, ty::shape<n>>;
  constexpr auto loss = ty::sum(a32 * ty::square(w32)) * ty::constant<0.5>;
  constexpr auto train = ty::adam(ty::constant<0.01>).minimize(loss);
  static_assert(std::is_same_v<decltype(loss)::value_type, float>);
  std::vector<float> av(n), wv0(n);
  for (i64 i = 0; i < n; ++i) {
    av[static_cast<std::size_t>(i)] = 0.25f + 0.125f * static_cast<float>(i % 7);
    wv0[static_cast<std::size_t>(i)] = static_cast<float>(i % 5) - 2.0f + 0.5f;
  }
  ty::session<> s;
  s.initialize(w32);
  s.write(w32, ty::tensor<float>({n}, std::span<const float>(wv0)));
  const ty::tensor<float> at({n}, std::span<const float>(av));
  for (int k = 0; k < 20; ++k)
    s.run(ty::fetch(train), ty::feed(a32, at));
  std::vector<double> wv(wv0.begin(), wv0.end()), m(n, 0.0), v(n, 0.0);
  for (int t = 1; t <= 20; ++t) {
    const double rate = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (std::size_t i = 0; i < wv.size(); ++i) {
      const double g = av[i] * wv[i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      wv[i] -= rate * m[i] / (std::sqrt(v[i]) + 1e-8);
    }
  }
  const auto got = s.read(w32);
  REQUIRE(got.size() == n);
  for (i64 i = 0; i < n; ++i)
    CHECK(got[i] == doctest::Approx(wv[static_cast<std::size_t>(i)]).epsilon(1e-4).scale(1e-3));
  CHECK(s.read(ty::global_step)[0] == 20);
}

TEST_CASE("the learning rate is a run-time value: changing it needs no recompilation") {
  constexpr auto train = ty::gradient_descent(lr).minimize(quad);
  ty::session<> s;
  start(s);
  s.write(lr, 0.0);
  step(s, train);
  check_close(s.read(w), W0, 0);
  s.write(lr, 0.5);
  step(s, train);
  std::vector<double> want(3);
  for (int i = 0; i < 3; ++i)
    want[i] = W0[i] - 0.5 * A[i] * W0[i];
  check_close(s.read(w), want, 1e-15);
}

TEST_CASE("exponential_decay follows global_step, staircase or not") {
  constexpr auto smooth = ty::exponential_decay<10, 0.5>(lr);
  constexpr auto stairs = ty::exponential_decay<10, 0.5, true>(lr);
  ty::session<> s;
  s.initialize(smooth, stairs);
  for (i64 gs : {0, 5, 10, 25}) {
    s.write(ty::global_step, gs);
    auto [a1, a2] = s.run(ty::fetch(smooth, stairs));
    CHECK(a1[0] == doctest::Approx(0.1 * std::pow(0.5, static_cast<double>(gs) / 10.0)));
    CHECK(a2[0] == doctest::Approx(0.1 * std::pow(0.5, static_cast<double>(gs / 10))));
  }
}

TEST_CASE("minimize trains exactly the trainable variables") {
  constexpr auto frozen = ty::variable<"frozen", double, ty::shape<3>, ty::not_trainable<ty::ones>>;
  constexpr auto loss = ty::sum(a * ty::square(w) * frozen);
  using vars = ty::trainable_variables_t<decltype(loss)>;
  static_assert(std::is_same_v<vars, ty::type_list<std::remove_cvref_t<decltype(w)>>>);
  constexpr auto train = ty::gradient_descent(lr).minimize(loss);
  ty::session<> s;
  start(s);
  s.initialize(frozen);
  step(s, train);
  check_close(s.read(frozen), {1, 1, 1}, 0);
  CHECK(s.read(w)[0] != doctest::Approx(W0[0]));
}

TEST_CASE("layers own Name/weights and Name/biases; the losses collection adds weight decay") {
  constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, 4>>;
  constexpr auto h =
      ty::dense<"fc", 3, ty::glorot_uniform, ty::constant_initializer<0.25>, 0.01>(x);
  constexpr auto fw = ty::find_variable<"fc/weights">(h);
  constexpr auto fb = ty::find_variable<"fc/biases">(h);
  static_assert(decltype(fw)::shape_type::dims == ty::dims_t<2>{4, 3});
  static_assert(decltype(fb)::shape_type::dims == ty::dims_t<1>{3});
  constexpr auto base = ty::sum(h);
  constexpr auto total = ty::add_weight_decay(base);
  ty::session<> s(ty::session_options{.seed = 3});
  s.initialize(total);
  const auto wv = s.read(fw);
  const double limit = std::sqrt(6.0 / (4 + 3));
  double l2 = 0;
  for (i64 i = 0; i < wv.size(); ++i) {
    CHECK(std::abs(wv[i]) <= limit);
    l2 += wv[i] * wv[i];
  }
  check_close(s.read(fb), {0.25, 0.25, 0.25}, 0);
  ty::tensor<double> xv({2, 4}, {1, 2, 3, 4, -1, 0.5, 2, 0});
  auto [b, t] = s.run(ty::fetch(base, total), ty::feed(x, xv));
  CHECK(t[0] == doctest::Approx(b[0] + 0.01 * 0.5 * l2).epsilon(1e-12));
}

TEST_CASE("a checkpoint of a training state resumes bit for bit") {
  constexpr auto train = ty::momentum(lr, ty::constant<0.9>, ty::nesterov).minimize(quad);
  const auto dir = std::filesystem::temp_directory_path() / "typeflow_test_train_ckpt";
  std::filesystem::create_directories(dir);
  const auto file = dir / "state.safetensors";
  ty::session<> s1;
  start(s1);
  step(s1, train);
  step(s1, train);
  ty::save_checkpoint(s1, file);
  step(s1, train);

  ty::session<> s2(ty::session_options{.seed = 99});
  s2.initialize(train);
  ty::restore_checkpoint(s2, file);
  CHECK(s2.read(ty::global_step)[0] == 2);
  step(s2, train);
  const auto w1 = s1.read(w), w2 = s2.read(w);
  for (i64 i = 0; i < 3; ++i)
    CHECK(w1[i] == w2[i]); // bitwise: same inputs, same kernels
  CHECK(s2.read(ty::global_step)[0] == 3);
  std::filesystem::remove_all(dir);
}

namespace {
/// 512 examples: Fashion-MNIST's first training images when installed, else a synthetic set
/// whose class is drawn in the image (a bright bar at a class-dependent position).
std::pair<std::vector<float>, std::vector<std::int32_t>> subset512() {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (std::filesystem::exists(dir + "/train-labels-idx1-ubyte.gz")) {
    auto split = ty::data::load_mnist(dir, true);
    split.images.resize(512 * 28 * 28);
    split.labels.resize(512);
    return {split.images, split.labels};
  }
  MESSAGE("Fashion-MNIST not installed: using a synthetic 512-example set");
  std::vector<float> img(512 * 28 * 28, -0.5f);
  std::vector<std::int32_t> lab(512);
  for (int n = 0; n < 512; ++n) {
    lab[n] = n % 10;
    for (int r = 0; r < 28; ++r)
      for (int c = 2 * lab[n]; c < 2 * lab[n] + 4; ++c)
        img[(n * 28 + r) * 28 + c] = 0.45f;
  }
  return {img, lab};
}
} // namespace

TEST_CASE("the seed's model lowers its loss on a 512-example subset within 60 steps") {
  const auto [images, labels] = subset512();
  ty::session<> s(ty::session_options{.seed = 1});
  s.initialize(mnist::train_op);
  s.write(mnist::learning_rate, 0.05f);
  auto loss_on_all = [&] {
    auto [l] =
        s.run(ty::fetch(mnist::cross_entropy),
              ty::feed(mnist::images, ty::tensor_view<float>(images.data(), {512, 28, 28, 1})),
              ty::feed(mnist::labels, ty::tensor_view<std::int32_t>(labels.data(), {512})));
    return static_cast<double>(l[0]);
  };
  const double before = loss_on_all();
  CHECK(before == doctest::Approx(std::log(10.0)).epsilon(0.1)); // near-uniform at the start
  for (int k = 0; k < 60; ++k) {
    const i64 b = (k % 4) * 128;
    s.run(ty::fetch(mnist::train_op),
          ty::feed(mnist::images,
                   ty::tensor_view<float>(images.data() + b * 28 * 28, {128, 28, 28, 1})),
          ty::feed(mnist::labels, ty::tensor_view<std::int32_t>(labels.data() + b, {128})));
  }
  const double after = loss_on_all();
  INFO("cross-entropy before " << before << ", after 60 steps " << after);
  CHECK(after < 0.6 * before); // the stated margin: at least 40% lower
  CHECK(s.read(ty::global_step)[0] == 60);
}
