// Placement: devices print in TensorFlow's form; policies (on, variables_on + compute_on, by_op,
// strict), with_device scopes and soft placement decide each node's device at compile time;
// every edge across devices gets exactly one transfer per (tensor, destination); fusion never
// crosses a device; and a placed graph computes what the unplaced one does.
#include <doctest/doctest.h>

#include <string>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 4>>;
constexpr auto w = ty::variable<"w", float, ty::shape<4, 3>, ty::uniform<-1.0, 1.0>>;
constexpr auto b = ty::variable<"b", float, ty::shape<3>, ty::fill<0.5>>;
constexpr auto y = ty::relu(ty::matmul(x, w) + b);
constexpr auto loss = ty::mean(ty::square(y));
constexpr auto train = ty::gradient_descent(ty::constant<0.1>).minimize(loss);

using seed_policy = ty::variables_on<ty::cpu<0>, ty::compute_on<ty::cpu<1>>>;

template <class P, class N>
ty::device_id device_of_node() {
  return P::placement.device[P::template index_c<N>::value];
}

ty::tensor<float> input() {
  return ty::tensor<float>({2, 4}, {1, 2, 3, 4, -1, 0.5f, 2, 0});
}

std::size_t count(const std::string& s, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("device tags print in TensorFlow's form") {
  CHECK(ty::cpu<0>::name() == "/job:localhost/replica:0/task:0/device:CPU:0");
  CHECK(ty::gpu<3>::name() == "/job:localhost/replica:0/task:0/device:GPU:3");
  CHECK(ty::id_of<ty::gpu<1>>.name() == ty::gpu<1>::name());
  static_assert(std::is_same_v<ty::device_of<false, 2>, ty::gpu<2>>);
}

TEST_CASE("the seed's device function: variables on cpu<0>, compute on cpu<1>") {
  using P = ty::compile::plan<ty::type_list<decltype(loss), decltype(train)>, seed_policy>;
  CHECK(device_of_node<P, decltype(w)>() == ty::id_of<ty::cpu<0>>);
  CHECK(device_of_node<P, decltype(b)>() == ty::id_of<ty::cpu<0>>);
  CHECK(device_of_node<P, decltype(ty::matmul(x, w))>() == ty::id_of<ty::cpu<1>>);
  CHECK(device_of_node<P, decltype(loss)>() == ty::id_of<ty::cpu<1>>);
  CHECK(device_of_node<P, decltype(ty::global_step)>() == ty::id_of<ty::cpu<0>>);
  // Each assignment runs where its variable lives.
  CHECK(device_of_node<P, decltype(ty::assign_add(ty::global_step, ty::constant<1>))>() ==
        ty::id_of<ty::cpu<0>>);
  // Exactly the expected transfers: w and b to the compute device (read by the forward and the
  // gradient, one transfer each), and the two updates back to the variables' device.
  // global_step's increment stays on cpu<0>.
  CHECK(P::transfers == 4);
  const std::string listing = P::describe_placement();
  INFO(listing);
  CHECK(count(listing, "  transfer %") == 4);
  CHECK(count(listing, "transfer ") >= 4);
  CHECK(listing.find("leaf w  @/job:localhost/replica:0/task:0/device:CPU:0\n  transfer %") !=
        std::string::npos);
  CHECK(count(listing, "-> /job:localhost/replica:0/task:0/device:CPU:1") == 2);
  CHECK(count(listing, "-> /job:localhost/replica:0/task:0/device:CPU:0") == 2);
}

// Placed and unplaced graphs fuse differently (fusion stops at a device), so with FMA
// contraction their results agree to rounding, not bitwise.
constexpr double same = 1e-5;

TEST_CASE("a placed graph trains as the unplaced one; each run does its transfers") {
  ty::trace_recorder rec(ty::trace_recorder::options{.skip = 2});
  ty::session<seed_policy> placed(ty::session_options{.seed = 5, .trace = &rec});
  ty::session<> plain(ty::session_options{.seed = 5});
  using P = ty::compile::plan<ty::type_list<decltype(loss), decltype(train)>, seed_policy>;
  for (int k = 0; k < 3; ++k) {
    auto [l1] = placed.run(ty::fetch(loss, train), ty::feed(x, input()));
    auto [l2] = plain.run(ty::fetch(loss, train), ty::feed(x, input()));
    CHECK(l1[0] == doctest::Approx(l2[0]).epsilon(same));
    CHECK(placed.stats().transfers == P::transfers);
    CHECK(placed.stats().transfer_bytes == (4 * 3 + 3) * sizeof(float) * 2);
    CHECK(plain.stats().transfers == 0);
  }
  const auto w1 = placed.read(w), w2 = plain.read(w);
  for (i64 i = 0; i < w1.size(); ++i)
    CHECK(w1[i] == doctest::Approx(w2[i]).epsilon(same));
  std::size_t traced = 0, bytes = 0; // the last run's
  for (const auto& e : rec.events())
    if (e.what == ty::trace_event::type::transfer) {
      ++traced;
      bytes += e.bytes;
    }
  CHECK(rec.runs_recorded() == 1);
  CHECK(traced == P::transfers);
  CHECK(bytes == placed.stats().transfer_bytes);
}

TEST_CASE("one transfer per (tensor, destination device), however many readers") {
  constexpr auto u = ty::matmul(x, w) * ty::matmul(x * ty::constant<2.0>, w) + ty::sum<0>(w);
  using P = ty::compile::plan<ty::type_list<decltype(u)>, seed_policy>;
  // w is read three times on cpu<1>: one transfer.
  CHECK(P::transfers == 1);
  CHECK(P::placement.transfer_source[0] == P::index_c<decltype(w)>::value);
  CHECK(P::placement.transfer_device[0] == ty::id_of<ty::cpu<1>>);
}

TEST_CASE("by_op maps op kinds to devices") {
  using policy = ty::by_op<ty::cpu<0>, ty::kind_on<ty::node_kind::matmul, ty::cpu<1>>,
                           ty::kind_on<ty::node_kind::reduction, ty::cpu<2>>>;
  using P = ty::compile::plan<ty::type_list<decltype(loss)>, policy>;
  CHECK(device_of_node<P, decltype(ty::matmul(x, w))>() == ty::id_of<ty::cpu<1>>);
  CHECK(device_of_node<P, decltype(loss)>() == ty::id_of<ty::cpu<2>>);
  CHECK(device_of_node<P, decltype(y)>() == ty::id_of<ty::cpu<0>>);
  CHECK(device_of_node<P, decltype(w)>() == ty::id_of<ty::cpu<0>>);
  // x and w to cpu<1> for the matmul, its result back to cpu<0>, square(y) to cpu<2>.
  CHECK(P::transfers == 4);
  ty::session<policy> s;
  ty::session<> plain;
  auto [a] = s.run(ty::fetch(loss), ty::feed(x, input()));
  auto [c] = plain.run(ty::fetch(loss), ty::feed(x, input()));
  CHECK(a[0] == doctest::Approx(c[0]).epsilon(same));
}

TEST_CASE("with_device overrides the policy for a subtree; the innermost scope wins") {
  constexpr auto inner = ty::with_device<ty::cpu<2>>(ty::matmul(x, w));
  constexpr auto outer = ty::with_device<ty::cpu<1>>(ty::relu(inner + b));
  constexpr auto z = outer * ty::constant<3.0>;
  using P = ty::compile::plan<ty::type_list<decltype(z)>>;
  CHECK(device_of_node<P, decltype(ty::matmul(x, w))>() == ty::id_of<ty::cpu<2>>);
  CHECK(device_of_node<P, decltype(inner + b)>() == ty::id_of<ty::cpu<1>>);
  CHECK(device_of_node<P, decltype(z)>() == ty::id_of<ty::cpu<0>>);
  // Leaves keep the policy's device.
  CHECK(device_of_node<P, decltype(w)>() == ty::id_of<ty::cpu<0>>);
  // Fusion stops at device boundaries: relu(inner + b) is one region on cpu<1>, z another.
  CHECK(P::layout.root[P::index_c<decltype(inner + b)>::value] ==
        P::index_c<std::remove_cvref_t<decltype(outer)>>::value);
  CHECK(P::layout.root[P::index_c<std::remove_cvref_t<decltype(outer)>>::value] ==
        P::index_c<std::remove_cvref_t<decltype(outer)>>::value);
  ty::session<> s;
  auto [got] = s.run(ty::fetch(z), ty::feed(x, input()));
  auto [want] =
      s.run(ty::fetch(ty::relu(ty::matmul(x, w) + b) * ty::constant<3.0>), ty::feed(x, input()));
  REQUIRE(got.size() == want.size());
  for (i64 i = 0; i < got.size(); ++i)
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(same));
  // The gradient passes through a scope unchanged.
  constexpr auto g = ty::grad(ty::sum(z), w);
  constexpr auto g0 = ty::grad(ty::sum(ty::relu(ty::matmul(x, w) + b) * ty::constant<3.0>), w);
  auto [ga, gb] = s.run(ty::fetch(g, g0), ty::feed(x, input()));
  for (i64 i = 0; i < ga.size(); ++i)
    CHECK(ga[i] == doctest::Approx(gb[i]).epsilon(same));
}

