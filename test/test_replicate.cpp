// Replication: N CPU towers on B/N rows each train exactly as one tower on B rows (float32
// within 1e-5 relative, float64 within 1e-12), for N = 2 and 3 and uneven splits; fetched values
// are combined (the loss as the batch-weighted mean, predictions concatenated); the in-process
// average is taken in a fixed order, so two runs give identical bits.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

template <class T>
struct model {
  static constexpr auto x = ty::placeholder<"x", T, ty::shape<ty::dyn, 6>>;
  static constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<ty::dyn>>;
  static constexpr auto h =
      ty::tanh(ty::dense<"l1", 8, ty::uniform<-0.5, 0.5>, ty::fill<0.05>, 1e-3>(x));
  static constexpr auto logits = ty::dense<"l2", 4, ty::uniform<-0.5, 0.5>>(h);
  static constexpr auto loss =
      ty::add_weight_decay(ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y)));
  static constexpr auto train =
      ty::momentum(ty::constant<0.2>, ty::constant<0.9>, ty::nesterov).minimize(loss);
  static constexpr auto predictions = ty::argmax<1>(logits);
};

template <class T>
void make_batch(i64 rows, i64 step, ty::tensor<T>& xv, ty::tensor<std::int32_t>& yv) {
  xv = ty::tensor<T>({rows, 6});
  yv = ty::tensor<std::int32_t>({rows});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<T>(std::sin(0.31 * static_cast<double>(i + 7 * step)));
  for (i64 i = 0; i < rows; ++i)
    yv[i] = static_cast<std::int32_t>((i * 3 + step) % 4);
}

/// Trains `steps` steps on a single session and on a replicated one, batch sizes cycling through
/// `batches`, and compares every variable.
template <class T, class Rep>
void check_equivalent(std::initializer_list<i64> batches, double tol) {
  using M = model<T>;
  ty::session<> one(ty::session_options{.threads = 1, .seed = 11});
  ty::session<Rep> rep(ty::session_options{.threads = 2, .seed = 11});
  i64 step = 0;
  for (i64 rows : batches) {
    ty::tensor<T> xv;
    ty::tensor<std::int32_t> yv;
    make_batch(rows, step++, xv, yv);
    auto [l1] = one.run(ty::fetch(M::loss, M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
    auto [l2] = rep.run(ty::fetch(M::loss, M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
    INFO("batch ", rows);
    CHECK(std::abs(static_cast<double>(l1[0]) - static_cast<double>(l2[0])) <=
          tol * (1 + std::abs(static_cast<double>(l1[0]))));
  }
  CHECK(rep.read(ty::global_step)[0] == static_cast<i64>(batches.size()));
  CHECK(rep.variable_count() == one.variable_count());
  std::size_t compared = 0;
  one.for_each_variable([&](const auto& a) {
    rep.for_each_variable([&](const auto& b) {
      if (a.name != b.name || a.dtype == "int64")
        return;
      ++compared;
      const T* pa = static_cast<const T*>(a.data);
      const T* pb = static_cast<const T*>(b.data);
      double worst = 0;
      for (std::size_t i = 0; i < a.bytes / sizeof(T); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(pa[i]) - pb[i]) /
                                    (1 + std::abs(static_cast<double>(pa[i]))));
      INFO(std::string(a.name));
      CHECK(worst <= tol);
    });
  });
  CHECK(compared == 8); // 4 weights and biases, 4 momentum slots
}

} // namespace

TEST_CASE("batch_split: shares differ by at most one row and cover the batch") {
  for (i64 batch : {0, 1, 2, 5, 12, 13, 128}) {
    for (std::size_t n : {1u, 2u, 3u, 7u}) {
      i64 next = 0, lo = batch, hi = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const auto p = ty::batch_split::of(batch, n, k);
        CHECK(p.begin == next);
        next += p.rows;
        lo = std::min(lo, p.rows);
        hi = std::max(hi, p.rows);
      }
      CHECK(next == batch);
      CHECK(hi - lo <= 1);
    }
  }
}

TEST_CASE("2 and 3 CPU towers train as one tower on the whole batch (float32)") {
  check_equivalent<float, ty::replicate<ty::cpu<0>, ty::cpu<1>>>({12, 12, 12, 12}, 1e-5);
  check_equivalent<float, ty::replicate<ty::cpu<0>, ty::cpu<1>, ty::cpu<2>>>({12, 12, 12, 12},
                                                                             1e-5);
}

TEST_CASE("uneven splits give the full-batch gradient, down to towers with no rows") {
  // 13 over 2 and 3 towers, an epoch's short last batch of 5, and 2 rows over 3 towers (one
  // tower idle).
  check_equivalent<float, ty::replicate<ty::cpu<0>, ty::cpu<1>>>({13, 13, 5}, 1e-5);
  check_equivalent<float, ty::replicate<ty::cpu<0>, ty::cpu<1>, ty::cpu<2>>>({13, 7, 2, 13}, 1e-5);
}

TEST_CASE("float64 towers agree with one tower to 1e-12") {
  check_equivalent<double, ty::replicate<ty::cpu<0>, ty::cpu<1>, ty::cpu<2>>>({13, 12, 7}, 1e-12);
}

template <class Op>
constexpr bool is_matmul = false;
template <bool TA, bool TB>
constexpr bool is_matmul<ty::ops::matmul<TA, TB>> = true;

/// How many of plan P's replica_mean nodes average a sum (`add`), and how many a matmul.
template <class P>
constexpr std::array<int, 2> means_of_sums_and_products() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    std::array<int, 2> n{};
    (
        []<class N>(std::array<int, 2>& c, N) {
          if constexpr (std::is_same_v<typename N::op, ty::ops::replica_mean>)
            []<class A>(std::array<int, 2>& d, ty::type_list<A>) {
              d[0] += std::is_same_v<typename A::op, ty::ops::add> ? 1 : 0;
              d[1] += is_matmul<typename A::op> ? 1 : 0;
            }(c, typename N::children{});
        }(n, typename P::template node<I>{}),
        ...);
    return n;
  }
  (std::make_index_sequence<P::size>{});
}

