// Op correctness: every op against independently computed expected values (naive double-precision
// reference loops below, NumPy semantics), on deterministic pseudo-random inputs, including
// broadcasting edge cases, empty extents and scalars.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeflow/typeflow.hpp>
#include <vector>

namespace ty = typeflow;

namespace {

using i64 = std::int64_t;
using dims = std::vector<i64>;

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Reference n-d arrays: row-major doubles (exact for every int32 value and for the int64 values
// used here).
// ---------------------------------------------------------------------------------------------
struct nd {
  dims shape;
  std::vector<double> v;
};

i64 count(const dims& s) {
  i64 n = 1;
  for (auto e : s)
    n *= e;
  return n;
}

nd zeros_nd(const dims& s, double fill = 0.0) {
  return nd{s, std::vector<double>(static_cast<std::size_t>(count(s)), fill)};
}

template <class T>
nd to_nd(const ty::tensor<T>& t) {
  nd r = zeros_nd(t.shape());
  for (i64 i = 0; i < t.size(); ++i)
    r.v[static_cast<std::size_t>(i)] = static_cast<double>(t[i]);
  return r;
}

std::string str(const dims& d) {
  return ty::dims_string(d);
}

dims unravel(i64 flat, const dims& s) {
  dims idx(s.size());
  for (std::size_t a = s.size(); a-- > 0;) {
    idx[a] = flat % s[a];
    flat /= s[a];
  }
  return idx;
}

i64 ravel(const dims& idx, const dims& s) {
  i64 off = 0;
  for (std::size_t a = 0; a < s.size(); ++a)
    off = off * s[a] + idx[a];
  return off;
}

/// NumPy broadcasting of shapes (right-aligned; 1 stretches). Fails the test when incompatible.
dims broadcast_shapes(std::initializer_list<dims> shapes) {
  std::size_t rank = 0;
  for (const auto& s : shapes)
    rank = std::max(rank, s.size());
  dims out(rank, 1);
  for (const auto& s : shapes) {
    for (std::size_t a = 0; a < s.size(); ++a) {
      i64& o = out[rank - s.size() + a];
      const i64 e = s[a];
      if (e == o || e == 1)
        continue;
      if (o == 1)
        o = e;
      else
        FAIL("reference: shapes do not broadcast: " << str(s));
    }
  }
  return out;
}

/// Flat offset of the element of an operand of shape `in` that NumPy broadcasting maps to the
/// output multi-index `out_idx`.
i64 broadcast_offset(const dims& out_idx, const dims& in) {
  const std::size_t lead = out_idx.size() - in.size();
  i64 off = 0;
  for (std::size_t a = 0; a < in.size(); ++a)
    off = off * in[a] + (in[a] == 1 ? 0 : out_idx[lead + a]);
  return off;
}

double at(const nd& a, const dims& out_idx) {
  return a.v[static_cast<std::size_t>(broadcast_offset(out_idx, a.shape))];
}

template <class F>
nd ref_map(const nd& a, F f) {
  nd r = a;
  for (auto& x : r.v)
    x = f(x);
  return r;
}

template <class F>
nd ref_zip(const nd& a, const nd& b, F f) {
  nd r = zeros_nd(broadcast_shapes({a.shape, b.shape}));
  for (i64 i = 0; i < count(r.shape); ++i) {
    const dims idx = unravel(i, r.shape);
    r.v[static_cast<std::size_t>(i)] = f(at(a, idx), at(b, idx));
  }
  return r;
}

nd ref_where(const nd& c, const nd& a, const nd& b) {
  nd r = zeros_nd(broadcast_shapes({c.shape, a.shape, b.shape}));
  for (i64 i = 0; i < count(r.shape); ++i) {
    const dims idx = unravel(i, r.shape);
    r.v[static_cast<std::size_t>(i)] = at(c, idx) != 0.0 ? at(a, idx) : at(b, idx);
  }
  return r;
}

nd ref_broadcast_to(const nd& a, const dims& target) {
  nd r = zeros_nd(target);
  for (i64 i = 0; i < count(target); ++i)
    r.v[static_cast<std::size_t>(i)] = at(a, unravel(i, target));
  return r;
}

enum class red { sum, mean, max, min };

/// Reduction over `axes` (empty: all; negative counts from the end). `l1` receives, per output
/// element, the sum of |x| over the reduced elements (the scale of a sum's rounding error).
nd ref_reduce(const nd& a, std::vector<i64> axes, bool keep, red kind, nd* l1 = nullptr) {
  const std::size_t R = a.shape.size();
  std::vector<bool> mask(R, axes.empty());
  for (i64 ax : axes)
    mask[static_cast<std::size_t>(ax < 0 ? ax + static_cast<i64>(R) : ax)] = true;
  dims keep_shape = a.shape, out_shape;
  i64 red_n = 1;
  for (std::size_t i = 0; i < R; ++i) {
    if (mask[i]) {
      keep_shape[i] = 1;
      red_n *= a.shape[i];
      if (keep)
        out_shape.push_back(1);
    } else {
      out_shape.push_back(a.shape[i]);
    }
  }
  const double init = kind == red::max ? -inf : kind == red::min ? inf : 0.0;
  nd r = zeros_nd(out_shape, init);
  if (l1)
    *l1 = zeros_nd(out_shape);
  for (i64 i = 0; i < count(a.shape); ++i) {
    dims idx = unravel(i, a.shape);
    for (std::size_t k = 0; k < R; ++k)
      if (mask[k])
        idx[k] = 0;
    const auto o = static_cast<std::size_t>(ravel(idx, keep_shape));
    const double x = a.v[static_cast<std::size_t>(i)];
    double& acc = r.v[o];
    if (std::isnan(x) || std::isnan(acc))
      acc = qnan; // NaN propagates through every reduction
    else if (kind == red::max)
      acc = std::max(acc, x);
    else if (kind == red::min)
      acc = std::min(acc, x);
    else
      acc += x;
    if (l1)
      l1->v[o] += std::abs(x);
  }
  if (kind == red::mean) {
    for (auto& x : r.v)
      x = red_n == 0 ? qnan : x / static_cast<double>(red_n);
    if (l1)
      for (auto& x : l1->v)
        x = red_n == 0 ? 0.0 : x / static_cast<double>(red_n);
  }
  return r;
}

/// argmax along one axis; ties give the first index.
nd ref_argmax(const nd& a, i64 axis, bool keep) {
  const std::size_t R = a.shape.size();
  const auto ax = static_cast<std::size_t>(axis < 0 ? axis + static_cast<i64>(R) : axis);
  dims out_shape;
  for (std::size_t i = 0; i < R; ++i)
    if (i != ax)
      out_shape.push_back(a.shape[i]);
    else if (keep)
      out_shape.push_back(1);
  nd r = zeros_nd(out_shape);
  for (i64 o = 0; o < count(out_shape); ++o) {
    dims idx = unravel(o, out_shape);
    if (!keep)
      idx.insert(idx.begin() + static_cast<std::ptrdiff_t>(ax), 0);
    double best = -inf;
    i64 arg = -1;
    for (i64 j = 0; j < a.shape[ax]; ++j) {
      idx[ax] = j;
      const double x = a.v[static_cast<std::size_t>(ravel(idx, a.shape))];
      if (arg < 0 || x > best) {
        best = x;
        arg = j;
      }
    }
    r.v[static_cast<std::size_t>(o)] = static_cast<double>(arg);
  }
  return r;
}

/// Batched matmul [..., m, k] x [..., k, n]; a is stored [..., k, m] when ta, b [..., n, k] when
/// tb. `l1` receives sum_k |a_ik b_kj| per output element.
nd ref_matmul(const nd& a, const nd& b, bool ta, bool tb, nd* l1 = nullptr) {
  const std::size_t R = a.shape.size();
  REQUIRE(b.shape.size() == R);
  const i64 m = ta ? a.shape[R - 1] : a.shape[R - 2], k = ta ? a.shape[R - 2] : a.shape[R - 1];
  const i64 kb = tb ? b.shape[R - 1] : b.shape[R - 2], n = tb ? b.shape[R - 2] : b.shape[R - 1];
  REQUIRE(k == kb);
  dims out_shape(a.shape.begin(), a.shape.end() - 2);
  i64 batch = count(out_shape);
  out_shape.push_back(m);
  out_shape.push_back(n);
  nd r = zeros_nd(out_shape);
  if (l1)
    *l1 = zeros_nd(out_shape);
  for (i64 t = 0; t < batch; ++t)
    for (i64 i = 0; i < m; ++i)
      for (i64 j = 0; j < n; ++j) {
        double acc = 0, scale = 0;
        for (i64 p = 0; p < k; ++p) {
          const double x = a.v[static_cast<std::size_t>(t * m * k + (ta ? p * m + i : i * k + p))];
          const double y = b.v[static_cast<std::size_t>(t * k * n + (tb ? j * k + p : p * n + j))];
          acc += x * y;
          scale += std::abs(x * y);
        }
        const auto o = static_cast<std::size_t>((t * m + i) * n + j);
        r.v[o] = acc;
        if (l1)
          l1->v[o] = scale;
      }
  return r;
}

/// Output axis i is input axis perm[i]; an empty perm reverses the axes.
nd ref_transpose(const nd& a, dims perm) {
  const std::size_t R = a.shape.size();
  if (perm.empty())
    for (std::size_t i = 0; i < R; ++i)
      perm.push_back(static_cast<i64>(R - 1 - i));
  dims out_shape(R);
  for (std::size_t i = 0; i < R; ++i)
    out_shape[i] = a.shape[static_cast<std::size_t>(perm[i])];
  nd r = zeros_nd(out_shape);
  for (i64 o = 0; o < count(out_shape); ++o) {
    const dims oi = unravel(o, out_shape);
    dims ii(R);
    for (std::size_t i = 0; i < R; ++i)
      ii[static_cast<std::size_t>(perm[i])] = oi[i];
    r.v[static_cast<std::size_t>(o)] = a.v[static_cast<std::size_t>(ravel(ii, a.shape))];
  }
  return r;
}

nd ref_concat(const std::vector<nd>& parts, i64 axis) {
  const std::size_t R = parts[0].shape.size();
  const auto ax = static_cast<std::size_t>(axis < 0 ? axis + static_cast<i64>(R) : axis);
  dims out_shape = parts[0].shape;
  out_shape[ax] = 0;
  for (const auto& p : parts)
    out_shape[ax] += p.shape[ax];
  nd r = zeros_nd(out_shape);
  for (i64 o = 0; o < count(out_shape); ++o) {
    dims idx = unravel(o, out_shape);
    std::size_t p = 0;
    while (idx[ax] >= parts[p].shape[ax])
      idx[ax] -= parts[p++].shape[ax];
    r.v[static_cast<std::size_t>(o)] =
        parts[p].v[static_cast<std::size_t>(ravel(idx, parts[p].shape))];
  }
  return r;
}

nd ref_slice(const nd& a, const dims& begin, const dims& size) {
  const std::size_t R = a.shape.size();
  dims out_shape(R);
  for (std::size_t i = 0; i < R; ++i)
    out_shape[i] = size[i] == -1 ? a.shape[i] - begin[i] : size[i];
  nd r = zeros_nd(out_shape);
  for (i64 o = 0; o < count(out_shape); ++o) {
    dims idx = unravel(o, out_shape);
    for (std::size_t i = 0; i < R; ++i)
      idx[i] += begin[i];
    r.v[static_cast<std::size_t>(o)] = a.v[static_cast<std::size_t>(ravel(idx, a.shape))];
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------------------------
struct tol {
  double rel, abs;
};

template <class T>
constexpr tol default_tol() {
  if constexpr (std::is_same_v<T, float>)
    return {1e-5, 1e-6};
  else if constexpr (std::is_same_v<T, double>)
    return {1e-12, 1e-12};
  else
    return {0, 0};
}

/// The reference value as the nearest T would hold it (overflow to +-inf for float).
template <class T>
double representable(double x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isfinite(x) && std::abs(x) > static_cast<double>(std::numeric_limits<T>::max()))
      return std::copysign(inf, x);
    return std::isfinite(x) ? static_cast<double>(static_cast<T>(x)) : x;
  } else {
    return x;
  }
}

/// Shape equality, then every element: integers and bools exactly; floating point within
/// abs + rel * scale, where scale is |expected| or, when given, the per-element error scale (L1
/// of the summands for sums and matmul). NaN must meet NaN and infinities must match exactly.
template <class T>
void check_tensor(const ty::tensor<T>& got, const nd& want, const char* what,
                  tol t = default_tol<T>(), const nd* scale = nullptr) {
  INFO(std::string(what));
  REQUIRE_MESSAGE(got.shape() == want.shape,
                  "shape " << str(got.shape()) << ", expected " << str(want.shape));
  std::ostringstream first;
  i64 bad = 0;
  for (i64 i = 0; i < got.size(); ++i) {
    const auto u = static_cast<std::size_t>(i);
    const double g = static_cast<double>(got[i]);
    const double w = representable<T>(want.v[u]);
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(w) || std::isnan(g))
        ok = std::isnan(w) && std::isnan(g);
      else if (std::isinf(w) || std::isinf(g))
        ok = g == w;
      else
        ok = std::abs(g - w) <= t.abs + t.rel * (scale ? scale->v[u] : std::abs(w));
    } else {
      ok = g == w;
    }
    if (!ok && bad++ < 6)
      first << "  at " << str(unravel(i, want.shape)) << ": got " << g << ", expected " << w
            << "\n";
  }
  INFO("first mismatches:\n" << first.str());
  CHECK_MESSAGE(bad == 0, bad << " of " << got.size() << " elements differ");
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// Uniform in [lo, hi] (integers: inclusive), from a fixed seed.
template <class T>
ty::tensor<T> rnd(const dims& s, unsigned seed, double lo = -3, double hi = 3) {
  std::mt19937 g(seed);
  ty::tensor<T> t(s);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (auto& x : t)
      x = static_cast<T>(d(g));
  } else if constexpr (std::is_same_v<T, bool>) {
    for (auto& x : t)
      x = (g() & 1u) != 0;
  } else {
    std::uniform_int_distribution<long long> d(static_cast<long long>(lo),
                                               static_cast<long long>(hi));
    for (auto& x : t)
      x = static_cast<T>(d(g));
  }
  return t;
}

