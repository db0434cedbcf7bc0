// What the compiler asks the backends: whether a device has a kernel for an op, and which folds
// its kernels implement. Each backend says so in a plain C++ header that every translation unit
// includes, compiled by nvcc or not, so that a plan means the same everywhere: the CPU backend in
// backend/cpu/capabilities.hpp, the CUDA backend in backend/cuda/kernels.hpp (an op has a GPU
// kernel exactly when one is declared there).
#pragma once
#include "../backend/common/capabilities.hpp"
#include "../backend/cpu/capabilities.hpp"
#include "../backend/cuda/kernels.hpp"
#include "../device/device.hpp"

namespace typeflow {

/// Whether op Op has a kernel on device D.
template <class Op, device_tag D>
inline constexpr bool has_kernel_on =
    D::is_cpu ? cpu_backend::has_kernel_for<Op> : cuda_backend::has_kernel_for<Op>;

/// Whether the CUDA backend has a kernel for Op (for describe_placement and tests).
template <class Op>
inline constexpr bool has_gpu_kernel = cuda_backend::has_kernel_for<Op>;

namespace compile {
/// The folds that the backend of device d implements.
constexpr backend::device_folds folds_on(device_id d) {
  return d.is_cpu ? cpu_backend::folds : cuda_backend::folds;
}
} // namespace compile

} // namespace typeflow
