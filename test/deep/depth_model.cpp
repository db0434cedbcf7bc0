// A graph far deeper than the compiler's template depth allows nested instantiations: a chain of
// 150 levels (300 ops forward, as many in the gradient) with weight decay, built under
// -ftemplate-depth=200 (test/CMakeLists.txt). Any part of typeflow that nests one instantiation per
// graph level (a recursive walk, a flag computed by recursion over operands: both did) fails the
// build. Once built, its loss and its gradient step are checked against a double-precision loop
// and central differences.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

namespace {

constexpr int depth = 150;
constexpr double decay = 0.01, rate = 0.1;

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto w = ty::variable<"w", float, ty::shape<4>, ty::fill<1>>;

template <int N>
consteval auto chain() {
  if constexpr (N == 0)
    return x * w;
  else
    return ty::tanh(chain<N - 1>() * w);
}
constexpr auto loss = ty::sum(chain<depth>()) + ty::constant<decay> * ty::sum(ty::square(w));
constexpr auto train = ty::gradient_descent(ty::constant<rate>).minimize(loss);

constexpr int rows = 2;
double input(int i, int j) {
  return 0.1 * (i * 4 + j + 1);
}

/// The loss in double precision for weights v.
double reference_loss(const double (&v)[4]) {
  double total = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < 4; ++j) {
      double h = input(i, j) * v[j];
      for (int k = 0; k < depth; ++k)
        h = std::tanh(h * v[j]);
      total += h;
    }
  for (double c : v)
    total += decay * c * c;
  return total;
}

} // namespace

int main() {
  ty::session s(ty::session_options{.threads = 2, .seed = 1});
  s.initialize(train);
  ty::tensor<float> xv({rows, 4});
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < 4; ++j)
      xv.data()[i * 4 + j] = static_cast<float>(input(i, j));
  const double w0[4] = {1, 1, 1, 1};
  auto [l] = s.run(ty::fetch(loss, train), ty::feed(x, xv));
  const double want = reference_loss(w0);
  int failures = 0;
  if (std::abs(static_cast<double>(l.item()) - want) > 1e-4 * (1 + std::abs(want))) {
    std::printf("FAIL loss %.9g, want %.9g\n", static_cast<double>(l.item()), want);
    ++failures;
  }
  // The step: w1 = w0 - rate * dloss/dw, the derivative by central differences in double.
  const auto w1 = s.read(w);
  for (int j = 0; j < 4; ++j) {
    double up[4] = {1, 1, 1, 1}, down[4] = {1, 1, 1, 1};
    constexpr double eps = 1e-6;
    up[j] += eps;
    down[j] -= eps;
    const double grad = (reference_loss(up) - reference_loss(down)) / (2 * eps);
    const double want_w = w0[j] - rate * grad;
    if (std::abs(static_cast<double>(w1[j]) - want_w) > 1e-4) {
      std::printf("FAIL w[%d] %.9g, want %.9g\n", j, static_cast<double>(w1[j]), want_w);
      ++failures;
    }
  }
  std::printf("depth %d: loss %.6g (double: %.6g), %d failures\n", depth,
              static_cast<double>(l.item()), want, failures);
  return failures == 0 ? 0 : 1;
}
