// The GPU kernels of the layout ops (transpose, slice, slice_like, pad_like, concat), argmax,
// element_count, sum_to_like and dropout_mask: a session on gpu<0> must place them on the GPU
// (no op of these graphs falls back to the CPU) and compute what a CPU session computes, bit for
// bit (sum_to_like within 1e-5 relative: the two backends sum in different orders). Without a
// device it runs the placement checks, which need none, fails if one fails, and otherwise
// reports "skipped: no CUDA device" (CTest counts that as skipped).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;

namespace {

int failures = 0;
bool on_device = false; // without a GPU only the host-side checks run (expect_on_gpu)

template <class T>
double as_double(T v) {
  return static_cast<double>(v);
}

/// g and c have the same shape and the same bytes (NaNs and signed zeros included).
template <class T>
void expect_equal(const char* what, const ty::tensor<T>& g, const ty::tensor<T>& c) {
  if (g.shape() != c.shape()) {
    std::printf("FAIL %s: GPU shape %s, CPU shape %s\n", what, ty::dims_string(g.shape()).c_str(),
                ty::dims_string(c.shape()).c_str());
    ++failures;
    return;
  }
  for (std::int64_t i = 0; i < c.size(); ++i)
    if (std::memcmp(&g.data()[i], &c.data()[i], sizeof(T)) != 0) {
      std::printf("FAIL %s[%lld]: GPU %.9g, CPU %.9g\n", what, static_cast<long long>(i),
                  as_double(g.data()[i]), as_double(c.data()[i]));
      ++failures;
      return;
    }
}

template <class T>
void expect_close(const char* what, const ty::tensor<T>& g, const ty::tensor<T>& c, double rel) {
  if (g.shape() != c.shape()) {
    std::printf("FAIL %s: GPU shape %s, CPU shape %s\n", what, ty::dims_string(g.shape()).c_str(),
                ty::dims_string(c.shape()).c_str());
    ++failures;
    return;
  }
  for (std::int64_t i = 0; i < c.size(); ++i) {
    const double a = g.data()[i], b = c.data()[i];
    if (!(std::abs(a - b) <= rel * (1 + std::abs(b)))) {
      std::printf("FAIL %s[%lld]: GPU %.9g, CPU %.9g\n", what, static_cast<long long>(i), a, b);
      ++failures;
      return;
    }
  }
}

/// Every op of the fetches' plan on on<gpu<0>> runs on the GPU: only leaves fall back.
template <class... E>
void expect_on_gpu(const char* what, E...) {
  using P = ty::compile::plan<ty::type_list<E...>, ty::on<ty::gpu<0>>>;
  for (std::size_t i = 0; i < P::size; ++i)
    if (P::placement.fell_back[i] && P::fact.edge_begin[i] != P::fact.edge_begin[i + 1]) {
      std::printf("FAIL %s: %s fell back to the CPU\n", what, P::node_string(i).c_str());
      ++failures;
    }
}

/// Runs f on both sessions; both must throw typeflow::error with the same message.
template <class G, class C, class F>
void expect_same_error(const char* what, G& gpu, C& cpu, F f) {
  std::string eg = "(no error)", ec = "(no error)";
  try {
    f(gpu);
  } catch (const ty::error& e) {
    eg = e.what();
  }
  try {
    f(cpu);
  } catch (const ty::error& e) {
    ec = e.what();
  }
  if (eg != ec || eg == "(no error)") {
    std::printf("FAIL %s: GPU error \"%s\", CPU error \"%s\"\n", what, eg.c_str(), ec.c_str());
    ++failures;
  }
}

template <class T>
ty::tensor<T> ramp(std::vector<std::int64_t> dims, double step) {
  ty::tensor<T> t(std::move(dims));
  for (std::int64_t i = 0; i < t.size(); ++i)
    t.data()[i] = static_cast<T>(std::sin(step * static_cast<double>(i)) * 100.0);
  return t;
}

using gpu_session = ty::session<ty::on<ty::gpu<0>>>;
using cpu_session = ty::session<>;

// The graphs are built in templates with deduced node types: nvcc's host-code generation cannot
// spell, outside templates, types whose template arguments are class-type values (the names).

template <class X, class Y, class Z, class J>
void case_layout(X x, Y y, Z z, J j) {
  constexpr auto t1 = ty::transpose<2, 0, 1>(x);
  constexpr auto t2 = ty::transpose(x);
  constexpr auto t3 = ty::transpose<0, 2, 1>(x);
  constexpr auto s1 = ty::slice<ty::ints<1, 2, 0>, ty::ints<-1, 3, 4>>(x);
  constexpr auto s2 = ty::slice<ty::ints<0, 5, 4>, ty::ints<2, 1, 1>>(y);
  constexpr auto c1 = ty::concat<1>(x, z, y);
  constexpr auto c0 = ty::concat<0>(x, y);
  constexpr auto c2 = ty::concat<-1>(x, y, x);
  constexpr auto p1 = ty::pad_like<ty::ints<1, 2, 0>>(s1, x);
  constexpr auto l1 = ty::slice_like<ty::ints<1, 2, 0>>(y, s1);
  constexpr auto tj = ty::transpose<1, 0>(j);
  constexpr auto cj = ty::concat<1>(j, j);
  expect_on_gpu("layout", t1, t2, t3, s1, s2, c1, c0, c2, p1, l1, tj, cj);
  // Gradients: transpose's is a transpose, slice's a pad_like, concat's slice_likes.
  constexpr auto loss = ty::sum(ty::square(t1)) + ty::sum(s1 * s1) + ty::sum(c1 * c1);
  constexpr auto grads = ty::grad(loss, x, z);
  constexpr auto gx = ty::get<0>(grads);
  constexpr auto gz = ty::get<1>(grads);
  expect_on_gpu("layout gradients", gx, gz);
  if (!on_device)
    return; // the placement checks above ran on the host; the rest needs a GPU
  const auto xv = ramp<float>({4, 6, 5}, 0.37), yv = ramp<float>({4, 6, 5}, 0.11);
  const auto zv = ramp<float>({4, 2, 5}, 0.53);
  const auto jv = ramp<std::int32_t>({4, 7}, 0.7); // every dyn extent of a run is one
  gpu_session g;
  cpu_session c;
  auto run = [&](auto& s) {
    return s.run(ty::fetch(t1, t2, t3, s1, s2, c1, c0, c2, p1, l1, tj, cj), ty::feed(x, xv),
                 ty::feed(y, yv), ty::feed(z, zv), ty::feed(j, jv));
  };
  const auto rg = run(g);
  const auto rc = run(c);
  const char* names[] = {
      "transpose<2,0,1>", "transpose",   "transpose<0,2,1>", "slice",    "slice (one element)",
      "concat<1>",        "concat<0>",   "concat<-1>",       "pad_like", "slice_like",
      "transpose int32",  "concat int32"};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (expect_equal(names[I], std::get<I>(rg), std::get<I>(rc)), ...);
  }
  (std::make_index_sequence<12>{});

