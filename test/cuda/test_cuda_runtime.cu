// The CUDA backend's host side, which runs with or without a GPU: checked calls throw
// typeflow::cuda_error naming the call, the file and the line; device discovery never throws;
// the caching allocator's size classes; the fused kernel's parameters (vector path, broadcast
// strides); the device evaluator of a region, called on the host, against the CPU loop's; the
// placement of the ops with GPU kernels; and the index arithmetic of the layout, argmax and
// dropout kernels (backend/cuda/layout.cuh), run on the host against the CPU kernels, and of the
// window kernels (im2col, col2im, pooling: backend/cuda/nn.cuh) against naive loops.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "typeflow/backend/cuda/fused.cuh"
#include "typeflow/backend/cuda/layout.cuh"
#include "typeflow/backend/cuda/nn.cuh"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
namespace cb = typeflow::cuda_backend;

// The graphs are built inside functions: nvcc's host-code generation cannot spell, at namespace
// scope, types whose template arguments are class-type values (the placeholders' names).
namespace {
template <class E>
struct region_of {
  using P = ty::compile::plan<ty::type_list<E>>;
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
std::array<const ty::backend::rt_value*, F::R::inputs::size>
bind_inputs(std::array<const ty::backend::rt_value*, sizeof...(N)> vals, N...) {
  const std::size_t at[] = {position_in<typename F::P, N>()...};
  std::array<const ty::backend::rt_value*, F::R::inputs::size> in{};
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
  ty::backend::rt_value va, vb, vc, vd;
  va.data = buf[0];
  va.dims = ty::backend::rt_dims::from(ty::dims_t<2>{4, 8});
  vb.data = buf[1];
  vb.dims = ty::backend::rt_dims::from(ty::dims_t<1>{8});
  vc.data = buf[2];
  vc.dims = va.dims;
  vd.data = buf[3];
  vd.dims = ty::backend::rt_dims::from(ty::dims_t<0>{});
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
  using P = ty::compile::plan<ty::type_list<decltype(total)>, ty::on<ty::gpu<0>>>;
  // With the CUDA backend the fused region (add, tanh), matmul (cuBLAS) and argmax run on the
  // GPU; the placeholder stays on the CPU.
  CHECK(P::placement.device[P::template index_c<decltype(h)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(P::placement.device[P::template index_c<decltype(mm)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(P::placement.device[P::template index_c<decltype(total)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(P::placement.device[P::template index_c<X>::value] == ty::id_of<ty::cpu<0>>);
}
} // namespace

TEST_CASE("with the CUDA backend, fused regions are placed on the GPU") {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 16>>;
  constexpr auto w = ty::variable<"w", float, ty::shape<16, 16>>;
  constexpr auto b = ty::variable<"b", float, ty::shape<16>>;
  placement_case(x, w, b);
}

TEST_CASE("reduction parameters: kept and reduced axes with their strides") {
  ty::backend::rt_dims d = ty::backend::rt_dims::from(ty::dims_t<3>{2, 3, 4});
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
  using P = ty::compile::plan<ty::type_list<decltype(gw)>, ty::on<ty::gpu<0>>>;
  // Every op of the model and of its gradient has a GPU kernel (element_count, the mean's
  // divisor, and sum_to_like included): no node but the leaves is left on the CPU.
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
  CHECK(on_cpu == 0);
}
} // namespace

TEST_CASE("with the CUDA backend, a convolutional model and its gradient run on the GPU") {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 8, 8, 3>>;
  constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<ty::dyn>>;
  conv_placement_case(x, y);
}

// ---- layout.cuh: placement, and the kernels' index arithmetic on the host ---------------------

// The layout ops, argmax, element_count, sum_to_like and dropout have GPU kernels (checked by the
// compiler: a missing kernel fails the build of this test).
namespace layout_kernels {
using ty::has_gpu_kernel;
static_assert(has_gpu_kernel<ty::ops::transpose<1, 0>>);
static_assert(has_gpu_kernel<ty::ops::slice<ty::ints<0, 1>, ty::ints<2, -1>>>);
static_assert(has_gpu_kernel<ty::ops::slice_like<ty::ints<0, 1>>>);
static_assert(has_gpu_kernel<ty::ops::pad_like<ty::ints<0, 1>>>);
static_assert(has_gpu_kernel<ty::ops::concat<-1>>);
static_assert(has_gpu_kernel<ty::ops::reduce<ty::ops::reducers::argmax, false, 1>>);
static_assert(has_gpu_kernel<ty::ops::reduce<ty::ops::reducers::argmax, true, 0>>);
static_assert(has_gpu_kernel<ty::ops::reduce<ty::ops::reducers::sum, false, 0>>);
static_assert(has_gpu_kernel<ty::ops::element_count<0, 1>>);
static_assert(has_gpu_kernel<ty::ops::sum_to_like>);
static_assert(has_gpu_kernel<ty::ops::dropout_mask<7>>);
} // namespace layout_kernels

namespace {
/// The nodes of P left on the CPU by soft placement that are not leaves.
template <class P>
std::string fell_back_ops() {
  std::string left;
  for (std::size_t i = 0; i < P::size; ++i)
    if (P::placement.fell_back[i] && P::fact.edge_begin[i] != P::fact.edge_begin[i + 1])
      left += P::node_string(i) + "; ";
  return left;
}

template <class X, class Y, class K>
void layout_placement_case(X x, Y y, K keep) {
  constexpr auto t =
      ty::transpose<1, 0, 2>(x) + ty::slice<ty::ints<0, 1, 0>, ty::ints<-1, 4, 5>>(y);
  constexpr auto c = ty::concat<1>(t, x, ty::dropout<3>(y, keep));
  constexpr auto a = ty::argmax<2>(c);
  constexpr auto loss = ty::mean(ty::square(c));
  constexpr auto g = ty::grad(loss, x, y);
  using P = ty::compile::plan<
      ty::type_list<decltype(a), decltype(ty::get<0>(g)), decltype(ty::get<1>(g))>,
      ty::on<ty::gpu<0>>>;
  INFO("ops left on the CPU: " << fell_back_ops<P>());
  CHECK(fell_back_ops<P>().empty());
  CHECK(P::placement.device[P::template index_c<decltype(c)>::value] == ty::id_of<ty::gpu<0>>);
  CHECK(P::placement.device[P::template index_c<decltype(a)>::value] == ty::id_of<ty::gpu<0>>);
}
} // namespace

TEST_CASE("transpose, slice, concat, dropout, argmax and their gradients are placed on the GPU") {
  constexpr auto x = ty::placeholder<"x", float, ty::shape<4, ty::dyn, 5>>;
  constexpr auto y = ty::placeholder<"y", float, ty::shape<ty::dyn, 6, 5>>;
  constexpr auto keep = ty::placeholder<"keep", float, ty::shape<>>;
  layout_placement_case(x, y, keep);
}

namespace {
ty::backend::rt_dims dims_of(std::vector<std::int64_t> d) {
  ty::backend::rt_dims r;
  r.rank = d.size();
  for (std::size_t i = 0; i < d.size(); ++i)
    r.d[i] = d[i];
  return r;
}
std::vector<float> iota_values(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}
std::vector<float> emulate_gather(const float* in, const cb::gather_params& p) {
  std::vector<float> out(static_cast<std::size_t>(p.total));
  for (std::int64_t i = 0; i < p.total; ++i)
    out[static_cast<std::size_t>(i)] = in[cb::gather_offset(p, i)];
  return out;
}
} // namespace

TEST_CASE("the gather of transpose and slice matches the CPU kernels (emulated on the host)") {
  ty::cpu_backend::thread_pool pool(1);
  // Every permutation of a rank-4 input with an extent-1 axis, and of one without.
  for (const auto& d :
       {std::vector<std::int64_t>{3, 1, 4, 5}, std::vector<std::int64_t>{2, 3, 4, 5}}) {
    const auto id = dims_of(d);
    const auto in = iota_values(id.numel());
    std::array<std::int64_t, 4> perm{0, 1, 2, 3};
    do {
      const auto od = dims_of({d[perm[0]], d[perm[1]], d[perm[2]], d[perm[3]]});
      std::vector<float> want(static_cast<std::size_t>(od.numel()));
      ty::cpu_backend::transpose(pool, in.data(), id, perm, want.data(), od);
      const auto p = cb::make_transpose_params(id, perm, od);
      INFO("perm " << perm[0] << perm[1] << perm[2] << perm[3] << " of " << id.str());
      CHECK(emulate_gather(in.data(), p) == want);
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  // The identity permutation is one contiguous axis.
  const auto id = dims_of({2, 3, 4});
  CHECK(cb::make_transpose_params(id, std::array<std::int64_t, 3>{0, 1, 2}, id).rank == 1);
  CHECK(cb::make_transpose_params(id, std::array<std::int64_t, 3>{0, 2, 1}, dims_of({2, 4, 3}))
            .rank == 3);

  // Slices: full inner axes coalesce with the axis above them.
  const auto sd = dims_of({4, 6, 5, 3});
  const auto in = iota_values(sd.numel());
  const std::array<std::int64_t, 4> begins[] = {
      {0, 0, 0, 0}, {1, 2, 0, 0}, {3, 5, 4, 2}, {1, 0, 2, 1}};
  const std::vector<std::int64_t> sizes[] = {
      {4, 6, 5, 3}, {2, 3, 5, 3}, {1, 1, 1, 1}, {3, 6, 2, 2}};
  for (std::size_t k = 0; k < 4; ++k) {
    const auto od = dims_of(sizes[k]);
    std::vector<float> want(static_cast<std::size_t>(od.numel()));
    ty::cpu_backend::slice(pool, in.data(), sd, begins[k], want.data(), od);
    std::int64_t offset = -1;
    const auto p = cb::make_slice_params(sd, begins[k], od, offset);
    INFO("slice " << k);
    CHECK(emulate_gather(in.data() + offset, p) == want);
    if (k == 1)
      CHECK(p.rank == 2); // [2, 3*5*3]
  }
}

TEST_CASE("pad_like's gather matches the CPU pad (emulated on the host)") {
  const auto od = dims_of({4, 6, 5});
  const std::array<std::int64_t, 3> begins[] = {{0, 0, 0}, {1, 2, 3}, {3, 5, 4}, {0, 1, 0}};
  const std::vector<std::int64_t> sizes[] = {{4, 6, 5}, {2, 3, 2}, {1, 1, 1}, {4, 5, 5}};
  for (std::size_t k = 0; k < 4; ++k) {
    const auto id = dims_of(sizes[k]);
    const auto in = iota_values(id.numel());
    std::vector<float> want(static_cast<std::size_t>(od.numel()), -1.0f);
    ty::cpu_backend::pad(in.data(), id, begins[k], want.data(), od);
    const auto p = cb::make_pad_params(id, begins[k], od);
    std::vector<float> got(static_cast<std::size_t>(p.total));
    for (std::int64_t i = 0; i < p.total; ++i) {
      const std::int64_t src = cb::pad_source(p, i);
      got[static_cast<std::size_t>(i)] = src < 0 ? 0.0f : in[static_cast<std::size_t>(src)];
    }
    INFO("pad " << k);
    CHECK(got == want);
  }
}

namespace {
/// argmax_rows_kernel on the host: 32 lanes, then __shfl_down_sync's tree (a lane whose source is
/// out of range reads its own value).
template <class T>
std::int64_t emulate_warp_argmax(const T* row, std::int64_t n) {
  T best[32];
  std::int64_t arg[32];
  for (int l = 0; l < 32; ++l)
    cb::argmax_lane(row, n, l, 32, best[l], arg[l]);
  for (int d = 16; d > 0; d /= 2) {
    T nb[32];
    std::int64_t na[32];
    for (int l = 0; l < 32; ++l) {
      const int src = l + d < 32 ? l + d : l;
      nb[l] = best[l];
      na[l] = arg[l];
      if (cb::argmax_precedes(best[src], arg[src], best[l], arg[l])) {
        nb[l] = best[src];
        na[l] = arg[src];
      }
    }
    std::copy(nb, nb + 32, best);
    std::copy(na, na + 32, arg);
  }
  return arg[0];
}
} // namespace

TEST_CASE("argmax on the GPU's terms: a thread per output and a warp per row, as the CPU") {
  ty::cpu_backend::thread_pool pool(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Rows of 7 and of 200: ties, NaNs first, later, twice, -inf only, signed zeros.
  for (std::int64_t n : {7, 31, 32, 33, 200}) {
    const std::int64_t rows = 9;
    std::vector<float> v(static_cast<std::size_t>(rows * n));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < n; ++k)
        v[static_cast<std::size_t>(r * n + k)] = static_cast<float>((k * 13 + r * 5) % 11);
    auto at = [&](std::int64_t r, std::int64_t k) -> float& {
      return v[static_cast<std::size_t>(r * n + k % n)];
    };
    at(1, 0) = nan;
    at(2, n / 2) = nan;
    at(3, n - 1) = nan;
    at(3, 3) = nan;
    for (std::int64_t k = 0; k < n; ++k)
      at(4, k) = -inf;
    for (std::int64_t k = 0; k < n; ++k)
      at(5, k) = (k % 2) ? 0.0f : -0.0f;
    at(6, 5) = 20;
    at(6, n - 2) = 20;
    at(7, 1) = inf;
    at(7, n - 3) = inf;
    std::vector<std::int64_t> want(static_cast<std::size_t>(rows));
    ty::cpu_backend::reduce<ty::ops::reducers::argmax>(
        pool, v.data(), dims_of({rows, n}), std::array<bool, 2>{false, true}, want.data());
    std::vector<std::int64_t> want0(static_cast<std::size_t>(n));
    ty::cpu_backend::reduce<ty::ops::reducers::argmax>(
        pool, v.data(), dims_of({rows, n}), std::array<bool, 2>{true, false}, want0.data());
    const auto view1 = cb::argmax_view(dims_of({rows, n}), std::array<bool, 2>{false, true});
    CHECK(view1.k1 == rows);
    CHECK(view1.rn == n);
    CHECK(view1.k2 == 1);
    CHECK(cb::argmax_by_warps(view1) == (n >= 64));
    for (std::int64_t r = 0; r < rows; ++r) {
      INFO("row " << r << " of " << n);
      CHECK(cb::argmax_scan(v.data() + r * n, n, 1) == want[static_cast<std::size_t>(r)]);
      CHECK(emulate_warp_argmax(v.data() + r * n, n) == want[static_cast<std::size_t>(r)]);
    }
    for (std::int64_t c = 0; c < n; ++c)
      CHECK(cb::argmax_scan(v.data() + c, rows, n) == want0[static_cast<std::size_t>(c)]);
  }
  const auto v3 =
      cb::argmax_view(dims_of({2, 3, 4, 5}), std::array<bool, 4>{false, false, true, false});
  CHECK(v3.k1 == 6);
  CHECK(v3.rn == 4);
  CHECK(v3.k2 == 5);
}

TEST_CASE("the dropout hash is shared: the masks are those drawn before it was") {
  // Masks of 64 elements recorded from the CPU kernel before its hash became TYPEFLOW_HD
  // functions; the GPU kernel draws element i as dropout_uniform(base, i) < keep.
  struct drawn {
    std::uint64_t seed, run;
    double keep;
    std::uint64_t kept_bits;
  };
  ty::cpu_backend::thread_pool pool(2);
  for (const drawn& d :
       {drawn{7, 1, 0.5, 0x5553e8c924e63dc5ULL}, drawn{42, 3, 0.8, 0xafa9bff6f7dfffa3ULL},
        drawn{0, 0, 0.3, 0x2044062493008a03ULL}}) {
    float mask[64];
    ty::cpu_backend::dropout_mask(pool, d.seed, d.run, d.keep, 64, mask);
    const std::uint64_t base = ty::backend::dropout_base(d.seed, d.run);
    std::uint64_t cpu_bits = 0, kernel_bits = 0;
    for (int i = 0; i < 64; ++i) {
      if (mask[i] != 0.0f) {
        cpu_bits |= std::uint64_t{1} << i;
        CHECK(mask[i] == static_cast<float>(1.0 / d.keep));
      }
      if (ty::backend::dropout_uniform(base, i) < d.keep)
        kernel_bits |= std::uint64_t{1} << i;
    }
    CHECK(cpu_bits == d.kept_bits);
    CHECK(kernel_bits == d.kept_bits);
  }
  CHECK_THROWS_WITH(ty::backend::check_keep_prob(0.0),
                    "typeflow: dropout: keep_prob must be in (0, 1], got 0.000000");
  CHECK_NOTHROW(ty::backend::check_keep_prob(1.0));
}

TEST_CASE("fast_divider divides exactly below 2^31 (the window kernels' 32-bit index math)") {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::vector<std::int64_t> divisors{1,
                                     2,
                                     3,
                                     5,
                                     7,
                                     25,
                                     32,
                                     800,
                                     3136,
                                     65535,
                                     65536,
                                     1000003,
                                     (std::int64_t{1} << 30) + 1,
                                     (std::int64_t{1} << 31) - 1};
  for (int k = 0; k < 200; ++k)
    divisors.push_back(static_cast<std::int64_t>(next() % ((std::uint64_t{1} << 31) - 1)) + 1);
  for (const std::int64_t d : divisors) {
    const cb::fast_divider f(d);
    std::vector<std::uint32_t> ns{0, 1, static_cast<std::uint32_t>(d - 1),
                                  static_cast<std::uint32_t>(d), (1u << 31) - 1};
    if (d < (std::int64_t{1} << 30))
      ns.push_back(static_cast<std::uint32_t>(2 * d - 1));
    for (int k = 0; k < 500; ++k)
      ns.push_back(static_cast<std::uint32_t>(next() % (1u << 31)));
    for (const std::uint32_t n : ns) {
      INFO(n << " / " << d);
      CHECK(f.div(n) == static_cast<std::uint32_t>(n / static_cast<std::uint64_t>(d)));
    }
  }
}

namespace {
struct same_window {
  static constexpr auto pad = ty::padding::same;
};
struct valid_window {
  static constexpr auto pad = ty::padding::valid;
};

/// Every element of a window function, with 32-bit and 64-bit indices.
template <class F>
std::vector<double> all_of(F f, const ty::backend::window2d& g, std::int64_t n) {
  std::vector<double> out(static_cast<std::size_t>(n));
  const cb::window_dividers<std::uint32_t> narrow(g);
  const cb::window_dividers<std::int64_t> wide(g);
  for (std::int64_t i = 0; i < n; ++i) {
    out[static_cast<std::size_t>(i)] = f(narrow, static_cast<std::uint32_t>(i));
    CHECK(f(wide, i) == out[static_cast<std::size_t>(i)]);
  }
  return out;
}
} // namespace

TEST_CASE("im2col, col2im and pooling: the GPU's index arithmetic against naive loops (on the "
          "host)") {
  using ty::backend::window2d;
  struct geometry {
    bool same;
    std::int64_t n, h, w, c, kh, kw, sh, sw, dh, dw;
  };
  // SAME and VALID; strided, dilated; an odd SAME padding (the extra row after); the seed's
  // 5x5 convolution and 2x2 pool.
  const geometry geometries[] = {
      {true, 2, 9, 10, 3, 3, 3, 1, 1, 1, 1},  {true, 2, 9, 10, 3, 3, 3, 2, 2, 1, 1},
      {false, 2, 9, 10, 3, 3, 2, 2, 3, 1, 1}, {true, 1, 9, 10, 2, 3, 3, 2, 1, 1, 2},
      {false, 1, 9, 10, 2, 3, 2, 1, 1, 2, 3}, {true, 2, 14, 14, 4, 5, 5, 1, 1, 1, 1},
      {true, 2, 14, 14, 4, 2, 2, 2, 2, 1, 1}, {true, 1, 7, 7, 3, 3, 3, 2, 2, 1, 1},
      {false, 1, 9, 10, 8, 3, 2, 2, 1, 1, 2}};
  for (const auto& q : geometries) {
    const auto x = dims_of({q.n, q.h, q.w, q.c});
    const window2d g =
        q.same ? ty::backend::window_of<same_window>(x, q.kh, q.kw, 4, q.sh, q.sw, q.dh, q.dw)
               : ty::backend::window_of<valid_window>(x, q.kh, q.kw, 4, q.sh, q.sw, q.dh, q.dw);
    INFO("input " << x.str() << " window " << q.kh << "x" << q.kw << " strides " << q.sh << "x"
                  << q.sw << " dilations " << q.dh << "x" << q.dw << (q.same ? " SAME" : " VALID"));
    // Small integers with ties: every sum below is exact whatever its order.
    std::vector<double> xv(static_cast<std::size_t>(x.numel()));
    for (std::size_t i = 0; i < xv.size(); ++i)
      xv[i] = static_cast<double>((i * 7) % 5) - 2;
    auto at = [&](std::int64_t b, std::int64_t iy, std::int64_t ix, std::int64_t ci) {
      return ((b * g.h + iy) * g.w + ix) * g.c + ci;
    };
    // im2col and its adjoint col2im (a scatter-add of the patches).
    const std::int64_t rows = g.rows(), patch = g.patch();
    std::vector<double> col_ref(static_cast<std::size_t>(rows * patch), 0.0);
    std::vector<double> colv(col_ref.size());
    for (std::size_t i = 0; i < colv.size(); ++i)
      colv[i] = static_cast<double>((i * 3) % 7) - 3;
    std::vector<double> dx_ref(xv.size(), 0.0);
    for (std::int64_t b = 0; b < g.n; ++b)
      for (std::int64_t oy = 0; oy < g.oh; ++oy)
        for (std::int64_t ox = 0; ox < g.ow; ++ox)
          for (std::int64_t ky = 0; ky < g.kh; ++ky)
            for (std::int64_t kx = 0; kx < g.kw; ++kx)
              for (std::int64_t ci = 0; ci < g.c; ++ci) {
                const std::int64_t r = (b * g.oh + oy) * g.ow + ox, p = (ky * g.kw + kx) * g.c + ci;
                const std::int64_t iy = oy * g.sh - g.ph + ky * g.dh,
                                   ix = ox * g.sw - g.pw + kx * g.dw;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                  continue;
                col_ref[static_cast<std::size_t>(r * patch + p)] =
                    xv[static_cast<std::size_t>(at(b, iy, ix, ci))];
                dx_ref[static_cast<std::size_t>(at(b, iy, ix, ci))] +=
                    colv[static_cast<std::size_t>(r * patch + p)];
              }
    CHECK(all_of(cb::im2col_fn<double>{xv.data(), g}, g, rows * patch) == col_ref);
    CHECK(all_of(cb::col2im_fn<double>{colv.data(), g}, g, x.numel()) == dx_ref);
    // The same V channels at a time (the GPU's 16-byte lanes), V the largest of 4, 2, 1 that
    // divides the channels.
    const int v = g.c % 4 == 0 ? 4 : g.c % 2 == 0 ? 2 : 1;
    INFO("lanes of " << v);
    const cb::window_dividers<std::uint32_t> dv(g);
    auto lanes_match = [&](auto lanes_of, std::int64_t n, const std::vector<double>& ref) {
      bool same = true;
      for (std::int64_t i = 0; i < n; i += v) {
        const auto got = lanes_of(static_cast<std::uint32_t>(i));
        for (int k = 0; k < v; ++k)
          same = same && got[k] == ref[static_cast<std::size_t>(i + k)];
      }
      return same;
    };
    auto as_vector = [](const auto& l) {
      return std::vector<double>(std::begin(l.v), std::end(l.v));
    };
    auto im2col_lanes = [&](std::uint32_t i) {
      return v == 4   ? as_vector(cb::im2col_lanes_at<4, double>(xv.data(), g, dv, i))
             : v == 2 ? as_vector(cb::im2col_lanes_at<2, double>(xv.data(), g, dv, i))
                      : as_vector(cb::im2col_lanes_at<1, double>(xv.data(), g, dv, i));
    };
    auto col2im_lanes = [&](std::uint32_t i) {
      return v == 4   ? as_vector(cb::col2im_lanes_at<4>(colv.data(), g, dv, i))
             : v == 2 ? as_vector(cb::col2im_lanes_at<2>(colv.data(), g, dv, i))
                      : as_vector(cb::col2im_lanes_at<1>(colv.data(), g, dv, i));
    };
    CHECK(lanes_match(im2col_lanes, rows * patch, col_ref));
    CHECK(lanes_match(col2im_lanes, x.numel(), dx_ref));
    // Pooling over the same window (no dilation: pools have none).
    if (q.dh != 1 || q.dw != 1)
      continue;
    const std::int64_t outputs = g.n * g.oh * g.ow * g.c;
    std::vector<double> dyv(static_cast<std::size_t>(outputs));
    for (std::size_t i = 0; i < dyv.size(); ++i)
      dyv[i] = static_cast<double>((i * 5) % 9) - 4;
    std::vector<double> max_ref(dyv.size()), avg_ref(dyv.size()), dmax_ref(xv.size(), 0.0),
        davg_ref(xv.size(), 0.0);
    for (std::int64_t b = 0; b < g.n; ++b)
      for (std::int64_t oy = 0; oy < g.oh; ++oy)
        for (std::int64_t ox = 0; ox < g.ow; ++ox)
          for (std::int64_t ci = 0; ci < g.c; ++ci) {
            const auto o = static_cast<std::size_t>(((b * g.oh + oy) * g.ow + ox) * g.c + ci);
            double best = -INFINITY, sum = 0;
            std::int64_t best_at = -1, count = 0;
            for (std::int64_t iy = oy * g.sh - g.ph; iy < oy * g.sh - g.ph + g.kh; ++iy)
              for (std::int64_t ix = ox * g.sw - g.pw; ix < ox * g.sw - g.pw + g.kw; ++ix) {
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w)
                  continue;
                const double v = xv[static_cast<std::size_t>(at(b, iy, ix, ci))];
                if (best_at < 0 || v > best) {
                  best = v;
                  best_at = at(b, iy, ix, ci);
                }
                sum += v;
                ++count;
              }
            max_ref[o] = best;
            avg_ref[o] = sum / static_cast<double>(count > 0 ? count : 1);
            if (best_at >= 0)
              dmax_ref[static_cast<std::size_t>(best_at)] += dyv[o];
            for (std::int64_t iy = oy * g.sh - g.ph; iy < oy * g.sh - g.ph + g.kh; ++iy)
              for (std::int64_t ix = ox * g.sw - g.pw; ix < ox * g.sw - g.pw + g.kw; ++ix)
                if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
                  davg_ref[static_cast<std::size_t>(at(b, iy, ix, ci))] +=
                      dyv[o] / static_cast<double>(count);
          }
    CHECK(all_of(cb::pool_forward_fn<true, double>{xv.data(), g}, g, outputs) == max_ref);
    const auto avg = all_of(cb::pool_forward_fn<false, double>{xv.data(), g}, g, outputs);
    const auto dmax =
        all_of(cb::pool_backward_fn<true, double>{xv.data(), dyv.data(), g}, g, x.numel());
    const auto davg =
        all_of(cb::pool_backward_fn<false, double>{xv.data(), dyv.data(), g}, g, x.numel());
    CHECK(dmax == dmax_ref);
    for (std::size_t i = 0; i < avg.size(); ++i)
      CHECK(avg[i] == doctest::Approx(avg_ref[i]).epsilon(1e-12));
    for (std::size_t i = 0; i < davg.size(); ++i)
      CHECK(davg[i] == doctest::Approx(davg_ref[i]).epsilon(1e-12));
    // The pool gradients V channels at a time: each lane as one channel alone, bit for bit.
    auto pool_lanes = [&]<bool Max>(std::uint32_t i) {
      return v == 4 ? as_vector(cb::pool_backward_lanes_at<4, Max, double>(xv.data(), dyv.data(), g,
                                                                           dv, i))
             : v == 2 ? as_vector(cb::pool_backward_lanes_at<2, Max, double>(xv.data(), dyv.data(),
                                                                             g, dv, i))
                      : as_vector(cb::pool_backward_lanes_at<1, Max, double>(xv.data(), dyv.data(),
                                                                             g, dv, i));
    };
    CHECK(lanes_match([&](std::uint32_t i) { return pool_lanes.template operator()<true>(i); },
                      x.numel(), dmax));
    CHECK(lanes_match([&](std::uint32_t i) { return pool_lanes.template operator()<false>(i); },
                      x.numel(), davg));
  }
}
