// The compile-time plan: topological order, common subexpressions, pruning, fusion and the
// memory plan, each proven by instrumentation of real runs.
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/hana/count_if.hpp>
#include <boost/hana/for_each.hpp>
#include <cmath>
#include <string>
#include <string_view>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

namespace {
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto W = ty::variable<"W", float, ty::shape<4, 4>, ty::uniform<-1.0, 1.0>>;
constexpr auto b = ty::variable<"b", float, ty::shape<4>, ty::fill<0.25>>;

ty::tensor<float> input(std::int64_t rows) {
  ty::tensor<float> t({rows, 4});
  for (std::int64_t i = 0; i < t.size(); ++i)
    t[i] = 0.1f * static_cast<float>(i % 13) - 0.5f;
  return t;
}

std::size_t count(const std::vector<std::string>& trace, const std::string& s) {
  return static_cast<std::size_t>(std::count(trace.begin(), trace.end(), s));
}

template <class P, std::size_t... I>
constexpr bool children_first(std::index_sequence<I...>) {
  bool ok = true;
  auto check = [&]<class Op, class... Cs>([[maybe_unused]] std::size_t i, ty::expr<Op, Cs...>*) {
    ((ok = ok && P::template index_c<Cs>::value < i), ...);
  };
  (check(I, static_cast<typename P::template node<I>*>(nullptr)), ...);
  return ok;
}
} // namespace

namespace {
/// The compiler's spelling of type T, as diagnostics and debuggers show it.
template <class T>
constexpr std::string_view spelling() {
  return __PRETTY_FUNCTION__;
}
/// 2^Depth-leaf tree spelled out: level k is `tanh(h * h + h)` of level k - 1.
template <int Depth>
consteval auto shared_levels() {
  if constexpr (Depth == 0)
    return x;
  else {
    constexpr auto h = shared_levels<Depth - 1>();
    return ty::tanh(h * h + h);
  }
}
} // namespace

