// The CUDA backend's host side, which runs with or without a GPU: checked calls throw
// typeflow::cuda_error naming the call, the file and the line; device discovery never throws;
// the caching allocator's size classes; the fused kernel's parameters (vector path, broadcast
// strides); and the device evaluator of a region, called on the host, against the CPU loop's.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "typeflow/backend/cuda/fused.cuh"
#include "typeflow/backend/cuda/session.cuh"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
namespace cb = typeflow::cuda_backend;

// The graphs are built inside functions: nvcc's host-code generation cannot spell, at namespace
// scope, types whose template arguments are class-type values (the placeholders' names).
namespace {
template <class E>
struct region_of {
  using P = ty::graph::plan<ty::type_list<E>>;
  using R = typename P::template region<P::size - 1>;
  using device_fn = cb::fused_device<typename R::out_type, typename R::inputs, typename R::members>;
  using host_fn =
      ty::cpu_backend::fused_kernel<typename R::out_type, typename R::inputs, typename R::members>;
  using kernel = cb::fused_kernel<typename R::out_type, typename R::inputs, typename R::members>;
};

template <class P, class N>
constexpr std::size_t position_in() {
  if constexpr (P::template contains_c<N>::value)
    return P::template index_c<N>::value;
  else
    return static_cast<std::size_t>(-1);
}

/// The region's input values in its order, given each placeholder's value (the node types are
/// deduced, never spelled: see above).
template <class F, class... N>
std::array<const ty::runtime::rt_value*, F::R::inputs::size>
bind_inputs(std::array<const ty::runtime::rt_value*, sizeof...(N)> vals, N...) {
  const std::size_t at[] = {position_in<typename F::P, N>()...};
  std::array<const ty::runtime::rt_value*, F::R::inputs::size> in{};
  for (std::size_t k = 0; k < in.size(); ++k)
    for (std::size_t j = 0; j < sizeof...(N); ++j)
      if (at[j] == F::R::input_indices[k])
        in[k] = vals[j];
  return in;
}
} // namespace

TEST_CASE("a failing CUDA call throws cuda_error naming the call, file and line") {
  void* p = nullptr;
  try {
    // No driver here: cudaErrorInsufficientDriver; on a GPU: out of memory.
    TYPEFLOW_CUDA_CHECK(cudaMalloc(&p, std::size_t{1} << 60));
    FAIL("cudaMalloc of 2^60 bytes succeeded");
  } catch (const ty::cuda_error& err) {
    const std::string what = err.what();
    INFO(what);
    CHECK(what.find("cudaMalloc(&p, std::size_t{1} << 60)") != std::string::npos);
    CHECK(what.find("test_cuda_runtime.cu:") != std::string::npos);
    CHECK(what.find("cudaError") != std::string::npos);
  }
}

TEST_CASE("device_count is the runtime's count, or 0 where there is no driver") {
  const int n = cb::device_count();
  int raw = 0;
  const bool ok = cudaGetDeviceCount(&raw) == cudaSuccess;
  (void)cudaGetLastError();
  CHECK(n == (ok ? raw : 0)); // the runtime's count, or 0 where the call fails (no driver)
  if (n == 0)
    MESSAGE("no CUDA device here: the device tests report " << cb::no_device_message);
}

TEST_CASE("caching allocator size classes") {
  CHECK(cb::caching_allocator::size_class(1) == 512);
  CHECK(cb::caching_allocator::size_class(512) == 512);
  CHECK(cb::caching_allocator::size_class(513) == 1024);
  CHECK(cb::caching_allocator::size_class((1 << 20) + 1) == (std::size_t{1} << 21));
  CHECK(cb::caching_allocator::size_class(std::size_t{3} << 20) == (std::size_t{1} << 22));
}

namespace {
// Template bodies keep their types as written; nvcc's host-code generation only has to spell
// the deduced arguments at the call, which it can.
template <class A, class B, class C, class D>
void params_case(A a, B b, C c, D d) {
  // a, c: [4, 8]; b: [8] broadcast over rows; d: a scalar.
  alignas(16) static float buf[4][64];
  ty::runtime::rt_value va, vb, vc, vd;
  va.data = buf[0];
  va.dims = ty::runtime::rt_dims::from(ty::dims_t<2>{4, 8});
  vb.data = buf[1];
  vb.dims = ty::runtime::rt_dims::from(ty::dims_t<1>{8});
  vc.data = buf[2];
  vc.dims = va.dims;
  vd.data = buf[3];
  vd.dims = ty::runtime::rt_dims::from(ty::dims_t<0>{});
  alignas(16) static float out[32];
  using F = region_of<decltype(a * b + c * d)>;
  const auto p = F::kernel::params(out, va.dims, bind_inputs<F>({&va, &vb, &vc, &vd}, a, b, c, d));
  CHECK(p.total == 32);
  CHECK(!p.vector); // b is broadcast along rows: neither contiguous like the output nor scalar
  using G = region_of<decltype(a * c + d)>;
  const auto in2 = bind_inputs<G>({&va, &vc, &vd}, a, c, d);
  const auto q = G::kernel::params(out, va.dims, in2);
  CHECK(q.vector);
  CHECK(q.groups == 1); // coalesced into one axis of 32
  CHECK(q.dims[0] == 32);
  const auto r = G::kernel::params(out + 1, va.dims, in2); // misaligned output
  CHECK(!r.vector);
}

template <class A, class B, class C, class D>
void eval_case(A a, B b, C c, D d) {
  using F = region_of<decltype(a * b + c * ty::sin(d) - ty::exp(a) / ty::constant<4.0>)>;
  static_assert(F::R::inputs::size == 4);
  for (float x : {-2.0f, -0.5f, 0.0f, 0.25f, 1.5f})
    for (float y : {-1.0f, 0.5f, 3.0f}) {
      const float got = F::device_fn::eval(x, y, x + y, y * 0.5f);
      const float want = F::host_fn::eval(x, y, x + y, y * 0.5f);
      CHECK(got == want);
    }
}
} // namespace