TEST_CASE("the weight decay's gradient is added after the towers' mean, in the update's loop") {
  // l1/weights' gradient is matmul(x^T, dh) + 1e-3 w: the towers average the matmul only (the
  // decay term is the same in every tower), and the sum is computed in the update's fused loop.
  // What may differ between towers: a placeholder's value, or a draw per run (a dropout mask,
  // each tower session counting its own runs), directly or not.
  constexpr auto w = ty::variable<"tw", float, ty::shape<4>>;
  constexpr auto f = ty::placeholder<"tf", float, ty::shape<4>>;
  static_assert(!ty::detail::tower_dependent<decltype(w * w + ty::constant<2>)>::value);
  static_assert(ty::detail::tower_dependent<decltype(w * ty::relu(f))>::value);
  static_assert(ty::detail::tower_dependent<decltype(ty::dropout<7>(w, ty::constant<0.5>))>::value);
  using M = model<float>;
  using P = ty::compile::plan<ty::type_list<std::remove_const_t<decltype(M::train)>>>;
  constexpr auto n = means_of_sums_and_products<P>();
  CHECK(n[0] == 0);
  CHECK(n[1] == 2); // l1/weights and l2/weights
  const std::string steps = P::describe();
  INFO(steps);
  CHECK(steps.find("= fused apply_nesterov(l1/weights, l1/weights/momentum, "
                   "add(replica_mean(matmul(") != std::string::npos);
}

TEST_CASE("fetches: the loss is the batch-weighted mean, predictions are concatenated") {
  using M = model<float>;
  ty::tensor<float> xv;
  ty::tensor<std::int32_t> yv;
  make_batch<float>(11, 0, xv, yv);
  ty::session<> one(ty::session_options{.threads = 1, .seed = 3});
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>, ty::cpu<2>>> rep(
      ty::session_options{.threads = 3, .seed = 3});
  auto [l1, p1, lg1] = one.run(ty::fetch(M::loss, M::predictions, M::logits), ty::feed(M::x, xv),
                               ty::feed(M::y, yv));
  auto [l2, p2, lg2] = rep.run(ty::fetch(M::loss, M::predictions, M::logits), ty::feed(M::x, xv),
                               ty::feed(M::y, yv));
  CHECK(l2[0] == doctest::Approx(l1[0]).epsilon(1e-6));
  REQUIRE(p2.shape() == std::vector<i64>{11});
  REQUIRE(lg2.shape() == std::vector<i64>{11, 4});
  for (i64 i = 0; i < 11; ++i)
    CHECK(p2[i] == p1[i]);
  for (i64 i = 0; i < lg1.size(); ++i)
    CHECK(lg2[i] == doctest::Approx(lg1[i]).epsilon(1e-6));
  // No feed: nothing to split, every tower would compute the same.
  auto [w] = rep.run(ty::fetch(ty::find_variable<"l2/biases">(M::loss)));
  CHECK(w.size() == 4);
}