TEST_SUITE("graph") {
  TEST_CASE("node identities: one type per distinct node, none spells its subgraph") {
    // The same expression built twice is one type (hash-consing), and a node is its definition.
    constexpr auto a = ty::relu(ty::matmul(x, W) + b);
    constexpr auto a2 = ty::relu(ty::matmul(x, W) + b);
    static_assert(std::is_same_v<decltype(a), decltype(a2)>);
    static_assert(!std::is_same_v<decltype(a), decltype(ty::relu(ty::matmul(x, W) - b))>);
    using D = ty::def_t<std::remove_const_t<decltype(a)>>;
    static_assert(std::is_same_v<D::op, ty::ops::relu>);
    // A node type's spelling does not grow with its graph: 40 levels, each reading the one below
    // three times (a tree of 3^40 leaves when spelled out), spell as long as one level.
    constexpr auto deep = shared_levels<40>();
    constexpr auto one = shared_levels<1>();
    static_assert(spelling<std::remove_const_t<decltype(deep)>>().size() <=
                  spelling<std::remove_const_t<decltype(one)>>().size() + 8);
    CHECK(spelling<std::remove_const_t<decltype(deep)>>().find("tanh") == std::string_view::npos);
    // ...and it is still the graph it was built as.
    using P = ty::compile::plan<ty::type_list<decltype(deep)>>;
    static_assert(P::size == 1 + 3 * 40); // x, then mul, add, tanh per level
    CHECK(ty::to_string(one) == "tanh(add(mul(x, x), x))");
    ty::session s;
    auto [r] = s.run(ty::fetch(deep), ty::feed(x, input(2)));
    const auto in = input(2);
    for (std::int64_t i = 0; i < in.size(); ++i) {
      double h = in[i];
      for (int k = 0; k < 40; ++k)
        h = std::tanh(h * h + h);
      CHECK(r[i] == doctest::Approx(h).epsilon(1e-5));
    }
  }

  TEST_CASE("topological order: children first, each distinct node once") {
    constexpr auto m = ty::matmul(x, W);
    constexpr auto y = ty::relu(m + b) + ty::sigmoid(ty::matmul(x, W));
    using P = ty::compile::plan<ty::type_list<decltype(y)>>;
    // x, W, b, matmul, add, relu, sigmoid, add: the two matmuls are one node.
    static_assert(P::size == 8);
    static_assert(children_first<P>(std::make_index_sequence<P::size>{}));
    static_assert(std::is_same_v<P::node<P::size - 1>, std::remove_const_t<decltype(y)>>);
    CHECK(P::size == 8);
  }

  TEST_CASE("the plan's nodes as a Hana sequence") {
    namespace hana = boost::hana;
    constexpr auto y = ty::sum(ty::relu(ty::matmul(x, W) + b));
    using P = ty::compile::plan<ty::type_list<decltype(y)>>;
    constexpr auto variables = hana::count_if(P::nodes_c(), [](auto t) {
      return hana::bool_c<ty::is_variable<typename decltype(t)::type>>;
    });
    static_assert(decltype(variables)::value == 2); // W and b
    std::vector<std::string> printed;
    hana::for_each(P::nodes_c(),
                   [&](auto t) { printed.push_back(ty::to_string(typename decltype(t)::type{})); });
    CHECK(printed == std::vector<std::string>{"x", "W", "matmul(x, W)", "b", "add(matmul(x, W), b)",
                                              "relu(add(matmul(x, W), b))",
                                              "sum(relu(add(matmul(x, W), b)))"});
  }

  TEST_CASE("a common subexpression runs once") {
    constexpr auto m = ty::matmul(x, W);
    constexpr auto y1 = ty::sum(ty::relu(m));
    constexpr auto y2 = ty::max(ty::matmul(x, W) * ty::constant<2>);
    ty::trace_recorder rec;
    ty::session s(ty::session_options{.threads = 2, .seed = 3, .trace = &rec});
    auto in = input(5);
    auto [a, c] = s.run(ty::fetch(y1, y2), ty::feed(x, in));
    std::vector<std::string> kernels;
    for (const auto& e : rec.events())
      if (e.what == ty::trace_event::type::step)
        kernels.push_back(e.plan->kernel[e.node]);
    CHECK(kernels.size() == 3);
    CHECK(count(kernels, "matmul") == 1);
    // matmul, sum (evaluating the relu region as it reads it), max (likewise the mul region)
    CHECK(s.stats().steps == 3);
    auto [mm] = s.run(ty::fetch(m), ty::feed(x, in));
    double ref_sum = 0, ref_max = -1e30;
    for (std::int64_t i = 0; i < mm.size(); ++i) {
      ref_sum += std::max(0.0f, mm[i]);
      ref_max = std::max(ref_max, 2.0 * mm[i]);
    }
    CHECK(a.item() == doctest::Approx(ref_sum).epsilon(1e-5));
    CHECK(c.item() == doctest::Approx(ref_max).epsilon(1e-6));
  }

  TEST_CASE("an unfetched branch does not run") {
    constexpr auto used = ty::debug::probe<"used">(x * ty::constant<3>);
    constexpr auto unused = ty::debug::probe<"unused">(ty::exp(x));
    constexpr auto both = used + unused;
    (void)both;
    ty::session s(ty::session_options{.threads = 1, .seed = 0});
    auto in = input(3);
    const auto used0 = ty::debug::probe_count<"used">.load();
    const auto unused0 = ty::debug::probe_count<"unused">.load();
    auto [r] = s.run(ty::fetch(used), ty::feed(x, in));
    CHECK(ty::debug::probe_count<"used">.load() - used0 == in.size());
    CHECK(ty::debug::probe_count<"unused">.load() == unused0);
    CHECK(r(2, 3) == doctest::Approx(3 * in(2, 3)));
    // The same through the plan: the unfetched exp is not a node of it.
    using P = ty::compile::plan<ty::type_list<decltype(used)>>;
    static_assert(P::size == 4); // x, 3, mul, probe
  }

  TEST_CASE("a fused region is one loop with no intermediate buffer") {
    constexpr auto y = ty::relu(x * ty::constant<2> + b) - ty::sigmoid(x);
    using P = ty::compile::plan<ty::type_list<decltype(y)>>;
    static_assert(P::steps == 1);       // x and b are leaves; one kernel
    static_assert(P::fused_nodes == 4); // mul, add, relu, sigmoid inside sub's loop
    ty::session s;
    auto in = input(1000);
    auto [r] = s.run(ty::fetch(y), ty::feed(x, in));
    CHECK(s.stats().steps == 1);
    CHECK(s.stats().fused_nodes == 4);
    CHECK(s.stats().buffers_allocated + s.stats().buffers_reused == 1); // the output only
    for (std::int64_t i = 0; i < in.size(); i += 97) {
      const double v = in[i];
      const double ref = std::max(0.0, 2 * v + 0.25) - 1 / (1 + std::exp(-v));
      CHECK(r[i] == doctest::Approx(ref).epsilon(1e-6));
    }
  }

  TEST_CASE("a node used twice inside a region is computed once per element") {
    constexpr auto t = ty::debug::probe<"t">(ty::exp(x));
    constexpr auto y = t * t + t;
    ty::session s;
    auto in = input(7);
    const auto before = ty::debug::probe_count<"t">.load();
    auto [r] = s.run(ty::fetch(y), ty::feed(x, in));
    CHECK(ty::debug::probe_count<"t">.load() - before == in.size());
    CHECK(s.stats().steps == 1);
    const double e = std::exp(static_cast<double>(in[5]));
    CHECK(r[5] == doctest::Approx(e * e + e).epsilon(1e-6));
  }

  TEST_CASE("matmul, reductions and reshapes are region boundaries") {
    constexpr auto t = ty::exp(x);
    constexpr auto y = ty::exp(ty::sum<1>(t)) + ty::sum(ty::reshape<-1>(t * ty::constant<2>));
    using P = ty::compile::plan<ty::type_list<decltype(y)>>;
    // exp(x) feeds a reduction and a fused mul: it is materialized. Steps: exp, sum<1>,
    // mul, reshape, sum, and the final exp+add region.
    static_assert(P::steps == 6);
    ty::session s(ty::session_options{.threads = 2, .seed = 0});
    auto in = input(3);
    auto [r] = s.run(ty::fetch(y), ty::feed(x, in));
    CHECK(s.stats().steps == 6);
    double total = 0;
    for (std::int64_t i = 0; i < in.size(); ++i)
      total += 2 * std::exp(double(in[i]));
    for (std::int64_t i = 0; i < 3; ++i) {
      double row = 0;
      for (std::int64_t j = 0; j < 4; ++j)
        row += std::exp(double(in(i, j)));
      CHECK(r[i] == doctest::Approx(std::exp(row) + total).epsilon(1e-5));
    }
  }

  TEST_CASE("memory plan: a buffer is reused once its last consumer has run") {
    constexpr auto sq = ty::variable<"sq", float, ty::shape<64, 64>, ty::uniform<-0.1, 0.1>>;
    constexpr auto in = ty::placeholder<"in", float, ty::shape<64, 64>>;
    constexpr auto y = ty::matmul(
        ty::matmul(ty::matmul(ty::matmul(ty::matmul(ty::matmul(in, sq), sq), sq), sq), sq), sq);
    ty::session s(ty::session_options{.threads = 1, .seed = 0});
    ty::tensor<float> v({64, 64});
    for (std::int64_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(i % 7) - 3;
    auto [r1] = s.run(ty::fetch(y), ty::feed(in, v));
    CHECK(s.stats().steps == 6);
    // Six 16 KiB intermediates, but never more than two alive: two fresh buffers in all.
    CHECK(s.stats().buffers_allocated == 2);
    CHECK(s.stats().peak_bytes == 2 * 64 * 64 * sizeof(float));
    // The fetched tensor is the run's own last buffer (no copy), so while r1 lives the pool
    // needs one fresh buffer for the next run's result.
    auto [r2] = s.run(ty::fetch(y), ty::feed(in, v));
    CHECK(s.stats().buffers_allocated == 1);
    CHECK(s.stats().buffers_reused == 5);
    CHECK(std::equal(r1.begin(), r1.end(), r2.begin()));
    const std::vector<float> expect(r1.begin(), r1.end());
    r1 = {};
    r2 = {}; // both results' buffers go back to the pool
    auto [r3] = s.run(ty::fetch(y), ty::feed(in, v));
    CHECK(s.stats().buffers_allocated == 0); // steady state: everything from the pool
    CHECK(s.stats().buffers_reused == 6);
    CHECK(std::equal(r3.begin(), r3.end(), expect.begin()));
  }

  TEST_CASE("fetching one value twice gives two independent tensors") {
    constexpr auto in = ty::placeholder<"in", float, ty::shape<4>>;
    constexpr auto y = ty::exp(in);
    ty::session s;
    ty::tensor<float> v({4}, {0.f, 1.f, 2.f, 3.f});
    auto [a, b] = s.run(ty::fetch(y, y), ty::feed(in, v));
    REQUIRE(a.data() != b.data());
    a[0] = 42.f;
    CHECK(b[0] == doctest::Approx(1.0));
    // A fetched placeholder is a copy of the feed, never the caller's memory.
    auto [c] = s.run(ty::fetch(in), ty::feed(in, v));
    CHECK(c.data() != v.data());
    CHECK(c[3] == 3.f);
  }

  TEST_CASE("reshape is a view of its input's buffer") {
    constexpr auto y = ty::sum<0>(ty::reshape<2, -1>(ty::exp(x)));
    ty::session s;
    auto in = input(4);
    auto [r] = s.run(ty::fetch(y), ty::feed(x, in));
    CHECK(s.stats().steps == 3);
    CHECK(s.stats().buffers_allocated + s.stats().buffers_reused == 2); // exp and the sum
    CHECK(r.shape() == std::vector<std::int64_t>{8});
    CHECK(r[1] == doctest::Approx(std::exp(double(in[1])) + std::exp(double(in[9]))));
  }

  TEST_CASE("plan description lists steps with their fused ops") {
    constexpr auto y = ty::sum(ty::relu(ty::matmul(x, W) + b));
    using P = ty::compile::plan<ty::type_list<decltype(y)>>;
    const std::string d = P::describe();
    CHECK(d.find("matmul matmul(x, W)") != std::string::npos);
    CHECK(d.find("fused relu(add(matmul(x, W), b))  [fused 2 ops, evaluated in its reader's "
                 "step]") != std::string::npos);
    CHECK(d.find("reduce sum(relu(add(matmul(x, W), b)))  [reads %") != std::string::npos);
    // Fetched too, the region is a step of its own.
    using P2 =
        ty::compile::plan<ty::type_list<decltype(y), decltype(ty::relu(ty::matmul(x, W) + b))>>;
    CHECK(P2::describe().find("fused relu(add(matmul(x, W), b))  [fused 2 ops]\n") !=
          std::string::npos);
  }

  TEST_CASE("steps at different places share one local form; frames hold their slots") {
    constexpr auto W2 = ty::variable<"W2", float, ty::shape<4, 4>, ty::uniform<-1.0, 1.0>>;
    constexpr auto h1 = ty::tanh(ty::matmul(x, W));
    constexpr auto h2 = ty::tanh(ty::matmul(h1, W2));
    constexpr auto y = ty::sum(h2);
    // h2 fetched too: a step of its own, like h1 (else sum would evaluate it as it reads it)
    using P = ty::compile::plan<ty::type_list<decltype(y), decltype(h2)>>;
    constexpr std::size_t m1 = P::index_c<decltype(ty::matmul(x, W))>::value;
    constexpr std::size_t m2 = P::index_c<decltype(ty::matmul(h1, W2))>::value;
    constexpr std::size_t t1 = P::index_c<decltype(h1)>::value;
    constexpr std::size_t t2 = P::index_c<decltype(h2)>::value;
    // In plan positions the two matmuls differ; in frame positions they are the same step.
    static_assert(!std::is_same_v<P::flat<m1>, P::flat<m2>>);
    static_assert(std::is_same_v<P::local_flat<m1>, P::local_flat<m2>>);
    static_assert(std::is_same_v<P::local_flat<t1>, P::local_flat<t2>>);
    // A frame: the step's own slot, then its operands' slots.
    constexpr auto& F = P::frames;
    static_assert(F.slot[F.begin[m2]] == m2);
    static_assert(F.slot[F.begin[m2] + 1] == t1);
    static_assert(F.slot[F.begin[m2] + 2] == P::index_c<decltype(W2)>::value);
    static_assert(F.begin[m2 + 1] - F.begin[m2] == 3);
    // The run computes what a double-precision loop does.
    ty::session s;
    s.initialize(y);
    auto in = input(3);
    auto [r, out] = s.run(ty::fetch(y, h2), ty::feed(x, in));
    const auto w1 = s.read(W), w2 = s.read(W2);
    double want = 0;
    for (std::int64_t i = 0; i < 3; ++i) {
      double a[4], c[4];
      for (std::int64_t j = 0; j < 4; ++j) {
        a[j] = 0;
        for (std::int64_t k = 0; k < 4; ++k)
          a[j] += double(in(i, k)) * double(w1(k, j));
        a[j] = std::tanh(a[j]);
      }
      for (std::int64_t j = 0; j < 4; ++j) {
        c[j] = 0;
        for (std::int64_t k = 0; k < 4; ++k)
          c[j] += a[k] * double(w2(k, j));
        want += std::tanh(c[j]);
        CHECK(out(i, j) == doctest::Approx(std::tanh(c[j])).epsilon(1e-5));
      }
    }
    CHECK(r.item() == doctest::Approx(want).epsilon(1e-5));
  }
}
