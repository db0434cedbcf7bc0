// GPU benchmarks (issue 20), side by side in one run on one device, each against a baseline
// measured in the same run:
//   copy        cudaMemcpy device to device of 64M floats: the bandwidth ceiling, bytes read +
//               written (2 * 4 * N)
//   fused       typeflow's fused kernel for a*b + c*sin(d) over 64M floats (the kernel the
//               session launches for that region, instantiated from the plan's flat region):
//               bytes 5 * 4 * N, against the copy's bandwidth
//   matmul      typeflow's matmul (a session on gpu<0>, variables resident, the product
//               assigned to a variable: one cuBLAS call plus the assignment's copy) against
//               cublasSgemm called directly, float32, 4096^3 (FP32 and TF32); under a session
//               precision of bfloat16 (float32 variables rounded per product, tensor cores)
//               against cublasGemmEx called directly on operands already in bfloat16
//   reduce      typeflow's reduction kernels (sum over all, over axis 0 and over axis 1 of a
//               [8192, 8192] float32 matrix) against the read bandwidth (the copy's, bytes read
//               only: 4 * N)
//   train_step  the seed model (examples/mnist/model.hpp), batch 128, on gpu<0>: one
//               session::run of total_loss and train_op per step, batch fed from the host;
//               convolutions as im2col + cuBLAS and on cuDNN, kernel by kernel and as one
//               CUDA graph; then with bfloat16 and float16 products (tensor cores), against
//               the float32 and TF32 steps of the same run
// Every result is checked against a double-precision host reference before it is timed. Times
// are medians of CUDA-event (or host clock, for whole session runs) samples after warm-up.
// Prints a table; writes JSON to argv[1] when given. Without a device: "skipped: no CUDA device".
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mnist/model.hpp"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
namespace cb = typeflow::cuda_backend;

namespace {

#define CHECK(call) TYPEFLOW_CUDA_CHECK(call)

struct result {
  std::string name, unit;
  double ms = 0, rate = 0;
  std::string against;
  double ratio = 0;
};
std::vector<result> results;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median milliseconds of fn() on `stream` over `reps` event-timed samples, after warm-up.
template <class F>
double time_events(cudaStream_t stream, F&& fn, int reps = 30) {
  for (int i = 0; i < 3; ++i)
    fn();
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(a, stream));
    fn();
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return median(ms);
}

/// Median milliseconds of fn() by the host clock (fn synchronises).
template <class F>
double time_host(F&& fn, int reps, int warmup = 20) {
  for (int i = 0; i < warmup; ++i)
    fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1, float hi = 1) {
  std::vector<float> v(n);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& x : v)
    x = u(rng);
  return v;
}

