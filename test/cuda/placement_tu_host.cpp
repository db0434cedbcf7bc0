// The g++ translation unit of the two-TU placement test (placement_tu.hpp): no CUDA backend.
#include "placement_tu.hpp"

#if defined(__CUDACC__)
#error "placement_tu_host.cpp is the translation unit g++ compiles"
#endif

placement_tu::report placement_tu::from_host_tu() {
  constexpr report r{fingerprint<on_gpu>(), fingerprint<seed>(), gpu_nodes<on_gpu>(),
                     fell_back<on_gpu>()};
  return r;
}
