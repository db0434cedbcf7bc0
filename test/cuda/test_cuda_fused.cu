// The fused elementwise kernel on a GPU against the CPU session, float and double, on the
// 16-byte path and the broadcasting path. First, on the host, what needs no device: the plan
// makes the expression one fused region of three inputs, the kernel's element evaluator (the
// same __host__ __device__ function the GPU runs) agrees with a double-precision loop at every
// element, and the launch parameters choose the 16-byte path exactly where every input is
// contiguous or a scalar. A host failure exits 1; only then, without a device, it reports
// "skipped: no CUDA device" (CTest counts that as skipped, not passed).
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "typeflow/backend/cuda/fused.cuh"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
namespace cb = typeflow::cuda_backend;

namespace {

int failures = 0;

template <class T>
struct device_array {
  T* p = nullptr;
  explicit device_array(const std::vector<T>& host) {
    TYPEFLOW_CUDA_CHECK(cudaMalloc(&p, sizeof(T) * host.size()));
    TYPEFLOW_CUDA_CHECK(
        cudaMemcpy(p, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice));
  }
  ~device_array() { cudaFree(p); }
};

// The expression of every case, and its value in double precision.
template <class A, class B, class C>
constexpr auto expression(A x, B y, C z) {
  return x * y + z * ty::sin(x) - ty::exp(y) / ty::constant<4.0>;
}
double reference(double x, double y, double z) {
  return x * y + z * std::sin(x) - std::exp(y) / 4.0;
}
// The inputs of element i (row r, column c): x and z per element, y per column.
double x_at(std::size_t i) {
  return std::sin(0.37 * static_cast<double>(i));
}
double y_at(std::size_t c) {
  return 0.01 * static_cast<double>(c) - 0.3;
}
double z_at(std::size_t i) {
  return std::cos(0.11 * static_cast<double>(i));
}

template <class T>
struct host_buffer {
  T* p;
  explicit host_buffer(std::size_t n)
      : p(static_cast<T*>(std::aligned_alloc(64, (sizeof(T) * n + 63) / 64 * 64))) {}
  ~host_buffer() { std::free(p); }
};

// What needs no device: the region, the evaluator at every element, the launch parameters.
template <class A, class B, class C>
void host_case(const char* what, std::int64_t rows, A x, B y, C z) {
  using T = typename A::value_type;
  const std::int64_t cols = B::shape_type::dims[0];
  constexpr auto e = expression(x, y, z);
  using P = ty::compile::plan<ty::type_list<decltype(e)>>;
  using R = typename P::template region<P::size - 1>;
  using Fd = cb::fused_device<T, typename R::inputs, typename R::members>;
  const int before = failures;
  if (R::inputs::size != 3) {
    std::printf("FAIL %s: the region has %zu inputs, expected 3 (x, y, z)\n", what,
                static_cast<std::size_t>(R::inputs::size));
    ++failures;
    return;
  }
  // Which of x (0), y (1), z (2) each input of the region is.
  std::array<int, 3> role{};
  for (std::size_t k = 0; k < 3; ++k) {
    const std::size_t node = R::input_indices[k];
    role[k] = node == P::template index_c<A>::value   ? 0
              : node == P::template index_c<B>::value ? 1
              : node == P::template index_c<C>::value ? 2
                                                      : -1;
  }
  if (role[0] < 0 || role[1] < 0 || role[2] < 0 || role[0] == role[1] || role[1] == role[2] ||
      role[0] == role[2]) {
    std::printf("FAIL %s: the region's inputs are not x, y and z\n", what);
    ++failures;
    return;
  }
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (std::size_t i = 0; i < static_cast<std::size_t>(rows * cols); ++i) {
    const T in[3] = {static_cast<T>(x_at(i)), static_cast<T>(y_at(i % cols)),
                     static_cast<T>(z_at(i))};
    const double got = Fd::eval(in[role[0]], in[role[1]], in[role[2]]);
    const double want = reference(in[0], in[1], in[2]);
    if (std::abs(got - want) > tol * (1 + std::abs(want))) {
      std::printf("FAIL %s: the evaluator at element %zu: %.17g, double loop %.17g\n", what, i, got,
                  want);
      ++failures;
      return;
    }
  }
  // Launch parameters for 64-byte aligned buffers: the 16-byte path when every input is
  // contiguous like the output or a scalar (one column: y is a scalar), else the strided one.
  host_buffer<T> hx(rows * cols), hy(cols), hz(rows * cols), hout(rows * cols);
  ty::backend::rt_value v[3];
  v[0].data = hx.p;
  v[0].dims = ty::backend::rt_dims::from(ty::dims_t<2>{rows, cols});
  v[1].data = hy.p;
  v[1].dims = ty::backend::rt_dims::from(ty::dims_t<1>{cols});
  v[2].data = hz.p;
  v[2].dims = v[0].dims;
  std::array<const ty::backend::rt_value*, 3> in{&v[role[0]], &v[role[1]], &v[role[2]]};
  const auto p =
      cb::fused_kernel<T, typename R::inputs, typename R::members>::params(hout.p, v[0].dims, in);
  const bool one_column = cols == 1;
  if (p.total != rows * cols || p.vector != one_column) {
    std::printf("FAIL %s: launch parameters: %lld elements (expected %lld), 16-byte path %d "
                "(expected %d)\n",
                what, static_cast<long long>(p.total), static_cast<long long>(rows * cols),
                static_cast<int>(p.vector), static_cast<int>(one_column));
    ++failures;
  }
  for (std::size_t k = 0; k < 3; ++k)
    if (p.scalar[k] != (role[k] == 1 && one_column)) {
      std::printf("FAIL %s: input %zu read as a scalar: %d\n", what, k,
                  static_cast<int>(p.scalar[k]));
      ++failures;
    }
  if (failures == before)
    std::printf("ok %s on the host (%lld x %lld)\n", what, static_cast<long long>(rows),
                static_cast<long long>(cols));
}

// A template with deduced node types: nvcc's host-code generation cannot spell, outside
// templates, types whose template arguments are class-type values (the placeholders' names).
template <class A, class B, class C>
void check_case(const char* what, std::int64_t rows, A x, B y, C z) {
  using T = typename A::value_type;
  const std::int64_t cols = B::shape_type::dims[0];
  constexpr auto e = expression(x, y, z);
  using P = ty::compile::plan<ty::type_list<decltype(e)>>;
  using R = typename P::template region<P::size - 1>;
  std::vector<T> hx(rows * cols), hy(cols), hz(rows * cols);
  for (std::size_t i = 0; i < hx.size(); ++i) {
    hx[i] = static_cast<T>(x_at(i));
    hz[i] = static_cast<T>(z_at(i));
  }
  for (std::size_t i = 0; i < hy.size(); ++i)
    hy[i] = static_cast<T>(y_at(i));
  ty::session<> s;
  auto [want] = s.run(ty::fetch(e), ty::feed(x, ty::tensor_view<T>(hx.data(), {rows, cols})),
                      ty::feed(y, ty::tensor_view<T>(hy.data(), {cols})),
                      ty::feed(z, ty::tensor_view<T>(hz.data(), {rows, cols})));
  device_array<T> dx(hx), dy(hy), dz(hz), dout(std::vector<T>(rows * cols));
  ty::backend::rt_value vx, vy, vz;
  vx.data = dx.p;
  vx.dims = ty::backend::rt_dims::from(ty::dims_t<2>{rows, cols});
  vy.data = dy.p;
  vy.dims = ty::backend::rt_dims::from(ty::dims_t<1>{cols});
  vz.data = dz.p;
  vz.dims = vx.dims;
  std::array<const ty::backend::rt_value*, R::inputs::size> in{};
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::size_t node = R::input_indices[k];
    in[k] = node == P::template index_c<A>::value   ? &vx
            : node == P::template index_c<B>::value ? &vy
                                                    : &vz;
  }
  cb::stream st;
  cb::fused_kernel<T, typename R::inputs, typename R::members>::run(st.get(), dout.p, vx.dims, in);
  st.synchronize();
  std::vector<T> got(rows * cols);
  TYPEFLOW_CUDA_CHECK(
      cudaMemcpy(got.data(), dout.p, sizeof(T) * got.size(), cudaMemcpyDeviceToHost));
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(static_cast<double>(got[i]) - want[static_cast<std::int64_t>(i)]) >
        tol * (1 + std::abs(static_cast<double>(want[static_cast<std::int64_t>(i)])))) {
      std::printf("FAIL %s: element %zu: GPU %.17g, CPU %.17g\n", what, i,
                  static_cast<double>(got[i]),
                  static_cast<double>(want[static_cast<std::int64_t>(i)]));
      ++failures;
      return;
    }
  std::printf("ok %s (%lld x %lld)\n", what, static_cast<long long>(rows),
              static_cast<long long>(cols));
}

} // namespace