TEST_CASE("GPU kernels are what the CUDA backend declares, in every translation unit") {
  // This file is compiled by g++, without the CUDA backend: placement still knows its kernels
  // (backend/cuda/kernels.hpp declares them), so a plan means the same here as under nvcc.
  using ty::has_gpu_kernel;
  static_assert(has_gpu_kernel<ty::ops::matmul<false, true>>);
  static_assert(has_gpu_kernel<ty::ops::add>); // fused, from its scalar functor
  static_assert(has_gpu_kernel<ty::ops::conv2d<ty::padding::same, 1, 1, 1, 1>>);
  static_assert(has_gpu_kernel<ty::ops::sparse_softmax_xent_grad>);
  static_assert(has_gpu_kernel<ty::ops::transpose<1, 0>>);
  static_assert(has_gpu_kernel<ty::ops::concat<-1>>);
  static_assert(has_gpu_kernel<ty::ops::reduce<ty::ops::reducers::argmax, false, 1>>);
  static_assert(has_gpu_kernel<ty::ops::reduce<ty::ops::reducers::sum, false, 0>>);
  static_assert(has_gpu_kernel<ty::ops::dropout_mask<7>>);
  static_assert(has_gpu_kernel<decltype(w)::op>);  // variables live on their GPU
  static_assert(!has_gpu_kernel<decltype(x)::op>); // fed on the host
  using probe_op = decltype(ty::debug::probe<"p">(x))::op;
  static_assert(!has_gpu_kernel<probe_op>); // host_only: counts in a host atomic
  static_assert(ty::has_kernel_on<probe_op, ty::cpu<0>> &&
                !ty::has_kernel_on<probe_op, ty::gpu<0>>);
  CHECK(ty::has_kernel_on<ty::ops::add, ty::gpu<1>>);
}

