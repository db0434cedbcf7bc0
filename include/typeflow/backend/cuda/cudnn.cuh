// Convolutions on cuDNN 9 (compiled by nvcc; where CMake found cuDNN, TYPEFLOW_HAS_CUDNN): the
// forward pass and both gradients of a float32 conv2d over NHWC data, through cuDNN's
// convolution API, where cuDNN is faster than im2col + cuBLAS (nn.cuh's path, which runs
// otherwise: float64, session_options::cudnn off, a 16-bit session precision (cuDNN's 16-bit
// convolutions write 16-bit outputs), an empty extent, asymmetric SAME padding, which cuDNN
// cannot express, or no cuDNN algorithm for the geometry).
//
// typeflow's filters are [KH, KW, C, O] (TensorFlow's HWIO); cuDNN's NHWC filters are
// [O, KH, KW, C]: the filter goes through a 2-D transpose ([KH*KW*C, O] <-> [O, KH*KW*C]) on
// its way in (forward, input gradient) and the filter gradient on its way out.
//
// The way, per geometry and pass: the first time a geometry runs outside a CUDA-graph capture,
// cuDNN's candidates and im2col + cuBLAS are each timed on the run's own operands and the
// fastest is kept for the process (every session then runs that geometry alike: their results
// agree bit for bit). cuDNN's candidates are its heuristic ranking (cudnnGet*Algorithm_v7),
// keeping only deterministic algorithms (no atomics: a step's bits do not change between runs)
// and, unless TF32 is allowed, only the GEMM-like ones in FMA math (no TF32, no Winograd or FFT
// transforms), so that results stay within float32's accumulation error of the im2col path.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "../common/window.hpp"
#include "context.cuh"

#if TYPEFLOW_HAS_CUDNN
#include <cudnn.h>
#endif

namespace typeflow::cuda_backend {

using backend::window2d;

enum class conv_pass { forward, backward_data, backward_filter };

#if TYPEFLOW_HAS_CUDNN

inline constexpr bool has_cudnn = true;

inline void check(cudnnStatus_t e, const char* call, const char* file, int line) {
  if (e != CUDNN_STATUS_SUCCESS)
    throw cuda_error(call, file, line, cudnnGetErrorString(e));
}

/// out[c, r] = in[r, c] for a rows x cols row-major matrix.
template <class T>
__global__ void transpose_2d_kernel(const T* in, T* out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    const std::int64_t r = i / cols, c = i % cols;
    out[c * rows + r] = in[i];
  }
}
template <class T>
void transpose_2d(context& ctx, const T* in, T* out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  const int blocks = static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 4096));
  transpose_2d_kernel<<<blocks, 256, 0, ctx.stream()>>>(in, out, rows, cols);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

/// One geometry and pass: cuDNN's descriptors and the algorithms to try, best first.
struct cudnn_conv_plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  struct candidate {
    int algo;
    std::size_t workspace;
  };
  std::vector<candidate> candidates;  ///< cuDNN's heuristic order
  std::array<std::int64_t, 17> key{}; ///< the pass, the geometry, TF32
  cudnn_conv_plan() = default;
  cudnn_conv_plan(const cudnn_conv_plan&) = delete;
  cudnn_conv_plan& operator=(const cudnn_conv_plan&) = delete;
  ~cudnn_conv_plan() {
    if (x)
      cudnnDestroyTensorDescriptor(x);
    if (y)
      cudnnDestroyTensorDescriptor(y);
    if (w)
      cudnnDestroyFilterDescriptor(w);
    if (conv)
      cudnnDestroyConvolutionDescriptor(conv);
  }
  bool usable() const { return !candidates.empty(); }
};

/// A GPU's cuDNN handle (on the session's stream) and its plans by geometry.
struct cudnn_state {
  cudnnHandle_t handle = nullptr;
  std::map<std::array<std::int64_t, 17>, std::unique_ptr<cudnn_conv_plan>> plans;
  cudnn_state() = default; ///< cuDNN unusable: no handle
  explicit cudnn_state(cudaStream_t s) {
    TYPEFLOW_CUDA_CHECK(cudnnCreate(&handle));
    if (cudnnSetStream(handle, s) != CUDNN_STATUS_SUCCESS) {
      cudnnDestroy(handle);
      handle = nullptr;
      throw error("cudnnSetStream failed");
    }
  }
  ~cudnn_state() {
    plans.clear();
    if (handle)
      cudnnDestroy(handle);
  }
  cudnn_state(const cudnn_state&) = delete;
  cudnn_state& operator=(const cudnn_state&) = delete;
};

