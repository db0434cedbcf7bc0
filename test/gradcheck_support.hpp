// Shared by the gradient tests (test_autodiff, test_nn): deterministic inputs kept away from
// kinks, variables filled from a generator, and gradcheck with the default (torch) tolerances
// that also checks how many entries were compared.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <typeflow/typeflow.hpp>
#include <vector>

namespace test_support {

namespace ty = typeflow;
using session_t = ty::session<>;

/// Uniform in [lo, hi], with |x| > away (keeps relu/abs away from their kink).
struct uniform_gen {
  std::mt19937 rng;
  double lo, hi, away = 0;
  uniform_gen(unsigned seed, double l, double h, double a = 0) : rng(seed), lo(l), hi(h), away(a) {}
  double operator()() {
    std::uniform_real_distribution<double> u(lo, hi);
    for (;;)
      if (const double x = u(rng); std::abs(x) > away)
        return x;
  }
};

template <class V>
std::vector<std::int64_t> dims_of(V) {
  return {V::shape_type::dims.begin(), V::shape_type::dims.end()};
}

/// Fills variable v from gen() and returns the values written.
template <class V, class Gen>
ty::tensor<double> set(session_t& s, V v, Gen&& gen) {
  ty::tensor<double> t(dims_of(v));
  for (std::int64_t i = 0; i < t.size(); ++i)
    t[i] = gen();
  s.write(v, t);
  return t;
}

/// gradcheck; checks that it passed and compared every element of every small variable (or
/// `directions` directions of a large one).
template <class Y, class... X, class... F>
ty::gradcheck_result expect_gradcheck(session_t& s, Y y, ty::wrt_t<X...> w,
                                      const ty::gradcheck_options& o, const F&... feeds) {
  const auto r = ty::gradcheck(s, y, w, o, feeds...);
  const std::size_t expected = ((ty::numel(X::shape_type::dims) <= o.max_elements
                                     ? static_cast<std::size_t>(ty::numel(X::shape_type::dims))
                                     : static_cast<std::size_t>(o.directions)) +
                                ...);
  INFO(ty::to_string(y));
  INFO(r.report());
  CHECK(r.ok);
  CHECK(r.checked == expected);
  CHECK(r.worst_ratio <= 1.0);
  return r;
}

template <class Y, class... X, class... F>
ty::gradcheck_result expect_gradcheck(session_t& s, Y y, ty::wrt_t<X...> w, const F&... feeds) {
  return expect_gradcheck(s, y, w, ty::gradcheck_options{}, feeds...);
}

} // namespace test_support
