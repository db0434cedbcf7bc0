// Run-time misuse: every mistake throws ty::error with the promised message (what() starts with
// "typeflow: ", names the op or placeholder and the shapes involved), and the session keeps
// working afterwards: variables keep their values, a failed run commits no assignment, and the
// next valid run gives the right answer.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <typeflow/typeflow.hpp>
#include <vector>

namespace ty = typeflow;

namespace {

using dims = std::vector<std::int64_t>;

// The model every test checks after an error: y = x W + b.
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 3>>;
constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 3>>;
constexpr auto W = ty::variable<"W", float, ty::shape<3, 2>, ty::fill<0.5>>;
constexpr auto b = ty::variable<"b", float, ty::shape<2>, ty::fill<-1>>;
constexpr auto model = ty::matmul(x, W) + b;
constexpr auto bump_b = ty::group(ty::assign_add(b, ty::constant<1>));

/// Changes the session's state (b: -1 -> 0) so that check_still_works can see it was kept.
void warm_up(ty::session<>& s) {
  s.run(ty::fetch(bump_b));
}

/// After warm_up: W and b keep their values and x W + b is right:
/// [[1,2,3],[4,5,6]] x 0.5 + 0 = [[3,3],[7.5,7.5]].
void check_still_works(ty::session<>& s) {
  const auto w = s.read(W);
  for (float v : w)
    CHECK(v == 0.5f);
  const auto bv = s.read(b);
  CHECK(bv[0] == 0.0f);
  CHECK(bv[1] == 0.0f);
  ty::tensor<float> in({2, 3}, {1, 2, 3, 4, 5, 6});
  auto [out] = s.run(ty::fetch(model), ty::feed(x, in));
  REQUIRE(out.shape() == dims{2, 2});
  CHECK(out(0, 0) == doctest::Approx(3));
  CHECK(out(0, 1) == doctest::Approx(3));
  CHECK(out(1, 0) == doctest::Approx(7.5));
  CHECK(out(1, 1) == doctest::Approx(7.5));
}

/// Runs f, which must throw ty::error, and returns its what().
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ty::error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw an exception that is not ty::error: " << e.what());
    return {};
  }
  FAIL_CHECK("did not throw");
  return {};
}

/// The message starts with "typeflow: " and contains every part.
void check_message(const std::string& msg, std::initializer_list<std::string_view> parts) {
  INFO("message: " << msg);
  CHECK(msg.rfind("typeflow: ", 0) == 0);
  for (std::string_view p : parts) {
    INFO("expected to contain: " << p);
    CHECK(msg.find(p) != std::string::npos);
  }
}

} // namespace

// ---- feeds ------------------------------------------------------------------------------------

TEST_CASE("feed: a static extent that disagrees with the placeholder") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> bad({2, 4});
  const auto msg = error_of([&] { s.run(ty::fetch(model), ty::feed(x, bad)); });
  check_message(msg, {"feed: placeholder \"x\"", "[?,3]", "[2,4]"});
  CHECK(msg == "typeflow: feed: placeholder \"x\" expects [?,3], fed [2,4]");
  check_still_works(s);
}

TEST_CASE("feed: the wrong rank") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> flat({6});
  check_message(error_of([&] { s.run(ty::fetch(model), ty::feed(x, flat)); }),
                {"feed: placeholder \"x\"", "[?,3]", "fed [6]", "rank differs"});
  ty::tensor<float> cube({2, 3, 1});
  check_message(error_of([&] { s.run(ty::fetch(model), ty::feed(x, cube)); }),
                {"feed: placeholder \"x\"", "[?,3]", "fed [2,3,1]", "rank differs"});
  check_still_works(s);
}

TEST_CASE("feed: a rank above max_rank is rejected by feed itself") {
  ty::session s;
  warm_up(s);
  const float one = 1;
  const ty::tensor_view<float> v(&one, dims(ty::max_rank + 1, 1));
  CHECK_THROWS_WITH_AS(ty::feed(x, v),
                       doctest::Contains("feed: placeholder \"x\" expects [?,3], fed [1,1,1,1,1"),
                       ty::error);
  check_still_works(s);
}