namespace detail {

/// Forward algorithms that are GEMMs or direct sums in float32 (no transform of the operands).
inline bool plain_algorithm(conv_pass pass, int algo) {
  switch (pass) {
  case conv_pass::forward:
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
  case conv_pass::backward_data:
    return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  case conv_pass::backward_filter:
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  }
  return false;
}

/// The candidates of a heuristic ranking, in its order.
template <class Perf, class Size>
void keep_candidates(cudnn_conv_plan& p, conv_pass pass, bool tf32, const Perf* perf, int count,
                     Size workspace_of) {
  for (int k = 0; k < count; ++k) {
    const Perf& r = perf[k];
    if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC)
      continue;
    if (!tf32 && !plain_algorithm(pass, static_cast<int>(r.algo)))
      continue;
    std::size_t bytes = 0;
    if (workspace_of(r.algo, &bytes) != CUDNN_STATUS_SUCCESS)
      continue;
    p.candidates.push_back({static_cast<int>(r.algo), bytes});
  }
}

inline cudnn_conv_plan* make_plan(cudnnHandle_t h, cudnn_conv_plan& p, conv_pass pass,
                                  const window2d& g, bool tf32) {
  auto i32 = [](std::int64_t v) { return static_cast<int>(v); };
  TYPEFLOW_CUDA_CHECK(cudnnCreateTensorDescriptor(&p.x));
  TYPEFLOW_CUDA_CHECK(cudnnCreateTensorDescriptor(&p.y));
  TYPEFLOW_CUDA_CHECK(cudnnCreateFilterDescriptor(&p.w));
  TYPEFLOW_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
  TYPEFLOW_CUDA_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, i32(g.n),
                                                 i32(g.c), i32(g.h), i32(g.w)));
  TYPEFLOW_CUDA_CHECK(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, i32(g.o),
                                                 i32(g.c), i32(g.kh), i32(g.kw)));
  TYPEFLOW_CUDA_CHECK(cudnnSetConvolution2dDescriptor(p.conv, i32(g.ph), i32(g.pw), i32(g.sh),
                                                      i32(g.sw), i32(g.dh), i32(g.dw),
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TYPEFLOW_CUDA_CHECK(
      cudnnSetConvolutionMathType(p.conv, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  // cuDNN pads both sides by (ph, pw); TensorFlow's SAME puts an odd padding's extra row or
  // column after. The output extents tell them apart.
  int n = 0, c = 0, oh = 0, ow = 0;
  TYPEFLOW_CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &c, &oh, &ow));
  if (n != g.n || c != g.o || oh != g.oh || ow != g.ow)
    return nullptr;
  TYPEFLOW_CUDA_CHECK(
      cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n, c, oh, ow));
  switch (pass) {
  case conv_pass::forward: {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    TYPEFLOW_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, p.x, p.w, p.conv, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    keep_candidates(p, pass, tf32, perf, count, [&](cudnnConvolutionFwdAlgo_t a, std::size_t* b) {
      return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, a, b);
    });
    break;
  }
  case conv_pass::backward_data: {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    TYPEFLOW_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, p.w, p.y, p.conv, p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    keep_candidates(
        p, pass, tf32, perf, count, [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t* b) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x, a, b);
        });
    break;
  }
  case conv_pass::backward_filter: {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    TYPEFLOW_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, p.x, p.y, p.conv, p.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
    keep_candidates(
        p, pass, tf32, perf, count, [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t* b) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w, a, b);
        });
    break;
  }
  }
  return p.candidates.empty() ? nullptr : &p;
}

/// The plan of a pass over geometry g on ctx's GPU (made on first use), or nullptr when cuDNN
/// does not take it.
inline cudnn_conv_plan* plan_of(context& ctx, conv_pass pass, const window2d& g) {
  if (ctx.session.convolutions == backend::gpu_convolutions::im2col || g.n <= 0 || g.h <= 0 ||
      g.w <= 0 || g.c <= 0 || g.o <= 0 || g.oh <= 0 || g.ow <= 0)
    return nullptr;
  auto& slot = ctx.gpu.cudnn;
  if (!slot) {
    try {
      slot = std::make_shared<cudnn_state>(ctx.stream());
    } catch (const error&) { // no usable cuDNN (a sub-library missing): im2col from now on
      slot = std::make_shared<cudnn_state>();
    }
  }
  auto& st = *static_cast<cudnn_state*>(slot.get());
  if (!st.handle)
    return nullptr;
  const bool tf32 = ctx.session.allow_tf32;
  const std::array<std::int64_t, 17> key{static_cast<std::int64_t>(pass),
                                         g.n,
                                         g.h,
                                         g.w,
                                         g.c,
                                         g.kh,
                                         g.kw,
                                         g.o,
                                         g.sh,
                                         g.sw,
                                         g.dh,
                                         g.dw,
                                         g.ph,
                                         g.pw,
                                         g.oh, // the padding after: SAME's odd padding
                                         g.ow, // has VALID's padding before
                                         tf32 ? 1 : 0};
  auto [it, fresh] = st.plans.try_emplace(key);
  if (fresh) {
    it->second = std::make_unique<cudnn_conv_plan>();
    it->second->key = key;
    try {
      if (!make_plan(st.handle, *it->second, pass, g, tf32))
        it->second->candidates.clear();
    } catch (const error&) { // a geometry cuDNN cannot describe (2^31 elements or more)
      it->second->candidates.clear();
    }
  }
  return it->second->usable() ? it->second.get() : nullptr;
}

