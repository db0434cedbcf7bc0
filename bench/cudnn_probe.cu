// What cuDNN offers for the seed model's convolutions at batch 128 (issue 20): for conv1
// (28x28x1 -> 32, 5x5 SAME) and conv2 (14x14x32 -> 64, 5x5 SAME), each pass (forward, input
// gradient, filter gradient), NHWC and NCHW, FMA math and TF32-permitting math: every algorithm
// cudnnFind*AlgorithmEx times (median of cuDNN's own trials), with its workspace, determinism
// and math, next to the rank cuDNN's heuristic (cudnnGet*Algorithm_v7) gives it. Inputs are
// random (never zeros). Without a device: "skipped: no CUDA device".
//   gpu_cudnn_probe
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// Only the runtime's checked calls: the whole library (typeflow.hpp) would cost this
// cuDNN-only program about 45 s of nvcc.
#include "typeflow/backend/cuda/runtime.hpp"

namespace {

using typeflow::cuda_backend::check;
void check(cudnnStatus_t e, const char* call, const char* file, int line) {
  if (e != CUDNN_STATUS_SUCCESS)
    throw typeflow::cuda_error(call, file, line, cudnnGetErrorString(e));
}
#define CK(call) check((call), #call, __FILE__, __LINE__)

__global__ void fill(float* p, std::size_t n, unsigned salt) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{blockDim.x} * gridDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ salt;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = static_cast<float>(h & 0xffff) / 32768.0f - 1.0f;
  }
}

struct layer {
  const char* name;
  int n, c, h, w, o, k;
};

const char* math_name(cudnnMathType_t m) {
  switch (m) {
  case CUDNN_DEFAULT_MATH:
    return "default";
  case CUDNN_TENSOR_OP_MATH:
    return "tensor_op";
  case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
    return "tensor_op_conv";
  case CUDNN_FMA_MATH:
    return "fma";
  }
  return "?";
}

template <class Perf>
void print(const char* layer, const char* pass, const char* format, bool tf32, const Perf* found,
           int nf, const Perf* heur, int nh) {
  for (int i = 0; i < nf; ++i) {
    const Perf& p = found[i];
    if (p.status != CUDNN_STATUS_SUCCESS)
      continue;
    int rank = -1;
    for (int j = 0; j < nh; ++j)
      if (heur[j].algo == p.algo && heur[j].status == CUDNN_STATUS_SUCCESS) {
        rank = j;
        break;
      }
    std::printf("%-6s %-15s %-4s %-4s algo %d  %8.4f ms  ws %9zu  %-13s %-14s heuristic rank %d\n",
                layer, pass, format, tf32 ? "tf32" : "fma", static_cast<int>(p.algo), p.time,
                p.memory, p.determinism == CUDNN_DETERMINISTIC ? "deterministic" : "atomic",
                math_name(p.mathType), rank);
  }
}

} // namespace

int main() {
  if (typeflow::cuda_backend::device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  try {
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    std::printf("cuDNN %zu (headers %d.%d.%d)\n", cudnnGetVersion(), CUDNN_MAJOR, CUDNN_MINOR,
                CUDNN_PATCHLEVEL);
    const layer layers[] = {{"conv1", 128, 1, 28, 28, 32, 5}, {"conv2", 128, 32, 14, 14, 64, 5}};
    const std::size_t ws_bytes = std::size_t{1} << 30;
    void* ws = nullptr;
    CK(cudaMalloc(&ws, ws_bytes));
    for (const auto& l : layers) {
      const std::size_t nx = std::size_t(l.n) * l.c * l.h * l.w,
                        nw = std::size_t(l.o) * l.c * l.k * l.k,
                        ny = std::size_t(l.n) * l.o * l.h * l.w;
      float *x, *w, *y, *dx, *dw, *dy;
      CK(cudaMalloc(&x, nx * 4));
      CK(cudaMalloc(&dx, nx * 4));
      CK(cudaMalloc(&w, nw * 4));
      CK(cudaMalloc(&dw, nw * 4));
      CK(cudaMalloc(&y, ny * 4));
      CK(cudaMalloc(&dy, ny * 4));
      fill<<<1024, 256>>>(x, nx, 1);
      fill<<<1024, 256>>>(w, nw, 2);
      fill<<<1024, 256>>>(dy, ny, 3);
      CK(cudaDeviceSynchronize());
      for (const bool nhwc : {true, false})
        for (const bool tf32 : {false, true}) {
          const auto fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
          const char* fname = nhwc ? "NHWC" : "NCHW";
          cudnnTensorDescriptor_t xd, yd;
          cudnnFilterDescriptor_t wd;
          cudnnConvolutionDescriptor_t cd;
          CK(cudnnCreateTensorDescriptor(&xd));
          CK(cudnnCreateTensorDescriptor(&yd));
          CK(cudnnCreateFilterDescriptor(&wd));
          CK(cudnnCreateConvolutionDescriptor(&cd));
          CK(cudnnSetTensor4dDescriptor(xd, fmt, CUDNN_DATA_FLOAT, l.n, l.c, l.h, l.w));
          CK(cudnnSetTensor4dDescriptor(yd, fmt, CUDNN_DATA_FLOAT, l.n, l.o, l.h, l.w));
          CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, fmt, l.o, l.c, l.k, l.k));
          CK(cudnnSetConvolution2dDescriptor(cd, l.k / 2, l.k / 2, 1, 1, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
          CK(cudnnSetConvolutionMathType(cd, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
          {
            cudnnConvolutionFwdAlgoPerf_t f[16], hh[16];
            int nf = 0, nh = 0;
            CK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 16, &nh, hh));
            CK(cudnnFindConvolutionForwardAlgorithmEx(h, xd, x, wd, w, cd, yd, y, 16, &nf, f, ws,
                                                      ws_bytes));
            print(l.name, "forward", fname, tf32, f, nf, hh, nh);
          }
          {
            cudnnConvolutionBwdDataAlgoPerf_t f[16], hh[16];
            int nf = 0, nh = 0;
            CK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, 16, &nh, hh));
            CK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, wd, w, yd, dy, cd, xd, dx, 16, &nf, f,
                                                           ws, ws_bytes));
            print(l.name, "backward_data", fname, tf32, f, nf, hh, nh);
          }
          {
            cudnnConvolutionBwdFilterAlgoPerf_t f[16], hh[16];
            int nf = 0, nh = 0;
            CK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, 16, &nh, hh));
            CK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd, x, yd, dy, cd, wd, dw, 16, &nf,
                                                             f, ws, ws_bytes));
            print(l.name, "backward_filter", fname, tf32, f, nf, hh, nh);
          }
          cudnnDestroyTensorDescriptor(xd);
          cudnnDestroyTensorDescriptor(yd);
          cudnnDestroyFilterDescriptor(wd);
          cudnnDestroyConvolutionDescriptor(cd);
        }
      for (float* p : {x, w, y, dx, dw, dy})
        CK(cudaFree(p));
    }
    CK(cudaFree(ws));
    cudnnDestroy(h);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