/// Magnitude uniform in [lo, hi], random sign (safe divisors).
template <class T>
ty::tensor<T> rnd_away(const dims& s, unsigned seed, double lo = 0.5, double hi = 2) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  ty::tensor<T> t(s);
  for (auto& x : t)
    x = static_cast<T>((g() & 1u) ? d(g) : -d(g));
  return t;
}

template <class T>
ty::tensor<T> make(const dims& s, std::initializer_list<double> values) {
  ty::tensor<T> t(s);
  REQUIRE(static_cast<i64>(values.size()) == t.size());
  i64 i = 0;
  for (double v : values)
    t[i++] = static_cast<T>(v);
  return t;
}

template <class T>
ty::tensor<T> scalar(double v) {
  ty::tensor<T> t(dims{});
  t[0] = static_cast<T>(v);
  return t;
}

/// Integer values in [-2, 2] held in T (ties are frequent).
template <class T>
ty::tensor<T> small_ints(const dims& s, unsigned seed, int lo = -2, int hi = 2) {
  const auto r = rnd<std::int32_t>(s, seed, lo, hi);
  ty::tensor<T> t(s);
  for (i64 k = 0; k < t.size(); ++k)
    t[k] = static_cast<T>(r[k]);
  return t;
}

double ref_div(double x, double y, bool integral) {
  if (!integral)
    return x / y;
  return y == 0 ? 0.0 : std::trunc(x / y); // truncation toward zero; integer x / 0 is 0
}

// ---------------------------------------------------------------------------------------------
// Generic checks: one run per operand pair, all ops of a family fetched together.
// ---------------------------------------------------------------------------------------------

/// Compares add, sub, mul, div, maximum, minimum and (floating point) pow(|a|, b) with the
/// broadcasting reference.
template <class T>
void verify_arith(const nd& A, const nd& B, const std::vector<const ty::tensor<T>*>& got) {
  constexpr bool integral = !std::is_floating_point_v<T>;
  check_tensor(*got[0], ref_zip(A, B, [](double x, double y) { return x + y; }), "add");
  check_tensor(*got[1], ref_zip(A, B, [](double x, double y) { return x - y; }), "sub");
  check_tensor(*got[2], ref_zip(A, B, [](double x, double y) { return x * y; }), "mul");
  check_tensor(*got[3], ref_zip(A, B, [](double x, double y) { return ref_div(x, y, integral); }),
               "div");
  check_tensor(*got[4], ref_zip(A, B, [](double x, double y) { return std::max(x, y); }),
               "maximum");
  check_tensor(*got[5], ref_zip(A, B, [](double x, double y) { return std::min(x, y); }),
               "minimum");
  if (got.size() > 6)
    check_tensor(*got[6],
                 ref_zip(A, B, [](double x, double y) { return std::pow(std::abs(x), y); }),
                 "pow(abs(a), b)");
}

/// + - * / maximum minimum (and pow for floating point) of two expressions, in one run.
template <class T, class PA, class PB, class... Feeds>
void check_arith(PA pa, PB pb, const nd& A, const nd& B, const Feeds&... feeds) {
  ty::session s;
  std::vector<const ty::tensor<T>*> got;
  auto collect = [&](const auto&... t) { got = {&t...}; };
  if constexpr (std::is_floating_point_v<T>) {
    const auto r = s.run(ty::fetch(pa + pb, pa - pb, pa * pb, pa / pb, ty::maximum(pa, pb),
                                   ty::minimum(pa, pb), ty::pow(ty::abs(pa), pb)),
                         feeds...);
    static_assert(
        std::is_same_v<std::tuple_element_t<0, std::remove_cvref_t<decltype(r)>>, ty::tensor<T>>);
    std::apply(collect, r);
    verify_arith<T>(A, B, got);
  } else {
    const auto r = s.run(
        ty::fetch(pa + pb, pa - pb, pa * pb, pa / pb, ty::maximum(pa, pb), ty::minimum(pa, pb)),
        feeds...);
    static_assert(
        std::is_same_v<std::tuple_element_t<0, std::remove_cvref_t<decltype(r)>>, ty::tensor<T>>);
    std::apply(collect, r);
    verify_arith<T>(A, B, got);
  }
}

template <class T, class PA, class PB>
void check_arith_fed(PA pa, PB pb, const ty::tensor<T>& a, const ty::tensor<T>& b) {
  check_arith<T>(pa, pb, to_nd(a), to_nd(b), ty::feed(pa, a), ty::feed(pb, b));
}

/// Broadcasting geometry is independent of the op: the other broadcasting cases check two
/// non-commutative ops (an operand swap or a wrong stride shows), which keeps compile time down.
template <class T>
void verify_bcast(const nd& A, const nd& B, const ty::tensor<T>& sub, const ty::tensor<T>& dv) {
  constexpr bool integral = !std::is_floating_point_v<T>;
  check_tensor(sub, ref_zip(A, B, [](double x, double y) { return x - y; }), "sub");
  check_tensor(dv, ref_zip(A, B, [](double x, double y) { return ref_div(x, y, integral); }),
               "div");
}

template <class T, class PA, class PB>
void check_bcast_fed(PA pa, PB pb, const ty::tensor<T>& a, const ty::tensor<T>& b) {
  ty::session s;
  auto [sub, dv] = s.run(ty::fetch(pa - pb, pa / pb), ty::feed(pa, a), ty::feed(pb, b));
  verify_bcast(to_nd(a), to_nd(b), sub, dv);
}

void verify_compare(const nd& A, const nd& B, const std::vector<const ty::tensor<bool>*>& got) {
  check_tensor(*got[0], ref_zip(A, B, [](double x, double y) { return double(x < y); }), "less");
  check_tensor(*got[1], ref_zip(A, B, [](double x, double y) { return double(x <= y); }),
               "less_equal");
  check_tensor(*got[2], ref_zip(A, B, [](double x, double y) { return double(x > y); }), "greater");
  check_tensor(*got[3], ref_zip(A, B, [](double x, double y) { return double(x >= y); }),
               "greater_equal");
  check_tensor(*got[4], ref_zip(A, B, [](double x, double y) { return double(x == y); }), "equal");
  check_tensor(*got[5], ref_zip(A, B, [](double x, double y) { return double(x != y); }),
               "not_equal");
}

template <class T, class PA, class PB>
void check_compare(PA pa, PB pb, const ty::tensor<T>& a, const ty::tensor<T>& b) {
  ty::session s;
  const auto r = s.run(ty::fetch(pa<pb, pa <= pb, pa> pb, pa >= pb, pa == pb, pa != pb),
                       ty::feed(pa, a), ty::feed(pb, b));
  std::vector<const ty::tensor<bool>*> got;
  std::apply([&](const auto&... t) { got = {&t...}; }, r);
  verify_compare(to_nd(a), to_nd(b), got);
  // The named forms build the same nodes.
  static_assert(std::is_same_v<decltype(ty::less(pa, pb)), decltype(pa < pb)>);
  static_assert(std::is_same_v<decltype(ty::less_equal(pa, pb)), decltype(pa <= pb)>);
  static_assert(std::is_same_v<decltype(ty::greater(pa, pb)), decltype(pa > pb)>);
  static_assert(std::is_same_v<decltype(ty::greater_equal(pa, pb)), decltype(pa >= pb)>);
  static_assert(std::is_same_v<decltype(ty::equal(pa, pb)), decltype(pa == pb)>);
  static_assert(std::is_same_v<decltype(ty::not_equal(pa, pb)), decltype(pa != pb)>);
}

/// Compares sum, max, min, mean (floating point only) of `A` over `axes` with the reference;
/// `got` holds them in that order, each followed by its keepdims form when `keep`.
template <class T>
void verify_reductions(const nd& A, const std::vector<i64>& axes, tol t, bool keep,
                       const std::vector<const ty::tensor<T>*>& got) {
  INFO("axes = " << str(axes));
  const int forms = keep ? 2 : 1;
  nd l1;
  for (int k = 0; k < forms; ++k) {
    INFO("keepdims = " << k);
    const nd sum_ref = ref_reduce(A, axes, k, red::sum, &l1);
    check_tensor(*got[static_cast<std::size_t>(0 * forms + k)], sum_ref, "sum", t, &l1);
    check_tensor(*got[static_cast<std::size_t>(1 * forms + k)], ref_reduce(A, axes, k, red::max),
                 "max", tol{0, 0});
    check_tensor(*got[static_cast<std::size_t>(2 * forms + k)], ref_reduce(A, axes, k, red::min),
                 "min", tol{0, 0});
    if constexpr (std::is_floating_point_v<T>) {
      const nd mean_ref = ref_reduce(A, axes, k, red::mean, &l1);
      check_tensor(*got[static_cast<std::size_t>(3 * forms + k)], mean_ref, "mean", t, &l1);
    }
  }
}