TEST_CASE("fused kernel parameters: broadcast strides and the 16-byte path") {
  constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn, 8>>;
  constexpr auto b = ty::placeholder<"b", float, ty::shape<8>>;
  constexpr auto c = ty::placeholder<"c", float, ty::shape<ty::dyn, 8>>;
  constexpr auto d = ty::placeholder<"d", float, ty::shape<>>;
  params_case(a, b, c, d);
}

TEST_CASE("the device evaluator computes what the CPU loop computes (on the host)") {
  constexpr auto a = ty::placeholder<"a", float, ty::shape<ty::dyn, 8>>;
  constexpr auto b = ty::placeholder<"b", float, ty::shape<8>>;
  constexpr auto c = ty::placeholder<"c", float, ty::shape<ty::dyn, 8>>;
  constexpr auto d = ty::placeholder<"d", float, ty::shape<>>;
  eval_case(a, b, c, d);
}

namespace {
template <class X, class W, class B>
void placement_case(X x, W w, B b) {
  constexpr auto h = ty::tanh(ty::matmul(x, w) + b);
  constexpr auto mm = ty::matmul(x, w);
  constexpr auto total = ty::argmax<1>(h);
  using P = ty::graph::plan<ty::type_list<decltype(total)>, ty::on<ty::gpu<0>>>;
  // With the CUDA backend the fused region (add, tanh) and matmul (cuBLAS) run on the GPU;
  // argmax and the leaves have no GPU kernel yet and run on the CPU by soft placement.
  CHECK(P::placement.device[P::template index_c<decltype(h)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(P::placement.device[P::template index_c<decltype(mm)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(P::placement.device[P::template index_c<decltype(total)>::value] == ty::id_of<ty::cpu<0>>);
  CHECK(P::placement.device[P::template index_c<W>::value] == ty::id_of<ty::cpu<0>>);
  // x, w and b go to the GPU; h comes back for the argmax.
  CHECK(P::transfers == 4);
}
} // namespace

TEST_CASE("with the CUDA backend, fused regions are placed on the GPU") {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 16>>;
  constexpr auto w = ty::variable<"w", float, ty::shape<16, 16>>;
  constexpr auto b = ty::variable<"b", float, ty::shape<16>>;
  placement_case(x, w, b);
}

TEST_CASE("reduction parameters: kept and reduced axes with their strides") {
  ty::runtime::rt_dims d = ty::runtime::rt_dims::from(ty::dims_t<3>{2, 3, 4});
  const auto p =
      cb::make_reduce_params(nullptr, nullptr, d, std::array<bool, 3>{true, false, true});
  CHECK(p.out_n == 3);
  CHECK(p.red_n == 8);
  REQUIRE(p.kept_rank == 1);
  CHECK(p.kept_dims[0] == 3);
  CHECK(p.kept_strides[0] == 4);
  REQUIRE(p.red_rank == 2);
  CHECK(p.red_dims[0] == 2);
  CHECK(p.red_strides[0] == 12);
  CHECK(p.red_dims[1] == 4);
  CHECK(p.red_strides[1] == 1);
  // combiner: NaN propagates through max from either side.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(cb::combiner<ty::ops::reducers::max>{}(nan, 1.0)));
  CHECK(std::isnan(cb::combiner<ty::ops::reducers::max>{}(1.0, nan)));
  CHECK(cb::combiner<ty::ops::reducers::min>{}(2.0, -1.0) == -1.0);
}

namespace {
template <class X, class Y>
void conv_placement_case(X x, Y y) {
  constexpr auto conv = ty::conv2d_layer<"conv", 3, 3, 8>(x);
  constexpr auto pool = ty::max_pool<ty::padding::same, 2>(ty::relu(conv));
  constexpr auto logits = ty::dense<"fc", 10>(ty::reshape<-1, 4 * 4 * 8>(pool));
  constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));
  constexpr auto cw = ty::find_variable<"conv/weights">(loss);
  constexpr auto gw = ty::grad(loss, cw);
  using P = ty::graph::plan<ty::type_list<decltype(gw)>, ty::on<ty::gpu<0>>>;
  // Every op of the model and of its gradient has a GPU kernel except element_count (the mean's
  // divisor, a host scalar) and sum_to_like: count the nodes left on the CPU that are not leaves.
  std::size_t on_cpu = 0;
  const char* names[P::size];
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((names[I] = P::template node<I>::op::name.data()), ...);
  }
  (std::make_index_sequence<P::size>{});
  std::string left;
  for (std::size_t i = 0; i < P::size; ++i)
    if (P::placement.device[i].is_cpu && P::fact.edge_begin[i] != P::fact.edge_begin[i + 1]) {
      ++on_cpu;
      left += std::string(names[i]) + " ";
    }
  INFO("ops left on the CPU: " << left);
  CHECK(P::placement.device[P::template index_c<decltype(conv)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(P::placement.device[P::template index_c<decltype(pool)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(on_cpu <= 2);
}
} // namespace

TEST_CASE("with the CUDA backend, a convolutional model and its gradient run on the GPU") {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 8, 8, 3>>;
  constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<ty::dyn>>;
  conv_placement_case(x, y);
}
