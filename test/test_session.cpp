// The session: variables, initializers, assignments, feeds and fetches, threads.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <typeflow/typeflow.hpp>
#include <vector>

namespace ty = typeflow;

namespace {
constexpr auto v = ty::variable<"v", float, ty::shape<3>, ty::fill<1.5>>;
constexpr auto u = ty::variable<"u", float, ty::shape<3>, ty::fill<-2>>;
constexpr auto n = ty::variable<"n", double, ty::shape<1000>, ty::normal<0.0, 2.0>>;
constexpr auto tn = ty::variable<"tn", float, ty::shape<1000>, ty::truncated_normal<0.5>>;
constexpr auto step = ty::variable<"global_step", std::int64_t, ty::shape<>>;
} // namespace

TEST_SUITE("session") {
  TEST_CASE("an empty fetch list compiles, returns nothing and makes no variable") {
    // A plan of no nodes: its tables are zero-length arrays (compile/tables.hpp).
    ty::session s;
    auto r = s.run(ty::fetch());
    static_assert(std::tuple_size_v<decltype(r)> == 0);
    std::size_t held = 0;
    s.for_each_variable([&](const ty::variable_entry&) { ++held; });
    CHECK(held == 0);
  }

  TEST_CASE("variables persist across runs and assignments update them") {
    ty::session s;
    CHECK(s.read(v)[0] == 1.5f);
    s.run(ty::fetch(ty::assign_add(v, ty::constant<1>)));
    s.run(ty::fetch(ty::assign_add(v, ty::constant<1>)));
    CHECK(s.read(v)[2] == 3.5f);
    auto [r] = s.run(ty::fetch(ty::assign_sub(v, v * ty::constant<0.5>)));
    CHECK(r[0] == 1.75f); // the fetched value is the new value
    CHECK(s.read(v)[1] == 1.75f);
    s.run(ty::fetch(ty::assign(v, ty::full<4, float, ty::shape<1>>))); // broadcast to [3]
    CHECK(s.read(v)[0] == 4.0f);
    CHECK(s.read(v)[2] == 4.0f);
  }

  TEST_CASE("a group runs every assignment as one step; reads see the start of the run") {
    ty::session s;
    const auto train =
        ty::group(ty::assign(v, u), ty::assign(u, v), ty::assign_add(step, ty::constant<1>));
    auto out = s.run(ty::fetch(train));
    static_assert(std::tuple_size_v<decltype(out)> == 0); // a group yields no value
    CHECK(s.read(v)[0] == -2.0f);                         // swapped
    CHECK(s.read(u)[0] == 1.5f);
    s.run(ty::fetch(train));
    CHECK(s.read(step).item() == 2);
  }

  TEST_CASE("an assignment of a value the run computed takes that buffer, not a copy") {
    ty::session s;
    constexpr auto prod = v * u; // read by two regions: materialized
    const auto train = ty::group(ty::assign(v, prod), ty::assign(u, prod + ty::constant<1>));
    const auto storage = [&](std::string_view name) {
      void* p = nullptr;
      s.for_each_variable([&](const auto& e) {
        if (e.name == name)
          p = e.data;
      });
      return p;
    };
    s.initialize(train);
    void* const v0 = storage("v");
    s.run(ty::fetch(train));
    // prod's buffer and the second assignment's; the first assignment's value is prod's buffer.
    CHECK(s.stats().buffers_allocated + s.stats().buffers_reused == 2);
    CHECK(s.read(v)[0] == -3.0f); // 1.5 * -2
    CHECK(s.read(u)[2] == -2.0f); // 1.5 * -2 + 1
    // ... and those buffers became v's and u's storage at the commit (no copy); their old
    // storage went to the pool, where the next run finds its buffers.
    CHECK(storage("v") != v0);
    s.run(ty::fetch(train));
    CHECK(s.stats().buffers_allocated == 0);
    CHECK(s.stats().buffers_reused == 2);
    CHECK(s.read(v)[0] == 6.0f); // -3 * -2
    CHECK(s.read(u)[0] == 7.0f);
    s.run(ty::fetch(train));
    CHECK(s.read(v)[1] == 42.0f); // 6 * 7
    // Fetched, the assignment's value and prod are equal and neither is the variable's storage.
    auto [a, p] = s.run(ty::fetch(ty::assign(v, prod), prod));
    CHECK(a[1] == 42.0f * 43.0f);
    CHECK(p[1] == 42.0f * 43.0f);
    a[1] = 100.f;
    p[1] = 100.f;
    CHECK(s.read(v)[1] == 42.0f * 43.0f);
  }

  TEST_CASE("initializers are reproducible per seed and name") {
    ty::session a(ty::session_options{.threads = 1, .seed = 7});
    ty::session b(ty::session_options{.threads = 2, .seed = 7});
    ty::session c(ty::session_options{.threads = 1, .seed = 8});
    auto na = a.read(n), nb = b.read(n), nc = c.read(n);
    CHECK(std::equal(na.begin(), na.end(), nb.begin()));
    CHECK(!std::equal(na.begin(), na.end(), nc.begin()));
    // Moments of normal(0, 2) over 1000 draws.
    double mean = 0, var = 0;
    for (double x : na)
      mean += x / 1000;
    for (double x : na)
      var += (x - mean) * (x - mean) / 999;
    CHECK(std::abs(mean) < 0.25);
    CHECK(std::abs(std::sqrt(var) - 2.0) < 0.2);
    auto t = a.read(tn);
    CHECK(*std::max_element(t.begin(), t.end()) <= 1.0f);
    CHECK(*std::min_element(t.begin(), t.end()) >= -1.0f);
    // initialize() restores the initial value.
    a.run(ty::fetch(ty::assign(n, ty::full<0, double, ty::shape<1000>>)));
    CHECK(a.read(n)[0] == 0.0);
    a.initialize(n);
    auto again = a.read(n);
    CHECK(std::equal(na.begin(), na.end(), again.begin()));
  }

  TEST_CASE("feeds from a non-owning view of user memory; write() sets a variable") {
    constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
    ty::session s;
    s.write(v, ty::tensor<float>({3}, {1, 2, 3}));
    std::vector<float> mem{1, 1, 1, 2, 2, 2};
    auto [r] =
        s.run(ty::fetch(ty::sum<1>(x * v)), ty::feed(x, ty::tensor_view<float>(mem, {2, 3})));
    CHECK(r.shape() == std::vector<std::int64_t>{2});
    CHECK(r[0] == 6.0f);
    CHECK(r[1] == 12.0f);
  }

  TEST_CASE("results do not depend on the thread count") {
    constexpr auto big = ty::placeholder<"big", float, ty::shape<ty::dyn>>;
    constexpr auto y = ty::sum(ty::sin(big) * big);
    ty::tensor<float> t({500000});
    for (std::int64_t i = 0; i < t.size(); ++i)
      t[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
    ty::session one(ty::session_options{.threads = 1, .seed = 0});
    ty::session two(ty::session_options{.threads = 2, .seed = 0});
    auto [a] = one.run(ty::fetch(y), ty::feed(big, t));
    auto [b] = two.run(ty::fetch(y), ty::feed(big, t));
    CHECK(a.item() == b.item());
    double ref = 0;
    for (float x : t)
      ref += std::sin(double(x)) * x;
    CHECK(a.item() == doctest::Approx(ref).epsilon(1e-5));
  }

  TEST_CASE("host tensors: shape, access and printing") {
    ty::tensor<std::int32_t> t({2, 3}, {1, 2, 3, 4, 5, 6});
    CHECK(t.dtype() == "int32");
    CHECK(t.rank() == 2);
    CHECK(t(1, 2) == 6);
    CHECK(t.to_string() == "tensor<int32, [2,3]>\n[[1, 2, 3],\n [4, 5, 6]]");
    ty::tensor<bool> s({}, {true});
    CHECK(s.to_string() == "tensor<bool, []>(true)");
  }
  TEST_CASE("the CPU backend: fetch hands a lone buffer over, commit adopts it, CPUs share") {
    // The executor drives every device through device_backend<D>; these are the CPU's answers.
    using B = ty::device_backend<ty::cpu<0>>;
    static_assert(ty::has_device_backend<ty::cpu<0>> && ty::has_device_backend<ty::cpu<3>>);
    static_assert(B::host_memory);
    ty::backend::session_state st;
    st.host = std::make_shared<ty::cpu_backend::host_state>(1, false, false);
    auto pool_value = [&](float first) {
      ty::backend::rt_value x;
      x.dims = ty::backend::rt_dims::from(ty::dims_t<1>{4});
      x.owner = st.host_mem->acquire(4 * sizeof(float), st.stats);
      x.data = x.owner.get();
      for (int i = 0; i < 4; ++i)
        static_cast<float*>(x.data)[i] = first + static_cast<float>(i);
      return x;
    };
    ty::backend::rt_value x = pool_value(10);
    void* const buffer = x.data;
    {
      const ty::backend::rt_value other = x; // a second holder: fetch copies
      const ty::tensor<float> t = B::fetch<float>(st, x);
      CHECK(t.data() != buffer);
      CHECK(x.owner != nullptr);
      CHECK(t[3] == 13.0f);
    }
    const ty::tensor<float> handed = B::fetch<float>(st, x);
    CHECK(static_cast<const void*>(handed.data()) == buffer);
    CHECK(x.owner == nullptr);
    CHECK(handed[0] == 10.0f);

    // Between CPUs the buffer is shared, not copied.
    ty::backend::rt_value y = pool_value(20), moved;
    B::receive<ty::cpu<1>>(st, y, moved, sizeof(float));
    CHECK(moved.data == y.data);
    CHECK(moved.dims == y.dims);

    // A commit makes the value's buffer the variable's storage when nothing else holds it, and
    // copies when the value is kept (fetched).
    ty::backend::variable_record rec;
    rec.bytes = 4 * sizeof(float);
    rec.data = decltype(rec.data)(ty::detail::aligned_bytes(rec.bytes));
    rec.device_valid = true;
    ty::backend::rt_value var;
    var.data = rec.data.get();
    ty::backend::rt_value kept = pool_value(30);
    B::commit(st, var, kept, rec, true, rec.bytes);
    CHECK(rec.data.get() != kept.data);
    CHECK(static_cast<float*>(rec.data.get())[2] == 32.0f);
    CHECK_FALSE(rec.device_valid);
    ty::backend::rt_value lone = pool_value(40);
    void* const lone_buffer = lone.data;
    B::commit(st, var, lone, rec, false, rec.bytes);
    CHECK(rec.data.get() == lone_buffer);
    CHECK(var.data == lone_buffer);
    CHECK(lone.data == nullptr);
    CHECK(static_cast<float*>(var.data)[1] == 41.0f);
  }
}