TEST_CASE("towers draw their own dropout masks; tower 0 draws an unreplicated session's") {
  static constexpr auto x = ty::placeholder<"dx", float, ty::shape<ty::dyn, 256>>;
  static constexpr auto y = ty::dropout<11>(x, ty::constant<0.5>);
  ty::tensor<float> ones({4, 256});
  for (i64 i = 0; i < ones.size(); ++i)
    ones[i] = 1;
  ty::tensor<float> half({2, 256}); // tower 0's rows
  for (i64 i = 0; i < half.size(); ++i)
    half[i] = 1;
  ty::session<> one(ty::session_options{.threads = 1});
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> rep(ty::session_options{.threads = 2});
  for (int run = 0; run < 2; ++run) {
    auto [a] = one.run(ty::fetch(y), ty::feed(x, half));
    auto [b] = rep.run(ty::fetch(y), ty::feed(x, ones));
    REQUIRE(b.shape() == std::vector<i64>{4, 256});
    i64 same_as_one = 0, same_rows = 0, kept = 0;
    for (i64 i = 0; i < 512; ++i) {
      same_as_one += b[i] == a[i];
      same_rows += b[i] == b[512 + i]; // tower 1's element at the same place in its rows
      kept += b[512 + i] != 0;
    }
    CHECK(same_as_one == 512);
    // independent masks at keep 0.5 agree on about half of the places; the same mask on all
    CHECK(same_rows < 400);
    CHECK(kept > 150);
    CHECK(kept < 362);
  }
}

