// Core: dtypes, shapes, and the printed form of expressions.
#include <doctest/doctest.h>

#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

namespace {
constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 784>>;
constexpr auto W = ty::variable<"W", float, ty::shape<784, 10>>;
constexpr auto b = ty::variable<"b", float, ty::shape<10>>;
} // namespace

TEST_SUITE("core") {
  TEST_CASE("dtype names") {
    CHECK(ty::dtype_name<float> == "float32");
    CHECK(ty::dtype_name<double> == "float64");
    CHECK(ty::dtype_name<std::int32_t> == "int32");
    CHECK(ty::dtype_name<std::int64_t> == "int64");
    CHECK(ty::dtype_name<bool> == "bool");
  }

  TEST_CASE("static shapes, dyn and scalars") {
    constexpr auto y = ty::matmul(x, W) + b;
    using Y = decltype(y);
    static_assert(std::is_same_v<Y::shape_type, ty::shape<ty::dyn, 10>>);
    static_assert(std::is_same_v<Y::value_type, float>);
    static_assert(std::is_same_v<decltype(ty::sum(y))::shape_type, ty::shape<>>);
    static_assert(
        std::is_same_v<decltype(ty::sum<1>(y, ty::keepdims))::shape_type, ty::shape<ty::dyn, 1>>);
    static_assert(std::is_same_v<decltype(ty::reshape<-1, 28, 28, 1>(x))::shape_type,
                                 ty::shape<ty::dyn, 28, 28, 1>>);
    static_assert(std::is_same_v<decltype(ty::argmax<1>(y))::value_type, std::int64_t>);
    static_assert(std::is_same_v<decltype(x < ty::constant<0>)::value_type, bool>);
    static_assert(std::is_same_v<decltype(ty::constant<2> * x)::value_type, float>);
    CHECK(ty::dims_string(Y::shape_type::dims) == "[?,10]");
  }

  TEST_CASE("graph identity: the same expression is the same type, names identify variables") {
    // A variable is identified by its name, dtype and shape: declared twice, it is one node, and
    // a graph built from either declaration, by operators or by functions, is one node too.
    constexpr auto W2 = ty::variable<"W", float, ty::shape<784, 10>>;
    static_assert(std::is_same_v<decltype(W), decltype(W2)>);
    constexpr auto by_operators = ty::relu(ty::matmul(x, W) + b);
    constexpr auto by_functions = ty::relu(ty::add(ty::matmul(x, W2), b));
    static_assert(std::is_same_v<decltype(by_operators), decltype(by_functions)>);
    // Another name, another op or another operand order is another node.
    constexpr auto V = ty::variable<"V", float, ty::shape<784, 10>>;
    static_assert(!std::is_same_v<decltype(W), decltype(V)>);
    static_assert(!std::is_same_v<decltype(ty::matmul(x, W)), decltype(ty::matmul(x, V))>);
    static_assert(!std::is_same_v<decltype(ty::relu(x)), decltype(ty::sigmoid(x))>);
    static_assert(!std::is_same_v<decltype(b + ty::matmul(x, W)), decltype(ty::matmul(x, W) + b)>);
    CHECK(ty::to_string(by_functions) == "relu(add(matmul(x, W), b))");
  }

  TEST_CASE("to_string") {
    CHECK(ty::to_string(ty::relu(ty::matmul(x, W) + b)) == "relu(add(matmul(x, W), b))");
    CHECK(ty::to_string(ty::sum<1>(x, ty::keepdims)) == "sum(x, axes=[1], keepdims)");
    CHECK(ty::to_string(ty::matmul<false, true>(W, W)) == "matmul(W, W, transpose_b)");
    CHECK(ty::to_string(-x * ty::constant<0.5>) == "mul(neg(x), 0.5)");
    CHECK(ty::to_string(ty::cast<std::int32_t>(x)) == "cast(x, int32)");
    CHECK(ty::to_string(ty::reshape<-1, 28, 28, 1>(x)) == "reshape(x, [-1,28,28,1])");
    CHECK(ty::to_string(ty::transpose(W)) == "transpose(W, perm=[1,0])");
    CHECK(ty::to_string(ty::full<0, float, ty::shape<2, 3>>) == "full(0, float32, [2,3])");
    CHECK(ty::to_string(ty::group(ty::assign_add(b, ty::constant<1>))) ==
          "group(assign_add(b, 1))");
    CHECK(ty::to_string(ty::slice<ty::ints<0, 1>, ty::ints<-1, 3>>(x)) ==
          "slice(x, begin=[0,1], size=[-1,3])");
  }
}
