// GPU towers: replicate_with<seed_tower, gpu<0>, gpu<1>> (the seed's multi-GPU training:
// variables on cpu<0>, each tower's compute on its GPU, the gradients averaged by one NCCL
// all-reduce) trains as one CPU session on the whole batches. Needs two GPUs; with fewer it
// reports "skipped: no CUDA device" (fewer than 2), which CTest counts as skipped.
#include <cmath>
#include <cstdio>

#include "typeflow/typeflow.hpp"

namespace ty = typeflow;
using i64 = std::int64_t;

namespace {

constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 10>>;
constexpr auto y = ty::placeholder<"y", std::int32_t, ty::shape<ty::dyn>>;
constexpr auto h = ty::relu(ty::dense<"l1", 16, ty::uniform<-0.4, 0.4>, ty::fill<0.05>>(x));
constexpr auto logits = ty::dense<"l2", 5, ty::uniform<-0.4, 0.4>>(h);
constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));
constexpr auto train =
    ty::momentum(ty::constant<0.1>, ty::constant<0.9>, ty::nesterov).minimize(loss);

template <class D>
using seed_tower = ty::variables_on<ty::cpu<0>, ty::compute_on<D>>;
using towers = ty::replicate_with<seed_tower, ty::gpu<0>, ty::gpu<1>>;

// The gradients' replica_mean nodes are on the towers' GPUs: averaged there by NCCL.
using tower0_plan =
    ty::compile::plan<ty::type_list<decltype(loss), decltype(train)>, seed_tower<ty::gpu<0>>>;
static_assert(!tower0_plan::placement.fell_back[tower0_plan::index_c<decltype(loss)>::value]);

} // namespace

int main() {
  if (ty::cuda_backend::device_count() < 2) {
    std::printf("%s (this test needs 2 GPUs)\n", ty::cuda_backend::no_device_message);
    return 0;
  }
  ty::session<> one(ty::session_options{.threads = 2, .seed = 4});
  ty::session<towers> two(ty::session_options{.threads = 2, .seed = 4});
  int failures = 0;
  for (i64 step = 0; step < 4; ++step) {
    const i64 rows = step == 3 ? 7 : 32; // an uneven last batch
    ty::tensor<float> xv({rows, 10});
    ty::tensor<std::int32_t> yv({rows});
    for (i64 i = 0; i < xv.size(); ++i)
      xv[i] = static_cast<float>(std::sin(0.23 * static_cast<double>(i + step)));
    for (i64 i = 0; i < rows; ++i)
      yv[i] = static_cast<std::int32_t>((i * 3 + step) % 5);
    auto [a] = one.run(ty::fetch(loss, train), ty::feed(x, xv), ty::feed(y, yv));
    auto [b] = two.run(ty::fetch(loss, train), ty::feed(x, xv), ty::feed(y, yv));
    if (std::abs(a[0] - b[0]) > 1e-4f * (1 + std::abs(a[0]))) {
      std::printf("FAIL step %lld: loss %.9g on 2 GPUs, %.9g on the CPU\n",
                  static_cast<long long>(step), b[0], a[0]);
      ++failures;
    }
  }
  const auto w1 = ty::find_variable<"l1/weights">(loss);
  const auto wa = one.read(w1), wb = two.read(w1);
  for (i64 i = 0; i < wa.size(); ++i)
    if (std::abs(wa[i] - wb[i]) > 1e-4f * (1 + std::abs(wa[i]))) {
      std::printf("FAIL l1/weights[%lld]: %.9g on 2 GPUs, %.9g on the CPU\n",
                  static_cast<long long>(i), wb[i], wa[i]);
      ++failures;
      break;
    }
  std::printf("%s: 2 GPU towers, 4 steps\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