inline cudnnHandle_t handle_of(context& ctx) {
  return static_cast<cudnn_state*>(ctx.gpu.cudnn.get())->handle;
}

/// A pass's way for one geometry: a cuDNN algorithm, or im2col + cuBLAS (algo < 0).
struct conv_choice {
  int algo = -1;
  std::size_t workspace = 0;
};
/// The choices made so far in this process, by GPU, pass, geometry and math: every session
/// (captured or not) runs a geometry the same way, so their results agree bit for bit.
struct conv_choices {
  std::mutex mu;
  std::map<std::array<std::int64_t, 18>, conv_choice> by_key;
  static conv_choices& get() {
    static conv_choices c;
    return c;
  }
};

/// Candidates whose workspace exceeds this are not timed (nor run): FFT algorithms can ask for
/// gigabytes, which the caching allocator would then keep.
inline constexpr std::size_t max_timed_workspace = std::size_t{256} << 20;

/// The mean time of three runs of f after one (f returns false: it cannot run).
template <class F>
float time_of(cudaStream_t s, F f) {
  if (!f())
    return -1;
  event start, stop;
  start.record(s);
  for (int k = 0; k < 3; ++k)
    (void)f();
  stop.record(s);
  return stop.milliseconds_since(start) / 3;
}

/// Runs one pass of geometry g the fastest way: the first time a geometry is seen outside a
/// CUDA-graph capture, each of cuDNN's candidates and im2col + cuBLAS (`fallback`) is timed on
/// the run's own operands (cuDNN's benchmark mode, with im2col in the race) and the winner is
/// kept for the process. Inside a capture a geometry not yet timed takes cuDNN's heuristic
/// choice (the session warms a plan up uncaptured first, so this is rare). With
/// gpu_convolutions::cudnn nothing is timed: the heuristic's first algorithm that runs. `prepare`
/// runs before cuDNN (the filter's transpose), `call(plan, algo, workspace, bytes)` is cuDNN's
/// call, `finish` after it.
template <class Prepare, class Call, class Finish, class Fallback>
void run_conv(context& ctx, conv_pass pass, const window2d& g, Prepare prepare, Call call,
              Finish finish, Fallback fallback) {
  cudnn_conv_plan* p = plan_of(ctx, pass, g);
  if (!p) {
    fallback();
    return;
  }
  std::array<std::int64_t, 18> key{};
  std::copy(p->key.begin(), p->key.end(), key.begin());
  key[17] = ctx.gpu.device;
  auto& all = conv_choices::get();
  conv_choice choice;
  bool known = false;
  {
    std::lock_guard lock(all.mu);
    if (auto it = all.by_key.find(key); it != all.by_key.end()) {
      choice = it->second;
      known = true;
    }
  }
  auto run_cudnn = [&](const conv_choice& c) {
    value workspace;
    void* ws = c.workspace ? ctx.scratch<char>(workspace, static_cast<std::int64_t>(c.workspace))
                           : nullptr;
    const cudnnStatus_t e = call(*p, c.algo, ws, c.workspace);
    if (e != CUDNN_STATUS_SUCCESS && CUDNN_STATUS_CATEGORY(e) != CUDNN_STATUS_NOT_SUPPORTED)
      check(e, "cuDNN convolution", __FILE__, __LINE__);
    return e == CUDNN_STATUS_SUCCESS;
  };
  const bool forced = ctx.session.convolutions == backend::gpu_convolutions::cudnn;
  if (!known && !forced && !ctx.session.capturing) {
    prepare();
    float best = time_of(ctx.stream(), [&] {
      fallback();
      return true;
    });
    for (const auto& c : p->candidates) {
      if (c.workspace > max_timed_workspace)
        continue;
      const conv_choice candidate{c.algo, c.workspace};
      float ms = -1;
      try {
        ms = time_of(ctx.stream(), [&] { return run_cudnn(candidate); });
      } catch (const error&) { // its workspace does not fit: not a candidate
        (void)cudaGetLastError();
      }
      if (ms >= 0 && ms < best) {
        best = ms;
        choice = candidate;
      }
    }
    std::lock_guard lock(all.mu);
    choice = all.by_key.try_emplace(key, choice).first->second; // the first session's choice
    known = true;
  } else if (!known || forced) {
    choice = {p->candidates.front().algo, p->candidates.front().workspace};
  }
  if (choice.algo < 0) {
    fallback();
    return;
  }
  prepare();
  bool ran = run_cudnn(choice);
  if (!ran && forced) // the heuristic's first choice cannot run: the next that can
    for (std::size_t k = 1; k < p->candidates.size() && !ran; ++k)
      ran = run_cudnn({p->candidates[k].algo, p->candidates[k].workspace});
  if (!ran) {
    fallback();
    return;
  }
  finish();
  ++ctx.session.stats.cudnn_convolutions;
}

