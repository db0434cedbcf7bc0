// unit.cuda_placement: a plan places its nodes the same in a translation unit nvcc compiles with
// the CUDA backend (this one) and in one g++ compiles without it (placement_tu_host.cpp). Needs
// no GPU: placements are computed at compile time.
#include <doctest/doctest.h>

#include <cstddef>
#include <string>

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

namespace {
namespace ty = typeflow;
// A model with products (no probe: GCC 12's -Wrestrict misfires on the probe's attrs() string
// when describe_placement instantiates it at -O3).
namespace products_model {
inline constexpr auto x = ty::placeholder<"px", float, ty::shape<ty::dyn, 8, 8, 2>>;
inline constexpr auto h = ty::relu(ty::conv2d_layer<"p_conv", 3, 3, 4>(x));
inline constexpr auto y = ty::dense<"p_fc", 3>(ty::reshape<-1, 8 * 8 * 4>(h));
inline constexpr auto loss = ty::mean(ty::square(y));
inline constexpr auto train =
    ty::momentum(ty::constant<0.01>, ty::constant<0.9>, ty::nesterov).minimize(loss);
using plan = ty::compile::plan<ty::type_list<decltype(loss), decltype(train)>, ty::on<ty::gpu<0>>>;
} // namespace products_model

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}
} // namespace

TEST_CASE("describe_placement names the GPU steps' products: 16-bit under the precision, else "
          "TF32 where allowed") {
  using P = products_model::plan;
  using typeflow::precision;
  const std::string bf16 = P::describe_placement(precision::float32, true, precision::bfloat16);
  const std::string f16 = P::describe_placement(precision::float32, false, precision::float16);
  const std::string tf32 = P::describe_placement(precision::float32, true);
  const std::string plain = P::describe_placement();
  // The convolution, its filter gradient, the dense layer's matmul and its two gradients (the
  // convolution's input gradient is not needed: its input is fed).
  const std::size_t products = count(tf32, "tf32 products, float32 sums");
  INFO(bf16);
  CHECK(products == 5);
  CHECK(count(bf16, "bfloat16 products, float32 sums") == products);
  CHECK(count(bf16, "tf32 products") == 0); // the 16-bit precision takes precedence
  CHECK(count(f16, "float16 products, float32 sums") == products);
  CHECK(count(plain, " products, float32 sums") == 0);
}