TEST_CASE("feed: dyn extents of two placeholders disagree") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> two({2, 3}), five({5, 3});
  const auto msg = error_of([&] { s.run(ty::fetch(x + y), ty::feed(x, two), ty::feed(y, five)); });
  check_message(msg, {"placeholder \"x\"", "placeholder \"y\"", "[2,3]", "[5,3]",
                      "dyn extent 5 disagrees with 2"});
  CHECK(msg == "typeflow: feed: placeholder \"y\" expects [?,3], fed [5,3]; dyn extent 5 "
               "disagrees with 2 from placeholder \"x\" fed [2,3]");
  // The same two feeds in the other order: the message follows the feed order.
  check_message(error_of([&] { s.run(ty::fetch(x + y), ty::feed(y, five), ty::feed(x, two)); }),
                {"placeholder \"x\" expects [?,3], fed [2,3]",
                 "dyn extent 2 disagrees with 5 from placeholder \"y\" fed [5,3]"});
  // A placeholder fed but not needed by the fetches is checked too.
  check_message(error_of([&] {
                  ty::tensor<float> in({2, 3}, {1, 2, 3, 4, 5, 6});
                  s.run(ty::fetch(model), ty::feed(x, in), ty::feed(y, five));
                }),
                {"placeholder \"y\"", "dyn extent 5 disagrees with 2"});
  check_still_works(s);
}

TEST_CASE("feed: all dyn extents of one placeholder share one extent") {
  constexpr auto m = ty::placeholder<"m", float, ty::shape<ty::dyn, ty::dyn>>;
  ty::session s;
  warm_up(s);
  ty::tensor<float> rect({2, 3});
  check_message(error_of([&] { s.run(ty::fetch(ty::sum(m)), ty::feed(m, rect)); }),
                {"feed: placeholder \"m\" expects [?,?], fed [2,3]",
                 "dyn extent 3 disagrees with 2 from placeholder \"m\" fed [2,3]"});
  ty::tensor<float> square({2, 2}, {1, 2, 3, 4});
  auto [total] = s.run(ty::fetch(ty::sum(m)), ty::feed(m, square));
  CHECK(total.item() == doctest::Approx(10));
  check_still_works(s);
}

// Library bug (see the report): runtime/feed.hpp accepts negative extents from a tensor_view, and
// session::check_feeds takes a fed extent of -1 at a dyn position for "no batch yet", so the fed
// x is read as if it had y's 100 rows (a heap overflow under ASan when the buffer is 1 row).
// Skipped until feed() rejects negative extents; the buffers here are large enough that the buggy
// behaviour reads no memory out of bounds.
TEST_CASE("feed: a view with a negative extent is rejected") {
  ty::session s;
  warm_up(s);
  std::vector<float> xs(300, 1.0f), ys(300, 2.0f);
  CHECK_THROWS_AS(s.run(ty::fetch(x + y), ty::feed(x, ty::tensor_view<float>(xs.data(), {-1, 3})),
                        ty::feed(y, ty::tensor_view<float>(ys.data(), {100, 3}))),
                  ty::error);
  CHECK_THROWS_AS(s.run(ty::fetch(x * ty::constant<2>),
                        ty::feed(x, ty::tensor_view<float>(xs.data(), {-2, 3}))),
                  ty::error);
  check_still_works(s);
}

TEST_CASE("feed: a view with null data and a non-empty shape is rejected before any kernel") {
  ty::session s;
  warm_up(s);
  const auto msg = error_of([&] {
    s.run(ty::fetch(model), ty::feed(x, ty::tensor_view<float>(nullptr, {2, 3})));
  });
  check_message(msg, {"placeholder \"x\"", "[2,3]", "null data for 6 elements"});
  // an empty feed may have null data (what std::vector<float>{}.data() gives)
  auto [out] = s.run(ty::fetch(model), ty::feed(x, ty::tensor_view<float>(nullptr, {0, 3})));
  CHECK(out.shape() == dims{0, 2});
  check_still_works(s);
}

TEST_CASE("feed: a view whose data is not aligned to its dtype is rejected") {
  ty::session s;
  warm_up(s);
  alignas(float) unsigned char raw[7 * sizeof(float)] = {};
  const auto* misaligned = reinterpret_cast<const float*>(raw + 1);
  const auto msg = error_of([&] {
    s.run(ty::fetch(model), ty::feed(x, ty::tensor_view<float>(misaligned, {2, 3})));
  });
  check_message(msg, {"placeholder \"x\"", "not aligned to 4 bytes for float32"});
  check_still_works(s);
}

