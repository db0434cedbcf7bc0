// The portable GEMM, used when no BLAS is found: this executable is built without CBLAS.
#undef TYPEFLOW_HAS_CBLAS
#include <doctest/doctest.h>

#include <random>
#include <typeflow/typeflow.hpp>

namespace ty = typeflow;

static_assert(!ty::cpu_backend::has_blas, "this test must exercise the portable GEMM");

namespace {
template <class T>
ty::tensor<T> random_tensor(std::vector<std::int64_t> shape, unsigned seed) {
  ty::tensor<T> t(std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (auto& v : t)
    v = static_cast<T>(dist(gen));
  return t;
}

// C[b,i,j] = sum_p A'[b,i,p] B'[b,p,j] in double, with A' = A^T when ta, B' = B^T when tb.
template <class T>
std::vector<double> reference(const ty::tensor<T>& a, const ty::tensor<T>& b, bool ta, bool tb,
                              std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k) {
  std::vector<double> c(static_cast<std::size_t>(batch * m * n));
  for (std::int64_t q = 0; q < batch; ++q)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double x = ta ? a[q * k * m + p * m + i] : a[q * m * k + i * k + p];
          const double y = tb ? b[q * n * k + j * k + p] : b[q * k * n + p * n + j];
          acc += x * y;
        }
        c[static_cast<std::size_t>(q * m * n + i * n + j)] = acc;
      }
  return c;
}

template <class T>
void check_close(const ty::tensor<T>& got, const std::vector<double>& want, double tol) {
  REQUIRE(static_cast<std::size_t>(got.size()) == want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    CHECK(static_cast<double>(got[static_cast<std::int64_t>(i)]) ==
          doctest::Approx(want[i]).epsilon(tol).scale(1.0));
}
} // namespace

TEST_SUITE("gemm fallback") {
  TEST_CASE("2-D, every transpose combination, float") {
    constexpr auto a = ty::placeholder<"a", float, ty::shape<5, 7>>;
    constexpr auto at = ty::placeholder<"at", float, ty::shape<7, 5>>;
    constexpr auto b = ty::placeholder<"b", float, ty::shape<7, 3>>;
    constexpr auto bt = ty::placeholder<"bt", float, ty::shape<3, 7>>;
    const auto A = random_tensor<float>({5, 7}, 1), AT = random_tensor<float>({7, 5}, 2);
    const auto B = random_tensor<float>({7, 3}, 3), BT = random_tensor<float>({3, 7}, 4);
    ty::session s(ty::session_options{.threads = 2, .seed = 0});
    auto [nn, tn, nt, tt] =
        s.run(ty::fetch(ty::matmul(a, b), ty::matmul<true, false>(at, b),
                        ty::matmul<false, true>(a, bt), ty::matmul<true, true>(at, bt)),
              ty::feed(a, A), ty::feed(at, AT), ty::feed(b, B), ty::feed(bt, BT));
    check_close(nn, reference(A, B, false, false, 1, 5, 3, 7), 1e-5);
    check_close(tn, reference(AT, B, true, false, 1, 5, 3, 7), 1e-5);
    check_close(nt, reference(A, BT, false, true, 1, 5, 3, 7), 1e-5);
    check_close(tt, reference(AT, BT, true, true, 1, 5, 3, 7), 1e-5);
  }

  TEST_CASE("batched, double") {
    constexpr auto a = ty::placeholder<"a", double, ty::shape<ty::dyn, 4, 6>>;
    constexpr auto b = ty::placeholder<"b", double, ty::shape<ty::dyn, 6, 2>>;
    const auto A = random_tensor<double>({3, 4, 6}, 5), B = random_tensor<double>({3, 6, 2}, 6);
    ty::session s;
    auto [c] = s.run(ty::fetch(ty::matmul(a, b)), ty::feed(a, A), ty::feed(b, B));
    CHECK(c.shape() == std::vector<std::int64_t>{3, 4, 2});
    check_close(c, reference(A, B, false, false, 3, 4, 2, 6), 1e-12);
  }
}
