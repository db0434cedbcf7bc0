// Two translation units, one plan: test_cuda_placement.cu (nvcc, with the CUDA backend) and
// placement_tu_host.cpp (g++, without it) each compute a fingerprint of the same plans'
// placements at compile time, baked into a function of their own; the test compares them.
// Before kernel availability was derived from declarations every TU sees, the g++ TU placed
// every op of a gpu<0> plan on the CPU (an ODR violation: one plan type, two placements).
#pragma once
#include <cstdint>

#include "typeflow/typeflow.hpp"

namespace placement_tu {

namespace ty = typeflow;

// The seed's model, shortened, with a probe (host only: soft placement moves it to the CPU).
inline constexpr auto images = ty::placeholder<"images", float, ty::shape<ty::dyn, 28, 28, 1>>;
inline constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn>>;
inline constexpr auto conv = ty::conv2d_layer<"tu_conv1", 5, 5, 8>(images);
inline constexpr auto pooled =
    ty::debug::probe<"tu">(ty::max_pool<ty::padding::same, 2>(ty::relu(conv)));
inline constexpr auto logits = ty::dense<"tu_fc", 10>(ty::reshape<-1, 14 * 14 * 8>(pooled));
inline constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, labels));
inline constexpr auto train =
    ty::momentum(ty::constant<0.01>, ty::constant<0.9>, ty::nesterov).minimize(loss);

using on_gpu =
    ty::compile::plan<ty::type_list<decltype(loss), decltype(train)>, ty::on<ty::gpu<0>>>;
using seed = ty::compile::plan<ty::type_list<decltype(loss), decltype(train)>,
                               ty::variables_on<ty::cpu<0>, ty::compute_on<ty::gpu<0>>>>;

/// FNV-1a over every node's device and soft-placement mark, and every transfer.
template <class P>
constexpr std::uint64_t fingerprint() {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(P::size);
  for (std::size_t i = 0; i < P::size; ++i) {
    mix(P::placement.device[i].is_cpu);
    mix(static_cast<std::uint64_t>(P::placement.device[i].index));
    mix(P::placement.fell_back[i]);
  }
  mix(P::transfers);
  for (std::size_t t = 0; t < P::transfers; ++t) {
    mix(P::placement.transfer_source[t]);
    mix(P::placement.transfer_device[t].is_cpu);
  }
  return h;
}
/// How many nodes of P run on a GPU, and how many fell back to the CPU.
template <class P>
constexpr std::uint64_t gpu_nodes() {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < P::size; ++i)
    n += !P::placement.device[i].is_cpu;
  return n;
}
template <class P>
constexpr std::uint64_t fell_back() {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < P::size; ++i)
    n += P::placement.fell_back[i];
  return n;
}

struct report {
  std::uint64_t on_gpu, seed, gpu_nodes, fell_back;
};
/// Computed at compile time in each translation unit (constexpr locals, not a shared inline
/// function whose one copy the linker would keep).
report from_host_tu(); // placement_tu_host.cpp, g++
report from_cuda_tu(); // test_cuda_placement.cu, nvcc

} // namespace placement_tu