TEST_CASE("feed: a view whose shape has more elements than an int64 counts is rejected") {
  ty::session s;
  warm_up(s);
  std::vector<float> xs(3, 1.0f);
  // 2^62 x 3 elements: the product wraps a signed 64-bit count
  const auto msg = error_of([&] {
    s.run(ty::fetch(model),
          ty::feed(x, ty::tensor_view<float>(xs.data(), {std::int64_t{1} << 62, 3})));
  });
  check_message(msg, {"placeholder \"x\"", "more elements than can be addressed"});
  check_still_works(s);
}

// ---- sizes that overflow or cannot be allocated -------------------------------------------------

namespace {
constexpr auto ba = ty::placeholder<"ba", float, ty::shape<ty::dyn, 1, 1>>;
constexpr auto bb = ty::placeholder<"bb", float, ty::shape<1, ty::dyn, 1>>;
constexpr auto bc = ty::placeholder<"bc", float, ty::shape<1, 1, ty::dyn>>;
} // namespace

TEST_CASE("a broadcast whose element count overflows int64 is an error, not a wrong sum") {
  // Three 16 MiB inputs broadcast to [2^22, 2^22, 2^22]: 2^66 elements, which wraps to 0 in
  // int64 arithmetic (the sum was silently 0 before the count was checked).
  const std::int64_t n = std::int64_t{1} << 22;
  std::vector<float> data(static_cast<std::size_t>(n), 1.0f);
  ty::session s;
  warm_up(s);
  const auto msg = error_of([&] {
    s.run(ty::fetch(ty::sum(ba + bb + bc)),
          ty::feed(ba, ty::tensor_view<float>(data.data(), {n, 1, 1})),
          ty::feed(bb, ty::tensor_view<float>(data.data(), {1, n, 1})),
          ty::feed(bc, ty::tensor_view<float>(data.data(), {1, 1, n})));
  });
  check_message(msg, {"add: result of shape [4194304,4194304,1]"});
  check_still_works(s);
}

TEST_CASE(
    "a result larger than the machine's memory is an error naming the op, before allocating") {
  // [2^16, 2^16, 2^16] float32: 2^48 elements, 1 PiB
  const std::int64_t n = std::int64_t{1} << 16;
  std::vector<float> data(static_cast<std::size_t>(n), 1.0f);
  ty::session s;
  warm_up(s);
  const auto msg = error_of([&] {
    s.run(ty::fetch(ba + bb + bc), ty::feed(ba, ty::tensor_view<float>(data.data(), {n, 1, 1})),
          ty::feed(bb, ty::tensor_view<float>(data.data(), {1, n, 1})),
          ty::feed(bc, ty::tensor_view<float>(data.data(), {1, 1, n})));
  });
  check_message(msg, {"add: result of shape [65536,65536,65536]", "bytes of memory"});
  check_still_works(s);
}

TEST_CASE("tensor: a shape past int64 or past memory is a ty::error, not std::bad_alloc") {
  const std::int64_t big = std::int64_t{1} << 40;
  check_message(error_of([&] {
                  ty::tensor<float> t({big, big});
                }),
                {"[1099511627776,1099511627776]", "more elements than an int64 counts"});
  check_message(error_of([&] { ty::tensor<double> t({std::int64_t{1} << 61}); }),
                {"needs more bytes than can be addressed"});
  // 2^50 floats: countable and addressable, but no machine this runs on has 4 PiB
  check_message(error_of([&] { ty::tensor<float> t({std::int64_t{1} << 50}); }),
                {"out of memory allocating 4503599627370496 bytes"});
}

// ---- shapes that only fail at run time ----------------------------------------------------------

TEST_CASE("run-time broadcasting mismatch: [?,3] + [4,3] fed 2 rows") {
  constexpr auto c = ty::variable<"c", float, ty::shape<4, 3>, ty::ones>;
  constexpr auto e = x + c;
  static_assert(decltype(e)::shape_type::dims == ty::dims_t<2>{4, 3});
  ty::session s;
  warm_up(s);
  ty::tensor<float> two({2, 3});
  const auto msg = error_of([&] { s.run(ty::fetch(e), ty::feed(x, two)); });
  check_message(msg, {"add: shapes are not broadcastable: [2,3] x [4,3]", "(in add(x, c))"});
  // One row broadcasts; four rows match.
  ty::tensor<float> one({1, 3}, {1, 2, 3});
  auto [r1] = s.run(ty::fetch(e), ty::feed(x, one));
  REQUIRE(r1.shape() == dims{4, 3});
  CHECK(r1(3, 2) == doctest::Approx(4));
  ty::tensor<float> four({4, 3});
  auto [r4] = s.run(ty::fetch(e), ty::feed(x, four));
  CHECK(r4.shape() == dims{4, 3});
  check_still_works(s);
}

