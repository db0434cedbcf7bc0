// The per-device op and gradient suite: every op with a GPU kernel runs with the same inputs on
// a gpu<0> session and on a CPU session, and the two results must agree within the tolerance of
// the op's class below; for each differentiable op, the gradient of loss = sum(op(x) * w) (w
// fixed weights, fed) with respect to each input is compared the same way. Every fetch is one
// case: "ok <case>" or "FAIL <case>: <details>", then "N cases, M failed"; the exit status is
// nonzero when a case failed.
//
// Each case also checks where the GPU plan put the ops of its subgraph: every op here has a GPU
// kernel, so a non-leaf node that soft placement moved to the CPU (placement.fell_back) is a
// FAIL naming the op. That check needs no device: without one the suite runs only it and
// prints its tally; then a failed case exits 1 (a failure, never reported as a skip), and
// otherwise it prints "skipped: no CUDA device" and returns 0.
//
// Tolerances. A float result passes when |gpu - cpu| <= tol * (1 + |cpu|), NaN only against NaN;
// integer and bool results must be equal. tol by class and dtype:
//
//   class            float32          float64           ops
//   exact            0                0                 layout (reshape, expand_dims, transpose,
//                                                       slice, concat) and their gradients, neg,
//                                                       abs, relu, maximum, minimum, comparisons,
//                                                       where, broadcast_to, casts, max/min
//                                                       reductions, max pooling, argmax
//   arith            1e-6             1e-12             + - * /, square, sqrt, bias_add, and the
//                                                       gradients made of them
//   transc           2e-6             1e-12             exp log rsqrt sin cos tanh sigmoid pow
//   accum(k)         2e-6 * sqrt(k)   1e-12 * sqrt(k)   sums of k terms: sum/mean, matmul, conv2d
//                                                       and its gradients, avg pooling, pooling
//                                                       gradients, gradients that unbroadcast
//   accum_transc(k)  4e-6 * sqrt(k)   1e-12 * sqrt(k)   softmax, log_softmax, cross-entropy
//
// Why (u = 2^-24 = 6e-8 is float32's unit roundoff; inputs are at most 2 in magnitude, rms
// about 0.7):
// - exact: these ops copy, select, compare, or round once (casts) in the same way on both
//   sides; a max/min reduction or a max pool returns one of its inputs in any order.
// - arith: + - * / and sqrt are correctly rounded on both sides (nvcc's default -prec-div=true
//   -prec-sqrt=true, no fast math); the one allowed difference is nvcc contracting a * b + c
//   into an FMA in a fused kernel, which x86-64 g++ does not do: one rounding per contracted
//   pair, a few ulp over these short chains. 1e-6 is 8 ulp at |x| = 1 and 8 ulp relative above.
//   float64: 1e-12 (~4500 ulp) is far above any rounding difference here and 1e5 times below the
//   error of a computation done in float32 by mistake, the failure it is there to catch.
// - transc: CUDA's float functions are within 1 to 4 ulp (CUDA C++ Programming Guide, maximum
//   ulp errors; powf the largest), glibc's within 1; a gradient multiplies one or two of them:
//   2e-6 is 16 ulp at 1. CUDA's double functions are within 2 ulp, so 1e-12 is ample.
// - accum(k): two orders of summing k terms of rms s differ by about u * s * k / sqrt(2) (a
//   random walk: partial sums grow like sqrt(j) * s). float32 GEMMs (cuBLAS and OpenBLAS; no
//   TF32 unless session_options::allow_tf32) accumulate in float32: ~1e-6 for the 53-term
//   matmul, ~4e-6 for a 180-term filter gradient. float32 reductions accumulate in double on the
//   GPU and in float32 lanes of at most 64 terms on the CPU: ~2e-5 for all 9102 elements.
//   2e-6 * sqrt(k) (1.5e-5, 2.7e-5 and 1.9e-4 for those) is 7x or more above them even where
//   the result cancels to about 0, and (1 + |ref|) grows with the result where it does not.
//   k is given per case: the inner extent of a matmul; KH*KW*C for a convolution, KH*KW*O for
//   its input gradient, N*OH*OW for its filter gradient; the window or the window overlap for
//   pooling; the broadcast extent for a gradient that sums it away.
// - accum_transc(k): k exponentials summed, then a log or a division: both of the above.
//
// Two units: this file runs the elementwise, reduction, product, convolution and pooling cases
// and main; test_cuda_ops_2.cu (this file again, with TYPEFLOW_CUDA_OPS_PART 2) the softmax,
// index, normalization, attention and layout cases, which main calls and counts. nvcc's device
// pass needed 4.07 GiB for all of them in one unit.

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/typeflow.hpp"

#ifndef TYPEFLOW_CUDA_OPS_PART
#define TYPEFLOW_CUDA_OPS_PART 1
#endif

namespace ty = typeflow;

namespace {

// ---- tolerances -----------------------------------------------------------------------------

enum class tol_class { exact, arith, transc, accum, accum_transc };
struct tol {
  tol_class c = tol_class::exact;
  double k = 1; // the number of terms of a sum, for accum and accum_transc
};
constexpr tol exact{tol_class::exact};
constexpr tol arith{tol_class::arith};
constexpr tol transc{tol_class::transc};
constexpr tol accum(double k) {
  return {tol_class::accum, k};
}
constexpr tol accum_transc(double k) {
  return {tol_class::accum_transc, k};
}

/// A factor on the float32 accum tolerances: 4 while the GPU's products run on the tensor cores
/// (16-bit operands, float32 sums whose rounding inside the matrix unit is not specified as
/// round-to-nearest: 4x still lies 100x under one bfloat16 rounding of an operand, 2^-9).
double accum_scale = 1;

/// The allowed |gpu - cpu| for a reference value `ref` of dtype T (0: must be equal).
template <class T>
double allowed(tol t, double ref) {
  if constexpr (!std::is_floating_point_v<T>) {
    return 0;
  } else {
    constexpr bool f32 = std::is_same_v<T, float>;
    double base = 0;
    switch (t.c) {
    case tol_class::exact:
      return 0;
    case tol_class::arith:
      base = f32 ? 1e-6 : 1e-12;
      break;
    case tol_class::transc:
      base = f32 ? 2e-6 : 1e-12;
      break;
    case tol_class::accum:
      base = (f32 ? 2e-6 * accum_scale : 1e-12) * std::sqrt(t.k);
      break;
    case tol_class::accum_transc:
      base = (f32 ? 4e-6 : 1e-12) * std::sqrt(t.k);
      break;
    }
    return base * (1 + std::abs(ref));
  }
}

/// "" when GPU and CPU results agree, else what differs (the worst element first).
template <class T>
std::string compare(const ty::tensor<T>& g, const ty::tensor<T>& c, tol t) {
  if (g.shape() != c.shape()) {
    std::string s = "shape: GPU ";
    s += ty::dims_string(g.shape());
    s += ", CPU ";
    s += ty::dims_string(c.shape());
    return s;
  }
  std::int64_t bad = 0, worst = -1;
  double worst_excess = -1, worst_limit = 0;
  for (std::int64_t i = 0; i < c.size(); ++i) {
    const T gv = g[i], cv = c[i];
    if (gv == cv)
      continue;
    const double gd = static_cast<double>(gv), cd = static_cast<double>(cv);
    if (std::isnan(gd) && std::isnan(cd))
      continue;
    const double limit = allowed<T>(t, cd);
    const double err = std::abs(gd - cd); // NaN against a number: NaN, fails below
    if (err <= limit)
      continue;
    ++bad;
    const double excess = std::isnan(err) ? 1e300 : (limit > 0 ? err / limit : 1e299);
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
      worst_limit = limit;
    }
  }
  if (bad == 0)
    return {};
  char buf[256];
  const double gw = static_cast<double>(g[worst]), cw = static_cast<double>(c[worst]);
  std::snprintf(buf, sizeof buf, "%lld of %lld elements differ; worst [%lld]: GPU %.17g, CPU %.17g",
                static_cast<long long>(bad), static_cast<long long>(c.size()),
                static_cast<long long>(worst), gw, cw);
  std::string s = buf;
  if (worst_limit > 0) {
    std::snprintf(buf, sizeof buf, ", |diff| %.3g > allowed %.3g", std::abs(gw - cw), worst_limit);
    s += buf;
  } else {
    s += " (must be equal)";
  }
  return s;
}

