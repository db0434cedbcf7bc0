// The doctest-based CUDA tests in one nvcc unit: the backend's host side (test_cuda_runtime.cu,
// in a namespace of its own) and the two-TU placement test (test_cuda_placement.cu, at global
// scope: it defines placement_tu::from_cuda_tu; its g++ half is placement_tu_host.cpp), each run
// by its file:
//   test_cuda_units --source-file=*test_cuda_runtime.cu     (CTest's unit.cuda_runtime)
//   test_cuda_units --source-file=*test_cuda_placement.cu   (CTest's unit.cuda_placement)
// One unit because nvcc reads typeflow's headers three times (cudafe++, cicc's device pass, the
// host compiler) before it compiles a line of a test: about 50 s of a 2-core CI machine each.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <string>
#include <vector>

#include "placement_tu.hpp"
#include "typeflow/backend/cuda/fused.cuh"
#include "typeflow/backend/cuda/layout.cuh"
#include "typeflow/backend/cuda/nn.cuh"
#include "typeflow/typeflow.hpp"

#include "test_cuda_placement.cu"
namespace runtime_test {
#include "test_cuda_runtime.cu"
} // namespace runtime_test