TEST_CASE("run-time broadcasting mismatch: reshape<-1>(x) + a [6] constant") {
  constexpr auto e = ty::reshape<-1>(x) + ty::full<1, float, ty::shape<6>>;
  ty::session s;
  warm_up(s);
  ty::tensor<float> one({1, 3});
  check_message(error_of([&] { s.run(ty::fetch(e), ty::feed(x, one)); }),
                {"add: shapes are not broadcastable: [3] x [6]", "(in add(reshape(x"});
  ty::tensor<float> two({2, 3}, {1, 2, 3, 4, 5, 6});
  auto [r] = s.run(ty::fetch(e), ty::feed(x, two));
  REQUIRE(r.shape() == dims{6});
  CHECK(r[5] == doctest::Approx(7));
  check_still_works(s);
}

constexpr auto z = ty::placeholder<"z", float, ty::shape<ty::dyn, 2>>;

TEST_CASE("run-time matmul inner mismatch through reshape") {
  constexpr auto V = ty::variable<"V", float, ty::shape<4, 2>, ty::ones>;
  constexpr auto e = ty::matmul(ty::reshape<2, -1>(z), V); // [2,?] x [4,2]: checked when fed
  ty::session s;
  warm_up(s);
  ty::tensor<float> three({3, 2}); // reshaped to [2,3]
  const auto msg = error_of([&] { s.run(ty::fetch(e), ty::feed(z, three)); });
  check_message(msg, {"matmul: inner dimensions differ: [2,3] x [4,2]", "(in matmul(reshape(z"});
  ty::tensor<float> four({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}); // reshaped to [2,4]
  auto [r] = s.run(ty::fetch(e), ty::feed(z, four));
  REQUIRE(r.shape() == dims{2, 2});
  CHECK(r(0, 0) == doctest::Approx(10));
  CHECK(r(1, 1) == doctest::Approx(26));
  check_still_works(s);
}

TEST_CASE("run-time reshape whose element count does not divide") {
  constexpr auto e = ty::reshape<-1, 4>(z);
  ty::session s;
  warm_up(s);
  ty::tensor<float> three({3, 2});
  check_message(error_of([&] { s.run(ty::fetch(e), ty::feed(z, three)); }),
                {"reshape: element count does not divide: [3,2]"});
  ty::tensor<float> four({4, 2});
  auto [r] = s.run(ty::fetch(e), ty::feed(z, four));
  CHECK(r.shape() == dims{2, 4});
  check_still_works(s);
}

TEST_CASE("run-time concat, slice and broadcast_to mismatches") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> four({4, 3}), two({2, 3});

  constexpr auto cat = ty::concat<1>(x, ty::full<0, float, ty::shape<2, 3>>);
  check_message(error_of([&] { s.run(ty::fetch(cat), ty::feed(x, four)); }),
                {"concat: extents differ off the concatenation axis: [4,3] x [2,3]"});
  auto [c] = s.run(ty::fetch(cat), ty::feed(x, two));
  CHECK(c.shape() == dims{2, 6});

  constexpr auto sl = ty::slice<ty::ints<1, 0>, ty::ints<2, -1>>(x);
  check_message(error_of([&] { s.run(ty::fetch(sl), ty::feed(x, two)); }),
                {"slice: slice out of bounds: [2,3]"});
  ty::tensor<float> three({3, 3});
  auto [r] = s.run(ty::fetch(sl), ty::feed(x, three));
  CHECK(r.shape() == dims{2, 3});

  constexpr auto bt = ty::broadcast_to<ty::shape<4, 3>>(x);
  check_message(error_of([&] { s.run(ty::fetch(bt), ty::feed(x, two)); }),
                {"broadcast_to: shape cannot be broadcast: [2,3]"});
  check_still_works(s);
}