// ---- placement ------------------------------------------------------------------------------

template <class P, std::size_t... I>
std::array<std::string_view, P::size> op_names(std::index_sequence<I...>) {
  return {P::template node<I>::op::name...};
}

/// For each fetch (by its node index), the ops of its subgraph (leaves aside) that soft
/// placement moved to the CPU, each named once: " op op ...", empty when there are none.
template <class P, std::size_t N>
std::array<std::string, N> fallbacks(const std::array<std::size_t, N>& roots) {
  const auto names = op_names<P>(std::make_index_sequence<P::size>{});
  std::array<std::string, N> out;
  for (std::size_t f = 0; f < N; ++f) {
    std::vector<bool> reach(P::size, false);
    reach[roots[f]] = true;
    std::vector<std::string_view> seen;
    // Topological order: children come before their consumers.
    for (std::size_t i = roots[f] + 1; i-- > 0;) {
      if (!reach[i])
        continue;
      const std::size_t b = P::fact.edge_begin[i], e = P::fact.edge_begin[i + 1];
      for (std::size_t k = b; k < e; ++k)
        reach[P::fact.edges[k]] = true;
      if (b == e || !P::placement.fell_back[i])
        continue; // a leaf, or placed as asked
      bool dup = false;
      for (auto s : seen)
        dup = dup || s == names[i];
      if (dup)
        continue;
      seen.push_back(names[i]);
      out[f] += ' ';
      out[f] += names[i];
    }
  }
  return out;
}

// ---- cases ----------------------------------------------------------------------------------

struct tally_t {
  bool device = false;
  int cases = 0, failed = 0;
  ty::gpu_convolutions convolutions = ty::gpu_convolutions::fastest; ///< the GPU sessions'
  /// The GPU sessions' precision; under bfloat16 or float16 the CPU session's float32 feeds are
  /// rounded to it first (cpu_feeds), so both sides multiply the same operands.
  ty::precision precision = ty::precision::float32;
  std::size_t cudnn_runs = 0; ///< the last GPU run's convolutions on cuDNN
} tally;

void report(const std::string& name, const std::string& value_error, const std::string& on_cpu) {
  ++tally.cases;
  std::string why = value_error;
  if (!on_cpu.empty()) {
    why += why.empty() ? "" : "; ";
    why += "ops left on the CPU by soft placement:";
    why += on_cpu;
  }
  if (why.empty()) {
    if (tally.device)
      std::printf("ok %s\n", name.c_str());
    return;
  }
  ++tally.failed;
  std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
}

/// One fetch of a case: its name and tolerance; E is its expression type.
template <class E>
struct item {
  const char* name;
  tol t;
};
template <class E>
item<E> at(const char* name, E, tol t) {
  return {name, t};
}

/// A float32 feed rounded to H (to nearest even, by the host's conversion), its values kept in
/// `store`; other feeds as they are.
template <class H, class P>
ty::feed_t<P> round_feed(const ty::feed_t<P>& f, std::vector<std::vector<float>>& store) {
  if constexpr (std::is_same_v<typename P::value_type, float>) {
    auto& v = store.emplace_back(f.data, f.data + f.dims.numel());
    for (auto& e : v)
      e = static_cast<float>(H(e));
    return {v.data(), f.dims};
  } else {
    return f;
  }
}
/// The CPU session's feeds under tally.precision: the float32 ones rounded to its 16-bit type,
/// so that the CPU's float32 products read exactly the operands the GPU's tensor cores read
/// (a product of two 16-bit values is exact in float32; only the order of the sums differs).
template <class Feeds>
Feeds cpu_feeds(const Feeds& feeds, std::vector<std::vector<float>>& store) {
  if (tally.precision == ty::precision::float32)
    return feeds;
  store.reserve(std::tuple_size_v<Feeds>);
  return std::apply(
      [&](const auto&... f) {
        if (tally.precision == ty::precision::bfloat16)
          return Feeds{round_feed<ty::bfloat16>(f, store)...};
        return Feeds{round_feed<ty::float16>(f, store)...};
      },
      feeds);
}