  // The gradients of the layout ops (above) against the CPU's.
  auto [gxg, gzg] = g.run(ty::fetch(gx, gz), ty::feed(x, xv), ty::feed(y, yv), ty::feed(z, zv));
  auto [gxc, gzc] = c.run(ty::fetch(gx, gz), ty::feed(x, xv), ty::feed(y, yv), ty::feed(z, zv));
  expect_close("d/dx", gxg, gxc, 1e-6);
  expect_close("d/dz", gzg, gzc, 1e-6);

  // Run-time bounds: the same error on both devices.
  constexpr auto bad = ty::pad_like<ty::ints<1, 0, 0>>(x, y);
  expect_same_error("pad_like out of bounds", g, c,
                    [&](auto& s) { s.run(ty::fetch(bad), ty::feed(x, xv), ty::feed(y, yv)); });
  std::printf("ok: layout ops (%zu transfers on the GPU)\n", g.stats().transfers);
}

/// More elements than one launch's threads cover (65535 blocks of 256): the grid-stride loops.
template <class X>
void case_large(X x) {
  constexpr auto t = ty::transpose<0, 2, 1>(x);
  constexpr auto c = ty::concat<2>(x, x);
  constexpr auto s = ty::slice<ty::ints<1, 0, 3>, ty::ints<-1, -1, 200>>(x);
  expect_on_gpu("large", t, c, s);
  if (!on_device)
    return; // the placement checks above ran on the host; the rest needs a GPU
  const auto xv = ramp<float>({130, 512, 256}, 0.001);
  gpu_session g;
  cpu_session h;
  auto [tg, cg, sg] = g.run(ty::fetch(t, c, s), ty::feed(x, xv));
  auto [tc, cc, sc] = h.run(ty::fetch(t, c, s), ty::feed(x, xv));
  expect_equal("large transpose", tg, tc);
  expect_equal("large concat", cg, cc);
  expect_equal("large slice", sg, sc);
  std::printf("ok: large layout ops\n");
}

