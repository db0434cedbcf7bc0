// Dynamic loss scaling (nn/optimizers.hpp, loss_scaled): the scale and its growth counter follow
// PyTorch's GradScaler step by step over recorded overflow/finite sequences (fixtures from
// torch._amp_update_scale_: test/fixtures/gen_loss_scale_fixtures.py); a step with an inf or NaN
// gradient changes no trained variable; and, the scale being a power of two, loss-scaled training
// equals plain training over the finite batches alone, bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "fixtures/loss_scale_fixtures.hpp"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;

namespace {

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 1>>;
constexpr auto pred = ty::dense<"fc", 1, ty::uniform<-0.5, 0.5>>(x);
constexpr auto loss = ty::mean(ty::square(pred - y));
constexpr auto opt = ty::momentum(ty::constant<0.05>, ty::constant<0.9>, ty::nesterov);
constexpr auto plain = opt.minimize(loss);
constexpr auto scaled_short =
    ty::loss_scaled<ty::loss_scale_params{.initial = 65536.0, .interval = 3}>(opt).minimize(loss);
constexpr auto scaled_default = ty::loss_scaled(opt).minimize(loss);
constexpr auto scale = ty::find_variable<"loss_scale">(scaled_short);
constexpr auto good_steps = ty::find_variable<"loss_scale/good_steps">(scaled_short);
constexpr auto weights = ty::find_variable<"fc/weights">(loss);
constexpr auto biases = ty::find_variable<"fc/biases">(loss);

/// Batch k: smooth values; with `overflow`, one input is infinite (the gradients hold infs and
/// NaNs), or NaN on odd k.
std::pair<ty::tensor<float>, ty::tensor<float>> batch(int k, bool overflow) {
  ty::tensor<float> xv({8, 4}), yv({8, 1});
  for (std::int64_t i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i + 7 * k)));
  for (std::int64_t i = 0; i < yv.size(); ++i)
    yv[i] = static_cast<float>(std::cos(0.5 * static_cast<double>(i + 3 * k)));
  if (overflow)
    xv[5] =
        k % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  return {xv, yv};
}

template <class S>
std::string bits_of(S& s) {
  std::string out;
  s.for_each_variable([&](const auto& v) {
    if (v.name.rfind("fc/", 0) == 0)
      out.append(static_cast<const char*>(v.data), v.bytes);
  });
  return out;
}

} // namespace

TEST_CASE("the loss scale follows GradScaler's rule, and an overflowing step updates nothing") {
  using namespace loss_scale_fixtures;
  ty::session<> s(ty::session_options{.seed = 3});
  int k = 0;
  for (const bool overflow : short_overflow) {
    const std::string before = bits_of(s);
    const auto [xv, yv] = batch(k, overflow);
    (void)s.run(ty::fetch(scaled_short), ty::feed(x, xv), ty::feed(y, yv));
    INFO("step " << k << (overflow ? " (overflow)" : ""));
    CHECK(static_cast<double>(s.read(scale)[0]) == short_scale[k]);
    CHECK(s.read(good_steps)[0] == short_good_steps[k]);
    if (overflow)
      CHECK(bits_of(s) == before);
    else
      CHECK(bits_of(s) != before);
    CHECK(s.read(ty::global_step)[0] == k + 1); // every step counts, as in TensorFlow
    ++k;
  }
}

TEST_CASE("GradScaler's defaults over 4,100 steps: 2^16, x2 after 2000 finite steps, x0.5") {
  using namespace loss_scale_fixtures;
  ty::session<> s(ty::session_options{.seed = 3});
  constexpr auto sc = ty::find_variable<"loss_scale">(scaled_default);
  constexpr auto good = ty::find_variable<"loss_scale/good_steps">(scaled_default);
  CHECK(s.read(sc)[0] == 65536.0f);
  std::size_t next = 0;
  const auto [xv, yv] = batch(0, false);
  const auto [bad_x, bad_y] = batch(0, true);
  for (int k = 0; k < long_steps; ++k) {
    const bool overflow = k == long_overflow_at[0] || k == long_overflow_at[1];
    if (overflow)
      (void)s.run(ty::fetch(scaled_default), ty::feed(x, bad_x), ty::feed(y, bad_y));
    else
      (void)s.run(ty::fetch(scaled_default), ty::feed(x, xv), ty::feed(y, yv));
    if (next < std::size(long_at) && long_at[next] == k) {
      INFO("step " << k);
      CHECK(static_cast<double>(s.read(sc)[0]) == long_scale[next]);
      CHECK(s.read(good)[0] == long_good_steps[next]);
      ++next;
    }
  }
  CHECK(next == std::size(long_at));
}

TEST_CASE("loss-scaled training equals plain training over the finite batches, bit for bit") {
  using namespace loss_scale_fixtures;
  ty::session<> scaled(ty::session_options{.seed = 3}), reference(ty::session_options{.seed = 3});
  REQUIRE(bits_of(scaled) == bits_of(reference));
  int k = 0;
  for (const bool overflow : short_overflow) {
    const auto [xv, yv] = batch(k, overflow);
    (void)scaled.run(ty::fetch(scaled_short), ty::feed(x, xv), ty::feed(y, yv));
    if (!overflow)
      (void)reference.run(ty::fetch(plain), ty::feed(x, xv), ty::feed(y, yv));
    ++k;
  }
  CHECK(bits_of(scaled) == bits_of(reference));
  // The momentum slots too (bits_of reads fc/weights, fc/biases and their slots).
  std::size_t slots = 0;
  scaled.for_each_variable(
      [&](const auto& v) { slots += v.name.find("/momentum") != v.name.npos; });
  CHECK(slots == 2);
  // And the trained weights moved from their initial values.
  ty::session<> fresh(ty::session_options{.seed = 3});
  CHECK(scaled.read(weights)[0] != fresh.read(weights)[0]);
  CHECK(scaled.read(biases)[0] != fresh.read(biases)[0]);
}