struct device_buffer {
  float* p = nullptr;
  std::size_t n = 0;
  explicit device_buffer(std::size_t count) : n(count) { CHECK(cudaMalloc(&p, n * sizeof(float))); }
  device_buffer(const std::vector<float>& h) : device_buffer(h.size()) {
    CHECK(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  std::vector<float> host() const {
    std::vector<float> h(n);
    CHECK(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { CHECK(cudaMemset(p, 0xff, n * sizeof(float))); } // NaN everywhere
};

ty::backend::rt_value view(const device_buffer& b, std::vector<std::int64_t> dims) {
  ty::backend::rt_value v;
  v.data = b.p;
  v.dims.rank = dims.size();
  for (std::size_t i = 0; i < dims.size(); ++i)
    v.dims.d[i] = dims[i];
  return v;
}

/// ||got - ref|| <= rel ||ref|| (and every element finite); says by how much when not.
bool close(const std::vector<float>& got, const std::vector<double>& ref, double rel) {
  double err = 0, norm = 0, worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::abs(got[i] - ref[i]) : INFINITY;
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
    err += e * e;
    norm += ref[i] * ref[i];
  }
  const bool ok = std::sqrt(err) <= rel * std::sqrt(norm);
  if (!ok)
    std::printf("  relative error %.3g (limit %.3g); worst at %zu: got %.9g, reference %.9g\n",
                std::sqrt(err / norm), rel, at, static_cast<double>(got[at]), ref[at]);
  return ok;
}

constexpr std::int64_t N = 64ll << 20; // 64M floats, 256 MiB per tensor

double copy_bandwidth(cudaStream_t s) {
  device_buffer a(random_floats(N, 1)), b(N);
  const double ms = time_events(
      s, [&] { CHECK(cudaMemcpyAsync(b.p, a.p, N * sizeof(float), cudaMemcpyDeviceToDevice, s)); });
  const double gbs = 2.0 * 4 * N / ms / 1e6;
  results.push_back({"copy (device to device, 64M floats)", "GB/s", ms, gbs, "", 0});
  return gbs;
}

constexpr auto pa = ty::placeholder<"a", float, ty::shape<ty::dyn>>;
constexpr auto pb = ty::placeholder<"b", float, ty::shape<ty::dyn>>;
constexpr auto pc = ty::placeholder<"c", float, ty::shape<ty::dyn>>;
constexpr auto pd = ty::placeholder<"d", float, ty::shape<ty::dyn>>;

// (Templates with deduced node types throughout: nvcc's host-code generation cannot spell,
// outside templates, types whose template arguments are class-type values, the names.)
template <class A, class B, class C, class Dd>
void fused(A, B, C, Dd, cudaStream_t s, double copy_gbs) {
  constexpr auto e = A{} * B{} + C{} * ty::sin(Dd{});
  // The region's types are the same whatever the placement; planned on the CPU, its inputs are
  // the placeholders themselves (on gpu<0> they would be their transfers' slots).
  using P = ty::compile::plan<ty::type_list<decltype(e)>>;
  using R = typename P::template region<P::size - 1>;
  using K = cb::fused_kernel<typename R::out_type, typename R::inputs, typename R::members>;
  static_assert(R::inputs::size == 4, "a*b + c*sin(d) is one region of four inputs");
  std::vector<std::vector<float>> h;
  for (int k = 0; k < 4; ++k)
    h.push_back(random_floats(N, 10 + k));
  device_buffer a(h[0]), b(h[1]), c(h[2]), d(h[3]), out(N);
  const ty::backend::rt_value va = view(a, {N}), vb = view(b, {N}), vc = view(c, {N}),
                              vd = view(d, {N});
  // The region's inputs in its order (plan positions of the placeholders).
  std::array<const ty::backend::rt_value*, 4> in{};
  for (std::size_t k = 0; k < 4; ++k) {
    const std::size_t node = R::input_indices[k];
    in[k] = node == P::template index_c<A>::value   ? &va
            : node == P::template index_c<B>::value ? &vb
            : node == P::template index_c<C>::value ? &vc
                                                    : &vd;
  }
  ty::backend::rt_dims od;
  od.rank = 1;
  od.d[0] = N;
  out.poison();
  K::run(s, out.p, od, in);
  CHECK(cudaStreamSynchronize(s));
  std::vector<double> ref(N);
  for (std::int64_t i = 0; i < N; ++i)
    ref[i] = double(h[0][i]) * h[1][i] + double(h[2][i]) * std::sin(double(h[3][i]));
  if (!close(out.host(), ref, 1e-6))
    throw ty::error("bench fused: a*b + c*sin(d) differs from the double reference");
  const double ms = time_events(s, [&] { K::run(s, out.p, od, in); });
  const double gbs = 5.0 * 4 * N / ms / 1e6;
  results.push_back({"fused a*b + c*sin(d) (64M floats)", "GB/s", ms, gbs, "copy", gbs / copy_gbs});
}

void reduce(cudaStream_t s, double copy_gbs) {
  constexpr std::int64_t R = 8192, C = 8192;
  const auto h = random_floats(R * C, 20, 0, 1);
  device_buffer x(h), out(std::max(R, C));
  using acc_t = cb::accum_t<float>;
  acc_t* partials = nullptr;
  CHECK(cudaMalloc(&partials, sizeof(acc_t) * (std::int64_t{1} << 22)));
  const double read_gbs = copy_gbs; // bytes read + written at copy speed: the read ceiling
  ty::backend::rt_dims d;
  d.rank = 2;
  d.d[0] = R;
  d.d[1] = C;
  struct axis_case {
    const char* name;
    std::array<bool, 2> mask;
  };
  for (const axis_case ac :
       {axis_case{"sum over all", {true, true}}, axis_case{"sum over axis 0", {true, false}},
        axis_case{"sum over axis 1", {false, true}}}) {
    const std::int64_t outs = (ac.mask[0] ? 1 : R) * (ac.mask[1] ? 1 : C);
    std::vector<double> ref(outs, 0.0);
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t j = 0; j < C; ++j)
        ref[(ac.mask[0] ? 0 : i) * (ac.mask[1] ? 1 : C) + (ac.mask[1] ? 0 : j)] += h[i * C + j];
    out.poison();
    const auto run = [&] {
      cb::reduce<ty::ops::reducers::sum, float, float, 2>(s, x.p, d, ac.mask, out.p, partials);
    };
    run();
    CHECK(cudaStreamSynchronize(s));
    auto got = out.host();
    got.resize(outs);
    if (!close(got, ref, 1e-6))
      throw ty::error(std::string("bench reduce: ") + ac.name + " differs from the reference");
    const double ms = time_events(s, run);
    const double gbs = 4.0 * R * C / ms / 1e6;
    results.push_back(
        {std::string(ac.name) + " [8192, 8192]", "GB/s", ms, gbs, "copy", gbs / read_gbs});
  }
  CHECK(cudaFree(partials));
}

/// The median time of a session run that assigns va's product with vb to vc (warmed up once).
template <class S, class A, class B, class Cv>
double assign_product_ms(S& sess, A va, B vb, Cv vc) {
  auto step = ty::group(ty::assign(vc, ty::matmul(va, vb)));
  sess.run(ty::fetch(step));
  // (A run that fetches no value returns once its work is queued: wait for it.)
  return time_host(
      [&] {
        sess.run(ty::fetch(step));
        CHECK(cudaDeviceSynchronize());
      },
      20, 3);
}

/// The session's matmul with bfloat16 products (the float32 variables rounded in each run,
/// then cublasGemmEx) against cublasGemmEx called directly on bfloat16 operands.
template <class A, class B, class Cv>
void matmul_bf16_case(A va, B vb, Cv vc) {
  constexpr std::int64_t M = 4096;
  ty::session<ty::on<ty::gpu<0>>> sess(
      ty::session_options{.seed = 5, .precision = ty::precision::bfloat16});
  const double ms = assign_product_ms(sess, va, vb, vc);
  const double flop = 2.0 * M * M * M;
  cublasHandle_t h;
  CHECK(cublasCreate(&h));
  auto upload = [](const std::vector<float>& v) {
    std::vector<ty::bfloat16> b16(v.begin(), v.end());
    void* p = nullptr;
    CHECK(cudaMalloc(&p, b16.size() * sizeof(ty::bfloat16)));
    CHECK(cudaMemcpy(p, b16.data(), b16.size() * sizeof(ty::bfloat16), cudaMemcpyHostToDevice));
    return p;
  };
  void* a = upload(random_floats(M * M, 30));
  void* b = upload(random_floats(M * M, 31));
  device_buffer c(M * M);
  const float one = 1, zero = 0;
  const auto direct = [&] {
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, b, CUDA_R_16BF, M, a,
                       CUDA_R_16BF, M, &zero, c.p, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT));
    CHECK(cudaDeviceSynchronize());
  };
  const double ms_direct = time_host(direct, 20, 3);
  CHECK(cublasDestroy(h));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  results.push_back({"cublasGemmEx direct 4096^3 BF16 in, FP32 out", "TFLOP/s", ms_direct,
                     flop / ms_direct / 1e9, "", 0});
  results.push_back({"typeflow matmul 4096^3 bfloat16 products (session, rounding included)",
                     "TFLOP/s", ms, flop / ms / 1e9, "cublasGemmEx", ms_direct / ms});
}

