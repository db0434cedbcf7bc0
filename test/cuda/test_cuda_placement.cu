// unit.cuda_placement: a plan places its nodes the same in a translation unit nvcc compiles with
// the CUDA backend (this one) and in one g++ compiles without it (placement_tu_host.cpp). Needs
// no GPU: placements are computed at compile time.
#include <doctest/doctest.h>

#include "placement_tu.hpp"

#if !defined(__CUDACC__)
#error "test_cuda_placement.cu is the translation unit nvcc compiles"
#endif

placement_tu::report placement_tu::from_cuda_tu() {
  constexpr report r{fingerprint<on_gpu>(), fingerprint<seed>(), gpu_nodes<on_gpu>(),
                     fell_back<on_gpu>()};
  return r;
}

TEST_CASE("one plan type, one placement, with and without the CUDA backend") {
  const auto host = placement_tu::from_host_tu();
  const auto cuda = placement_tu::from_cuda_tu();
  CHECK(host.on_gpu == cuda.on_gpu);
  CHECK(host.seed == cuda.seed);
  CHECK(host.gpu_nodes == cuda.gpu_nodes);
  CHECK(host.fell_back == cuda.fell_back);
  // The plan is really on the GPU in both (convolution, pooling, matmul, the update...), and
  // only the probe and the two fed placeholders fell back to the CPU.
  CHECK(cuda.gpu_nodes > 20);
  CHECK(cuda.fell_back == 3);
}