TEST_CASE("the in-process average is deterministic: two runs, identical bits") {
  using M = model<float>;
  auto train = [] {
    ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>, ty::cpu<2>>> rep(
        ty::session_options{.threads = 3, .seed = 21});
    for (i64 step = 0; step < 5; ++step) {
      ty::tensor<float> xv;
      ty::tensor<std::int32_t> yv;
      make_batch<float>(17, step, xv, yv);
      rep.run(ty::fetch(M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
    }
    return rep.read(ty::find_variable<"l1/weights">(M::loss));
  };
  const auto a = train(), b = train();
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0);
}

TEST_CASE("a tower's error reaches the caller and the variables keep their values") {
  using M = model<float>;
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> rep(ty::session_options{.threads = 2});
  ty::tensor<float> xv;
  ty::tensor<std::int32_t> yv;
  make_batch<float>(8, 0, xv, yv);
  rep.run(ty::fetch(M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
  const auto before = rep.read(ty::find_variable<"l1/weights">(M::loss));
  yv[6] = 9; // a label out of range, in tower 1's rows
  CHECK_THROWS_WITH_AS(rep.run(ty::fetch(M::train), ty::feed(M::x, xv), ty::feed(M::y, yv)),
                       doctest::Contains("outside [0, 4)"), ty::error);
  const auto after = rep.read(ty::find_variable<"l1/weights">(M::loss));
  CHECK(std::memcmp(before.data(), after.data(),
                    sizeof(float) * static_cast<std::size_t>(before.size())) == 0);
  CHECK(rep.read(ty::global_step)[0] == 1);
}

TEST_CASE("replicate: check_numerics catches a NaN in the second tower's rows; an empty batch "
          "does not train") {
  using M = model<float>;
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> rep(
      ty::session_options{.threads = 2, .seed = 3, .check_numerics = true});
  ty::tensor<float> xv;
  ty::tensor<std::int32_t> yv;
  make_batch(6, 0, xv, yv);
  rep.run(ty::fetch(M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
  const auto w_before = rep.read(ty::find_variable<"l2/weights">(M::loss));
  xv[5 * 6 + 2] = std::nanf(""); // row 5: tower 1's share
  bool threw = false;
  try {
    rep.run(ty::fetch(M::loss, M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
  } catch (const ty::error& e) {
    threw = std::string(e.what()).find("check_numerics") != std::string::npos;
  }
  CHECK(threw);
  CHECK(rep.read(ty::global_step)[0] == 1);
  const auto w_after = rep.read(ty::find_variable<"l2/weights">(M::loss));
  for (i64 i = 0; i < w_before.size(); ++i)
    CHECK(w_after[i] == w_before[i]);
  std::vector<float> none;
  std::vector<std::int32_t> no_labels;
  CHECK_THROWS_AS(rep.run(ty::fetch(M::train),
                          ty::feed(M::x, ty::tensor_view<float>(none.data(), {0, 6})),
                          ty::feed(M::y, ty::tensor_view<std::int32_t>(no_labels.data(), {0}))),
                  ty::error);
  CHECK(rep.read(ty::global_step)[0] == 1);
}

namespace {
/// The seed's tower on CPUs: variables on cpu<0>, the tower's compute on D.
template <class D>
using seed_tower = ty::variables_on<ty::cpu<0>, ty::compute_on<D>>;
/// A tower whose matrix products go to the GPU of its own index: no plan to share.
template <class D>
using own_gpu_matmul = ty::by_op<D, ty::kind_on<ty::node_kind::matmul, ty::gpu<D::index>>>;
} // namespace

TEST_CASE("CPU towers share tower 0's plan and name their own CPU in the placement log") {
  using M = model<float>;
  using two = ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>>;
  using seed = ty::session<ty::replicate_with<seed_tower, ty::cpu<0>, ty::cpu<1>>>;
  using split = ty::session<ty::replicate_with<own_gpu_matmul, ty::cpu<0>, ty::cpu<1>>>;
  static_assert(two::cpu_towers && seed::cpu_towers && split::cpu_towers);
  static_assert(!ty::session<ty::replicate<ty::cpu<0>, ty::gpu<0>>>::cpu_towers);
  static_assert(two::shares_plan<decltype(M::loss), decltype(M::train)>);
  static_assert(seed::shares_plan<decltype(M::loss), decltype(M::train)>);
  static_assert(!split::shares_plan<decltype(M::loss), decltype(M::train)>);
  // The seed's towers train as one tower, with one plan for both (no copies between the CPUs).
  check_equivalent<float, ty::replicate_with<seed_tower, ty::cpu<0>, ty::cpu<1>>>({12, 13, 5},
                                                                                  1e-5);
  // Each tower logs the shared plan once, on its own CPU: every CPU:1 line is tower 1's.
  std::ostringstream log;
  two s(ty::session_options{.threads = 2, .seed = 1, .log_device_placement = true, .log = &log});
  s.initialize(M::train);
  ty::tensor<float> xv;
  ty::tensor<std::int32_t> yv;
  make_batch(8, 0, xv, yv);
  (void)s.run(ty::fetch(M::loss, M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
  (void)s.run(ty::fetch(M::loss, M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
  std::size_t cpu0 = 0, cpu1 = 0;
  std::istringstream lines(log.str());
  for (std::string line; std::getline(lines, line);) {
    cpu0 += line.ends_with("device:CPU:0");
    cpu1 += line.ends_with("device:CPU:1");
  }
  using P = ty::compile::plan<ty::type_list<std::remove_cvref_t<decltype(M::loss)>,
                                            std::remove_cvref_t<decltype(M::train)>>,
                              ty::on<ty::cpu<0>>>;
  CHECK(cpu0 == P::size);
  CHECK(cpu1 == P::size);
  // The seed's towers: tower 1 logs its compute on CPU:1 and the variables on CPU:0, as its own
  // plan places them, and no copies between the CPUs (the shared plan has none).
  std::ostringstream seed_log;
  seed r(
      ty::session_options{.threads = 2, .seed = 1, .log_device_placement = true, .log = &seed_log});
  r.initialize(M::train);
  (void)r.run(ty::fetch(M::loss, M::train), ty::feed(M::x, xv), ty::feed(M::y, yv));
  std::size_t variables = 0, compute1 = 0, copies = 0;
  std::istringstream seed_lines(seed_log.str());
  for (std::string line; std::getline(seed_lines, line);) {
    INFO(line);
    if (line.find("(variable)") != std::string::npos) {
      ++variables;
      CHECK(line.ends_with("device:CPU:0"));
    }
    compute1 += line.ends_with("device:CPU:1");
    copies += line.find("(send)") != std::string::npos;
  }
  std::size_t plan_variables = 0;
  for (std::size_t i = 0; i < P::size; ++i)
    plan_variables += P::op_names[i] == "variable";
  CHECK(plan_variables >= 4); // the weights and biases, their momentum slots, the global step
  CHECK(variables == 2 * plan_variables); // once per tower
  CHECK(compute1 > 0);
  CHECK(copies == 0);
}

TEST_CASE("the replication transformation: the gradients all-reduced, the update once") {
  using M = model<float>;
  using Loss = std::remove_cvref_t<decltype(M::loss)>;
  using Train = std::remove_cvref_t<decltype(M::train)>;
  using P = ty::compile::plan<ty::type_list<Loss, Train>, ty::on<ty::cpu<0>>>;
  constexpr auto& R = ty::replication<P>::value;
  // one all-reduce per trainable variable's gradient: two weights, two biases
  CHECK(R.all_reduces == 4);
  std::size_t means = 0, once_assigns = 0;
  for (std::size_t i = 0; i < P::size; ++i) {
    const std::string op(P::op_names[i]);
    if (R.all_reduce[i]) {
      ++means;
      CHECK(op == "replica_mean");
      CHECK_FALSE(R.once[i]); // each tower has its own value before the all-reduce
    }
    if (R.once[i] && (op.starts_with("assign") || op == "momentum_accum" || op == "apply_nesterov"))
      ++once_assigns;
  }
  CHECK(means == 4);
  CHECK(once_assigns == 8); // four variables and their four momentum slots, updated once
  // the loss and the predictions are the towers' (combined by fetch), not after the all-reduce
  CHECK_FALSE(R.once[P::template index_c<Loss>::value]);
  CHECK(R.batch[P::template index_c<Loss>::value]);
}

TEST_CASE("the CPU all-reduce kernel: the batch-weighted mean in tower order") {
  const i64 n = 50'000;
  std::vector<std::vector<float>> v(3, std::vector<float>(n));
  for (std::size_t k = 0; k < 3; ++k)
    for (i64 i = 0; i < n; ++i)
      v[k][static_cast<std::size_t>(i)] =
          static_cast<float>(std::sin(0.001 * static_cast<double>(i) * static_cast<double>(k + 1)) *
                             std::exp(static_cast<double>(k)));
  // tower 1 had no rows: its value must not count, even if its buffer holds numbers
  const std::array<ty::tower_part, 3> parts{{{v[0].data(), 5}, {v[1].data(), 0}, {v[2].data(), 4}}};
  std::vector<float> one(n);
  ty::cpu_backend::thread_pool pool(2);
  ty::cpu_backend::tower_mean<float>(pool, parts, 9, one.data(), n);
  double worst = 0;
  for (i64 i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const double ref = (5.0 * v[0][u] + 4.0 * v[2][u]) / 9.0;
    worst = std::max(worst, std::abs(ref - static_cast<double>(one[u])));
  }
  CHECK(worst <= 4e-7);
  // joined rows: tower 0's 5 rows, then tower 2's 4 (rows of 3 elements)
  std::vector<float> joined(27);
  ty::cpu_backend::concat_rows<float>(parts, 3, joined.data());
  CHECK(std::memcmp(joined.data(), v[0].data(), 15 * sizeof(float)) == 0);
  CHECK(std::memcmp(joined.data() + 15, v[2].data(), 12 * sizeof(float)) == 0);
}

TEST_CASE("a tower's value read again after the all-reduce is not written over in place") {
  constexpr auto x = ty::placeholder<"rx", float, ty::shape<ty::dyn, 8>>;
  constexpr auto w = ty::placeholder<"rw", float, ty::shape<8, 8>>;
  constexpr auto h = ty::matmul(x, w);                 // a tower value
  constexpr auto m = ty::replica_mean(ty::mean<0>(h)); // the all-reduce
  constexpr auto after = ty::mean<0>(h * m);           // runs once, after it: reads h again
  constexpr auto r = ty::relu(h) * ty::constant<2.0f>; // h's last reader in node order
  ty::tensor<float> xv({6, 8}), wv({8, 8});
  for (i64 i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)));
  for (i64 i = 0; i < wv.size(); ++i)
    wv[i] = static_cast<float>(std::cos(0.7 * static_cast<double>(i)));
  ty::session<ty::replicate<ty::cpu<0>, ty::cpu<1>>> rep(ty::session_options{.threads = 2});
  auto [a1, r1] = rep.run(ty::fetch(after, r), ty::feed(x, xv), ty::feed(w, wv));
  CHECK(rep.stats().buffers_in_place == 0);
  auto [a2, r2, h2] = rep.run(ty::fetch(after, r, h), ty::feed(x, xv), ty::feed(w, wv));
  for (i64 i = 0; i < a1.size(); ++i)
    CHECK(a1[i] == a2[i]);
  for (i64 i = 0; i < r1.size(); ++i)
    CHECK(r1[i] == r2[i]);
}