template <class A, class B, class Cv>
void matmul_case(A va, B vb, Cv vc, bool tf32) {
  constexpr std::int64_t M = 4096;
  ty::session<ty::on<ty::gpu<0>>> sess(ty::session_options{.seed = 5, .allow_tf32 = tf32});
  const double ms = assign_product_ms(sess, va, vb, vc);
  const double flop = 2.0 * M * M * M;
  // Direct cuBLAS on the same sizes, its own buffers and handle, timed the same way.
  cublasHandle_t h;
  CHECK(cublasCreate(&h));
  CHECK(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  device_buffer a(random_floats(M * M, 30)), b(random_floats(M * M, 31)), c(M * M);
  const float one = 1, zero = 0;
  const auto direct = [&] {
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, b.p, M, a.p, M, &zero, c.p, M));
    CHECK(cudaDeviceSynchronize());
  };
  const double ms_direct = time_host(direct, 20, 3);
  CHECK(cublasDestroy(h));
  const std::string kind = tf32 ? " TF32" : " FP32";
  results.push_back(
      {"cublasSgemm direct 4096^3" + kind, "TFLOP/s", ms_direct, flop / ms_direct / 1e9, "", 0});
  results.push_back({"typeflow matmul 4096^3" + kind + " (session)", "TFLOP/s", ms, flop / ms / 1e9,
                     "cuBLAS", ms_direct / ms});
}