TEST_CASE("run-time assign whose value does not fit the variable commits nothing") {
  constexpr auto A = ty::variable<"A", float, ty::shape<3, 2>, ty::fill<7>>;
  constexpr auto u = ty::placeholder<"u", float, ty::shape<ty::dyn, 2>>;
  constexpr auto set = ty::assign(A, u);
  ty::session s;
  warm_up(s);
  ty::tensor<float> five({5, 2});
  check_message(error_of([&] { s.run(ty::fetch(set), ty::feed(u, five)); }),
                {"assign: value shape does not match the variable: [3,2] x [5,2]"});
  for (float v : s.read(A))
    CHECK(v == 7.0f);
  ty::tensor<float> row({1, 2}, {1, 2});
  s.run(ty::fetch(ty::group(set)), ty::feed(u, row));
  const auto a = s.read(A);
  CHECK(a(2, 0) == 1.0f);
  CHECK(a(2, 1) == 2.0f);
  check_still_works(s);
}

TEST_CASE("a run that fails after an assignment was computed commits nothing") {
  constexpr auto c = ty::variable<"c", float, ty::shape<4, 3>, ty::ones>;
  ty::session s;
  warm_up(s);
  ty::tensor<float> two({2, 3});
  // The assignment to b is in the plan; the add fails at run time; b must stay 0.
  check_message(error_of([&] {
                  s.run(ty::fetch(ty::assign_add(b, ty::constant<1>), x + c), ty::feed(x, two));
                }),
                {"add: shapes are not broadcastable: [2,3] x [4,3]"});
  check_still_works(s);
  // The same run with a good feed commits exactly once.
  ty::tensor<float> one({1, 3});
  auto [nb, sum] = s.run(ty::fetch(ty::assign_add(b, ty::constant<1>), x + c), ty::feed(x, one));
  CHECK(nb[0] == 1.0f);
  CHECK(sum.shape() == dims{4, 3});
  CHECK(s.read(b)[0] == 1.0f);
}

// ---- host tensors
// --------------------------------------------------------------------------------