// Every case, through `run`: on the host, then on the device. Every dyn extent of a run is one
// extent (the batch): the columns are static.
template <class Run>
void each_case(Run run) {
  run("float, broadcast row", 1000, ty::placeholder<"x", float, ty::shape<ty::dyn, 777>>,
      ty::placeholder<"y", float, ty::shape<777>>,
      ty::placeholder<"z", float, ty::shape<ty::dyn, 777>>);
  run("float, one column (16-byte path)", 4099, ty::placeholder<"x", float, ty::shape<ty::dyn, 1>>,
      ty::placeholder<"y", float, ty::shape<1>>,
      ty::placeholder<"z", float, ty::shape<ty::dyn, 1>>);
  run("double, broadcast row", 513, ty::placeholder<"x", double, ty::shape<ty::dyn, 64>>,
      ty::placeholder<"y", double, ty::shape<64>>,
      ty::placeholder<"z", double, ty::shape<ty::dyn, 64>>);
}

int main() {
  // On the host first: a failure here is a failure, with a device or without.
  each_case([](const char* what, std::int64_t rows, auto x, auto y, auto z) {
    host_case(what, rows, x, y, z);
  });
  if (failures > 0)
    return 1;
  if (cb::device_count() == 0) {
    std::printf("%s\n", cb::no_device_message);
    return 0;
  }
  each_case([](const char* what, std::int64_t rows, auto x, auto y, auto z) {
    check_case(what, rows, x, y, z);
  });
  return failures == 0 ? 0 : 1;
}