/// A `prepare` of run_conv: the HWIO filter w transposed into cuDNN's [O, KH*KW*C], into a
/// buffer `holder` keeps, once.
inline auto filter_transposer(context& ctx, const window2d& g, const float* w, value& holder,
                              float*& out) {
  return [&ctx, &g, w, &holder, &out] {
    if (!out) {
      out = ctx.scratch<float>(holder, g.patch() * g.o);
      transpose_2d(ctx, w, out, g.patch(), g.o);
    }
  };
}

} // namespace detail

/// y = conv2d(x, w): on cuDNN or by `fallback` (im2col + cuBLAS), whichever is faster.
template <class Fallback>
void convolve_forward(context& ctx, const window2d& g, const float* x, const float* w, float* y,
                      Fallback fallback) {
  value filter;
  float* wt = nullptr;
  const float one = 1, zero = 0;
  detail::run_conv(
      ctx, conv_pass::forward, g, detail::filter_transposer(ctx, g, w, filter, wt),
      [&](const cudnn_conv_plan& p, int algo, void* ws, std::size_t bytes) {
        return cudnnConvolutionForward(detail::handle_of(ctx), &one, p.x, x, p.w, wt, p.conv,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes,
                                       &zero, p.y, y);
      },
      [] {}, fallback);
}

/// dx = the gradient of conv2d(x, w) with respect to x, given dy.
template <class Fallback>
void convolve_backward_data(context& ctx, const window2d& g, const float* dy, const float* w,
                            float* dx, Fallback fallback) {
  value filter;
  float* wt = nullptr;
  const float one = 1, zero = 0;
  detail::run_conv(
      ctx, conv_pass::backward_data, g, detail::filter_transposer(ctx, g, w, filter, wt),
      [&](const cudnn_conv_plan& p, int algo, void* ws, std::size_t bytes) {
        return cudnnConvolutionBackwardData(detail::handle_of(ctx), &one, p.w, wt, p.y, dy, p.conv,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws,
                                            bytes, &zero, p.x, dx);
      },
      [] {}, fallback);
}

/// dw = the gradient of conv2d(x, w) with respect to w, given dy.
template <class Fallback>
void convolve_backward_filter(context& ctx, const window2d& g, const float* x, const float* dy,
                              float* dw, Fallback fallback) {
  value filter;
  float* dwt = nullptr;
  const float one = 1, zero = 0;
  detail::run_conv(
      ctx, conv_pass::backward_filter, g,
      [&] {
        if (!dwt)
          dwt = ctx.scratch<float>(filter, g.patch() * g.o);
      },
      [&](const cudnn_conv_plan& p, int algo, void* ws, std::size_t bytes) {
        return cudnnConvolutionBackwardFilter(detail::handle_of(ctx), &one, p.x, x, p.y, dy, p.conv,
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                              ws, bytes, &zero, p.w, dwt);
      },
      [&] { transpose_2d(ctx, dwt, dw, g.o, g.patch()); }, fallback);
}

#else

inline constexpr bool has_cudnn = false;
template <class Fallback>
void convolve_forward(context&, const window2d&, const float*, const float*, float*, Fallback f) {
  f();
}
template <class Fallback>
void convolve_backward_data(context&, const window2d&, const float*, const float*, float*,
                            Fallback f) {
  f();
}
template <class Fallback>
void convolve_backward_filter(context&, const window2d&, const float*, const float*, float*,
                              Fallback f) {
  f();
}

#endif

} // namespace typeflow::cuda_backend