template <class X, class W, class I>
void case_argmax(X x, W w, I iv) {
  constexpr auto a1 = ty::argmax<1>(x);
  constexpr auto a0 = ty::argmax<0>(x);
  constexpr auto aw = ty::argmax<1>(w);
  constexpr auto ak = ty::argmax<-1>(w, ty::keepdims);
  constexpr auto aw0 = ty::argmax<0>(w);
  constexpr auto ai = ty::argmax<1>(iv);
  expect_on_gpu("argmax", a1, a0, aw, ak, aw0, ai);
  if (!on_device)
    return; // the placement checks above ran on the host; the rest needs a GPU
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Rows: ties, a NaN first, a NaN later, all -inf, signed zeros, two NaNs.
  ty::tensor<float> xv({6, 7}, {1,    3,    3,    2,    -1,   0,    3,    //
                                nan,  5,    6,    nan,  1,    2,    3,    //
                                4,    9,    nan,  9,    1,    nan,  2,    //
                                -inf, -inf, -inf, -inf, -inf, -inf, -inf, //
                                -0.f, 0.f,  -0.f, 0.f,  -1,   -2,   -3,   //
                                1,    2,    3,    4,    5,    6,    nan});
  // 40 rows of 300 (a warp per row): ties and NaNs at different lanes and strides.
  ty::tensor<float> wv({40, 300});
  for (std::int64_t r = 0; r < 40; ++r)
    for (std::int64_t k = 0; k < 300; ++k)
      wv.data()[r * 300 + k] = static_cast<float>((k * 37 + r * 11) % 53);
  for (std::int64_t r = 0; r < 40; r += 3)
    wv.data()[r * 300 + (r * 29) % 300] = 60; // ties with another 60 below in some rows
  for (std::int64_t r = 1; r < 40; r += 4)
    wv.data()[r * 300 + (r * 53) % 300] = 60;
  for (std::int64_t r = 2; r < 40; r += 5) {
    wv.data()[r * 300 + (r * 7 + 100) % 300] = nan;
    if (r % 2 == 0)
      wv.data()[r * 300 + (r * 7 + 31) % 300] = nan;
  }
  for (std::int64_t k = 0; k < 300; ++k)
    wv.data()[39 * 300 + k] = -inf;
  ty::tensor<std::int32_t> ivv({3, 4, 5});
  for (std::int64_t i = 0; i < ivv.size(); ++i)
    ivv.data()[i] = static_cast<std::int32_t>((i * 7) % 5);
  gpu_session g;
  cpu_session c;
  auto run = [&](auto& s) {
    return s.run(ty::fetch(a1, a0, aw, ak, aw0, ai), ty::feed(x, xv), ty::feed(w, wv),
                 ty::feed(iv, ivv));
  };
  const auto rg = run(g);
  const auto rc = run(c);
  const char* names[] = {"argmax<1>",
                         "argmax<0>",
                         "argmax<1> (warps)",
                         "argmax<-1> keepdims",
                         "argmax<0> of [40, 300]",
                         "argmax<1> int32"};
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (expect_equal(names[K], std::get<K>(rg), std::get<K>(rc)), ...);
  }
  (std::make_index_sequence<6>{});
  ty::tensor<float> empty({0, 7});
  expect_same_error("argmax over an empty axis", g, c,
                    [&](auto& s) { s.run(ty::fetch(a0), ty::feed(x, empty)); });
  std::printf("ok: argmax\n");
}

template <class X, class B, class D>
void case_reductions(X x, B b, D d) {
  constexpr auto n0 = ty::element_count<0>(x);
  constexpr auto n12 = ty::element_count<1, -1>(x);
  constexpr auto nall = ty::element_count(x);
  constexpr auto nd = ty::element_count<0>(d);
  constexpr auto st = ty::sum_to_like(x, b);
  constexpr auto gb = ty::grad(ty::mean(ty::square(x + b)), b); // mean's divisor, sum_to_like
  expect_on_gpu("element_count, sum_to_like", n0, n12, nall, nd, st, gb);
  if (!on_device)
    return; // the placement checks above ran on the host; the rest needs a GPU
  const auto xv = ramp<float>({9, 4, 3}, 0.29);
  const auto bv = ramp<float>({4, 1}, 0.9);
  const auto dv = ramp<double>({5, 2}, 0.4);
  gpu_session g;
  cpu_session c;
  auto run = [&](auto& s) {
    return s.run(ty::fetch(n0, n12, nall, nd, st, gb), ty::feed(x, xv), ty::feed(b, bv),
                 ty::feed(d, dv));
  };
  auto [n0g, n12g, nallg, ndg, stg, gbg] = run(g);
  auto [n0c, n12c, nallc, ndc, stc, gbc] = run(c);
  expect_equal("element_count<0>", n0g, n0c);
  expect_equal("element_count<1,-1>", n12g, n12c);
  expect_equal("element_count", nallg, nallc);
  expect_equal("element_count float64", ndg, ndc);
  expect_close("sum_to_like", stg, stc, 1e-5);
  expect_close("d/db of mean", gbg, gbc, 1e-5);
  std::printf("ok: element_count, sum_to_like\n");
}