/// sum max min mean over Axes... in one run; with Keep also their keepdims forms.
template <bool Keep, std::int64_t... Ax, class P, class T>
void check_reductions_impl(P p, const ty::tensor<T>& in, tol t) {
  ty::session s;
  std::vector<const ty::tensor<T>*> got;
  auto collect = [&](const auto&... r) { got = {&r...}; };
  if constexpr (Keep) {
    const auto r = s.run(ty::fetch(ty::sum<Ax...>(p), ty::sum<Ax...>(p, ty::keepdims),
                                   ty::max<Ax...>(p), ty::max<Ax...>(p, ty::keepdims),
                                   ty::min<Ax...>(p), ty::min<Ax...>(p, ty::keepdims),
                                   ty::mean<Ax...>(p), ty::mean<Ax...>(p, ty::keepdims)),
                         ty::feed(p, in));
    std::apply(collect, r);
    verify_reductions<T>(to_nd(in), std::vector<i64>{Ax...}, t, true, got);
  } else if constexpr (std::is_floating_point_v<T>) {
    const auto r = s.run(
        ty::fetch(ty::sum<Ax...>(p), ty::max<Ax...>(p), ty::min<Ax...>(p), ty::mean<Ax...>(p)),
        ty::feed(p, in));
    std::apply(collect, r);
    verify_reductions<T>(to_nd(in), std::vector<i64>{Ax...}, t, false, got);
  } else {
    const auto r =
        s.run(ty::fetch(ty::sum<Ax...>(p), ty::max<Ax...>(p), ty::min<Ax...>(p)), ty::feed(p, in));
    std::apply(collect, r);
    verify_reductions<T>(to_nd(in), std::vector<i64>{Ax...}, t, false, got);
  }
}

/// Without keepdims.
template <std::int64_t... Ax, class P, class T>
void check_reductions(P p, const ty::tensor<T>& in, tol t = default_tol<T>()) {
  check_reductions_impl<false, Ax...>(p, in, t);
}
/// With and without keepdims.
template <std::int64_t... Ax, class P, class T>
void check_reductions_keep(P p, const ty::tensor<T>& in, tol t = default_tol<T>()) {
  check_reductions_impl<true, Ax...>(p, in, t);
}

template <bool TA, bool TB, class PA, class PB, class T>
void check_matmul(PA pa, PB pb, const ty::tensor<T>& a, const ty::tensor<T>& b) {
  INFO("transpose_a = " << TA << ", transpose_b = " << TB);
  ty::session s;
  auto [c] = s.run(ty::fetch(ty::matmul<TA, TB>(pa, pb)), ty::feed(pa, a), ty::feed(pb, b));
  nd l1;
  const nd want = ref_matmul(to_nd(a), to_nd(b), TA, TB, &l1);
  check_tensor(c, want, "matmul", default_tol<T>(), &l1);
}

template <std::int64_t... Perm, class P, class T>
void check_transpose(P p, const ty::tensor<T>& x) {
  ty::session s;
  auto [y] = s.run(ty::fetch(ty::transpose<Perm...>(p)), ty::feed(p, x));
  check_tensor(y, ref_transpose(to_nd(x), dims{Perm...}), "transpose");
}

} // namespace

