// GPU towers of a replicated session (runtime/replicate.hpp): their replica_mean values are
// combined by one NCCL all-reduce across the towers' GPUs. Each tower first scales its value by
// its share of the batch (rows / batch); the sum is then the batch-weighted mean. A tower with no
// rows contributes zeros. Included by backend.cuh when <nccl.h> is available.
#pragma once
#include <nccl.h>

#include <memory>
#include <vector>

#include "../../core/error.hpp"
#include "../common/allreduce.hpp"
#include "context.cuh"
#include "nn.cuh"
#include "runtime.hpp"

namespace typeflow {
namespace cuda_backend {

inline void check(ncclResult_t e, const char* call, const char* file, int line) {
  if (e != ncclSuccess)
    throw cuda_error(call, file, line, ncclGetErrorString(e));
}

template <class T>
__global__ void scale_kernel(T* p, std::int64_t n, T w) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    p[i] *= w;
}

template <class T>
constexpr ncclDataType_t nccl_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "replicate: gradients are float32 or float64");
  return std::is_same_v<T, float> ? ncclFloat32 : ncclFloat64;
}

/// One communicator per tower GPU, created on first use.
struct nccl_comms {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  explicit nccl_comms(std::vector<int> devs) : devices(std::move(devs)), comms(devices.size()) {
    TYPEFLOW_CUDA_CHECK(
        ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  }
  ~nccl_comms() {
    for (auto c : comms)
      if (c)
        ncclCommDestroy(c);
  }
  nccl_comms(const nccl_comms&) = delete;
  nccl_comms& operator=(const nccl_comms&) = delete;
};

} // namespace cuda_backend

template <class T>
struct nccl_average<T, void> {
  static void run(std::vector<gpu_replica>& parts, std::int64_t count,
                  std::shared_ptr<void>& state) {
    std::vector<int> devs;
    for (const auto& p : parts) {
      for (int d : devs)
        if (d == p.device)
          throw error("replicate: GPU towers need distinct devices (gpu:" + std::to_string(d) +
                      " holds two)");
      devs.push_back(p.device);
    }
    if (!state)
      state = std::make_shared<cuda_backend::nccl_comms>(devs);
    auto& comms = *static_cast<cuda_backend::nccl_comms*>(state.get());
    if (comms.devices != devs)
      throw error("replicate: the towers' GPUs changed between runs");
    const std::size_t bytes = sizeof(T) * static_cast<std::size_t>(count);
    std::vector<void*> zeros(parts.size(), nullptr);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      auto& ctx = *static_cast<cuda_backend::gpu_context*>(parts[k].context);
      cuda_backend::use_device(parts[k].device);
      if (!parts[k].data) { // a tower with no rows adds zeros
        zeros[k] = ctx.mem.allocate(bytes);
        parts[k].data = zeros[k];
        TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(parts[k].data, 0, bytes, ctx.s.get()));
      } else if (count > 0) {
        cuda_backend::scale_kernel<<<cuda_backend::grid_for(count), 256, 0, ctx.s.get()>>>(
            static_cast<T*>(parts[k].data), count, static_cast<T>(parts[k].weight));
        TYPEFLOW_CUDA_CHECK(cudaGetLastError());
      }
    }
    TYPEFLOW_CUDA_CHECK(ncclGroupStart());
    for (std::size_t k = 0; k < parts.size(); ++k) {
      auto& ctx = *static_cast<cuda_backend::gpu_context*>(parts[k].context);
      TYPEFLOW_CUDA_CHECK(
          ncclAllReduce(parts[k].data, parts[k].data, static_cast<std::size_t>(count),
                        cuda_backend::nccl_type<T>(), ncclSum, comms.comms[k], ctx.s.get()));
    }
    TYPEFLOW_CUDA_CHECK(ncclGroupEnd());
    for (std::size_t k = 0; k < parts.size(); ++k)
      if (zeros[k]) {
        auto& ctx = *static_cast<cuda_backend::gpu_context*>(parts[k].context);
        ctx.s.synchronize();
        ctx.mem.deallocate(zeros[k], bytes);
      }
  }
};

} // namespace typeflow