TEST_CASE("soft placement: ops without a GPU kernel fall back to cpu<0>") {
  constexpr auto h = ty::matmul(x, w) + b;
  constexpr auto p = ty::debug::probe<"soft">(h);
  constexpr auto yp = ty::relu(p);
  using P = ty::compile::plan<ty::type_list<decltype(yp)>, ty::on<ty::gpu<0>>>;
  // matmul, add, relu and the variables stay on the GPU; the probe (host only) and the fed
  // placeholder x move to the CPU, marked as soft placements.
  CHECK(device_of_node<P, decltype(h)>() == ty::id_of<ty::gpu<0>>);
  CHECK(device_of_node<P, decltype(ty::matmul(x, w))>() == ty::id_of<ty::gpu<0>>);
  CHECK(device_of_node<P, decltype(w)>() == ty::id_of<ty::gpu<0>>);
  CHECK(device_of_node<P, decltype(yp)>() == ty::id_of<ty::gpu<0>>);
  CHECK(device_of_node<P, decltype(p)>() == ty::id_of<ty::cpu<0>>);
  CHECK(device_of_node<P, decltype(x)>() == ty::id_of<ty::cpu<0>>);
  CHECK(P::placement.fell_back[P::index_c<decltype(p)>::value]);
  CHECK(!P::placement.fell_back[P::index_c<decltype(h)>::value]);
  // x goes to the GPU for the matmul, h to the CPU for the probe, the probe back for relu.
  CHECK(P::transfers == 3);
  const std::string listing = P::describe_placement();
  INFO(listing);
  CHECK(count(listing, "(soft placement: no kernel on the requested device)") == 2);
  CHECK(count(listing, "-> /job:localhost/replica:0/task:0/device:GPU:0") == 2);
  CHECK(count(listing, "-> /job:localhost/replica:0/task:0/device:CPU:0") == 1);
}

TEST_CASE("a materialized constant read on another device travels like any tensor") {
  // The constant is a leaf (placed by the policy, cpu<0>); the matmul reading its buffer is
  // scoped to cpu<1>, so the constant needs a transfer, as does x. A constant that is only read
  // by elementwise ops is inlined into their loops and needs none.
  constexpr auto c = ty::full<2, float, ty::shape<4, 3>>;
  constexpr auto m = ty::with_device<ty::cpu<1>>(ty::matmul(x, c));
  constexpr auto inl = ty::with_device<ty::cpu<1>>(x * ty::full<3, float, ty::shape<4>>);
  using P = ty::compile::plan<ty::type_list<decltype(m), decltype(inl)>, ty::on<ty::cpu<0>>>;
  CHECK(device_of_node<P, decltype(c)>() == ty::id_of<ty::cpu<0>>);
  CHECK(P::transfers == 2);
  const std::string listing = P::describe_placement();
  INFO(listing);
  CHECK(count(listing, "-> /job:localhost/replica:0/task:0/device:CPU:1") == 2);
  ty::session<ty::on<ty::cpu<0>>> s;
  auto [mv, iv] = s.run(ty::fetch(m, inl), ty::feed(x, input()));
  const auto in = input();
  for (i64 r = 0; r < 2; ++r)
    for (i64 j = 0; j < 3; ++j) {
      double ref = 0;
      for (i64 k = 0; k < 4; ++k)
        ref += 2.0 * in[r * 4 + k];
      CHECK(mv[r * 3 + j] == doctest::Approx(ref));
    }
  for (i64 i = 0; i < 8; ++i)
    CHECK(iv[i] == doctest::Approx(3.0 * in[i]));
  CHECK(s.stats().transfers == 2);
}
