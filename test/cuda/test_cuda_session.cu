// A session on gpu<0>: the fused elementwise regions of a small model and its gradients run as
// CUDA kernels, the other ops on the CPU by soft placement, with host-device transfers between;
// values and gradients must match a CPU session's. Without a device it reports "skipped: no
// CUDA device" (CTest counts that as skipped, not passed).
#include <cmath>
#include <cstdio>

#include "typeflow/backend/cuda/session.cuh"
#include "typeflow/typeflow.hpp"

namespace ty = typeflow;

namespace {

// A template with deduced node types: nvcc's host-code generation cannot spell, outside
// templates, types whose template arguments are class-type values (the placeholders' names).
template <class X, class W, class B>
int run_case(X x, W w, B b) {
  constexpr auto h = ty::tanh(ty::matmul(x, w) + b) * ty::constant<0.5>;
  constexpr auto loss = ty::mean(ty::square(h - ty::sigmoid(x * ty::constant<2.0>)));
  constexpr auto gw = ty::grad(loss, w);
  constexpr auto col_max = ty::max<0>(h);
  ty::tensor<float> xv({64, 16});
  for (std::int64_t i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)));
  ty::session<ty::on<ty::gpu<0>>> g(ty::session_options{.seed = 3});
  ty::session<> c(ty::session_options{.seed = 3});
  auto [lg, gg, mg] = g.run(ty::fetch(loss, gw, col_max), ty::feed(x, xv));
  auto [lc, gc, mc] = c.run(ty::fetch(loss, gw, col_max), ty::feed(x, xv));
  int failures = 0;
  for (std::int64_t i = 0; i < mc.size(); ++i)
    if (mg[i] != mc[i]) {
      std::printf("FAIL max<0>[%lld]: GPU %.9g, CPU %.9g\n", static_cast<long long>(i), mg[i],
                  mc[i]);
      ++failures;
      break;
    }
  if (std::abs(lg[0] - lc[0]) > 1e-5f * (1 + std::abs(lc[0]))) {
    std::printf("FAIL loss: GPU %.9g, CPU %.9g\n", lg[0], lc[0]);
    ++failures;
  }
  for (std::int64_t i = 0; i < gc.size(); ++i)
    if (std::abs(gg[i] - gc[i]) > 1e-5f * (1 + std::abs(gc[i]))) {
      std::printf("FAIL d/dw[%lld]: GPU %.9g, CPU %.9g\n", static_cast<long long>(i), gg[i], gc[i]);
      ++failures;
      break;
    }
  std::printf("%s: loss %.6f, %zu transfers, %zu kernels\n", failures ? "FAIL" : "ok", lg[0],
              g.stats().transfers, g.stats().steps);
  return failures;
}

/// A small convolutional model and its gradients: conv2d, bias_add, relu, max_pool, reshape,
/// matmul and the fused cross-entropy on the GPU.
template <class X, class Y>
int conv_case(X x, Y y) {
  constexpr auto h = ty::max_pool<ty::padding::same, 2>(
      ty::relu(ty::conv2d_layer<"conv", 3, 3, 8, ty::uniform<-0.3, 0.3>, ty::fill<0.1>>(x)));
  constexpr auto logits =
      ty::dense<"fc", 10, ty::uniform<-0.2, 0.2>>(ty::reshape<-1, 4 * 4 * 8>(h));
  constexpr auto loss = ty::mean(ty::sparse_softmax_cross_entropy_with_logits(logits, y));
  constexpr auto cw = ty::find_variable<"conv/weights">(loss);
  constexpr auto fw = ty::find_variable<"fc/weights">(loss);
  constexpr auto grads = ty::grad(loss, cw, fw);
  constexpr auto gcw = ty::get<0>(grads);
  constexpr auto gfw = ty::get<1>(grads);
  ty::tensor<float> xv({6, 8, 8, 3});
  for (std::int64_t i = 0; i < xv.size(); ++i)
    xv[i] = static_cast<float>(std::cos(0.17 * static_cast<double>(i)));
  ty::tensor<std::int32_t> yv({6}, {0, 3, 9, 2, 2, 7});
  ty::session<ty::on<ty::gpu<0>>> g(ty::session_options{.seed = 4});
  ty::session<> c(ty::session_options{.seed = 4});
  auto [lg, ag, bg] = g.run(ty::fetch(loss, gcw, gfw), ty::feed(x, xv), ty::feed(y, yv));
  auto [lc, ac, bc] = c.run(ty::fetch(loss, gcw, gfw), ty::feed(x, xv), ty::feed(y, yv));
  int failures = 0;
  auto close = [](float a, float b) { return std::abs(a - b) <= 1e-4f * (1 + std::abs(b)); };
  if (!close(lg[0], lc[0])) {
    std::printf("FAIL conv loss: GPU %.9g, CPU %.9g\n", lg[0], lc[0]);
    ++failures;
  }
  for (std::int64_t i = 0; i < ac.size(); ++i)
    if (!close(ag[i], ac[i])) {
      std::printf("FAIL d/dconv[%lld]: GPU %.9g, CPU %.9g\n", static_cast<long long>(i), ag[i],
                  ac[i]);
      ++failures;
      break;
    }
  for (std::int64_t i = 0; i < bc.size(); ++i)
    if (!close(bg[i], bc[i])) {
      std::printf("FAIL d/dfc[%lld]: GPU %.9g, CPU %.9g\n", static_cast<long long>(i), bg[i],
                  bc[i]);
      ++failures;
      break;
    }
  std::printf("%s: conv model loss %.6f, %zu transfers, %zu kernels\n", failures ? "FAIL" : "ok",
              lg[0], g.stats().transfers, g.stats().steps);
  return failures;
}

} // namespace

int main() {
  if (ty::cuda_backend::device_count() == 0) {
    std::printf("%s\n", ty::cuda_backend::no_device_message);
    return 0;
  }
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 16>>;
  constexpr auto w = ty::variable<"w", float, ty::shape<16, 16>, ty::uniform<-0.5, 0.5>>;
  constexpr auto b = ty::variable<"b", float, ty::shape<16>, ty::fill<0.1>>;
  constexpr auto images = ty::placeholder<"images", float, ty::shape<ty::dyn, 8, 8, 3>>;
  constexpr auto labels = ty::placeholder<"labels", std::int32_t, ty::shape<ty::dyn>>;
  const int failures = run_case(x, w, b) + conv_case(images, labels);
  return failures == 0 ? 0 : 1;
}