// =============================================================================================
TEST_SUITE("ops") {
  // -------------------------------------------------------------------------------------------
  // Unary
  // -------------------------------------------------------------------------------------------
  TEST_CASE_TEMPLATE("unary floating-point ops", T, float, double) {
    constexpr auto x = ty::placeholder<"x", T, ty::shape<ty::dyn, 8>>;
    constexpr auto p = ty::placeholder<"p", T, ty::shape<ty::dyn, 8>>;
    // Random rows plus a row of special values: +-0, large |x| (overflowing exp in float), NaN.
    ty::tensor<T> xs = rnd<T>({6, 8}, 11, -4, 4);
    const double special_x[8] = {0.0, -0.0, 1000, -1000, 100, -100, 20, qnan};
    for (int j = 0; j < 8; ++j)
      xs(5, j) = static_cast<T>(special_x[j]);
    ty::tensor<T> ps = rnd<T>({6, 8}, 12, 0.01, 10);
    const double special_p[8] = {0.0, inf, 1.0, 4.0, 1e-3, 1e6, 0.25, 2.0};
    for (int j = 0; j < 8; ++j)
      ps(5, j) = static_cast<T>(special_p[j]);

    ty::session s;
    auto [neg, ab, sq, rl, ex, sn, cs, th, sg] =
        s.run(ty::fetch(-x, ty::abs(x), ty::square(x), ty::relu(x), ty::exp(x), ty::sin(x),
                        ty::cos(x), ty::tanh(x), ty::sigmoid(x)),
              ty::feed(x, xs));
    auto [lg, sr, rs, ng2] =
        s.run(ty::fetch(ty::log(p), ty::sqrt(p), ty::rsqrt(p), ty::negate(p)), ty::feed(p, ps));
    const nd X = to_nd(xs), P = to_nd(ps);
    check_tensor(neg, ref_map(X, [](double v) { return -v; }), "neg");
    check_tensor(ng2, ref_map(P, [](double v) { return -v; }), "negate");
    check_tensor(ab, ref_map(X, [](double v) { return std::fabs(v); }), "abs");
    check_tensor(sq, ref_map(X, [](double v) { return v * v; }), "square");
    check_tensor(rl, ref_map(X, [](double v) { return std::isnan(v) ? v
                                                      : v > 0       ? v
                                                                    : 0.0; }),
                 "relu");
    check_tensor(ex, ref_map(X, [](double v) { return std::exp(v); }), "exp");
    check_tensor(sn, ref_map(X, [](double v) { return std::sin(v); }), "sin");
    check_tensor(cs, ref_map(X, [](double v) { return std::cos(v); }), "cos");
    check_tensor(th, ref_map(X, [](double v) { return std::tanh(v); }), "tanh");
    check_tensor(sg, ref_map(X, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }), "sigmoid");
    check_tensor(lg, ref_map(P, [](double v) { return std::log(v); }), "log");
    check_tensor(sr, ref_map(P, [](double v) { return std::sqrt(v); }), "sqrt");
    check_tensor(rs, ref_map(P, [](double v) { return 1.0 / std::sqrt(v); }), "rsqrt");

    // Edge values spelled out.
    // abs clears the sign bit (IEEE 754 abs, std::fabs): abs(-0.) is +0., so 1 / abs(-0.) = +inf.
    CHECK(ab(5, 1) == T(0));
    CHECK_FALSE(std::signbit(ab(5, 1)));
    CHECK(rl(5, 0) == T(0)); // relu(0) = 0
    CHECK(rl(5, 1) == T(0)); // relu(-0.) compares equal to 0 ...
    CHECK_FALSE(rl(5, 1) < T(0));
    CHECK(rl(5, 3) == T(0));    // relu(-1000) = 0
    CHECK(rl(5, 2) == T(1000)); // relu(1000) = 1000
    CHECK(std::isnan(rl(5, 7)));
    for (int j : {2, 3, 4, 5}) { // sigmoid at |x| = 1000, 100: no NaN, saturates to 0 or 1
      CAPTURE(j);
      CHECK_FALSE(std::isnan(sg(5, j)));
      CHECK(sg(5, j) >= T(0));
      CHECK(sg(5, j) <= T(1));
    }
    CHECK(sg(5, 2) == doctest::Approx(1.0));
    CHECK(sg(5, 3) == doctest::Approx(0.0));
    CHECK(sg(5, 0) == doctest::Approx(0.5));
    CHECK(th(5, 2) == T(1));
    CHECK(th(5, 3) == T(-1));
    CHECK(ex(5, 3) == T(0));
    CHECK(std::isinf(ex(5, 2)));
    CHECK(lg(5, 0) == -std::numeric_limits<T>::infinity());
    CHECK(rs(5, 0) == std::numeric_limits<T>::infinity());
    CHECK(rs(5, 1) == T(0));
  }

  TEST_CASE_TEMPLATE("unary integer ops", T, std::int32_t, std::int64_t) {
    constexpr auto x = ty::placeholder<"x", T, ty::shape<3, 5>>;
    ty::tensor<T> xs = rnd<T>({3, 5}, 21, -1000, 1000);
    xs(0, 0) = 0;
    xs(0, 1) = -1;
    ty::session s;
    auto [neg, ab, sq, rl] =
        s.run(ty::fetch(-x, ty::abs(x), ty::square(x), ty::relu(x)), ty::feed(x, xs));
    static_assert(std::is_same_v<typename decltype(neg)::value_type, T>);
    const nd X = to_nd(xs);
    check_tensor(neg, ref_map(X, [](double v) { return -v; }), "neg");
    check_tensor(ab, ref_map(X, [](double v) { return std::fabs(v); }), "abs");
    check_tensor(sq, ref_map(X, [](double v) { return v * v; }), "square");
    check_tensor(rl, ref_map(X, [](double v) { return v > 0 ? v : 0.0; }), "relu");
  }

  // -------------------------------------------------------------------------------------------
  // Binary arithmetic and broadcasting
  // -------------------------------------------------------------------------------------------
  TEST_CASE("binary: same shape, float and double") {
    {
      constexpr auto a = ty::placeholder<"a", float, ty::shape<3, 4>>;
      constexpr auto b = ty::placeholder<"b", float, ty::shape<3, 4>>;
      check_arith_fed(a, b, rnd<float>({3, 4}, 1), rnd_away<float>({3, 4}, 2));
    }
    {
      constexpr auto a = ty::placeholder<"a", double, ty::shape<2, 3, 5>>;
      constexpr auto b = ty::placeholder<"b", double, ty::shape<2, 3, 5>>;
      check_arith_fed(a, b, rnd<double>({2, 3, 5}, 3), rnd_away<double>({2, 3, 5}, 4));
    }
    { // long rows: several blocks of the fused loop per row, and a tail
      constexpr auto a = ty::placeholder<"a", float, ty::shape<3, 1000>>;
      constexpr auto b = ty::placeholder<"b", float, ty::shape<1000>>;
      check_bcast_fed(a, b, rnd<float>({3, 1000}, 5), rnd_away<float>({1000}, 6));
    }
  }

  TEST_CASE("binary broadcasting: [3,4] op [4] and [4] op [3,4]") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<3, 4>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<4>>;
    check_arith_fed(a, b, rnd<float>({3, 4}, 7), rnd_away<float>({4}, 8));
    check_bcast_fed(b, a, rnd_away<float>({4}, 9), rnd_away<float>({3, 4}, 10));
  }

  TEST_CASE("binary broadcasting: [3,1] op [1,4]") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<3, 1>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<1, 4>>;
    check_bcast_fed(a, b, rnd<float>({3, 1}, 11), rnd_away<float>({1, 4}, 12));
    check_bcast_fed(b, a, rnd<float>({1, 4}, 13), rnd_away<float>({3, 1}, 14));
  }

  TEST_CASE("binary broadcasting: [2,1,3] op [4,1]") {
    constexpr auto a = ty::placeholder<"a", double, ty::shape<2, 1, 3>>;
    constexpr auto b = ty::placeholder<"b", double, ty::shape<4, 1>>;
    check_bcast_fed(a, b, rnd<double>({2, 1, 3}, 15), rnd_away<double>({4, 1}, 16));
    check_bcast_fed(b, a, rnd<double>({4, 1}, 17), rnd_away<double>({2, 1, 3}, 18));
  }

  TEST_CASE("binary broadcasting: middle and leading extent-1 axes, rank 4") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<2, 1, 3, 1>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<1, 5, 1, 300>>;
    check_bcast_fed(a, b, rnd<float>({2, 1, 3, 1}, 19), rnd_away<float>({1, 5, 1, 300}, 20));
  }

  TEST_CASE("binary broadcasting: rank-0 scalar placeholder op tensor") {
    constexpr auto sc = ty::placeholder<"s", float, ty::shape<>>;
    constexpr auto t = ty::placeholder<"t", float, ty::shape<3, 4>>;
    check_arith_fed(sc, t, scalar<float>(1.75), rnd_away<float>({3, 4}, 21));
    check_bcast_fed(t, sc, rnd<float>({3, 4}, 22), scalar<float>(-0.625));
    // scalar op scalar stays rank 0
    constexpr auto s2 = ty::placeholder<"s2", float, ty::shape<>>;
    check_bcast_fed(sc, s2, scalar<float>(2.5), scalar<float>(-4));
  }

  TEST_CASE("binary: weak ty::constant adopts the tensor's dtype") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<2, 3>>;
    const auto xs = rnd_away<float>({2, 3}, 23);
    const nd X = to_nd(xs);
    ty::session s;
    // One literal value per run: a graph holding two distinct floating literals does not compile
    // with g++ 12 (internal compiler error in plan.hpp's index lookup; see the report).
    auto [a, b, c, d, e] =
        s.run(ty::fetch(x + ty::constant<2>, ty::constant<2> - x, x * ty::constant<2>,
                        ty::constant<2> / x, ty::pow(ty::abs(x), ty::constant<2>)),
              ty::feed(x, xs));
    auto [f] = s.run(ty::fetch(ty::maximum(x, ty::constant<0>)), ty::feed(x, xs));
    auto [g] = s.run(ty::fetch(ty::minimum(ty::constant<0.5>, x)), ty::feed(x, xs));
    static_assert(std::is_same_v<typename decltype(a)::value_type, float>);
    static_assert(std::is_same_v<typename decltype(d)::value_type, float>);
    static_assert(std::is_same_v<typename decltype(g)::value_type, float>);
    check_tensor(a, ref_map(X, [](double v) { return v + 2; }), "x + 2");
    check_tensor(b, ref_map(X, [](double v) { return 2 - v; }), "2 - x");
    check_tensor(c, ref_map(X, [](double v) { return v * 2; }), "x * 2");
    check_tensor(d, ref_map(X, [](double v) { return 2 / v; }), "2 / x");
    check_tensor(e, ref_map(X, [](double v) { return v * v; }), "pow(|x|, 2)");
    check_tensor(f, ref_map(X, [](double v) { return std::max(v, 0.0); }), "maximum(x, 0)");
    check_tensor(g, ref_map(X, [](double v) { return std::min(0.5, v); }), "minimum(0.5, x)");

    // double and int32 operands: the literal becomes double / int32
    constexpr auto xd = ty::placeholder<"xd", double, ty::shape<4>>;
    constexpr auto xi = ty::placeholder<"xi", std::int32_t, ty::shape<4>>;
    const auto ds = rnd<double>({4}, 24);
    const auto is = make<std::int32_t>({4}, {-7, -1, 0, 9});
    auto [h, k] = s.run(ty::fetch(xd * ty::constant<3>, xi * ty::constant<3>), ty::feed(xd, ds),
                        ty::feed(xi, is));
    auto [m] = s.run(ty::fetch(xi / ty::constant<2>), ty::feed(xi, is));
    static_assert(std::is_same_v<typename decltype(h)::value_type, double>);
    static_assert(std::is_same_v<typename decltype(k)::value_type, std::int32_t>);
    check_tensor(h, ref_map(to_nd(ds), [](double v) { return 3 * v; }), "double * 3");
    check_tensor(k, ref_map(to_nd(is), [](double v) { return 3 * v; }), "int32 * 3");
    check_tensor(m, ref_map(to_nd(is), [](double v) { return std::trunc(v / 2); }), "int32 / 2");
  }

  TEST_CASE("binary: typed ty::full constant op tensor") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<4>>;
    constexpr auto c = ty::full<0.5, float, ty::shape<3, 4>>;
    const auto xs = rnd<float>({4}, 25);
    ty::session s;
    auto [a, b, cc] = s.run(ty::fetch(x + c, c / x, c), ty::feed(x, xs));
    const nd C = zeros_nd({3, 4}, 0.5);
    check_tensor(cc, C, "full");
    check_tensor(a, ref_zip(to_nd(xs), C, [](double u, double v) { return u + v; }), "x + full");
    check_tensor(b, ref_zip(C, to_nd(xs), [](double u, double v) { return u / v; }), "full / x");
  }

  TEST_CASE("binary broadcasting: dyn batch placeholders") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
    constexpr auto v = ty::placeholder<"v", float, ty::shape<4>>;
    constexpr auto c = ty::placeholder<"c", float, ty::shape<ty::dyn, 1>>;
    for (i64 batch : {3, 1, 0}) {
      CAPTURE(batch);
      check_arith_fed(x, v, rnd<float>({batch, 4}, 26), rnd_away<float>({4}, 27));
      check_bcast_fed(x, c, rnd<float>({batch, 4}, 28), rnd_away<float>({batch, 1}, 29));
    }
    // [dyn,4] against static [3,4]: the dyn extent may be fed 1 (it broadcasts) or 3.
    constexpr auto w = ty::placeholder<"w", float, ty::shape<3, 4>>;
    check_bcast_fed(x, w, rnd<float>({1, 4}, 30), rnd_away<float>({3, 4}, 31));
    check_bcast_fed(x, w, rnd<float>({3, 4}, 32), rnd_away<float>({3, 4}, 33));
    ty::session s;
    const auto bad = rnd<float>({2, 4}, 34), ws = rnd<float>({3, 4}, 35);
    CHECK_THROWS_AS(s.run(ty::fetch(x + w), ty::feed(x, bad), ty::feed(w, ws)), ty::error);
  }

  TEST_CASE_TEMPLATE("integer arithmetic", T, std::int32_t, std::int64_t) {
    // Divisors include 0 (x / 0 == 0) and negative values (truncation toward zero).
    constexpr auto a = ty::placeholder<"a", T, ty::shape<3, 4>>;
    constexpr auto b = ty::placeholder<"b", T, ty::shape<4>>;
    constexpr auto c = ty::placeholder<"c", T, ty::shape<3, 1>>;
    const double big = std::is_same_v<T, std::int64_t> ? 1e12 : 1e5;
    check_arith_fed(a, b, rnd<T>({3, 4}, 36, -big, big), make<T>({4}, {0, -3, 7, -1}));
    check_arith_fed(a, c, rnd<T>({3, 4}, 37, -20, 20), make<T>({3, 1}, {2, 0, -5}));
    check_bcast_fed(b, a, make<T>({4}, {-7, 7, -8, 0}), rnd<T>({3, 4}, 38, -5, 5));
    // Explicit truncation toward zero and division by zero.
    constexpr auto p = ty::placeholder<"p", T, ty::shape<6>>;
    constexpr auto q = ty::placeholder<"q", T, ty::shape<6>>;
    ty::session s;
    const auto ps = make<T>({6}, {7, -7, 7, -7, 5, -5});
    const auto qs = make<T>({6}, {2, 2, -2, -2, 0, 0});
    auto [d] = s.run(ty::fetch(p / q), ty::feed(p, ps), ty::feed(q, qs));
    CHECK(d[0] == 3);
    CHECK(d[1] == -3);
    CHECK(d[2] == -3);
    CHECK(d[3] == 3);
    CHECK(d[4] == 0);
    CHECK(d[5] == 0);
  }

  TEST_CASE("pow: special exponents against std::pow") {
    constexpr auto a = ty::placeholder<"a", double, ty::shape<4, 6>>;
    constexpr auto e = ty::placeholder<"e", double, ty::shape<6>>;
    const auto as = rnd<double>({4, 6}, 39, 0.05, 5);
    const auto es = make<double>({6}, {0, 1, 0.5, 2, -1, -2.5});
    ty::session s;
    auto [pw] = s.run(ty::fetch(ty::pow(a, e)), ty::feed(a, as), ty::feed(e, es));
    check_tensor(pw,
                 ref_zip(to_nd(as), to_nd(es), [](double x, double y) { return std::pow(x, y); }),
                 "pow");
  }

  TEST_CASE("maximum / minimum: ties go to the first operand") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<2>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<2>>;
    const auto as = make<float>({2}, {-0.0, 0.0}), bs = make<float>({2}, {0.0, -0.0});
    ty::session s;
    auto [mx, mn] =
        s.run(ty::fetch(ty::maximum(a, b), ty::minimum(a, b)), ty::feed(a, as), ty::feed(b, bs));
    // -0 and +0 compare equal: the result must be the first operand, sign included.
    CHECK(std::signbit(mx[0]));
    CHECK_FALSE(std::signbit(mx[1]));
    CHECK(std::signbit(mn[0]));
    CHECK_FALSE(std::signbit(mn[1]));
  }

  // -------------------------------------------------------------------------------------------
  // Comparisons, where, cast, broadcast_to
  // -------------------------------------------------------------------------------------------
  TEST_CASE("comparisons -> bool, with broadcasting and ties") {
    // Small integer-valued floats so that ties occur.
    constexpr auto a = ty::placeholder<"a", float, ty::shape<3, 4>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<4>>;
    check_compare(a, b, small_ints<float>({3, 4}, 40), make<float>({4}, {-1, 0, 1, 2}));
    constexpr auto c = ty::placeholder<"c", float, ty::shape<3, 1>>;
    check_compare(c, b, make<float>({3, 1}, {0, 1, -1}), make<float>({4}, {-1, 0, 1, 2}));
    constexpr auto i = ty::placeholder<"i", std::int64_t, ty::shape<ty::dyn, 3>>;
    constexpr auto j = ty::placeholder<"j", std::int64_t, ty::shape<3>>;
    check_compare(i, j, rnd<std::int64_t>({4, 3}, 41, -2, 2), make<std::int64_t>({3}, {0, 1, -1}));
    constexpr auto sc = ty::placeholder<"s", double, ty::shape<>>;
    constexpr auto d = ty::placeholder<"d", double, ty::shape<2, 2>>;
    check_compare(sc, d, scalar<double>(0.5), make<double>({2, 2}, {0.5, 0.25, 1, -0.5}));
  }

  TEST_CASE("where with broadcast condition and operands") {
    constexpr auto cnd = ty::placeholder<"cond", bool, ty::shape<3, 1>>;
    constexpr auto a = ty::placeholder<"a", float, ty::shape<3, 4>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<4>>;
    const auto cs = make<bool>({3, 1}, {1, 0, 1});
    const auto as = rnd<float>({3, 4}, 42), bs = rnd<float>({4}, 43);
    ty::session s;
    auto [w, w2, w3] = s.run(ty::fetch(ty::where(cnd, a, b), ty::where(a > b, a, b),
                                       ty::where(a > ty::constant<0>, a, -a)),
                             ty::feed(cnd, cs), ty::feed(a, as), ty::feed(b, bs));
    static_assert(std::is_same_v<typename decltype(w)::value_type, float>);
    const nd A = to_nd(as), B = to_nd(bs);
    check_tensor(w, ref_where(to_nd(cs), A, B), "where(cond[3,1], a[3,4], b[4])");
    check_tensor(w2, ref_zip(A, B, [](double x, double y) { return x > y ? x : y; }),
                 "where(a > b, a, b)");
    check_tensor(w3, ref_map(A, [](double x) { return x > 0 ? x : -x; }), "where(a > 0, a, -a)");
    // Rank-0 condition, int64 operands.
    constexpr auto c0 = ty::placeholder<"c0", bool, ty::shape<>>;
    constexpr auto ia = ty::placeholder<"ia", std::int64_t, ty::shape<2, 3>>;
    constexpr auto ib = ty::placeholder<"ib", std::int64_t, ty::shape<2, 1>>;
    const auto ias = rnd<std::int64_t>({2, 3}, 44, -100, 100);
    const auto ibs = rnd<std::int64_t>({2, 1}, 45, -100, 100);
    for (bool flag : {true, false}) {
      auto [wi] = s.run(ty::fetch(ty::where(c0, ia, ib)), ty::feed(c0, scalar<bool>(flag)),
                        ty::feed(ia, ias), ty::feed(ib, ibs));
      check_tensor(wi, ref_where(zeros_nd({}, flag ? 1 : 0), to_nd(ias), to_nd(ibs)),
                   "where(scalar cond, int64, int64)");
    }
  }

  TEST_CASE("cast: float->int32 truncation, int->bool, bool->float, int64<->double") {
    constexpr auto f = ty::placeholder<"f", float, ty::shape<10>>;
    constexpr auto i = ty::placeholder<"i", std::int32_t, ty::shape<6>>;
    constexpr auto b = ty::placeholder<"b", bool, ty::shape<2, 2>>;
    constexpr auto l = ty::placeholder<"l", std::int64_t, ty::shape<3>>;
    constexpr auto d = ty::placeholder<"d", double, ty::shape<3>>;
    const auto fs = make<float>({10}, {-2.7, -2.5, -0.5, -0.0, 0.5, 2.5, 2.7, 3.99, -3.99, 100.9});
    const auto is = make<std::int32_t>({6}, {0, 1, -1, 7, 0, -2147483647});
    const auto bs = make<bool>({2, 2}, {1, 0, 0, 1});
    const auto ls = make<std::int64_t>({3}, {-3000000000000, 0, 123456789012});
    const auto ds = make<double>({3}, {-3e12 - 0.75, 0.999, 1234567890123.9});
    ty::session s;
    auto [fi, ib, bf, ld, dl, ff] =
        s.run(ty::fetch(ty::cast<std::int32_t>(f), ty::cast<bool>(i), ty::cast<float>(b),
                        ty::cast<double>(l), ty::cast<std::int64_t>(d), ty::cast<double>(f)),
              ty::feed(f, fs), ty::feed(i, is), ty::feed(b, bs), ty::feed(l, ls), ty::feed(d, ds));
    static_assert(std::is_same_v<typename decltype(fi)::value_type, std::int32_t>);
    static_assert(std::is_same_v<typename decltype(ib)::value_type, bool>);
    static_assert(std::is_same_v<typename decltype(bf)::value_type, float>);
    check_tensor(fi, ref_map(to_nd(fs), [](double v) { return std::trunc(v); }), "float->int32");
    check_tensor(ib, ref_map(to_nd(is), [](double v) { return double(v != 0); }), "int32->bool");
    check_tensor(bf, to_nd(bs), "bool->float");
    check_tensor(ld, to_nd(ls), "int64->double");
    check_tensor(dl, ref_map(to_nd(ds), [](double v) { return std::trunc(v); }), "double->int64");
    check_tensor(ff, to_nd(fs), "float->double");
    // Bools of a comparison, back to numbers, summed: a count.
    constexpr auto x = ty::placeholder<"x", float, ty::shape<5, 7>>;
    const auto xs = rnd<float>({5, 7}, 46);
    auto [cnt] =
        s.run(ty::fetch(ty::sum<1>(ty::cast<std::int32_t>(x > ty::constant<0>))), ty::feed(x, xs));
    check_tensor(cnt,
                 ref_reduce(ref_map(to_nd(xs), [](double v) { return double(v > 0); }), {1}, false,
                            red::sum),
                 "sum(cast<int32>(x > 0))");
  }

  TEST_CASE("broadcast_to") {
    constexpr auto v = ty::placeholder<"v", float, ty::shape<3>>;
    constexpr auto c = ty::placeholder<"c", double, ty::shape<3, 1>>;
    constexpr auto sc = ty::placeholder<"s", std::int32_t, ty::shape<>>;
    constexpr auto m = ty::placeholder<"m", float, ty::shape<ty::dyn, 1, 2>>;
    const auto vs = rnd<float>({3}, 47);
    const auto cs = rnd<double>({3, 1}, 48);
    const auto ss = scalar<std::int32_t>(-5);
    const auto ms = rnd<float>({1, 1, 2}, 49);
    ty::session s;
    auto [a, b, cc, dd, e] = s.run(
        ty::fetch(ty::broadcast_to<ty::shape<4, 3>>(v), ty::broadcast_to<ty::shape<2, 3, 4>>(c),
                  ty::broadcast_to<ty::shape<2, 3>>(sc), ty::broadcast_to<ty::shape<3>>(v),
                  ty::broadcast_to<ty::shape<3, 4, 2>>(m)),
        ty::feed(v, vs), ty::feed(c, cs), ty::feed(sc, ss), ty::feed(m, ms));
    check_tensor(a, ref_broadcast_to(to_nd(vs), {4, 3}), "[3] -> [4,3]");
    check_tensor(b, ref_broadcast_to(to_nd(cs), {2, 3, 4}), "[3,1] -> [2,3,4]");
    check_tensor(cc, ref_broadcast_to(to_nd(ss), {2, 3}), "[] -> [2,3]");
    check_tensor(dd, to_nd(vs), "[3] -> [3]");
    check_tensor(e, ref_broadcast_to(to_nd(ms), {3, 4, 2}), "[dyn=1,1,2] -> [3,4,2]");
    // In a fused region with other ops.
    auto [f] =
        s.run(ty::fetch(ty::broadcast_to<ty::shape<2, 3>>(v) * ty::constant<2>), ty::feed(v, vs));
    check_tensor(f, ref_map(ref_broadcast_to(to_nd(vs), {2, 3}), [](double x) { return 2 * x; }),
                 "broadcast_to * 2");
  }

  // -------------------------------------------------------------------------------------------
  // Reductions
  // -------------------------------------------------------------------------------------------
  TEST_CASE("reductions: all axes and each single axis of a rank-3 tensor") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<3, 4, 5>>;
    const auto xs = rnd<float>({3, 4, 5}, 50);
    check_reductions_keep(x, xs);
    check_reductions_keep<0>(x, xs);
    check_reductions_keep<1>(x, xs);
    check_reductions_keep<2>(x, xs);
    // NaN propagates through max and min (and sum, mean) along every path.
    auto xn = xs;
    xn(1, 2, 3) = std::numeric_limits<float>::quiet_NaN();
    check_reductions_keep(x, xn);
    check_reductions_keep<0>(x, xn);
    check_reductions_keep<1>(x, xn);
    check_reductions_keep<2>(x, xn);
  }

  TEST_CASE("reductions: two axes (contiguous and not), negative and unordered axes") {
    constexpr auto x = ty::placeholder<"x", double, ty::shape<3, 4, 5>>;
    const auto xs = rnd<double>({3, 4, 5}, 51);
    check_reductions_keep<0, 2>(x, xs); // non-contiguous pattern
    check_reductions<0, 1>(x, xs);
    check_reductions<1, 2>(x, xs);
    check_reductions<-1>(x, xs);
    check_reductions_keep<-3, -1>(x, xs);
    check_reductions<2, 0>(x, xs);
    auto xn = xs;
    xn(2, 0, 4) = std::numeric_limits<double>::quiet_NaN();
    check_reductions_keep<0, 2>(x, xn);
    constexpr auto y = ty::placeholder<"y", float, ty::shape<2, 3, 4, 5>>;
    const auto ys = rnd<float>({2, 3, 4, 5}, 52);
    check_reductions<1, 3>(y, ys);
    check_reductions<0, -2>(y, ys);
  }

  TEST_CASE("reductions: extent-1 axes, rank 1, rank 0, dyn input") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<3, 1, 4>>;
    const auto xs = rnd<float>({3, 1, 4}, 53);
    check_reductions_keep<1>(x, xs);
    check_reductions_keep<0, 2>(x, xs);
    check_reductions_keep<0, 1>(x, xs);
    constexpr auto v = ty::placeholder<"v", float, ty::shape<7>>;
    check_reductions<0>(v, rnd<float>({7}, 54));
    constexpr auto sc = ty::placeholder<"s", float, ty::shape<>>;
    check_reductions_keep(sc, scalar<float>(-2.25));
    constexpr auto d = ty::placeholder<"d", float, ty::shape<ty::dyn, 6>>;
    for (i64 batch : {1, 5}) {
      CAPTURE(batch);
      check_reductions_keep<0>(d, rnd<float>({batch, 6}, 55));
      check_reductions<1>(d, rnd<float>({batch, 6}, 56));
    }
  }

  TEST_CASE_TEMPLATE("reductions: integer dtypes", T, std::int32_t, std::int64_t) {
    constexpr auto x = ty::placeholder<"x", T, ty::shape<3, 4, 5>>;
    const auto xs = rnd<T>({3, 4, 5}, 57, -1000, 1000);
    check_reductions(x, xs);
    check_reductions<1>(x, xs);
    check_reductions<0, 2>(x, xs);
  }

  TEST_CASE("reductions: large rows exercise the chunked path (float and double)") {
    constexpr i64 n = 300000;
    {
      constexpr auto x = ty::placeholder<"x", float, ty::shape<2, n>>;
      auto xs = rnd<float>({2, n}, 58, -1, 1.5);
      check_reductions<1>(x, xs);
      xs(1, n - 7) = std::numeric_limits<float>::quiet_NaN(); // in the last chunk of row 1
      check_reductions<1>(x, xs);
      xs(1, n - 7) = 0.25f;
      check_reductions(x, xs);
      check_reductions<0>(x, xs);
    }
    {
      constexpr auto x = ty::placeholder<"x", double, ty::shape<n>>;
      const auto xs = rnd<double>({n}, 59, -2, 3);
      check_reductions(x, xs);
    }
    { // long reduced column (outer reduction)
      constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
      check_reductions<0>(x, rnd<float>({n, 3}, 60, 0, 1));
    }
  }

  TEST_CASE("argmax: ties resolve to the first index, axis 0 / 1 / -1, keepdims") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<4, 5>>;
    // Values from {0, 1, 2}: many ties along both axes.
    auto xs = small_ints<float>({4, 5}, 61, 0, 2);
    xs(0, 0) = 2;
    xs(3, 0) = 2; // tie on axis 0 between rows 0 and 3
    ty::session s;
    auto [a0, a1, am1, k1] = s.run(ty::fetch(ty::argmax<0>(x), ty::argmax<1>(x), ty::argmax<-1>(x),
                                             ty::argmax<1>(x, ty::keepdims)),
                                   ty::feed(x, xs));
    static_assert(std::is_same_v<typename decltype(a0)::value_type, std::int64_t>);
    const nd X = to_nd(xs);
    check_tensor(a0, ref_argmax(X, 0, false), "argmax<0>");
    check_tensor(a1, ref_argmax(X, 1, false), "argmax<1>");
    check_tensor(am1, ref_argmax(X, -1, false), "argmax<-1>");
    check_tensor(k1, ref_argmax(X, 1, true), "argmax<1> keepdims");
    CHECK(a0[0] == 0);
    // All equal: index 0 everywhere.
    constexpr auto c = ty::placeholder<"c", std::int32_t, ty::shape<3, 6>>;
    ty::tensor<std::int32_t> cs({3, 6});
    for (auto& v : cs)
      v = 4;
    auto [c0, c1] = s.run(ty::fetch(ty::argmax<0>(c), ty::argmax<1>(c)), ty::feed(c, cs));
    check_tensor(c0, zeros_nd({6}), "argmax<0> all equal");
    check_tensor(c1, zeros_nd({3}), "argmax<1> all equal");
    // Rank 3, middle axis, random (longer than one 256-column tile).
    constexpr auto y = ty::placeholder<"y", double, ty::shape<2, 7, 300>>;
    const auto ys = rnd<double>({2, 7, 300}, 62);
    auto [y1, y2] = s.run(ty::fetch(ty::argmax<1>(y), ty::argmax<2>(y)), ty::feed(y, ys));
    check_tensor(y1, ref_argmax(to_nd(ys), 1, false), "argmax<1> rank 3");
    check_tensor(y2, ref_argmax(to_nd(ys), 2, false), "argmax<2> rank 3");
  }

  TEST_CASE("reductions over an empty extent") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
    const ty::tensor<float> empty({0, 3});
    ty::session s;
    auto [s0, sa, x0, n0, m0, s1, s0k] =
        s.run(ty::fetch(ty::sum<0>(x), ty::sum(x), ty::max<0>(x), ty::min<0>(x), ty::mean<0>(x),
                        ty::sum<1>(x), ty::sum<0>(x, ty::keepdims)),
              ty::feed(x, empty));
    const nd E = to_nd(empty);
    check_tensor(s0, zeros_nd({3}), "sum<0> of [0,3]");
    check_tensor(sa, zeros_nd({}), "sum of [0,3]");
    check_tensor(x0, zeros_nd({3}, -inf), "max<0> of [0,3]");
    check_tensor(n0, zeros_nd({3}, inf), "min<0> of [0,3]");
    check_tensor(m0, zeros_nd({3}, qnan), "mean<0> of [0,3]");
    check_tensor(s1, ref_reduce(E, {1}, false, red::sum), "sum<1> of [0,3]");
    check_tensor(s0k, zeros_nd({1, 3}), "sum<0> keepdims of [0,3]");
    CHECK(s1.shape() == dims{0});
    // argmax over the empty axis throws; along the non-empty axis the result is empty.
    CHECK_THROWS_AS(s.run(ty::fetch(ty::argmax<0>(x)), ty::feed(x, empty)), ty::error);
    auto [a1] = s.run(ty::fetch(ty::argmax<1>(x)), ty::feed(x, empty));
    CHECK(a1.shape() == dims{0});
    // The session still works after the throw.
    const auto xs = rnd<float>({2, 3}, 63);
    auto [a0] = s.run(ty::fetch(ty::argmax<0>(x)), ty::feed(x, xs));
    check_tensor(a0, ref_argmax(to_nd(xs), 0, false), "argmax after a throw");
  }

  // -------------------------------------------------------------------------------------------
  // Matmul
  // -------------------------------------------------------------------------------------------
  TEST_CASE("matmul: 5x7 * 7x3, all four transpose combinations") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<5, 7>>;
    constexpr auto at = ty::placeholder<"at", float, ty::shape<7, 5>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<7, 3>>;
    constexpr auto bt = ty::placeholder<"bt", float, ty::shape<3, 7>>;
    check_matmul<false, false>(a, b, rnd<float>({5, 7}, 64), rnd<float>({7, 3}, 65));
    check_matmul<true, false>(at, b, rnd<float>({7, 5}, 66), rnd<float>({7, 3}, 67));
    check_matmul<false, true>(a, bt, rnd<float>({5, 7}, 68), rnd<float>({3, 7}, 69));
    check_matmul<true, true>(at, bt, rnd<float>({7, 5}, 70), rnd<float>({3, 7}, 71));
    // The product's shape is [5,3] in every case.
    ty::session s;
    auto [c] = s.run(ty::fetch(ty::matmul<true, true>(at, bt)), ty::feed(at, rnd<float>({7, 5}, 1)),
                     ty::feed(bt, rnd<float>({3, 7}, 2)));
    CHECK(c.shape() == dims{5, 3});
  }

  TEST_CASE("matmul: larger sizes, double, all transposes") {
    constexpr auto a = ty::placeholder<"a", double, ty::shape<33, 129>>;
    constexpr auto at = ty::placeholder<"at", double, ty::shape<129, 33>>;
    constexpr auto b = ty::placeholder<"b", double, ty::shape<129, 17>>;
    constexpr auto bt = ty::placeholder<"bt", double, ty::shape<17, 129>>;
    check_matmul<false, false>(a, b, rnd<double>({33, 129}, 72), rnd<double>({129, 17}, 73));
    check_matmul<true, false>(at, b, rnd<double>({129, 33}, 74), rnd<double>({129, 17}, 75));
    check_matmul<false, true>(a, bt, rnd<double>({33, 129}, 76), rnd<double>({17, 129}, 77));
    check_matmul<true, true>(at, bt, rnd<double>({129, 33}, 78), rnd<double>({17, 129}, 79));
    constexpr auto f = ty::placeholder<"f", float, ty::shape<64, 100>>;
    constexpr auto g = ty::placeholder<"g", float, ty::shape<100, 40>>;
    check_matmul<false, false>(f, g, rnd<float>({64, 100}, 80), rnd<float>({100, 40}, 81));
  }

  TEST_CASE("matmul: batched rank 3 and rank 4, dyn batch") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<2, 5, 7>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<2, 7, 3>>;
    constexpr auto at = ty::placeholder<"at", float, ty::shape<2, 7, 5>>;
    constexpr auto bt = ty::placeholder<"bt", float, ty::shape<2, 3, 7>>;
    check_matmul<false, false>(a, b, rnd<float>({2, 5, 7}, 82), rnd<float>({2, 7, 3}, 83));
    check_matmul<true, true>(at, bt, rnd<float>({2, 7, 5}, 84), rnd<float>({2, 3, 7}, 85));
    constexpr auto c = ty::placeholder<"c", double, ty::shape<2, 3, 4, 5>>;
    constexpr auto d = ty::placeholder<"d", double, ty::shape<2, 3, 5, 6>>;
    constexpr auto ct = ty::placeholder<"ct", double, ty::shape<2, 3, 5, 4>>;
    constexpr auto dt = ty::placeholder<"dt", double, ty::shape<2, 3, 6, 5>>;
    check_matmul<false, false>(c, d, rnd<double>({2, 3, 4, 5}, 86), rnd<double>({2, 3, 5, 6}, 87));
    check_matmul<true, false>(ct, d, rnd<double>({2, 3, 5, 4}, 88), rnd<double>({2, 3, 5, 6}, 89));
    check_matmul<false, true>(c, dt, rnd<double>({2, 3, 4, 5}, 90), rnd<double>({2, 3, 6, 5}, 91));
    constexpr auto e = ty::placeholder<"e", float, ty::shape<ty::dyn, 4, 6>>;
    constexpr auto f = ty::placeholder<"f", float, ty::shape<ty::dyn, 6, 2>>;
    for (i64 batch : {3, 1, 0}) {
      CAPTURE(batch);
      check_matmul<false, false>(e, f, rnd<float>({batch, 4, 6}, 92),
                                 rnd<float>({batch, 6, 2}, 93));
    }
  }

  TEST_CASE("matmul: int32 (portable kernel), all four transpose combinations") {
    constexpr auto a = ty::placeholder<"a", std::int32_t, ty::shape<4, 6>>;
    constexpr auto at = ty::placeholder<"at", std::int32_t, ty::shape<6, 4>>;
    constexpr auto b = ty::placeholder<"b", std::int32_t, ty::shape<6, 5>>;
    constexpr auto bt = ty::placeholder<"bt", std::int32_t, ty::shape<5, 6>>;
    using I = std::int32_t;
    check_matmul<false, false>(a, b, rnd<I>({4, 6}, 94, -50, 50), rnd<I>({6, 5}, 95, -50, 50));
    check_matmul<true, false>(at, b, rnd<I>({6, 4}, 96, -50, 50), rnd<I>({6, 5}, 97, -50, 50));
    check_matmul<false, true>(a, bt, rnd<I>({4, 6}, 98, -50, 50), rnd<I>({5, 6}, 99, -50, 50));
    check_matmul<true, true>(at, bt, rnd<I>({6, 4}, 100, -50, 50), rnd<I>({5, 6}, 101, -50, 50));
    constexpr auto c = ty::placeholder<"c", std::int64_t, ty::shape<2, 3, 4>>;
    constexpr auto d = ty::placeholder<"d", std::int64_t, ty::shape<2, 4, 3>>;
    check_matmul<false, false>(c, d, rnd<std::int64_t>({2, 3, 4}, 102, -1000000, 1000000),
                               rnd<std::int64_t>({2, 4, 3}, 103, -1000000, 1000000));
  }

  TEST_CASE("matmul: empty extents (k = 0 gives zeros, m = 0 gives an empty result)") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<3, ty::dyn>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<ty::dyn, 4>>;
    ty::session s;
    auto [c, ct] =
        s.run(ty::fetch(ty::matmul(a, b), ty::matmul<true, true>(b, a)),
              ty::feed(a, ty::tensor<float>({3, 0})), ty::feed(b, ty::tensor<float>({0, 4})));
    check_tensor(c, zeros_nd({3, 4}), "[3,0] x [0,4]");
    check_tensor(ct, zeros_nd({4, 3}), "[0,4]^T x [3,0]^T");
    // int32 and double k = 0
    constexpr auto ia = ty::placeholder<"ia", std::int32_t, ty::shape<2, ty::dyn>>;
    constexpr auto ib = ty::placeholder<"ib", std::int32_t, ty::shape<ty::dyn, 2>>;
    auto [ic] = s.run(ty::fetch(ty::matmul(ia, ib)), ty::feed(ia, ty::tensor<std::int32_t>({2, 0})),
                      ty::feed(ib, ty::tensor<std::int32_t>({0, 2})));
    check_tensor(ic, zeros_nd({2, 2}), "int32 k = 0");
    // m = 0
    constexpr auto m = ty::placeholder<"m", double, ty::shape<ty::dyn, 7>>;
    constexpr auto w = ty::placeholder<"w", double, ty::shape<7, 3>>;
    auto [mc] = s.run(ty::fetch(ty::matmul(m, w)), ty::feed(m, ty::tensor<double>({0, 7})),
                      ty::feed(w, rnd<double>({7, 3}, 104)));
    CHECK(mc.shape() == dims{0, 3});
    // k = 0 after a non-empty run reuses pooled buffers: still zeros.
    auto [c2] = s.run(ty::fetch(ty::matmul(a, b)), ty::feed(a, rnd<float>({3, 2}, 105)),
                      ty::feed(b, rnd<float>({2, 4}, 106)));
    CHECK(c2.shape() == dims{3, 4});
    auto [c3] = s.run(ty::fetch(ty::matmul(a, b)), ty::feed(a, ty::tensor<float>({3, 0})),
                      ty::feed(b, ty::tensor<float>({0, 4})));
    check_tensor(c3, zeros_nd({3, 4}), "k = 0 again");
  }

  // -------------------------------------------------------------------------------------------
  // Layout
  // -------------------------------------------------------------------------------------------
  TEST_CASE("reshape with an inferred extent (static and dyn input)") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<3, 8>>;
    constexpr auto d = ty::placeholder<"d", float, ty::shape<ty::dyn, 6>>;
    const auto xs = rnd<float>({3, 8}, 107);
    const auto ds = rnd<float>({4, 6}, 108);
    ty::session s;
    auto [r1, r2, r3, r4] = s.run(ty::fetch(ty::reshape<-1, 4>(x), ty::reshape<2, -1, 3>(d),
                                            ty::reshape<-1>(x), ty::reshape<2, 2, 6>(x)),
                                  ty::feed(x, xs), ty::feed(d, ds));
    nd X = to_nd(xs), D = to_nd(ds);
    check_tensor(r1, nd{{6, 4}, X.v}, "reshape<-1,4>([3,8])");
    check_tensor(r2, nd{{2, 4, 3}, D.v}, "reshape<2,-1,3>([4,6])");
    check_tensor(r3, nd{{24}, X.v}, "reshape<-1>");
    check_tensor(r4, nd{{2, 2, 6}, X.v}, "reshape<2,2,6>");
    // Of an intermediate, and feeding a fused region.
    constexpr auto b = ty::placeholder<"b", float, ty::shape<6>>;
    const auto bs = rnd<float>({6}, 109);
    auto [r5] = s.run(ty::fetch(ty::reshape<-1, 6>(x * ty::constant<2> + x) + b), ty::feed(x, xs),
                      ty::feed(b, bs));
    check_tensor(r5,
                 ref_zip(nd{{4, 6}, ref_map(X, [](double v) { return 3 * v; }).v}, to_nd(bs),
                         [](double u, double v) { return u + v; }),
                 "reshape(2x + x) + b");
    // Zero rows.
    auto [r6] = s.run(ty::fetch(ty::reshape<-1, 3>(d)), ty::feed(d, ty::tensor<float>({0, 6})));
    CHECK(r6.shape() == dims{0, 3});
    // Element count that does not divide: run-time error.
    CHECK_THROWS_AS(s.run(ty::fetch(ty::reshape<-1, 4>(d)), ty::feed(d, rnd<float>({3, 6}, 1))),
                    ty::error);
  }

  TEST_CASE("transpose: permutations of rank 2, 3, 4 and the default reverse") {
    constexpr auto m = ty::placeholder<"m", float, ty::shape<3, 5>>;
    const auto ms = rnd<float>({3, 5}, 110);
    check_transpose<1, 0>(m, ms);
    check_transpose<0, 1>(m, ms);
    check_transpose(m, ms);
    constexpr auto x = ty::placeholder<"x", double, ty::shape<2, 3, 4>>;
    const auto xs = rnd<double>({2, 3, 4}, 111);
    check_transpose(x, xs);
    check_transpose<0, 2, 1>(x, xs);
    check_transpose<2, 0, 1>(x, xs);
    check_transpose<1, 2, 0>(x, xs);
    check_transpose<1, 0, 2>(x, xs);
    constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<2, 3, 4, 5>>;
    const auto ys = rnd<std::int32_t>({2, 3, 4, 5}, 112, -100, 100);
    check_transpose(y, ys);
    check_transpose<0, 2, 3, 1>(y, ys);
    check_transpose<3, 1, 0, 2>(y, ys);
    constexpr auto d = ty::placeholder<"d", float, ty::shape<ty::dyn, 3, 2>>;
    check_transpose<2, 0, 1>(d, rnd<float>({4, 3, 2}, 113));
    check_transpose<2, 0, 1>(d, rnd<float>({0, 3, 2}, 114));
  }

  TEST_CASE("concat along axis 0, 1 and -1, of 2 and 3 operands, with dyn") {
    ty::session s;
    { // axis 0, dyn operand
      constexpr auto a = ty::placeholder<"a", float, ty::shape<2, 3>>;
      constexpr auto b = ty::placeholder<"b", float, ty::shape<ty::dyn, 3>>;
      for (i64 rows : {4, 0}) {
        CAPTURE(rows);
        const auto as = rnd<float>({2, 3}, 115), bs = rnd<float>({rows, 3}, 116);
        auto [c, c2] = s.run(ty::fetch(ty::concat<0>(a, b), ty::concat<0>(b, a, b)),
                             ty::feed(a, as), ty::feed(b, bs));
        check_tensor(c, ref_concat({to_nd(as), to_nd(bs)}, 0), "concat<0>(a, b)");
        check_tensor(c2, ref_concat({to_nd(bs), to_nd(as), to_nd(bs)}, 0), "concat<0>(b, a, b)");
      }
    }
    { // axis 1 of three operands
      constexpr auto a = ty::placeholder<"a", double, ty::shape<2, 3>>;
      constexpr auto b = ty::placeholder<"b", double, ty::shape<2, 1>>;
      constexpr auto c = ty::placeholder<"c", double, ty::shape<2, 4>>;
      const auto as = rnd<double>({2, 3}, 117), bs = rnd<double>({2, 1}, 118),
                 cs = rnd<double>({2, 4}, 119);
      auto [r, r2] = s.run(ty::fetch(ty::concat<1>(a, b, c), ty::concat<1>(c, a)), ty::feed(a, as),
                           ty::feed(b, bs), ty::feed(c, cs));
      check_tensor(r, ref_concat({to_nd(as), to_nd(bs), to_nd(cs)}, 1), "concat<1>(a, b, c)");
      check_tensor(r2, ref_concat({to_nd(cs), to_nd(as)}, 1), "concat<1>(c, a)");
    }
    { // axis -1 of rank 3, and axis 1 (middle) of rank 3
      constexpr auto a = ty::placeholder<"a", std::int32_t, ty::shape<2, 3, 2>>;
      constexpr auto b = ty::placeholder<"b", std::int32_t, ty::shape<2, 3, 1>>;
      constexpr auto c = ty::placeholder<"c", std::int32_t, ty::shape<2, 1, 2>>;
      const auto as = rnd<std::int32_t>({2, 3, 2}, 120, -9, 9);
      const auto bs = rnd<std::int32_t>({2, 3, 1}, 121, -9, 9);
      const auto cs = rnd<std::int32_t>({2, 1, 2}, 122, -9, 9);
      auto [r, r2, r3] =
          s.run(ty::fetch(ty::concat<-1>(a, b, a), ty::concat<-1>(b, a), ty::concat<1>(a, c)),
                ty::feed(a, as), ty::feed(b, bs), ty::feed(c, cs));
      check_tensor(r, ref_concat({to_nd(as), to_nd(bs), to_nd(as)}, -1), "concat<-1>(a, b, a)");
      check_tensor(r2, ref_concat({to_nd(bs), to_nd(as)}, -1), "concat<-1>(b, a)");
      check_tensor(r3, ref_concat({to_nd(as), to_nd(cs)}, 1), "concat<1> rank 3");
    }
    { // axis 1 with dyn batch, of intermediates
      constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn, 2>>;
      constexpr auto b = ty::placeholder<"b", float, ty::shape<ty::dyn, 3>>;
      for (i64 batch : {4, 1, 0}) {
        CAPTURE(batch);
        const auto as = rnd<float>({batch, 2}, 123), bs = rnd<float>({batch, 3}, 124);
        auto [r] = s.run(ty::fetch(ty::concat<1>(a * ty::constant<2>, b, a)), ty::feed(a, as),
                         ty::feed(b, bs));
        const nd A = to_nd(as);
        check_tensor(r, ref_concat({ref_map(A, [](double v) { return 2 * v; }), to_nd(bs), A}, 1),
                     "concat<1>(2a, b, a)");
      }
    }
  }

  TEST_CASE("slice: a block of whole rows is a view; it is read, fetched and assigned as a copy") {
    using ty::cpu_backend::contiguous_block;
    const auto d3 = [](i64 a, i64 b, i64 c) {
      return ty::backend::rt_dims::from(ty::dims_t<3>{a, b, c});
    };
    using b3 = std::array<i64, 3>;
    CHECK(contiguous_block(d3(6, 4, 2), b3{2, 0, 0}, d3(3, 4, 2)) == 16); // rows 2..4
    CHECK(contiguous_block(d3(1, 6, 4), b3{0, 3, 0}, d3(1, 2, 4)) == 12); // extent 1, then rows
    CHECK(contiguous_block(d3(6, 4, 2), b3{0, 0, 0}, d3(6, 4, 2)) == 0);  // everything
    CHECK(!contiguous_block(d3(2, 6, 4), b3{0, 3, 0}, d3(2, 2, 4)));      // two runs
    CHECK(!contiguous_block(d3(6, 4, 2), b3{2, 1, 0}, d3(3, 2, 2)));      // inner cut
    CHECK(!contiguous_block(d3(6, 4, 2), b3{2, 0, 0}, d3(0, 4, 2)));      // empty

    constexpr auto x = ty::placeholder<"xv", float, ty::shape<6, 4>>;
    constexpr auto w = ty::variable<"wv", float, ty::shape<2, 4>, ty::fill<1>>;
    const auto xs = rnd<float>({6, 4}, 141);
    const nd E = ref_map(to_nd(xs), [](double v) { return std::exp(v); });
    ty::session s;
    constexpr auto e = ty::exp(x);
    // rows of an intermediate read by an elementwise op (which may write over them in place once
    // e dies), and rows of a fed tensor fetched
    auto [a, b] = s.run(ty::fetch(ty::slice<ty::ints<2, 0>, ty::ints<2, -1>>(e) * ty::constant<2>,
                                  ty::slice<ty::ints<3, 0>, ty::ints<2, -1>>(x)),
                        ty::feed(x, xs));
    check_tensor(a, ref_map(ref_slice(E, {2, 0}, {2, -1}), [](double v) { return 2 * v; }),
                 "2 exp(x)[2:4]");
    check_tensor(b, ref_slice(to_nd(xs), {3, 0}, {2, -1}), "x[3:5]");
    // a variable assigned rows at an offset of a buffer of its size class ([3, 4] against
    // [2, 4]), which then dies: copied, not adopted as the variable's storage
    constexpr auto x3 = ty::placeholder<"x3v", float, ty::shape<3, 4>>;
    const auto x3s = rnd<float>({3, 4}, 142);
    s.run(ty::fetch(
              ty::group(ty::assign(w, ty::slice<ty::ints<1, 0>, ty::ints<2, -1>>(ty::exp(x3))))),
          ty::feed(x3, x3s));
    const nd W =
        ref_slice(ref_map(to_nd(x3s), [](double v) { return std::exp(v); }), {1, 0}, {2, -1});
    check_tensor(s.read(w), W, "w = exp(x3)[1:3]");
    // rows of a variable fetched in the run that assigns it: the values before the assignment
    auto [old_row, assigned] = s.run(ty::fetch(ty::slice<ty::ints<1, 0>, ty::ints<1, -1>>(w),
                                               ty::assign(w, w * ty::constant<3>)));
    check_tensor(old_row, ref_slice(W, {1, 0}, {1, -1}), "w[1:2] before the assignment");
    check_tensor(assigned, ref_map(W, [](double v) { return 3 * v; }), "w = 3 w");
    check_tensor(s.read(w), ref_map(W, [](double v) { return 3 * v; }), "w after w = 3 w");
  }

  TEST_CASE("slice: -1 sizes and interior begins") {
    ty::session s;
    constexpr auto x = ty::placeholder<"x", float, ty::shape<4, 5>>;
    const auto xs = rnd<float>({4, 5}, 125);
    auto [a, b, c, e] = s.run(ty::fetch(ty::slice<ty::ints<1, 0>, ty::ints<-1, 2>>(x),
                                        ty::slice<ty::ints<1, 2>, ty::ints<2, 3>>(x),
                                        ty::slice<ty::ints<0, 0>, ty::ints<-1, -1>>(x),
                                        ty::slice<ty::ints<4, 1>, ty::ints<-1, 2>>(x)),
                              ty::feed(x, xs));
    const nd X = to_nd(xs);
    check_tensor(a, ref_slice(X, {1, 0}, {-1, 2}), "slice [1:, 0:2]");
    check_tensor(b, ref_slice(X, {1, 2}, {2, 3}), "slice [1:3, 2:5]");
    check_tensor(c, X, "slice everything");
    check_tensor(e, ref_slice(X, {4, 1}, {-1, 2}), "slice [4:, 1:3] (empty)");
    constexpr auto y = ty::placeholder<"y", double, ty::shape<3, 5, 4>>;
    const auto ys = rnd<double>({3, 5, 4}, 126);
    auto [f, g] = s.run(ty::fetch(ty::slice<ty::ints<1, 2, 1>, ty::ints<2, -1, 2>>(y),
                                  ty::slice<ty::ints<2, 1, 3>, ty::ints<1, 3, 1>>(y)),
                        ty::feed(y, ys));
    check_tensor(f, ref_slice(to_nd(ys), {1, 2, 1}, {2, -1, 2}), "slice rank 3");
    check_tensor(g, ref_slice(to_nd(ys), {2, 1, 3}, {1, 3, 1}), "slice rank 3, single column");
    constexpr auto d = ty::placeholder<"d", float, ty::shape<ty::dyn, 5>>;
    for (i64 rows : {4, 1}) {
      CAPTURE(rows);
      const auto ds = rnd<float>({rows, 5}, 127);
      auto [h] = s.run(ty::fetch(ty::slice<ty::ints<1, 1>, ty::ints<-1, 3>>(d)), ty::feed(d, ds));
      check_tensor(h, ref_slice(to_nd(ds), {1, 1}, {-1, 3}), "slice of dyn");
    }
    // Begin beyond the fed extent: run-time error.
    CHECK_THROWS_AS(s.run(ty::fetch(ty::slice<ty::ints<1, 1>, ty::ints<-1, 3>>(d)),
                          ty::feed(d, ty::tensor<float>({0, 5}))),
                    ty::error);
    // Of an intermediate.
    auto [k] =
        s.run(ty::fetch(ty::slice<ty::ints<1, 0>, ty::ints<2, -1>>(ty::exp(x))), ty::feed(x, xs));
    check_tensor(k, ref_slice(ref_map(X, [](double v) { return std::exp(v); }), {1, 0}, {2, -1}),
                 "slice(exp(x))");
  }

  // -------------------------------------------------------------------------------------------
  // Empty tensors, fused chains, state
  // -------------------------------------------------------------------------------------------
  TEST_CASE("empty tensors through elementwise ops") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
    constexpr auto w = ty::placeholder<"w", float, ty::shape<3>>;
    constexpr auto c = ty::placeholder<"c", float, ty::shape<ty::dyn, 1>>;
    const ty::tensor<float> empty({0, 3}), empty_c({0, 1});
    const auto ws = rnd<float>({3}, 128);
    ty::session s;
    auto [a, b, d, e, f] = s.run(ty::fetch(ty::exp(x), x * w + ty::constant<1>, ty::relu(x) - c,
                                           x > w, ty::where(x > w, x, w)),
                                 ty::feed(x, empty), ty::feed(w, ws), ty::feed(c, empty_c));
    CHECK(a.shape() == dims{0, 3});
    CHECK(b.shape() == dims{0, 3});
    CHECK(d.shape() == dims{0, 3});
    CHECK(e.shape() == dims{0, 3});
    CHECK(f.shape() == dims{0, 3});
    CHECK(a.size() == 0);
    // A broadcast against a zero extent: [0,1] op [1,3]... via [dyn,1] fed 0 rows.
    constexpr auto r = ty::placeholder<"r", float, ty::shape<1, 3>>;
    auto [g] = s.run(ty::fetch(c * r), ty::feed(c, empty_c), ty::feed(r, rnd<float>({1, 3}, 129)));
    CHECK(g.shape() == dims{0, 3});
  }

  TEST_CASE("broadcast_to with a dyn target extent") {
    // The shape rule accepts dyn in the target; the extent must then come from the fed input.
    constexpr auto c = ty::placeholder<"c", float, ty::shape<ty::dyn, 1>>;
    const auto cs = rnd<float>({2, 1}, 130);
    ty::session s;
    auto [f] = s.run(ty::fetch(ty::broadcast_to<ty::shape<ty::dyn, 3>>(c)), ty::feed(c, cs));
    check_tensor(f, ref_broadcast_to(to_nd(cs), {2, 3}), "broadcast_to<[dyn,3]>([2,1])");
    // a fed extent of 1 is the extent, not a broadcast (a batch of one)
    const auto one = rnd<float>({1, 1}, 131);
    auto [f1] = s.run(ty::fetch(ty::broadcast_to<ty::shape<ty::dyn, 3>>(c)), ty::feed(c, one));
    check_tensor(f1, ref_broadcast_to(to_nd(one), {1, 3}), "broadcast_to<[dyn,3]>([1,1])");
  }

  TEST_CASE("fused chain with broadcasting: relu(x * w + b) - sigmoid(x)") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 5>>;
    constexpr auto w = ty::placeholder<"w", float, ty::shape<5>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<1>>;
    constexpr auto y = ty::relu(x * w + b) - ty::sigmoid(x);
    const auto ws = rnd<float>({5}, 131), bs = rnd<float>({1}, 132);
    ty::session s;
    for (i64 batch : {7, 1, 300}) {
      CAPTURE(batch);
      const auto xs = rnd<float>({batch, 5}, 133);
      auto [out] = s.run(ty::fetch(y), ty::feed(x, xs), ty::feed(w, ws), ty::feed(b, bs));
      nd want = zeros_nd({batch, 5});
      for (i64 i = 0; i < batch; ++i)
        for (i64 j = 0; j < 5; ++j) {
          const double xv = xs(i, j), z = xv * ws[j] + bs[0];
          want.v[static_cast<std::size_t>(i * 5 + j)] =
              std::max(z, 0.0) - 1.0 / (1.0 + std::exp(-xv));
        }
      check_tensor(out, want, "relu(x * w + b) - sigmoid(x)");
    }
  }

  TEST_CASE("fused region with an intermediate used twice: t = exp(x); t * t + t") {
    constexpr auto x = ty::placeholder<"x", double, ty::shape<ty::dyn, 4>>;
    constexpr auto t = ty::exp(x);
    constexpr auto y = t * t + t;
    const auto xs = rnd<double>({6, 4}, 134, -2, 2);
    ty::session s;
    auto [out, tt] = s.run(ty::fetch(y, t), ty::feed(x, xs));
    const nd T = ref_map(to_nd(xs), [](double v) { return std::exp(v); });
    check_tensor(out, ref_map(T, [](double e) { return e * e + e; }), "t * t + t");
    check_tensor(tt, T, "t fetched too");
    auto [only] = s.run(ty::fetch(y), ty::feed(x, xs));
    check_tensor(only, ref_map(T, [](double e) { return e * e + e; }), "t * t + t alone");
    // An intermediate shared by a fused region and a reduction.
    auto [u, v] =
        s.run(ty::fetch(t - ty::sum<1>(t, ty::keepdims), ty::max<0>(t * t)), ty::feed(x, xs));
    const nd rs = ref_reduce(T, {1}, true, red::sum);
    check_tensor(u, ref_zip(T, rs, [](double p, double q) { return p - q; }), "t - sum<1>(t)");
    check_tensor(v, ref_reduce(ref_map(T, [](double e) { return e * e; }), {0}, false, red::max),
                 "max<0>(t * t)");
  }

  TEST_CASE("assign / assign_add / assign_sub with broadcast values persist across runs") {
    constexpr auto W = ty::variable<"W", float, ty::shape<3, 4>, ty::fill<1>>;
    constexpr auto v = ty::placeholder<"v", float, ty::shape<4>>;
    constexpr auto d = ty::placeholder<"d", float, ty::shape<3, 1>>;
    const auto vs = rnd<float>({4}, 135), ds = rnd<float>({3, 1}, 136);
    const nd V = to_nd(vs), D = to_nd(ds);
    ty::session s;
    check_tensor(s.read(W), zeros_nd({3, 4}, 1.0), "initial fill<1>");

    auto [a] = s.run(ty::fetch(ty::assign(W, v)), ty::feed(v, vs));
    nd want = ref_broadcast_to(V, {3, 4});
    check_tensor(a, want, "assign(W, v[4]) result");
    check_tensor(s.read(W), want, "W after assign");

    for (int step = 1; step <= 2; ++step) {
      CAPTURE(step);
      auto [b] = s.run(ty::fetch(ty::assign_add(W, d)), ty::feed(d, ds));
      want = ref_zip(want, D, [](double p, double q) { return p + q; });
      check_tensor(b, want, "assign_add(W, d[3,1]) result");
      check_tensor(s.read(W), want, "W after assign_add");
    }

    auto [c] = s.run(ty::fetch(ty::assign_sub(W, ty::constant<0.5>)));
    want = ref_map(want, [](double p) { return p - 0.5; });
    check_tensor(c, want, "assign_sub(W, 0.5) result");
    check_tensor(s.read(W), want, "W after assign_sub");

    // Reads in the same run see the value at the start of the run.
    auto [before, after] = s.run(ty::fetch(W, ty::assign_sub(W, v)), ty::feed(v, vs));
    check_tensor(before, want, "W read in the assigning run");
    want = ref_zip(want, V, [](double p, double q) { return p - q; });
    check_tensor(after, want, "assign_sub(W, v) result");
    check_tensor(s.read(W), want, "W after assign_sub(W, v)");

    // Several variables in one group, value computed from a variable.
    constexpr auto C = ty::variable<"C", std::int64_t, ty::shape<2>, ty::fill<5>>;
    for (int step = 1; step <= 3; ++step) {
      s.run(ty::fetch(ty::group(ty::assign_add(C, ty::constant<3>), ty::assign(W, W * W))));
      want = ref_map(want, [](double p) { return p * p; });
      CAPTURE(step);
      check_tensor(s.read(C), zeros_nd({2}, 5.0 + 3.0 * step), "C after assign_add(C, 3)");
      check_tensor(s.read(W), want, "W after assign(W, W * W)", tol{1e-5, 1e-6});
    }

    // A fresh session starts from the initializers again.
    ty::session s2;
    check_tensor(s2.read(W), zeros_nd({3, 4}, 1.0), "fresh session");
  }
}