template <class X, class K, class XD>
void case_dropout(X x, K keep, XD xd) {
  constexpr auto m = ty::make_node<ty::ops::dropout_mask<7>, X, K>();
  constexpr auto m2 = ty::make_node<ty::ops::dropout_mask<8>, X, K>();
  using half = std::remove_cvref_t<decltype(ty::constant<0.25>)>;
  constexpr auto md = ty::make_node<ty::ops::dropout_mask<9>, XD, half>();
  constexpr auto y = ty::dropout<7>(x, keep);
  expect_on_gpu("dropout", m, m2, md, y);
  if (!on_device)
    return; // the placement checks above ran on the host; the rest needs a GPU
  const auto xv = ramp<float>({300, 37}, 0.2);
  const auto xdv = ramp<double>({1000}, 0.2);
  gpu_session g;
  cpu_session c;
  // Several runs: the masks depend on the run counter, which advances alike in both sessions.
  for (float k : {0.5f, 0.8f, 1.0f, 0.1f}) {
    const ty::tensor<float> kv(std::vector<std::int64_t>{}, {k});
    auto [mg, m2g, mdg, yg] =
        g.run(ty::fetch(m, m2, md, y), ty::feed(x, xv), ty::feed(keep, kv), ty::feed(xd, xdv));
    auto [mc, m2c, mdc, yc] =
        c.run(ty::fetch(m, m2, md, y), ty::feed(x, xv), ty::feed(keep, kv), ty::feed(xd, xdv));
    expect_equal("dropout mask", mg, mc);
    expect_equal("dropout mask (seed 8)", m2g, m2c);
    expect_equal("dropout mask (constant keep, float64)", mdg, mdc);
    expect_equal("dropout", yg, yc);
  }
  const ty::tensor<float> zero(std::vector<std::int64_t>{}, {0.0f});
  expect_same_error("keep_prob 0", g, c,
                    [&](auto& s) { s.run(ty::fetch(m), ty::feed(x, xv), ty::feed(keep, zero)); });
  // A large mask: the grid-stride loop.
  const auto big = ramp<float>({460000, 37}, 0.01);
  const ty::tensor<float> kv(std::vector<std::int64_t>{}, {0.3f});
  auto [bg] = g.run(ty::fetch(m), ty::feed(x, big), ty::feed(keep, kv));
  auto [bc] = c.run(ty::fetch(m), ty::feed(x, big), ty::feed(keep, kv));
  expect_equal("large dropout mask", bg, bc);
  std::printf("ok: dropout masks\n");
}

} // namespace

int main() {
  on_device = ty::cuda_backend::device_count() > 0;
  // Every dyn extent of one run is one extent (the batch): other placeholders are static.
  try {
    case_layout(ty::placeholder<"x", float, ty::shape<ty::dyn, 6, 5>>,
                ty::placeholder<"y", float, ty::shape<ty::dyn, 6, 5>>,
                ty::placeholder<"z", float, ty::shape<ty::dyn, 2, 5>>,
                ty::placeholder<"j", std::int32_t, ty::shape<ty::dyn, 7>>);
    case_large(ty::placeholder<"x", float, ty::shape<ty::dyn, 512, 256>>);
    case_argmax(ty::placeholder<"x", float, ty::shape<ty::dyn, 7>>,
                ty::placeholder<"w", float, ty::shape<40, 300>>,
                ty::placeholder<"i", std::int32_t, ty::shape<3, 4, 5>>);
    case_reductions(ty::placeholder<"x", float, ty::shape<ty::dyn, 4, 3>>,
                    ty::placeholder<"b", float, ty::shape<4, 1>>,
                    ty::placeholder<"d", double, ty::shape<5, 2>>);
    case_dropout(ty::placeholder<"x", float, ty::shape<ty::dyn, 37>>,
                 ty::placeholder<"keep", float, ty::shape<>>,
                 ty::placeholder<"xd", double, ty::shape<1000>>);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    ++failures;
  }
  if (!on_device && failures == 0) { // a failure is reported as one, never as a skip
    std::printf("placement checked on the host, no failure\n%s\n",
                ty::cuda_backend::no_device_message);
    return 0;
  }
  return failures == 0 ? 0 : 1;
}