TEST_CASE(
    "loss-scaled adam: an overflowing step keeps the variables and Adam's slots, bit for bit") {
  // Adam's updates are assignments of their own (adam_m, adam_v, apply_adam); a skipped step
  // passes them the condition as a last operand.
  using namespace loss_scale_fixtures;
  constexpr auto adam_scaled =
      ty::loss_scaled<ty::loss_scale_params{.initial = 65536.0, .interval = 3}>(
          ty::adam(ty::constant<0.01>))
          .minimize(loss);
  ty::session<> s(ty::session_options{.seed = 3});
  s.initialize(adam_scaled);
  std::size_t slots = 0;
  s.for_each_variable([&](const auto& v) {
    slots += v.name.rfind("fc/", 0) == 0 && v.name.find("/adam_") != v.name.npos;
  });
  CHECK(slots == 4);
  int k = 0;
  for (const bool overflow : short_overflow) {
    const std::string before = bits_of(s);
    const auto [xv, yv] = batch(k, overflow);
    (void)s.run(ty::fetch(adam_scaled), ty::feed(x, xv), ty::feed(y, yv));
    INFO("step " << k << (overflow ? " (overflow)" : ""));
    if (overflow)
      CHECK(bits_of(s) == before);
    else
      CHECK(bits_of(s) != before);
    ++k;
  }
}

namespace {
constexpr auto tx = ty::placeholder<"tx", float, ty::shape<8, 4>>;
// dloss/dpred = 1e-8 / 8 per row: under float16's smallest subnormal (2^-24, about 6e-8).
constexpr auto tiny_loss =
    ty::mul(ty::mean(ty::dense<"tiny", 1, ty::uniform<-0.5, 0.5>>(tx)), ty::constant<1e-8>);
constexpr auto tiny_w = ty::find_variable<"tiny/weights">(tiny_loss);
constexpr auto sgd = ty::gradient_descent(ty::constant<1e6>);
} // namespace

// float16 products need oneDNN: skipped (doctest counts it) in a build without it.
TEST_CASE("float16 products: a gradient under 2^-24 vanishes unscaled, and loss scaling keeps it" *
          doctest::skip(!ty::cpu_backend::has_onednn)) {
  const auto opts = [](ty::precision p) { return ty::session_options{.seed = 5, .precision = p}; };
  ty::session<> half(opts(ty::precision::float16)), scaled(opts(ty::precision::float16)),
      exact(opts(ty::precision::float32));
  REQUIRE(half.products_in_float16()); // with oneDNN, a float16 session computes in float16
  ty::tensor<float> xv({8, 4});
  for (std::int64_t i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(0.25 + 0.05 * static_cast<double>(i % 7));
  const auto w0 = exact.read(tiny_w);
  (void)half.run(ty::fetch(sgd.minimize(tiny_loss)), ty::feed(tx, xv));
  (void)scaled.run(ty::fetch(ty::loss_scaled(sgd).minimize(tiny_loss)), ty::feed(tx, xv));
  (void)exact.run(ty::fetch(sgd.minimize(tiny_loss)), ty::feed(tx, xv));
  const auto wh = half.read(tiny_w), ws = scaled.read(tiny_w), we = exact.read(tiny_w);
  for (std::int64_t i = 0; i < w0.size(); ++i) {
    INFO("weight " << i);
    CHECK(wh[i] == w0[i]); // the weights' gradient underflowed to zero in float16
    const double want = static_cast<double>(we[i]) - w0[i],
                 got = static_cast<double>(ws[i]) - w0[i];
    CHECK(want != 0);
    CHECK(std::abs(got - want) <= 2e-3 * std::abs(want)); // float16's rounding of x and dy
  }
}

namespace {
/// An optimizer that adds its step (assign_add), to check that a skipped step keeps -0.0.
struct add_descent {
  template <class V, class G>
  static consteval auto update(V v, G g) {
    return ty::assign_add(v, ty::mul(g, ty::constant<-0.1>));
  }
};
} // namespace

TEST_CASE("a skipped step keeps every bit, -0.0 included, for assign_add updates too") {
  ty::session<> s(ty::session_options{.seed = 3});
  constexpr auto train = ty::loss_scaled(add_descent{}).minimize(loss);
  ty::tensor<float> zeros({4, 1});
  for (auto& v : zeros)
    v = -0.0f;
  s.write(weights, zeros);
  const auto [bad_x, bad_y] = batch(1, true);
  (void)s.run(ty::fetch(train), ty::feed(x, bad_x), ty::feed(y, bad_y));
  const auto w = s.read(weights);
  for (std::int64_t i = 0; i < w.size(); ++i)
    CHECK(std::signbit(w[i]));
  CHECK(s.read(ty::find_variable<"loss_scale">(train))[0] == 32768.0f);
  const auto [xv, yv] = batch(2, false);
  (void)s.run(ty::fetch(train), ty::feed(x, xv), ty::feed(y, yv));
  CHECK(s.read(weights)[0] != 0.0f); // a finite step adds its update
}
