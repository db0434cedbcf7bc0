// Graphs past the front end's old fixed limits (issue 43): 300 variables and a training op that
// groups 601 assignments (one per variable and per Momentum slot, and the global step), more
// operands than a 32- or 64-bit mask has bits, than clang's 256-operand fold expressions take, and
// a loss 300 additions deep, deeper than a recursive walk could go under g++'s template depth of
// 900. Trained and checked against a double-precision loop. (Compile cost: bench/README.md.)
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <utility>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;

namespace {

#ifndef TYPEFLOW_SCALE_VARIABLES
#define TYPEFLOW_SCALE_VARIABLES 300
#endif
constexpr std::size_t n_vars = TYPEFLOW_SCALE_VARIABLES;

/// "v000", "v001", ...: one name per variable.
template <std::size_t I>
consteval ty::fixed_string<4> var_name() {
  ty::fixed_string<4> s;
  s.data[0] = 'v';
  s.data[1] = static_cast<char>('0' + I / 100);
  s.data[2] = static_cast<char>('0' + I / 10 % 10);
  s.data[3] = static_cast<char>('0' + I % 10);
  return s;
}

/// Variable I starts at start(I).
constexpr double start(std::size_t i) {
  return 0.25 * static_cast<double>(i % 7) - 0.5;
}

template <std::size_t I>
constexpr auto var = ty::variable<var_name<I>(), double, ty::shape<>, ty::fill<start(I)>>;

/// sum_i v_i^2, as a chain of additions.
template <std::size_t... I>
consteval auto sum_of_squares(std::index_sequence<I...>) {
  return (... + ty::square(var<I>));
}
constexpr auto loss = sum_of_squares(std::make_index_sequence<n_vars>{});

template <class S, std::size_t... I>
std::array<double, n_vars> read_all(S& s, std::index_sequence<I...>) {
  return {s.read(var<I>)[0]...};
}

} // namespace

constexpr auto train = ty::momentum(ty::constant<0.1>, ty::constant<0.9>).minimize(loss);

// The loss's chain of additions is cut into fused regions of at most max_region_members.
using plan_t = ty::compile::plan<ty::type_list<decltype(loss), decltype(train)>>;
static_assert([] {
  const auto& L = plan_t::layout;
  std::size_t regions = 0, widest = 0;
  for (std::size_t r = 0; r < plan_t::size; ++r)
    if (L.root[r] == r) {
      ++regions;
      widest = std::max(widest, L.member_begin[r + 1] - L.member_begin[r]);
    }
  return regions > 1 && widest == ty::compile::max_region_members;
}());

TEST_CASE("momentum over more variables than a mask has bits: two steps against a loop") {
  static_assert(n_vars > 256);
  ty::session s;
  s.initialize(train);
  // The reference: TensorFlow 1.x's momentum, accum = 0.9 accum + g; v -= 0.1 accum; g = 2 v.
  std::array<double, n_vars> v{}, accum{};
  for (std::size_t i = 0; i < n_vars; ++i)
    v[i] = start(i);
  for (int step = 0; step < 2; ++step) {
    double want_loss = 0;
    for (double x : v)
      want_loss += x * x;
    auto [l] = s.run(ty::fetch(loss, train));
    CHECK(l.item() == doctest::Approx(want_loss).epsilon(1e-12));
    for (std::size_t i = 0; i < n_vars; ++i) {
      accum[i] = 0.9 * accum[i] + 2 * v[i];
      v[i] -= 0.1 * accum[i];
    }
    const auto got = read_all(s, std::make_index_sequence<n_vars>{});
    for (std::size_t i = 0; i < n_vars; ++i) {
      INFO("variable ", i, " after step ", step + 1);
      CHECK(got[i] == doctest::Approx(v[i]).epsilon(1e-12));
    }
  }
  CHECK(s.read(ty::global_step)[0] == 2);
}
