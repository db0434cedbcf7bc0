// The fused elementwise kernel on a GPU against the CPU session, float and double, on the
// 16-byte path and the broadcasting path. Without a device it reports "skipped: no CUDA device"
// (CTest counts that as skipped, not passed).
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

// A template with deduced node types: nvcc's host-code generation cannot spell, outside
// templates, types whose template arguments are class-type values (the placeholders' names).
template <class T, class A, class B, class C>
void check_case(const char* what, std::int64_t rows, A x, B y, C z) {
  const std::int64_t cols = B::shape_type::dims[0];
  constexpr auto e = x * y + z * ty::sin(x) - ty::exp(y) / ty::constant<4.0>;
  using P = ty::compile::plan<ty::type_list<decltype(e)>>;
  using R = typename P::template region<P::size - 1>;
  std::vector<T> hx(rows * cols), hy(cols), hz(rows * cols);
  for (std::size_t i = 0; i < hx.size(); ++i) {
    hx[i] = static_cast<T>(std::sin(0.37 * i));
    hz[i] = static_cast<T>(std::cos(0.11 * i));
  }
  for (std::size_t i = 0; i < hy.size(); ++i)
    hy[i] = static_cast<T>(0.01 * i - 0.3);
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

int main() {
  if (cb::device_count() == 0) {
    std::printf("%s\n", cb::no_device_message);
    return 0;
  }
  // Every dyn extent of a run is one extent (the batch): the columns are static.
  check_case<float>("float, broadcast row", 1000,
                    ty::placeholder<"x", float, ty::shape<ty::dyn, 777>>,
                    ty::placeholder<"y", float, ty::shape<777>>,
                    ty::placeholder<"z", float, ty::shape<ty::dyn, 777>>);
  check_case<float>("float, one column (16-byte path)", 4099,
                    ty::placeholder<"x", float, ty::shape<ty::dyn, 1>>,
                    ty::placeholder<"y", float, ty::shape<1>>,
                    ty::placeholder<"z", float, ty::shape<ty::dyn, 1>>);
  check_case<double>("double, broadcast row", 513,
                     ty::placeholder<"x", double, ty::shape<ty::dyn, 64>>,
                     ty::placeholder<"y", double, ty::shape<64>>,
                     ty::placeholder<"z", double, ty::shape<ty::dyn, 64>>);
  return failures == 0 ? 0 : 1;
}