/// Runs the items' expressions on gpu<0> and on the CPU with the same feeds, in one run per
/// session, and reports each: values within tolerance, and its subgraph placed on the GPU.
/// Without a device only the placement is checked.
template <class Feeds, class... E>
void check(const std::string& group, const Feeds& feeds, const item<E>&... items) {
  using P = ty::compile::plan<ty::type_list<E...>, ty::on<ty::gpu<0>>>;
  constexpr std::size_t n = sizeof...(E);
  const std::array<const char*, n> names{items.name...};
  const std::array<tol, n> tols{items.t...};
  const auto on_cpu = fallbacks<P>(std::array<std::size_t, n>{P::template index_c<E>::value...});
  std::array<std::string, n> errors;
  if (tally.device) {
    try {
      ty::session<> cs(ty::session_options{.seed = 7});
      ty::session<ty::on<ty::gpu<0>>> gs(ty::session_options{
          .seed = 7, .convolutions = tally.convolutions, .precision = tally.precision});
      std::vector<std::vector<float>> store;
      // (Not `const auto`: a const tuple of the results costs nvcc's device front end
      // seconds per case.)
      auto co = std::apply([&](const auto&... f) { return cs.run(ty::fetch_t<E...>{}, f...); },
                           cpu_feeds(feeds, store));
      auto go =
          std::apply([&](const auto&... f) { return gs.run(ty::fetch_t<E...>{}, f...); }, feeds);
      tally.cudnn_runs = gs.stats().cudnn_convolutions;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((errors[I] = compare(std::get<I>(go), std::get<I>(co), tols[I])), ...);
      }
      (std::make_index_sequence<n>{});
    } catch (const std::exception& e) {
      for (auto& s : errors) {
        s = "run threw: ";
        s += e.what();
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    report(group + "/" + names[i], errors[i], on_cpu[i]);
}

/// A deterministic input for placeholder E: element i is f(i).
template <class E, class F>
ty::tensor<typename E::value_type> make(E, F f, std::vector<std::int64_t> dims = {}) {
  using T = typename E::value_type;
  if (dims.empty())
    for (auto d : E::shape_type::dims)
      dims.push_back(d);
  ty::tensor<T> t(dims);
  for (std::int64_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<T>(f(i));
  return t;
}

/// Smooth values in [-scale, scale].
auto wave(double phase, double scale = 1) {
  return [=](std::int64_t i) { return scale * std::sin(0.37 * static_cast<double>(i) + phase); };
}
/// Smooth values in [0.25, 1.75] (for log, sqrt, rsqrt, pow's base).
auto positive(double phase) {
  return [=](std::int64_t i) {
    return 0.25 + 0.75 * (1 + std::cos(0.23 * static_cast<double>(i) + phase));
  };
}
/// Values on a grid lo + step * j, j in [0, m): exact in every dtype, with many ties.
auto grid(int m, double lo, double step, std::int64_t offset = 3) {
  return [=](std::int64_t i) { return lo + step * static_cast<double>((i * 7 + offset) % m); };
}

template <class T>
std::string dtype_group(const char* what) {
  return std::string(what) + "/" + std::string(ty::dtype_name<T>);
}

// Unary elementwise ops and their gradients. x is 7 x 33 (231 elements: not a multiple of the
// 16-byte vector width, so the kernel's tail runs too); x[0] = 0 checks relu'(0) = abs'(0) = 0.
// float32: every op and its gradient; float64: the transcendental functions.
template <class T>
void unary_case(T) {
  constexpr auto x = ty::placeholder<"x", T, ty::shape<7, 33>>;
  constexpr auto p = ty::placeholder<"p", T, ty::shape<7, 33>>;
  constexpr auto w = ty::placeholder<"w", T, ty::shape<7, 33>>;
  auto xv = make(x, wave(0.1, 2.0));
  xv[0] = 0;
  const auto pv = make(p, positive(0.4));
  const auto wv = make(w, wave(1.3));
  const auto feeds = std::make_tuple(ty::feed(x, xv), ty::feed(p, pv), ty::feed(w, wv));
  const std::string group = dtype_group<T>("unary");
  if constexpr (std::is_same_v<T, float>)
    check(group, feeds, at("neg", -x, exact), at("abs", ty::abs(x), exact),
          at("relu", ty::relu(x), exact), at("square", ty::square(x), arith),
          at("sqrt", ty::sqrt(p), arith), at("rsqrt", ty::rsqrt(p), transc),
          at("exp", ty::exp(x), transc), at("log", ty::log(p), transc),
          at("sin", ty::sin(x), transc), at("cos", ty::cos(x), transc),
          at("tanh", ty::tanh(x), transc), at("sigmoid", ty::sigmoid(x), transc),
          at("grad neg", ty::grad(ty::sum(-x * w), x), exact),
          at("grad abs", ty::grad(ty::sum(ty::abs(x) * w), x), exact),
          at("grad relu", ty::grad(ty::sum(ty::relu(x) * w), x), exact),
          at("grad square", ty::grad(ty::sum(ty::square(x) * w), x), arith),
          at("grad sqrt", ty::grad(ty::sum(ty::sqrt(p) * w), p), arith),
          at("grad rsqrt", ty::grad(ty::sum(ty::rsqrt(p) * w), p), transc),
          at("grad exp", ty::grad(ty::sum(ty::exp(x) * w), x), transc),
          at("grad log", ty::grad(ty::sum(ty::log(p) * w), p), arith),
          at("grad sin", ty::grad(ty::sum(ty::sin(x) * w), x), transc),
          at("grad cos", ty::grad(ty::sum(ty::cos(x) * w), x), transc),
          at("grad tanh", ty::grad(ty::sum(ty::tanh(x) * w), x), transc),
          at("grad sigmoid", ty::grad(ty::sum(ty::sigmoid(x) * w), x), transc),
          at("erf", ty::erf(x), transc), at("gelu", ty::gelu(x), transc),
          at("gelu_tanh", ty::gelu_tanh(x), transc),
          at("grad erf", ty::grad(ty::sum(ty::erf(x) * w), x), transc),
          at("grad gelu", ty::grad(ty::sum(ty::gelu(x) * w), x), transc),
          at("grad gelu_tanh", ty::grad(ty::sum(ty::gelu_tanh(x) * w), x), transc));
  else
    check(group, feeds, at("rsqrt", ty::rsqrt(p), transc), at("exp", ty::exp(x), transc),
          at("log", ty::log(p), transc), at("sin", ty::sin(x), transc),
          at("tanh", ty::tanh(x), transc), at("sigmoid", ty::sigmoid(x), transc),
          at("grad tanh", ty::grad(ty::sum(ty::tanh(x) * w), x), transc),
          at("gelu", ty::gelu(x), transc),
          at("grad gelu", ty::grad(ty::sum(ty::gelu(x) * w), x), transc));
}

// Binary ops with NumPy broadcasting ([4,1,5] with [3,5] gives [4,3,5]), comparisons, where,
// bias_add, broadcast_to, a scalar operand, and a dyn operand broadcast at run time (its
// gradient needs sum_to_like). a and b lie on a grid of quarters, so maximum/minimum and the
// comparisons meet ties (the gradient of a tie goes to the first operand). The six comparisons
// are fetched as one int32 code, bit k set when comparison k holds (<, <=, >, >=, ==, !=).
// Gradients sum over the broadcast axes: 3 terms for a, 4 for b.
template <class T>
void binary_case(T) {
  constexpr auto a = ty::placeholder<"a", T, ty::shape<4, 1, 5>>;
  constexpr auto b = ty::placeholder<"b", T, ty::shape<3, 5>>;
  constexpr auto w = ty::placeholder<"w", T, ty::shape<4, 3, 5>>;
  const auto av = make(a, grid(5, 0.5, 0.25));    // 0.5 .. 1.5
  const auto bv = make(b, grid(7, 0.5, 0.25, 1)); // 0.5 .. 2
  const auto wv = make(w, wave(0.7));
  const std::string group = dtype_group<T>("binary");
  if constexpr (std::is_same_v<T, float>) {
    constexpr auto c = ty::placeholder<"c", T, ty::shape<4, 3, 5>>;
    constexpr auto bias = ty::placeholder<"bias", T, ty::shape<5>>;
    constexpr auto s = ty::placeholder<"s", T, ty::shape<>>;
    constexpr auto d = ty::placeholder<"d", T, ty::shape<ty::dyn, 3, 5>>; // fed [1, 3, 5]
    const auto cv = make(c, wave(2.1, 1.5));
    const auto biasv = make(bias, wave(0.3));
    const auto sv = make(s, [](std::int64_t) { return -0.75; });
    const auto dv = make(d, wave(1.1), {1, 3, 5});
    using I = std::int32_t;
    constexpr auto comparisons = ty::cast<I>(a < b) + ty::cast<I>(a <= b) * ty::constant<2> +
                                 ty::cast<I>(a > b) * ty::constant<4> +
                                 ty::cast<I>(a >= b) * ty::constant<8> +
                                 ty::cast<I>(ty::equal(a, b)) * ty::constant<16> +
                                 ty::cast<I>(ty::not_equal(a, b)) * ty::constant<32>;
    constexpr auto sel = ty::where(a < b, a, b);
    check(group,
          std::make_tuple(ty::feed(a, av), ty::feed(b, bv), ty::feed(w, wv), ty::feed(c, cv),
                          ty::feed(bias, biasv), ty::feed(s, sv), ty::feed(d, dv)),
          at("add", a + b, arith), at("sub", a - b, arith), at("mul", a * b, arith),
          at("div", a / b, arith), at("pow", ty::pow(a, b), transc),
          at("maximum", ty::maximum(a, b), exact), at("minimum", ty::minimum(a, b), exact),
          at("comparisons", comparisons, exact), at("where", sel, exact),
          at("bias_add", ty::bias_add(c, bias), arith),
          at("broadcast_to", ty::broadcast_to<ty::shape<4, 3, 5>>(b), exact),
          at("scalar mul", c * s, arith), at("dyn add", d + c, arith),
          at("grad sub b", ty::grad(ty::sum((a - b) * w), b), accum(4)),
          at("grad mul a", ty::grad(ty::sum(a * b * w), a), accum(3)),
          at("grad mul b", ty::grad(ty::sum(a * b * w), b), accum(4)),
          at("grad div a", ty::grad(ty::sum(a / b * w), a), accum(3)),
          at("grad div b", ty::grad(ty::sum(a / b * w), b), accum(4)),
          at("grad pow a", ty::grad(ty::sum(ty::pow(a, b) * w), a), accum_transc(3)),
          at("grad pow b", ty::grad(ty::sum(ty::pow(a, b) * w), b), accum_transc(4)),
          at("grad maximum a", ty::grad(ty::sum(ty::maximum(a, b) * w), a), accum(3)),
          at("grad maximum b", ty::grad(ty::sum(ty::maximum(a, b) * w), b), accum(4)),
          at("grad where b", ty::grad(ty::sum(sel * w), b), accum(4)),
          at("grad bias_add bias", ty::grad(ty::sum(ty::bias_add(c, bias) * w), bias), accum(12)),
          at("grad broadcast_to", ty::grad(ty::sum(ty::broadcast_to<ty::shape<4, 3, 5>>(b) * w), b),
             accum(4)),
          at("grad scalar mul s", ty::grad(ty::sum(c * s * w), s), accum(60)),
          at("grad dyn add", ty::grad(ty::sum((d + c) * w), d), accum(4)));
  } else {
    check(group, std::make_tuple(ty::feed(a, av), ty::feed(b, bv), ty::feed(w, wv)),
          at("add", a + b, arith), at("div", a / b, arith), at("pow", ty::pow(a, b), transc),
          at("maximum", ty::maximum(a, b), exact),
          at("grad div b", ty::grad(ty::sum(a / b * w), b), accum(4)),
          at("grad pow b", ty::grad(ty::sum(ty::pow(a, b) * w), b), accum_transc(4)));
  }
}

// Casts between float32, float64, int32, int64 and bool; integer arithmetic (division
// truncates, by zero gives 0), comparisons (one code, as in binary_case), maximum/minimum (one
// value, 100 * max + min) and reductions; the casts' gradients. All exact. F is float32.
template <class F>
void cast_case(F) {
  constexpr auto xf = ty::placeholder<"xf", F, ty::shape<5, 9>>;
  constexpr auto xd = ty::placeholder<"xd", double, ty::shape<5, 9>>;
  constexpr auto i = ty::placeholder<"i", std::int32_t, ty::shape<5, 9>>;
  constexpr auto j = ty::placeholder<"j", std::int32_t, ty::shape<5, 9>>;
  constexpr auto l = ty::placeholder<"l", std::int64_t, ty::shape<5, 9>>;
  constexpr auto wf = ty::placeholder<"wf", F, ty::shape<5, 9>>;
  constexpr auto wd = ty::placeholder<"wd", double, ty::shape<5, 9>>;
  const auto xfv = make(xf, grid(25, -3, 0.25)); // -3 .. 3 in quarters, zero included
  const auto xdv = make(xd, wave(0.2, 3.0));     // not representable in float32
  const auto iv = make(i, grid(15, -7, 1));
  const auto jv = make(j, grid(7, -3, 1, 5)); // zeros included
  const auto lv = make(l, grid(11, -5000000000.0, 1000000000.0));
  const auto wfv = make(wf, wave(0.9));
  const auto wdv = make(wd, wave(1.9));
  // 1 + k/512 for k < 45: every bfloat16 rounding case at [1, 1.1): exact, halfway (to even,
  // down and up) and in between.
  constexpr auto xt = ty::placeholder<"xt", F, ty::shape<5, 9>>;
  const auto xtv = make(xt, grid(45, 1, 1.0 / 512));
  using I = std::int32_t;
  constexpr auto comparisons = ty::cast<I>(i < j) + ty::cast<I>(i <= j) * ty::constant<2> +
                               ty::cast<I>(i > j) * ty::constant<4> +
                               ty::cast<I>(i >= j) * ty::constant<8> +
                               ty::cast<I>(ty::equal(i, j)) * ty::constant<16> +
                               ty::cast<I>(ty::not_equal(i, j)) * ty::constant<32>;
  check("cast+int",
        std::make_tuple(ty::feed(xf, xfv), ty::feed(xd, xdv), ty::feed(i, iv), ty::feed(j, jv),
                        ty::feed(l, lv), ty::feed(wf, wfv), ty::feed(wd, wdv), ty::feed(xt, xtv)),
        at("cast float32->bfloat16 ties", ty::cast<ty::bfloat16>(xt), exact),
        at("cast float32->bfloat16", ty::cast<ty::bfloat16>(xf * wf), exact),
        at("cast float32->float16", ty::cast<ty::float16>(xf * wf), exact),
        at("bfloat16 and float16 round trips",
           ty::cast<float>(ty::cast<ty::bfloat16>(xf * wf)) -
               ty::cast<float>(ty::cast<ty::float16>(wf * ty::constant<3>)),
           exact),
        at("cast float32->float64", ty::cast<double>(xf), exact),
        at("cast float64->float32", ty::cast<float>(xd), exact),
        at("cast float32->int32", ty::cast<std::int32_t>(xf), exact),
        at("cast float64->int64", ty::cast<std::int64_t>(xd), exact),
        at("cast float32->bool", ty::cast<bool>(xf), exact),
        at("cast int32->float32", ty::cast<float>(i), exact),
        at("cast int64->float64", ty::cast<double>(l), exact), at("int add mul", i * j + i, exact),
        at("int div", i / j, exact), at("int abs", ty::abs(i), exact),
        at("int neg relu", ty::relu(-i), exact), at("int comparisons", comparisons, exact),
        at("int maximum minimum", ty::maximum(i, j) * ty::constant<100> + ty::minimum(i, j), exact),
        at("int where", ty::where(i > j, i, j - i), exact), at("int sum<1>", ty::sum<1>(i), exact),
        at("int max<0>", ty::max<0>(i), exact), at("int min", ty::min(i), exact),
        at("int64 sum", ty::sum(l), exact),
        at("grad cast float32->float64", ty::grad(ty::sum(ty::cast<double>(xf) * wd), xf), exact),
        at("grad cast float64->float32", ty::grad(ty::sum(ty::cast<float>(xd) * wf), xd), exact));
}

// sum, mean, max, min over axis 0, the last axis, two axes, all axes, with and without keepdims,
// on x [6, 37, 41] (9102 elements: more than a block's 256 threads and than the CPU's chunk of
// 1024), and gradients with and without keepdims; float32 on smooth values and on a grid with
// many ties (the max/min gradients share among tied elements); float64 a subset.
template <class T>
void reduce_case(T) {
  constexpr auto x = ty::placeholder<"x", T, ty::shape<6, 37, 41>>;
  constexpr double all = 6 * 37 * 41;
  const std::string group = dtype_group<T>("reduce");
  if constexpr (std::is_same_v<T, float>) {
    constexpr auto w1 = ty::placeholder<"w1", T, ty::shape<37>>;
    constexpr auto w2 = ty::placeholder<"w2", T, ty::shape<6, 1, 41>>;
    const auto w1v = make(w1, wave(0.5));
    const auto w2v = make(w2, wave(1.5));
    const auto run = [&](const std::string& name, const auto& xv) {
      check(
          name, std::make_tuple(ty::feed(x, xv), ty::feed(w1, w1v), ty::feed(w2, w2v)),
          at("sum<0>", ty::sum<0>(x), accum(6)), at("sum<-1>", ty::sum<-1>(x), accum(41)),
          at("sum<0,2>", ty::sum<0, 2>(x), accum(246)), at("sum", ty::sum(x), accum(all)),
          at("sum<1> keepdims", ty::sum<1>(x, ty::keepdims), accum(37)),
          at("mean<0,2>", ty::mean<0, 2>(x), accum(246)),
          at("mean<1> keepdims", ty::mean<1>(x, ty::keepdims), accum(37)),
          at("max<-1>", ty::max<-1>(x), exact), at("max<0,2>", ty::max<0, 2>(x), exact),
          at("max keepdims", ty::max(x, ty::keepdims), exact), at("min<0>", ty::min<0>(x), exact),
          at("min", ty::min(x), exact), at("min<1> keepdims", ty::min<1>(x, ty::keepdims), exact),
          at("grad sum<0,2>", ty::grad(ty::sum(ty::sum<0, 2>(x) * w1), x), arith),
          at("grad sum<1> keepdims", ty::grad(ty::sum(ty::sum<1>(x, ty::keepdims) * w2), x), arith),
          at("grad mean<0,2>", ty::grad(ty::sum(ty::mean<0, 2>(x) * w1), x), arith),
          at("grad max<0,2>", ty::grad(ty::sum(ty::max<0, 2>(x) * w1), x), arith),
          at("grad max<1> keepdims", ty::grad(ty::sum(ty::max<1>(x, ty::keepdims) * w2), x), arith),
          at("grad min<0,2>", ty::grad(ty::sum(ty::min<0, 2>(x) * w1), x), arith));
    };
    run(group, make(x, wave(0.3)));
    run(group + "/ties", make(x, grid(9, -1, 0.25)));
  } else {
    const auto xv = make(x, wave(0.3));
    check(group, std::make_tuple(ty::feed(x, xv)), at("sum", ty::sum(x), accum(all)),
          at("mean<-1>", ty::mean<-1>(x), accum(41)), at("max<0,2>", ty::max<0, 2>(x), exact));
  }
}

// matmul: the four transpose combinations of 37x53 times 53x19, and batched [3,37,53] x
// [3,53,19] without and with both transposes, and [2,1,37,53] x [3,53,19] (both operands
// stretched: one cuBLAS call per run of the last batch dimension); gradients with respect to
// both operands (they are matmuls with the other transpose combinations). Forward sums run over 53
// terms, dA over 19 (= n), dB over 37 (= m). float64: three of the forward products.
template <class T>
void matmul_case(T, const char* name = "matmul") {
  constexpr auto a = ty::placeholder<"a", T, ty::shape<37, 53>>;
  constexpr auto a_t = ty::placeholder<"at", T, ty::shape<53, 37>>;
  constexpr auto b = ty::placeholder<"b", T, ty::shape<53, 19>>;
  constexpr auto b_t = ty::placeholder<"bt", T, ty::shape<19, 53>>;
  constexpr auto w = ty::placeholder<"w", T, ty::shape<37, 19>>;
  constexpr auto ba = ty::placeholder<"ba", T, ty::shape<3, 37, 53>>;
  constexpr auto bb = ty::placeholder<"bb", T, ty::shape<3, 53, 19>>;
  constexpr auto ba_t = ty::placeholder<"bat", T, ty::shape<3, 53, 37>>;
  constexpr auto bb_t = ty::placeholder<"bbt", T, ty::shape<3, 19, 53>>;
  constexpr auto bw = ty::placeholder<"bw", T, ty::shape<3, 37, 19>>;
  constexpr auto sa = ty::placeholder<"sa", T, ty::shape<2, 1, 37, 53>>;
  constexpr auto sw = ty::placeholder<"sw", T, ty::shape<2, 3, 37, 19>>;
  const auto av = make(a, wave(0.1)), atv = make(a_t, wave(0.2)), bv = make(b, wave(0.3)),
             btv = make(b_t, wave(0.4)), wv = make(w, wave(0.5)), bav = make(ba, wave(0.6)),
             bbv = make(bb, wave(0.7)), batv = make(ba_t, wave(0.8)), bbtv = make(bb_t, wave(0.9)),
             bwv = make(bw, wave(1.0)), sav = make(sa, wave(1.1)), swv = make(sw, wave(1.2));
  constexpr auto nn = ty::matmul<false, false>(a, b);
  constexpr auto nt = ty::matmul<false, true>(a, b_t);
  constexpr auto tn = ty::matmul<true, false>(a_t, b);
  constexpr auto tt = ty::matmul<true, true>(a_t, b_t);
  constexpr auto bnn = ty::matmul<false, false>(ba, bb);
  constexpr auto btt = ty::matmul<true, true>(ba_t, bb_t);
  constexpr auto bxm = ty::matmul<false, false>(ba, b); // a batch times one matrix
  constexpr auto bxmt = ty::matmul<false, true>(ba, b_t);
  constexpr auto sxb = ty::matmul<false, false>(sa, bb); // [2, 3, 37, 19]
  const auto feeds = std::make_tuple(ty::feed(a, av), ty::feed(a_t, atv), ty::feed(b, bv),
                                     ty::feed(b_t, btv), ty::feed(w, wv), ty::feed(ba, bav),
                                     ty::feed(bb, bbv), ty::feed(ba_t, batv), ty::feed(bb_t, bbtv),
                                     ty::feed(bw, bwv), ty::feed(sa, sav), ty::feed(sw, swv));
  const std::string group = dtype_group<T>(name);
  if constexpr (std::is_same_v<T, float>)
    check(group, feeds, at("nn", nn, accum(53)), at("nt", nt, accum(53)), at("tn", tn, accum(53)),
          at("tt", tt, accum(53)), at("batched nn", bnn, accum(53)),
          at("batched tt", btt, accum(53)),
          at("grad nn a", ty::grad(ty::sum(nn * w), a), accum(19)),
          at("grad nn b", ty::grad(ty::sum(nn * w), b), accum(37)),
          at("grad tt a", ty::grad(ty::sum(tt * w), a_t), accum(19)),
          at("grad tt b", ty::grad(ty::sum(tt * w), b_t), accum(37)),
          at("grad batched nn a", ty::grad(ty::sum(bnn * bw), ba), accum(19)),
          at("grad batched tt b", ty::grad(ty::sum(btt * bw), bb_t), accum(37)),
          at("batch x matrix", bxm, accum(53)), at("batch x matrix^T", bxmt, accum(53)),
          at("grad batch x matrix a", ty::grad(ty::sum(bxm * bw), ba), accum(19)),
          at("grad batch x matrix b", ty::grad(ty::sum(bxm * bw), b), accum(3 * 37)),
          at("grad batch x matrix^T b", ty::grad(ty::sum(bxmt * bw), b_t), accum(3 * 37)),
          at("broadcast batch", sxb, accum(53)),
          at("grad broadcast batch a", ty::grad(ty::sum(sxb * sw), sa), accum(3 * 19)),
          at("grad broadcast batch b", ty::grad(ty::sum(sxb * sw), bb), accum(2 * 37)));
  else
    check(group, feeds, at("nn", nn, accum(53)), at("tt", tt, accum(53)),
          at("batched nn", bnn, accum(53)));
}

// conv2d on x [2, 9, 10, 3] (odd and even spatial extents) with 3x3 and 3x2 filters of 4
// outputs: SAME and VALID, strided, dilated, strided and dilated on different axes; the
// gradients with respect to input and filter of sum(conv * g). k: KH*KW*C forward, at most
// KH*KW*O for the input gradient, N*OH*OW for the filter gradient. float64: the SAME
// convolution and its gradients.
template <class T>
void conv_case(T, const char* name = "conv2d") {
  using ty::padding;
  constexpr auto x = ty::placeholder<"x", T, ty::shape<2, 9, 10, 3>>;
  constexpr auto f = ty::placeholder<"f", T, ty::shape<3, 3, 3, 4>>;
  constexpr auto f2 = ty::placeholder<"f2", T, ty::shape<3, 2, 3, 4>>;
  constexpr auto c1 = ty::conv2d<padding::same>(x, f);               // [2, 9, 10, 4]
  constexpr auto c2 = ty::conv2d<padding::valid>(x, f);              // [2, 7, 8, 4]
  constexpr auto c3 = ty::conv2d<padding::same, 2>(x, f);            // [2, 5, 5, 4]
  constexpr auto c4 = ty::conv2d<padding::valid, 2, 3>(x, f2);       // [2, 4, 3, 4]
  constexpr auto c5 = ty::conv2d<padding::same, 1, 1, 2>(x, f);      // [2, 9, 10, 4]
  constexpr auto c6 = ty::conv2d<padding::valid, 1, 1, 2, 3>(x, f2); // [2, 5, 7, 4]
  constexpr auto c7 = ty::conv2d<padding::same, 2, 1, 1, 2>(x, f);   // [2, 5, 10, 4]
  // VALID and SAME at stride 2 over 10x10: both pad 0 before (SAME's one row goes after), so
  // only their output extents tell the geometries apart (VALID runs first, on cuDNN).
  constexpr auto x10 = ty::placeholder<"x10", T, ty::shape<2, 10, 10, 3>>;
  constexpr auto c8 = ty::conv2d<padding::valid, 2>(x10, f); // [2, 4, 4, 4]
  constexpr auto c9 = ty::conv2d<padding::same, 2>(x10, f);  // [2, 5, 5, 4]
  // 8 input channels: im2col and col2im run 16 bytes of channels per thread (window lanes).
  constexpr auto x8 = ty::placeholder<"x8", T, ty::shape<2, 9, 10, 8>>;
  constexpr auto f8 = ty::placeholder<"f8", T, ty::shape<3, 3, 8, 4>>;
  constexpr auto c10 = ty::conv2d<padding::same>(x8, f8); // [2, 9, 10, 4]
  constexpr auto g1 = ty::placeholder<"g1", T, typename decltype(c1)::shape_type>;
  constexpr auto g4 = ty::placeholder<"g4", T, typename decltype(c4)::shape_type>;
  constexpr auto g6 = ty::placeholder<"g6", T, typename decltype(c6)::shape_type>;
  const auto xv = make(x, wave(0.1)), fv = make(f, wave(0.2)), f2v = make(f2, wave(0.3)),
             x10v = make(x10, wave(0.4)), g1v = make(g1, wave(1.1)), g4v = make(g4, wave(1.4)),
             g6v = make(g6, wave(1.6)), x8v = make(x8, wave(0.5)), f8v = make(f8, wave(0.6));
  const std::string group = dtype_group<T>(name);
  if constexpr (std::is_same_v<T, float>)
    check(group,
          std::make_tuple(ty::feed(x, xv), ty::feed(f, fv), ty::feed(f2, f2v), ty::feed(g1, g1v),
                          ty::feed(g4, g4v), ty::feed(g6, g6v), ty::feed(x10, x10v),
                          ty::feed(x8, x8v), ty::feed(f8, f8v)),
          at("same", c1, accum(27)), at("valid", c2, accum(27)), at("same stride 2", c3, accum(27)),
          at("valid stride 2x3 3x2", c4, accum(18)), at("same dilation 2", c5, accum(27)),
          at("valid dilation 2x3 3x2", c6, accum(18)),
          at("same stride 2x1 dilation 1x2", c7, accum(27)),
          at("valid stride 2 10x10", c8, accum(27)), at("same stride 2 10x10", c9, accum(27)),
          at("grad same x", ty::grad(ty::sum(c1 * g1), x), accum(36)),
          at("grad same f", ty::grad(ty::sum(c1 * g1), f), accum(180)),
          at("grad valid stride 2x3 x", ty::grad(ty::sum(c4 * g4), x), accum(24)),
          at("grad valid stride 2x3 f", ty::grad(ty::sum(c4 * g4), f2), accum(24)),
          at("grad valid dilation 2x3 x", ty::grad(ty::sum(c6 * g6), x), accum(24)),
          at("grad valid dilation 2x3 f", ty::grad(ty::sum(c6 * g6), f2), accum(70)),
          at("same 8 channels", c10, accum(72)),
          at("grad same 8 channels x", ty::grad(ty::sum(c10 * g1), x8), accum(36)),
          at("grad same 8 channels f", ty::grad(ty::sum(c10 * g1), f8), accum(180)));
  else
    check(group, std::make_tuple(ty::feed(x, xv), ty::feed(f, fv), ty::feed(g1, g1v)),
          at("same", c1, accum(27)), at("grad same x", ty::grad(ty::sum(c1 * g1), x), accum(36)),
          at("grad same f", ty::grad(ty::sum(c1 * g1), f), accum(180)));
}

// The float32 convolutions on every GPU path, each against the CPU: the fastest per geometry
// (the default: timed on first use), cuDNN wherever it takes the geometry (where the build has
// it; it takes every case but SAME stride 2 over 10 columns, whose padding is asymmetric), and
// im2col + cuBLAS.
#if TYPEFLOW_CUDA_OPS_PART == 1
void conv_paths_case() {
  conv_case(float{});
  tally.convolutions = ty::gpu_convolutions::cudnn;
  conv_case(float{}, "conv2d cudnn");
  const std::size_t on_cudnn = tally.cudnn_runs;
  tally.convolutions = ty::gpu_convolutions::im2col;
  conv_case(float{}, "conv2d im2col");
  tally.convolutions = ty::gpu_convolutions::fastest;
  if (!tally.device)
    return;
  // Forward passes: every case but the two SAME ones at stride 2 whose padding is odd (over 10
  // columns); gradients: eight.
  const std::size_t expected = ty::cuda_backend::has_cudnn ? 16 : 0;
  std::printf("convolution steps on cuDNN: %zu with gpu_convolutions::cudnn, %zu with im2col\n",
              on_cudnn, tally.cudnn_runs);
  report("conv2d/float32 on cuDNN where it takes the geometry, never with im2col",
         on_cudnn == expected && tally.cudnn_runs == 0
             ? ""
             : "cuDNN ran where it should not, or not where it should",
         "");
}

// float32 matmuls and convolutions (forward and both gradients) under a session precision of
// bfloat16 and of float16: the GPU rounds the operands and multiplies on the tensor cores with
// float32 sums; the CPU multiplies the same operands, rounded on the host, in float32. A GPU
// that ignored the precision, or truncated instead of rounding, differs by about one 16-bit
// rounding of an operand (2^-9 or 2^-12 relative), far over the accum tolerance (how ties round
// shows only on ties, which cast+int checks for the same conversion); cuDNN is not used (its
// 16-bit convolutions write 16-bit outputs).
void half_products_case() {
  accum_scale = 4;
  tally.precision = ty::precision::bfloat16;
  matmul_case(float{}, "matmul bf16 products");
  conv_case(float{}, "conv2d bf16 products");
  const std::size_t on_cudnn = tally.cudnn_runs;
  tally.precision = ty::precision::float16;
  matmul_case(float{}, "matmul f16 products");
  conv_case(float{}, "conv2d f16 products");
  tally.precision = ty::precision::float32;
  accum_scale = 1;
  if (tally.device)
    report("conv2d/16-bit products never on cuDNN",
           on_cudnn + tally.cudnn_runs == 0 ? "" : "a convolution ran on cuDNN", "");
}
#endif

// max_pool and avg_pool, SAME and VALID, non-overlapping and overlapping windows, a 3x2 window
// with strides 1x2; their gradients. Run on smooth values and on a grid with ties (the max-pool
// gradient goes to the window's first maximum). An input element lies in up to ceil(KH/SH) *
// ceil(KW/SW) windows (4 for 3x3/2, 3 for 3x2/1x2); an average sums up to KH*KW terms. With 3
// channels and with 8 (the gradients then run 4 channels per thread: window lanes).
template <std::int64_t C, class T>
void pool_case(T) {
  using ty::padding;
  constexpr auto x = ty::placeholder<"x", T, ty::shape<2, 9, 10, C>>;
  constexpr auto m1 = ty::max_pool<padding::same, 2>(x);           // [2, 5, 5, 3]
  constexpr auto m2 = ty::max_pool<padding::valid, 3, 3, 2, 2>(x); // [2, 4, 4, 3]
  constexpr auto m3 = ty::max_pool<padding::same, 3, 2, 1, 2>(x);  // [2, 9, 5, 3]
  constexpr auto a1 = ty::avg_pool<padding::same, 2>(x);
  constexpr auto a2 = ty::avg_pool<padding::valid, 3, 3, 2, 2>(x);
  constexpr auto a3 = ty::avg_pool<padding::same, 3, 2, 1, 2>(x);
  constexpr auto g1 = ty::placeholder<"g1", T, typename decltype(m1)::shape_type>;
  constexpr auto g2 = ty::placeholder<"g2", T, typename decltype(m2)::shape_type>;
  constexpr auto g3 = ty::placeholder<"g3", T, typename decltype(m3)::shape_type>;
  const auto g1v = make(g1, wave(1.1)), g2v = make(g2, wave(1.2)), g3v = make(g3, wave(1.3));
  const auto run = [&](const std::string& group, const auto& xv) {
    check(group,
          std::make_tuple(ty::feed(x, xv), ty::feed(g1, g1v), ty::feed(g2, g2v), ty::feed(g3, g3v)),
          at("max same 2", m1, exact), at("max valid 3/2", m2, exact),
          at("max same 3x2/1x2", m3, exact), at("avg same 2", a1, accum(4)),
          at("avg valid 3/2", a2, accum(9)), at("avg same 3x2/1x2", a3, accum(6)),
          at("grad max same 2", ty::grad(ty::sum(m1 * g1), x), exact),
          at("grad max valid 3/2", ty::grad(ty::sum(m2 * g2), x), accum(4)),
          at("grad max same 3x2/1x2", ty::grad(ty::sum(m3 * g3), x), accum(3)),
          at("grad avg same 2", ty::grad(ty::sum(a1 * g1), x), arith),
          at("grad avg valid 3/2", ty::grad(ty::sum(a2 * g2), x), accum(4)),
          at("grad avg same 3x2/1x2", ty::grad(ty::sum(a3 * g3), x), accum(3)));
  };
  const std::string group = dtype_group<T>(C == 3 ? "pool" : "pool 8 channels");
  run(group, make(x, wave(0.1)));
  run(group + "/ties", make(x, grid(4, -1, 0.5)));
}

// The fused sparse softmax cross-entropy (int32 or int64 labels), softmax and log_softmax on
// logits [13, 10], and their gradients; on moderate logits and on logits of about 1e3 (the
// log-sum-exp must subtract the row maximum). float64: the cross-entropy and its gradient.
template <class T, class L>
void softmax_case(T, L) {
  constexpr auto logits = ty::placeholder<"logits", T, ty::shape<13, 10>>;
  constexpr auto labels = ty::placeholder<"labels", L, ty::shape<13>>;
  constexpr auto wn = ty::placeholder<"wn", T, ty::shape<13>>;
  constexpr auto wk = ty::placeholder<"wk", T, ty::shape<13, 10>>;
  const auto labelsv = make(labels, grid(10, 0, 1));
  const auto wnv = make(wn, wave(0.4));
  const auto wkv = make(wk, wave(0.8));
  constexpr auto xent = ty::sparse_softmax_cross_entropy_with_logits(logits, labels);
  const auto run = [&](const std::string& group, const auto& lv) {
    const auto feeds = std::make_tuple(ty::feed(logits, lv), ty::feed(labels, labelsv),
                                       ty::feed(wn, wnv), ty::feed(wk, wkv));
    if constexpr (std::is_same_v<T, float>)
      check(
          group, feeds, at("xent", xent, accum_transc(10)),
          at("grad xent", ty::grad(ty::sum(xent * wn), logits), accum_transc(10)),
          at("softmax", ty::softmax(logits), accum_transc(10)),
          at("grad softmax", ty::grad(ty::sum(ty::softmax(logits) * wk), logits), accum_transc(10)),
          at("log_softmax", ty::log_softmax(logits), accum_transc(10)),
          at("grad log_softmax", ty::grad(ty::sum(ty::log_softmax(logits) * wk), logits),
             accum_transc(10)));
    else
      check(group, feeds, at("xent", xent, accum_transc(10)),
            at("grad xent", ty::grad(ty::sum(xent * wn), logits), accum_transc(10)));
  };
  std::string group = dtype_group<T>("softmax");
  group += "/labels ";
  group += ty::dtype_name<L>;
  run(group, make(logits, wave(0.2, 3.0)));
  run(group + "/large", make(logits, wave(0.2, 1000.0)));
}

// gather (an embedding lookup) of a [6, 2, 5] table by [3, 4] indices with repeats (row 2 three
// times, row 5 twice, row 0 once at each end), its gradient (a scatter-add: up to 3 terms per
// element, in any order on the GPU), and one_hot at depth 6 with indices outside [0, 6) (rows
// of zeros); causal_mask and band_part on [2, 5, 5] scores, and a causal softmax's gradient;
// iota along an inner axis (times a gather, so that the node runs on the device) and range.
template <class T, class L>
void index_case(T, L) {
  constexpr auto table = ty::placeholder<"table", T, ty::shape<6, 2, 5>>;
  constexpr auto ix = ty::placeholder<"ix", L, ty::shape<3, 4>>;
  constexpr auto w = ty::placeholder<"w", T, ty::shape<3, 4, 2, 5>>;
  constexpr auto oh = ty::placeholder<"oh", L, ty::shape<7>>;
  const std::vector<int> rows{0, 2, 5, 2, 1, 2, 3, 5, 4, 0, 3, 1};
  const auto ixv = make(ix, [&](std::int64_t i) { return rows[static_cast<std::size_t>(i)]; });
  const std::vector<int> hot{0, 5, -1, 6, 3, 3, 100};
  const auto ohv = make(oh, [&](std::int64_t i) { return hot[static_cast<std::size_t>(i)]; });
  const auto feeds = std::make_tuple(ty::feed(table, make(table, wave(0.6))), ty::feed(ix, ixv),
                                     ty::feed(w, make(w, wave(1.7))), ty::feed(oh, ohv));
  std::string group = dtype_group<T>("index");
  group += "/indices ";
  group += ty::dtype_name<L>;
  constexpr auto sc = ty::placeholder<"sc", T, ty::shape<2, 5, 5>>;
  constexpr auto sw = ty::placeholder<"sw", T, ty::shape<2, 5, 5>>;
  const auto more = std::tuple_cat(feeds, std::make_tuple(ty::feed(sc, make(sc, wave(0.9, 2.0))),
                                                          ty::feed(sw, make(sw, wave(2.3)))));
  check(group + "/bands", more, at("causal_mask", ty::causal_mask(sc), exact),
        at("band_part", ty::band_part<1, 2>(sc), exact),
        at("softmax causal", ty::softmax(ty::causal_mask(sc)), accum_transc(5)),
        at("grad softmax causal", ty::grad(ty::sum(ty::softmax(ty::causal_mask(sc)) * sw), sc),
           accum_transc(5)));
  check(group, feeds, at("gather", ty::gather(table, ix), exact),
        at("grad gather", ty::grad(ty::sum(ty::gather(table, ix) * w), table), accum(3)),
        at("one_hot", ty::one_hot<6, T>(oh), exact),
        at("iota axis 1", ty::iota<T, ty::shape<3, 4, 2, 5>, 1> * ty::gather(table, ix), exact),
        at("range", ty::range<7, T>, exact));
}

// layer_norm over the last axis of [5, 3, 37] (37: rows longer than a warp, not a multiple of
// it) and the gradients of its input, scale and shift.
template <class T>
void norm_case(T) {
  constexpr auto x = ty::placeholder<"x", T, ty::shape<5, 3, 37>>;
  constexpr auto g = ty::placeholder<"g", T, ty::shape<37>>;
  constexpr auto b = ty::placeholder<"b", T, ty::shape<37>>;
  constexpr auto w = ty::placeholder<"w", T, ty::shape<5, 3, 37>>;
  const auto feeds =
      std::make_tuple(ty::feed(x, make(x, wave(0.3, 2.0))), ty::feed(g, make(g, positive(0.1))),
                      ty::feed(b, make(b, wave(0.5))), ty::feed(w, make(w, wave(1.9))));
  constexpr auto y = ty::layer_norm(x, g, b);
  check(dtype_group<T>("layer_norm"), feeds, at("layer_norm", y, accum_transc(37)),
        at("grad x", ty::grad(ty::sum(y * w), x), accum_transc(37)),
        at("grad gamma", ty::grad(ty::sum(y * w), g), accum_transc(15 * 37)),
        at("grad beta", ty::grad(ty::sum(y * w), b), accum(15)));
}

// batch_norm in training mode over the 90 rows of [6, 5, 3, 37] (37 channels, each one thread's
// sum over the rows on the GPU), batch_moments itself, and the gradients of x, gamma and beta.
template <class T>
void batch_norm_case(T) {
  constexpr auto x = ty::placeholder<"x", T, ty::shape<6, 5, 3, 37>>;
  constexpr auto g = ty::placeholder<"g", T, ty::shape<37>>;
  constexpr auto b = ty::placeholder<"b", T, ty::shape<37>>;
  constexpr auto mm = ty::placeholder<"mm", T, ty::shape<37>>;
  constexpr auto mv = ty::placeholder<"mv", T, ty::shape<37>>;
  constexpr auto w = ty::placeholder<"w", T, ty::shape<6, 5, 3, 37>>;
  const auto feeds =
      std::make_tuple(ty::feed(x, make(x, wave(0.3, 2.0))), ty::feed(g, make(g, positive(0.1))),
                      ty::feed(b, make(b, wave(0.5))), ty::feed(mm, make(mm, wave(0.2))),
                      ty::feed(mv, make(mv, positive(0.3))), ty::feed(w, make(w, wave(1.9))));
  constexpr auto y = ty::batch_norm(x, g, b, mm, mv);
  check(dtype_group<T>("batch_norm"), feeds, at("batch_moments", ty::batch_moments(x), accum(90)),
        at("batch_norm", y, accum_transc(90)),
        at("grad x", ty::grad(ty::sum(y * w), x), accum_transc(90)),
        at("grad gamma", ty::grad(ty::sum(y * w), g), accum_transc(90)),
        at("grad beta", ty::grad(ty::sum(y * w), b), accum(90)));
}

// attention on [2, 3, 37, 8] queries over 41 keys (not causal) and 37 keys (causal), and the
// gradients of q, k and v (sums over the keys, or over the queries for k and v); q, k and v of
// one shape (self-attention) take the three gradients from one attention_grads op; the same with
// dropout (keep 0.7).
template <class T>
void attention_case(T) {
  constexpr auto q = ty::placeholder<"q", T, ty::shape<2, 3, 37, 8>>;
  constexpr auto k = ty::placeholder<"k", T, ty::shape<2, 3, 41, 8>>;
  constexpr auto v = ty::placeholder<"v", T, ty::shape<2, 3, 41, 5>>;
  constexpr auto kc = ty::placeholder<"kc", T, ty::shape<2, 3, 37, 8>>;
  constexpr auto vc = ty::placeholder<"vc", T, ty::shape<2, 3, 37, 5>>;
  constexpr auto w = ty::placeholder<"w", T, ty::shape<2, 3, 37, 5>>;
  constexpr auto vs = ty::placeholder<"vs", T, ty::shape<2, 3, 37, 8>>;
  constexpr auto ws = ty::placeholder<"ws", T, ty::shape<2, 3, 37, 8>>;
  const auto feeds =
      std::make_tuple(ty::feed(q, make(q, wave(0.1, 1.5))), ty::feed(k, make(k, wave(0.7, 1.5))),
                      ty::feed(v, make(v, wave(1.3))), ty::feed(kc, make(kc, wave(0.4, 1.5))),
                      ty::feed(vc, make(vc, wave(2.2))), ty::feed(w, make(w, wave(1.1))),
                      ty::feed(vs, make(vs, wave(1.7))), ty::feed(ws, make(ws, wave(0.9))));
  constexpr auto y = ty::attention(q, k, v);
  constexpr auto yc = ty::attention<true>(q, kc, vc);
  constexpr auto ys = ty::attention<true>(q, kc, vs);
  check(dtype_group<T>("attention"), feeds, at("attention", y, accum_transc(41 * 8)),
        at("causal", yc, accum_transc(37 * 8)),
        at("grad q", ty::grad(ty::sum(y * w), q), accum_transc(41 * 8)),
        at("grad k", ty::grad(ty::sum(y * w), k), accum_transc(37 * 8)),
        at("grad v", ty::grad(ty::sum(y * w), v), accum_transc(37)),
        at("causal grad q", ty::grad(ty::sum(yc * w), q), accum_transc(37 * 8)),
        at("causal grad k", ty::grad(ty::sum(yc * w), kc), accum_transc(37 * 8)),
        at("causal grad v", ty::grad(ty::sum(yc * w), vc), accum_transc(37)),
        at("self grad q", ty::grad(ty::sum(ys * ws), q), accum_transc(37 * 8)),
        at("self grad k", ty::grad(ty::sum(ys * ws), kc), accum_transc(37 * 8)),
        at("self grad v", ty::grad(ty::sum(ys * ws), vs), accum_transc(37)));
  // dropout on the probabilities: the GPU draws the CPU's masks (one hash of seed, run and
  // element), so the outputs and gradients agree as without it; the self-attention shapes take
  // attention_grads, the others attention_grad
  constexpr ty::attention_dropout drop{.keep = 0.7, .seed = 11};
  constexpr auto yd = ty::attention<false, drop>(q, k, v);
  constexpr auto ysd = ty::attention<true, drop>(q, kc, vs);
  check(dtype_group<T>("attention/dropout"), feeds, at("attention", yd, accum_transc(41 * 8)),
        at("grad q", ty::grad(ty::sum(yd * w), q), accum_transc(41 * 8)),
        at("grad k", ty::grad(ty::sum(yd * w), k), accum_transc(37 * 8)),
        at("grad v", ty::grad(ty::sum(yd * w), v), accum_transc(37)),
        at("self causal", ysd, accum_transc(37 * 8)),
        at("self grad q", ty::grad(ty::sum(ysd * ws), q), accum_transc(37 * 8)),
        at("self grad k", ty::grad(ty::sum(ysd * ws), kc), accum_transc(37 * 8)),
        at("self grad v", ty::grad(ty::sum(ysd * ws), vs), accum_transc(37)));
}

// Layout ops on a GPU-computed tensor h = -x: reshape, expand_dims, transpose, slice, concat
// and their gradients (all exact); argmax along each axis, on smooth values and on ties (the
// first index wins).
template <class T>
void layout_case(T) {
  constexpr auto x = ty::placeholder<"x", T, ty::shape<4, 6, 5>>;
  constexpr auto y = ty::placeholder<"y", T, ty::shape<4, 3, 5>>;
  constexpr auto h = -x;
  constexpr auto k = -y;
  constexpr auto r = ty::reshape<6, 20>(h);
  constexpr auto e = ty::expand_dims<1>(h);
  constexpr auto t = ty::transpose<2, 0, 1>(h);
  constexpr auto sl = ty::slice<ty::ints<1, 2, 0>, ty::ints<2, -1, 3>>(h);
  constexpr auto cc = ty::concat<1>(h, k);
  constexpr auto wr = ty::placeholder<"wr", T, typename decltype(r)::shape_type>;
  constexpr auto we = ty::placeholder<"we", T, typename decltype(e)::shape_type>;
  constexpr auto wt = ty::placeholder<"wt", T, typename decltype(t)::shape_type>;
  constexpr auto ws = ty::placeholder<"ws", T, typename decltype(sl)::shape_type>;
  constexpr auto wc = ty::placeholder<"wc", T, typename decltype(cc)::shape_type>;
  const auto yv = make(y, wave(0.9));
  const auto wrv = make(wr, wave(1.1)), wev = make(we, wave(1.2)), wtv = make(wt, wave(1.3)),
             wsv = make(ws, wave(1.4)), wcv = make(wc, wave(1.5));
  const auto run = [&](const std::string& group, const auto& xv) {
    check(group,
          std::make_tuple(ty::feed(x, xv), ty::feed(y, yv), ty::feed(wr, wrv), ty::feed(we, wev),
                          ty::feed(wt, wtv), ty::feed(ws, wsv), ty::feed(wc, wcv)),
          at("reshape", r, exact), at("expand_dims", e, exact), at("transpose", t, exact),
          at("slice", sl, exact), at("concat<1>", cc, exact),
          at("concat<0>", ty::concat<0>(h, h, x), exact), at("argmax<0>", ty::argmax<0>(x), exact),
          at("argmax<1> keepdims", ty::argmax<1>(x, ty::keepdims), exact),
          at("argmax<-1>", ty::argmax<-1>(x), exact),
          at("grad reshape", ty::grad(ty::sum(r * wr), x), exact),
          at("grad expand_dims", ty::grad(ty::sum(e * we), x), exact),
          at("grad transpose", ty::grad(ty::sum(t * wt), x), exact),
          at("grad slice", ty::grad(ty::sum(sl * ws), x), exact),
          at("grad concat x", ty::grad(ty::sum(cc * wc), x), exact),
          at("grad concat y", ty::grad(ty::sum(cc * wc), y), exact));
  };
  run("layout", make(x, wave(0.1)));
  run("layout/ties", make(x, grid(3, -1, 0.5)));
}

} // namespace

/// A part's tally, for main.
struct ops_counts {
  int cases = 0, failed = 0;
};
ops_counts cuda_ops_part_2(bool device);

#if TYPEFLOW_CUDA_OPS_PART == 2
ops_counts cuda_ops_part_2(bool device) {
  tally.device = device;
  softmax_case(float{}, std::int32_t{});
  softmax_case(double{}, std::int64_t{});
  index_case(float{}, std::int32_t{});
  index_case(double{}, std::int64_t{});
  norm_case(float{});
  norm_case(double{});
  batch_norm_case(float{});
  batch_norm_case(double{});
  attention_case(float{});
  attention_case(double{});
  layout_case(float{});
  return {tally.cases, tally.failed};
}
#else
int main() {
  tally.device = ty::cuda_backend::device_count() > 0;
  unary_case(float{});
  unary_case(double{});
  binary_case(float{});
  binary_case(double{});
  cast_case(float{});
  reduce_case(float{});
  reduce_case(double{});
  matmul_case(float{});
  matmul_case(double{});
  conv_paths_case();
  conv_case(double{});
  half_products_case();
  pool_case<3>(float{});
  pool_case<8>(float{});
  const ops_counts part_2 = cuda_ops_part_2(tally.device);
  tally.cases += part_2.cases;
  tally.failed += part_2.failed;
  if (!tally.device) {
    std::printf("placement checked on the host: %d cases, %d failed\n", tally.cases, tally.failed);
    if (tally.failed > 0) // a failure, not a skip: CTest's skip expression must not see it
      return 1;
    std::printf("%s\n", ty::cuda_backend::no_device_message);
    return 0;
  }
  std::printf("%d cases, %d failed\n", tally.cases, tally.failed);
  return tally.failed == 0 ? 0 : 1;
}
#endif