constexpr auto ma = ty::variable<"ma", float, ty::shape<4096, 4096>, ty::uniform<-1.0, 1.0>>;
constexpr auto mb = ty::variable<"mb", float, ty::shape<4096, 4096>, ty::uniform<-1.0, 1.0>>;
constexpr auto mc = ty::variable<"mc", float, ty::shape<4096, 4096>, ty::zeros>;

constexpr auto sa = ty::variable<"sa", float, ty::shape<256, 256>, ty::uniform<-1.0, 1.0>>;
constexpr auto sb = ty::variable<"sb", float, ty::shape<256, 256>, ty::uniform<-1.0, 1.0>>;

/// Correctness first, at a size a double loop checks: 256^3 through the same session path
/// (under bfloat16 products, against the operands rounded to bfloat16 on the host).
template <class A, class B>
void matmul_check(A sa, B sb, ty::precision precision = ty::precision::float32) {
  ty::session<ty::on<ty::gpu<0>>> sess(ty::session_options{.seed = 6, .precision = precision});
  auto [prod, av, bv] = sess.run(ty::fetch(ty::matmul(sa, sb), sa, sb));
  const auto operand = [&](float v) {
    return precision == ty::precision::bfloat16 ? static_cast<double>(ty::bfloat16(v)) : double(v);
  };
  std::vector<double> ref(256 * 256);
  std::vector<float> got(prod.data(), prod.data() + prod.size());
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 256; ++j) {
      double acc = 0;
      for (int k = 0; k < 256; ++k)
        acc += operand(av[i * 256 + k]) * operand(bv[k * 256 + j]);
      ref[i * 256 + j] = acc;
    }
  if (!close(got, ref, 1e-5))
    throw ty::error("bench matmul: the product differs from the double reference");
}

template <class Images, class Labels, class Loss, class Train>
void train_step(Images images_ph, Labels labels_ph, Loss total_loss, Train train_op) {
  constexpr int batch = 128;
  ty::tensor<float> images({batch, 28, 28, 1});
  ty::tensor<std::int32_t> labels({batch});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (auto& v : images)
    v = u(rng);
  for (auto& v : labels)
    v = static_cast<std::int32_t>(rng() % 10);
  using convs_t = ty::gpu_convolutions;
  // The captured step of the fastest float32 convolutions, exact and TF32: the baselines of the
  // 16-bit products (variants 6 and 7: bfloat16 and float16, convolutions as im2col + GEMM).
  double captured_fp32 = 0, captured_tf32 = 0;
  for (const int variant : {0, 1, 2, 3, 4, 5, 6, 7}) {
    const auto mode = variant >= 6       ? convs_t::fastest
                      : variant % 3 == 0 ? convs_t::im2col
                      : variant % 3 == 1 ? convs_t::cudnn
                                         : convs_t::fastest;
    const bool tf32 = variant >= 3 && variant < 6;
    const auto precision = variant == 6   ? ty::precision::bfloat16
                           : variant == 7 ? ty::precision::float16
                                          : ty::precision::float32;
    if (mode != convs_t::im2col && !cb::has_cudnn && variant < 6)
      continue;
    const std::string convs = variant == 6   ? std::string("BF16 products (tensor cores)")
                              : variant == 7 ? std::string("FP16 products (tensor cores)")
                                             : std::string(mode == convs_t::im2col  ? "im2col"
                                                           : mode == convs_t::cudnn ? "cuDNN"
                                                                                    : "fastest") +
                                                   (tf32 ? " TF32" : " FP32");
    double ms_uncaptured = 0;
    for (const bool graphs : {false, true}) {
      ty::session<ty::on<ty::gpu<0>>> s(ty::session_options{.seed = 1,
                                                            .allow_tf32 = tf32,
                                                            .convolutions = mode,
                                                            .cuda_graphs = graphs,
                                                            .precision = precision});
      auto step = [&] {
        auto [loss] = s.run(ty::fetch(total_loss, train_op), ty::feed(images_ph, images),
                            ty::feed(labels_ph, labels));
        if (!std::isfinite(loss[0]))
          throw ty::error("bench train_step: the loss is not finite");
      };
      const double ms = time_host(step, 300, 30);
      if (graphs && s.stats().graph_launches != 1)
        throw ty::error("bench train_step: the step was not replayed as a CUDA graph");
      if ((mode != convs_t::fastest || variant >= 6) &&
          (s.stats().cudnn_convolutions > 0) != (mode == convs_t::cudnn))
        throw ty::error("bench train_step: convolutions on cuDNN: " +
                        std::to_string(s.stats().cudnn_convolutions));
      const std::string name = "seed model train step, batch 128, " + convs + ", ";
      if (!graphs) {
        ms_uncaptured = ms;
        results.push_back({name + "kernel by kernel", "images/s", ms, batch / ms * 1e3, "", 0});
      } else {
        results.push_back({name + "one CUDA graph", "images/s", ms, batch / ms * 1e3,
                           "kernel by kernel", ms_uncaptured / ms});
        if (variant == 2 || (variant == 0 && !cb::has_cudnn)) // fastest: im2col without cuDNN
          captured_fp32 = ms;
        if (variant == 5 || (variant == 3 && !cb::has_cudnn))
          captured_tf32 = ms;
        if (variant >= 6 && captured_fp32 > 0) {
          results.push_back({name + "one CUDA graph, against FP32", "images/s", ms,
                             batch / ms * 1e3, "fastest FP32 one CUDA graph", captured_fp32 / ms});
          results.push_back({name + "one CUDA graph, against TF32", "images/s", ms,
                             batch / ms * 1e3, "fastest TF32 one CUDA graph", captured_tf32 / ms});
        }
      }
    }
  }
}

