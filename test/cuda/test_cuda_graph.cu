// The graph-level GPU tests in one nvcc unit: the fused kernel (test_cuda_fused.cu), a gpu<0>
// session (test_cuda_session.cu), the layout ops (test_cuda_layout.cu) and GPU towers
// (test_cuda_replicate.cu), each in a namespace of its own, its main() run by name:
//   test_cuda_graph fused|session|layout|replicate
// One unit because nvcc reads typeflow's headers three times (cudafe++, cicc and the host
// compiler, about 45 s on a 2-core CI machine) before it compiles a line of a test. It is built
// without host optimization (test/cuda/kernel_check/CMakeLists.txt), so that
// cuda.kernel_agreement checks its object: every kernel of the four tests.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/fused.cuh"
#include "typeflow/typeflow.hpp"

#define main main_of_test
namespace fused_test {
#include "test_cuda_fused.cu"
} // namespace fused_test
namespace session_test {
#include "test_cuda_session.cu"
} // namespace session_test
namespace layout_test {
#include "test_cuda_layout.cu"
} // namespace layout_test
namespace replicate_test {
#include "test_cuda_replicate.cu"
} // namespace replicate_test
#undef main

int main(int argc, char** argv) {
  struct entry {
    std::string_view name;
    int (*run)();
  };
  constexpr entry tests[] = {{"fused", fused_test::main_of_test},
                             {"session", session_test::main_of_test},
                             {"layout", layout_test::main_of_test},
                             {"replicate", replicate_test::main_of_test}};
  if (argc == 2)
    for (const entry& e : tests)
      if (argv[1] == e.name)
        return e.run();
  std::fprintf(stderr, "usage: %s fused|session|layout|replicate\n", argv[0]);
  return 2;
}