TEST_CASE("tensor: construction with the wrong number of values") {
  CHECK_THROWS_WITH_AS(ty::tensor<float>({2, 3}, {1, 2, 3}),
                       "typeflow: tensor: 3 values given for shape [2,3] (6 elements)", ty::error);
  CHECK_THROWS_WITH_AS(ty::tensor<float>({2}, {1, 2, 3}),
                       "typeflow: tensor: 3 values given for shape [2] (2 elements)", ty::error);
  const std::vector<double> values(5, 1.0);
  CHECK_THROWS_WITH_AS(ty::tensor<double>({2, 3}, std::span<const double>(values)),
                       doctest::Contains("5 values given for shape [2,3]"), ty::error);
  CHECK_THROWS_WITH_AS(ty::tensor<float>({2, -3}),
                       doctest::Contains("tensor: negative extent in shape [2,-3]"), ty::error);
  CHECK_THROWS_WITH_AS(ty::tensor_view<double>(std::span<const double>(values), {2, 3}),
                       doctest::Contains("tensor_view: 5 elements do not fill shape [2,3]"),
                       ty::error);
  CHECK_NOTHROW(ty::tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
}

TEST_CASE("tensor::item on a tensor that is not one element") {
  const ty::tensor<float> t({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK_THROWS_WITH_AS(
      t.item(), "typeflow: tensor::item: tensor of shape [2,3] has 6 elements, not 1", ty::error);
  const ty::tensor<float> empty({0});
  CHECK_THROWS_WITH_AS(empty.item(), doctest::Contains("shape [0] has 0 elements, not 1"),
                       ty::error);
  CHECK(ty::tensor<float>({1, 1}, {4}).item() == 4.0f);
  CHECK(ty::tensor<float>(dims{}, {5}).item() == 5.0f);

  ty::session s;
  warm_up(s);
  ty::tensor<float> in({2, 3}, {1, 2, 3, 4, 5, 6});
  auto [out] = s.run(ty::fetch(model), ty::feed(x, in));
  CHECK_THROWS_WITH_AS(out.item(), doctest::Contains("tensor of shape [2,2] has 4 elements"),
                       ty::error);
  check_still_works(s);
}

TEST_CASE("tensor: index out of range") {
  ty::tensor<float> t({2, 3}, {1, 2, 3, 4, 5, 6});
  const auto& ct = t;
  CHECK_THROWS_WITH_AS(t(2, 0), "typeflow: tensor: index 2 out of range on axis 0 of shape [2,3]",
                       ty::error);
  CHECK_THROWS_WITH_AS(ct(0, 3), "typeflow: tensor: index 3 out of range on axis 1 of shape [2,3]",
                       ty::error);
  CHECK_THROWS_WITH_AS(t(-1, 0), doctest::Contains("index -1 out of range on axis 0"), ty::error);
  CHECK_THROWS_WITH_AS(t(1), "typeflow: tensor: 1 indices for shape [2,3]", ty::error);
  CHECK_THROWS_WITH_AS(t(0, 0, 0), doctest::Contains("3 indices for shape [2,3]"), ty::error);
  CHECK_THROWS_WITH_AS(t[6], "typeflow: tensor: flat index 6 out of range for shape [2,3]",
                       ty::error);
  CHECK_THROWS_WITH_AS(ct[-1], doctest::Contains("flat index -1 out of range"), ty::error);
  CHECK(t(1, 2) == 6.0f);
  CHECK(ct[5] == 6.0f);
}

// ---- variables
// -----------------------------------------------------------------------------------

TEST_CASE("session::write with the wrong shape") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> wrong({2, 3}, {9, 9, 9, 9, 9, 9});
  CHECK_THROWS_WITH_AS(s.write(W, wrong),
                       "typeflow: session::write: variable \"W\" has shape [3,2], given [2,3]",
                       ty::error);
  // Same element count, other rank: still rejected.
  ty::tensor<float> flat({6}, {9, 9, 9, 9, 9, 9});
  CHECK_THROWS_WITH_AS(s.write(W, flat), doctest::Contains("has shape [3,2], given [6]"),
                       ty::error);
  check_still_works(s);
  // A variable the session has not seen yet: the failed write does not create it.
  constexpr auto fresh = ty::variable<"fresh", float, ty::shape<2>, ty::fill<3>>;
  CHECK_THROWS_AS(s.write(fresh, ty::tensor<float>({3})), ty::error);
  CHECK(s.read(fresh)[1] == 3.0f);
}

TEST_CASE("a variable name used with two shapes across two runs") {
  constexpr auto W_other_shape = ty::variable<"W", float, ty::shape<2, 3>>;
  constexpr auto W_other_dtype = ty::variable<"W", double, ty::shape<3, 2>, ty::fill<0.5>>;
  ty::session s;
  warm_up(s);
  check_still_works(s); // creates W as float32 [3,2]
  const auto msg = error_of([&] { s.run(ty::fetch(ty::sum(W_other_shape))); });
  check_message(msg, {"variable \"W\"", "[3,2]", "[2,3]"});
  CHECK(
      msg ==
      "typeflow: variable \"W\" exists as float32 [3,2] but this graph declares it float32 [2,3]");
  check_message(
      error_of([&] { s.run(ty::fetch(ty::sum(W_other_dtype))); }),
      {"variable \"W\" exists as float32 [3,2] but this graph declares it float64 [3,2]"});
  check_message(error_of([&] { (void)s.read(W_other_shape); }), {"variable \"W\" exists as"});
  check_message(error_of([&] {
                  s.write(W_other_shape, ty::tensor<float>({2, 3}));
                }),
                {"variable \"W\" exists as"});
  check_message(error_of([&] { s.initialize(W_other_shape); }), {"variable \"W\" exists as"});
  check_still_works(s);

  // In a fresh session the first declaration wins, whichever it is.
  ty::session s2;
  auto [t] = s2.run(ty::fetch(ty::sum(W_other_shape)));
  CHECK(t.item() == 0.0f);
  check_message(
      error_of([&] { (void)s2.read(W); }),
      {"variable \"W\" exists as float32 [2,3] but this graph declares it float32 [3,2]"});
}

// ---- reductions
// ----------------------------------------------------------------------------------

TEST_CASE("argmax over an empty axis") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> none({0, 3});
  CHECK_THROWS_WITH_AS(s.run(ty::fetch(ty::argmax<0>(x)), ty::feed(x, none)),
                       "typeflow: argmax: reduction over an empty axis: [0,3]", ty::error);
  // The other axis is not empty: the result is simply empty.
  auto [r] = s.run(ty::fetch(ty::argmax<1>(x)), ty::feed(x, none));
  CHECK(r.shape() == dims{0});
  // Documented results of the other reductions over an empty axis.
  auto [mx, mn, sm] =
      s.run(ty::fetch(ty::max<0>(x), ty::min<0>(x), ty::sum<0>(x)), ty::feed(x, none));
  CHECK(mx[0] == -std::numeric_limits<float>::infinity());
  CHECK(mn[0] == std::numeric_limits<float>::infinity());
  CHECK(sm[0] == 0.0f);
  ty::tensor<float> in({2, 3}, {1, 9, 3, 4, 5, 6});
  auto [am] = s.run(ty::fetch(ty::argmax<1>(x)), ty::feed(x, in));
  CHECK(am[0] == 1);
  CHECK(am[1] == 2);
  check_still_works(s);
}

TEST_CASE("many errors in a row leave the session usable") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> bad({2, 4}), good({1, 3}, {1, 1, 1});
  for (int i = 0; i < 20; ++i) {
    CHECK_THROWS_AS(s.run(ty::fetch(model, bump_b), ty::feed(x, bad)), ty::error);
    auto [out] = s.run(ty::fetch(model), ty::feed(x, good));
    CHECK(out(0, 0) == doctest::Approx(1.5));
  }
  check_still_works(s);
}