/// The batch the profiled steps run: 128 smooth images, labels cycling through the classes.
std::pair<ty::tensor<float>, ty::tensor<std::int32_t>> profile_batch() {
  ty::tensor<float> images({128, 28, 28, 1});
  ty::tensor<std::int32_t> labels({128});
  for (std::int64_t i = 0; i < images.size(); ++i)
    images[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i)));
  for (std::int64_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int32_t>(i % 10);
  return {images, labels};
}

/// For a kernel profiler (`ncu --profile-from-start off`): one step of the seed model, kernel
/// by kernel, between cudaProfilerStart and cudaProfilerStop, after three warm-up steps.
template <class Images, class Labels, class Loss, class Train>
void profiled_step(Images images_ph, Labels labels_ph, Loss total_loss, Train train_op,
                   ty::gpu_convolutions mode, bool tf32,
                   ty::precision precision = ty::precision::float32) {
  const auto [images, labels] = profile_batch();
  ty::session<ty::on<ty::gpu<0>>> s(ty::session_options{.seed = 1,
                                                        .allow_tf32 = tf32,
                                                        .convolutions = mode,
                                                        .cuda_graphs = false,
                                                        .precision = precision});
  for (int k = 0; k < 4; ++k) {
    if (k == 3) {
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaProfilerStart());
    }
    (void)s.run(ty::fetch(total_loss, train_op), ty::feed(images_ph, images),
                ty::feed(labels_ph, labels));
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaProfilerStop());
  std::printf("profiled one step: convolutions %s, %s, %zu on cuDNN\n",
              mode == ty::gpu_convolutions::im2col  ? "im2col"
              : mode == ty::gpu_convolutions::cudnn ? "cuDNN"
                                                    : "fastest",
              precision == ty::precision::bfloat16  ? "BF16 products"
              : precision == ty::precision::float16 ? "FP16 products"
              : tf32                                ? "TF32"
                                                    : "FP32",
              s.stats().cudnn_convolutions);
}

