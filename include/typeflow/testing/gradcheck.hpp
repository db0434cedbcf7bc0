// A gradient checker, for users too: compares grad() with central differences.
//
// Every element of a variable with at most `max_elements` elements is perturbed by +-eps; a
// larger variable is checked along `directions` random unit directions (the directional
// derivative against the dot product of the analytic gradient with the direction). An entry
// passes when |analytic - numeric| <= atol + rtol * |numeric|, the test of
// torch.autograd.gradcheck, whose defaults (eps 1e-6, atol 1e-5, rtol 1e-3) are ours. The
// differences are taken in double: build the graph in float64 to check it (a float32 graph
// needs eps near 1e-2 and tolerances near 1e-2). The report names the worst entry.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../autodiff/grad.hpp"
#include "../runtime/session.hpp"

namespace typeflow {

struct gradcheck_options {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  std::int64_t max_elements = 256; ///< larger variables are checked along random directions
  int directions = 12;
  std::uint64_t seed = 0;
};

struct gradcheck_result {
  bool ok = true;
  std::size_t checked = 0; ///< entries compared
  double worst_ratio = 0;  ///< max of |analytic - numeric| / (atol + rtol |numeric|)
  std::string worst;       ///< the worst entry, e.g. `W[5]: analytic 0.25, numeric 0.2501`
  std::string report() const {
    return std::string(ok ? "gradcheck passed" : "gradcheck FAILED") + " (" +
           std::to_string(checked) + " entries; worst " + worst + ")";
  }
};

template <class... X>
struct wrt_t {};
/// The variables to check: wrt(W, b).
template <class... X>
requires expressions<X...>
consteval wrt_t<X...> wrt(X...) {
  return {};
}

template <class Sess, expression Y, class... X, class... Feeds>
gradcheck_result gradcheck(Sess& s, Y y, wrt_t<X...>, const gradcheck_options& o,
                           const Feeds&... feeds) {
  static_assert((is_variable<X> && ...), "gradcheck: differentiate with respect to variables");
  static_assert(Y::shape_type::rank == 0, "gradcheck: y must be a scalar");
  constexpr auto grads = [] {
    if constexpr (sizeof...(X) == 1)
      return gradients<decltype(grad(Y{}, X{}...))>{};
    else
      return grad(Y{}, X{}...);
  }();
  auto analytic = typeflow::apply([&](auto... g) { return s.run(fetch(g...), feeds...); }, grads);
  auto value = [&] {
    auto [v] = s.run(fetch(y), feeds...);
    return static_cast<double>(v.item());
  };
  gradcheck_result r;
  auto judge = [&](double an, double nu, const std::string& where) {
    const double ratio = std::abs(an - nu) / (o.atol + o.rtol * std::abs(nu));
    ++r.checked;
    if (ratio > 1)
      r.ok = false;
    if (ratio >= r.worst_ratio || r.worst.empty()) {
      r.worst_ratio = ratio;
      std::ostringstream os;
      os.precision(10);
      os << where << ": analytic " << an << ", numeric " << nu;
      r.worst = os.str();
    }
  };
  std::mt19937_64 rng(o.seed);
  auto check_one = [&]<class V, class G>(V var, const G& an) {
    using T = typename V::value_type;
    const auto original = s.read(var);
    auto work = original;
    const std::string name(V::op::name);
    auto at = [&](double step, const std::vector<double>* dir, std::int64_t j) {
      work = original;
      if (dir)
        for (std::int64_t k = 0; k < work.size(); ++k)
          work[k] = static_cast<T>(original[k] + step * (*dir)[static_cast<std::size_t>(k)]);
      else
        work[j] = static_cast<T>(original[j] + step);
      s.write(var, work);
      return value();
    };
    if (original.size() <= o.max_elements) {
      for (std::int64_t j = 0; j < original.size(); ++j) {
        const double nu = (at(o.eps, nullptr, j) - at(-o.eps, nullptr, j)) / (2 * o.eps);
        judge(static_cast<double>(an[j]), nu, name + "[" + std::to_string(j) + "]");
      }
    } else {
      std::normal_distribution<double> normal;
      for (int d = 0; d < o.directions; ++d) {
        std::vector<double> dir(static_cast<std::size_t>(original.size()));
        double norm = 0;
        for (auto& v : dir) {
          v = normal(rng);
          norm += v * v;
        }
        double dot = 0;
        for (std::size_t k = 0; k < dir.size(); ++k) {
          dir[k] /= std::sqrt(norm);
          dot += dir[k] * static_cast<double>(an[static_cast<std::int64_t>(k)]);
        }
        const double nu = (at(o.eps, &dir, 0) - at(-o.eps, &dir, 0)) / (2 * o.eps);
        judge(dot, nu, name + " along direction " + std::to_string(d));
      }
    }
    s.write(var, original);
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (check_one(X{}, std::get<I>(analytic)), ...);
  }
  (std::index_sequence_for<X...>{});
  return r;
}

} // namespace typeflow