// ---- non-finite values and empty batches in training ------------------------------------------

namespace {
constexpr auto t = ty::placeholder<"t", float, ty::shape<ty::dyn, 2>>;
constexpr auto loss = ty::mean(ty::square(model - t));
constexpr auto train = ty::gradient_descent(ty::constant<0.1f>).minimize(loss);

struct training_state {
  ty::tensor<float> W, b;
  std::int64_t step;
};
training_state state_of(ty::session<>& s) {
  return {s.read(W), s.read(b), s.read(ty::global_step)[0]};
}
void check_unchanged(ty::session<>& s, const training_state& before) {
  const auto now = state_of(s);
  CHECK(now.step == before.step);
  for (std::int64_t i = 0; i < before.W.size(); ++i)
    CHECK(now.W[i] == before.W[i]);
  for (std::int64_t i = 0; i < before.b.size(); ++i)
    CHECK(now.b[i] == before.b[i]);
}
} // namespace

TEST_CASE("check_numerics: a NaN input fails the training step naming a node, commits nothing") {
  ty::session s(ty::session_options{.check_numerics = true});
  warm_up(s);
  ty::tensor<float> in({2, 3}, {1, 2, 3, 4, std::nanf(""), 6}), target({2, 2});
  s.run(ty::fetch(train), ty::feed(x, ty::tensor<float>({2, 3})), ty::feed(t, target));
  const auto before = state_of(s);
  const auto msg = error_of([&] { s.run(ty::fetch(train), ty::feed(x, in), ty::feed(t, target)); });
  check_message(msg, {"check_numerics: ", "has NaN", "(nothing was committed)"});
  check_unchanged(s, before);
  // an Inf in a fetched value
  ty::tensor<float> inf({1, 3}, {1, std::numeric_limits<float>::infinity(), 0});
  check_message(error_of([&] { s.run(ty::fetch(model), ty::feed(x, inf)); }),
                {"check_numerics: ", "has Inf at element"});
  // the same steps with finite data go on training
  s.run(ty::fetch(train), ty::feed(x, ty::tensor<float>({2, 3})), ty::feed(t, target));
  CHECK(state_of(s).step == before.step + 1);
}

TEST_CASE(
    "without check_numerics a NaN input trains into NaN weights (the default costs nothing)") {
  ty::session s;
  ty::tensor<float> in({1, 3}, {std::nanf(""), 0, 0}), target({1, 2});
  s.run(ty::fetch(train), ty::feed(x, in), ty::feed(t, target));
  CHECK(std::isnan(s.read(W)[0]));
}

TEST_CASE("a training step on an empty batch is an error and changes nothing") {
  ty::session s;
  warm_up(s);
  ty::tensor<float> target({2, 2});
  s.run(ty::fetch(train), ty::feed(x, ty::tensor<float>({2, 3})), ty::feed(t, target));
  const auto before = state_of(s);
  std::vector<float> none;
  const auto msg = error_of([&] {
    s.run(ty::fetch(train), ty::feed(x, ty::tensor_view<float>(none.data(), {0, 3})),
          ty::feed(t, ty::tensor_view<float>(none.data(), {0, 2})));
  });
  check_message(msg, {"placeholder \"x\" fed [0,3]", "an empty batch", "assigns variables"});
  check_unchanged(s, before);
  // the loss alone on an empty batch is a run like any other (the mean of nothing is NaN)
  auto [l] = s.run(ty::fetch(loss), ty::feed(x, ty::tensor_view<float>(none.data(), {0, 3})),
                   ty::feed(t, ty::tensor_view<float>(none.data(), {0, 2})));
  CHECK(std::isnan(l.item()));
}