/// Where a step's time goes: the last of five runs of the seed's step traced (a traced step on
/// a GPU synchronizes after each kernel, so each step's time is its GPU time plus the launch),
/// the steps printed slowest first with their share of the step, then the per-op profile.
template <class Images, class Labels, class Loss, class Train>
void profile_step(Images images_ph, Labels labels_ph, Loss total_loss, Train train_op, bool cudnn) {
  const auto [images, labels] = profile_batch();
  ty::trace_recorder rec(ty::trace_recorder::options{.skip = 4, .runs = 1});
  ty::session<ty::on<ty::gpu<0>>> s(ty::session_options{
      .seed = 1,
      .trace = &rec,
      .convolutions = cudnn ? ty::gpu_convolutions::fastest : ty::gpu_convolutions::im2col});
  for (int k = 0; k < 5; ++k)
    (void)s.run(ty::fetch(total_loss, train_op), ty::feed(images_ph, images),
                ty::feed(labels_ph, labels));
  std::vector<ty::trace_event> steps;
  double total = 0;
  for (const auto& e : rec.events())
    if (e.what == ty::trace_event::type::step) {
      steps.push_back(e);
      total += e.duration;
    }
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return a.duration > b.duration; });
  std::printf("traced step (convolutions on %s): %zu steps, %.3f ms in all\n",
              cudnn ? "the fastest" : "im2col + cuBLAS", steps.size(), total * 1e3);
  for (std::size_t k = 0; k < steps.size() && k < 25; ++k)
    std::printf("  %8.1f us %5.1f %%  %.110s\n", steps[k].duration * 1e6,
                100 * steps[k].duration / total, steps[k].plan->label[steps[k].node].c_str());
  std::printf("%s", ty::make_profile(rec, ty::roofline{}).str().c_str());
}

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // every line out before a crash
  if (cb::device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  try {
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0, runtime = 0;
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    std::printf("device: %s, %d SMs, %.0f MB L2, CUDA driver %d, runtime %d\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize / 1e6, driver, runtime);
    if (argc > 3 && std::string(argv[1]) == "--kernels") { // --kernels MODE tf32|fp32|bf16|f16
      const std::string m = argv[2], p = argv[3];
      profiled_step(mnist::images, mnist::labels, mnist::total_loss, mnist::train_op,
                    m == "cudnn"    ? ty::gpu_convolutions::cudnn
                    : m == "im2col" ? ty::gpu_convolutions::im2col
                                    : ty::gpu_convolutions::fastest,
                    p == "tf32",
                    p == "bf16"  ? ty::precision::bfloat16
                    : p == "f16" ? ty::precision::float16
                                 : ty::precision::float32);
      return 0;
    }
    if (argc > 1 && std::string(argv[1]) == "--profile") {
      for (const bool cudnn : {false, true})
        if (!cudnn || cb::has_cudnn)
          profile_step(mnist::images, mnist::labels, mnist::total_loss, mnist::train_op, cudnn);
      return 0;
    }
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const double copy_gbs = copy_bandwidth(s);
    std::printf("copy done\n");
    fused(pa, pb, pc, pd, s, copy_gbs);
    std::printf("fused done\n");
    reduce(s, copy_gbs);
    std::printf("reduce done\n");
    matmul_check(sa, sb);
    matmul_case(ma, mb, mc, false);
    matmul_case(ma, mb, mc, true);
    matmul_check(sa, sb, ty::precision::bfloat16);
    matmul_bf16_case(ma, mb, mc);
    std::printf("matmul done\n");
    train_step(mnist::images, mnist::labels, mnist::total_loss, mnist::train_op);
    CHECK(cudaStreamDestroy(s));
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    for (const auto& r : results)
      std::printf("  %s: %.4f ms\n", r.name.c_str(), r.ms);
    return 1;
  }
  std::printf("\n| benchmark | ms | rate | vs baseline |\n|---|---|---|---|\n");
  for (const auto& r : results) {
    std::printf("| %s | %.4f | %.1f %s | ", r.name.c_str(), r.ms, r.rate, r.unit.c_str());
    if (r.against.empty())
      std::printf("baseline |\n");
    else
      std::printf("%.3f x %s |\n", r.ratio, r.against.c_str());
  }
  if (argc > 1) {
    FILE* f = std::fopen(argv[1], "w");
    if (f) {
      std::fprintf(f, "[\n");
      for (std::size_t i = 0; i < results.size(); ++i)
        std::fprintf(f, "  {\"name\": \"%s\", \"ms\": %.6f, \"rate\": %.6g, \"unit\": \"%s\"}%s\n",
                     results[i].name.c_str(), results[i].ms, results[i].rate,
                     results[i].unit.c_str(), i + 1 < results.size() ? "," : "");
      std::fprintf(f, "]\n");
      std::fclose(f);
    }
  }
  return 0;
}
