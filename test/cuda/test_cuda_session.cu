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

} // namespace

int main() {
  if (ty::cuda_backend::device_count() == 0) {
    std::printf("%s\n", ty::cuda_backend::no_device_message);
    return 0;
  }
  constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, 16>>;
  constexpr auto w = ty::variable<"w", float, ty::shape<16, 16>, ty::uniform<-0.5, 0.5>>;
  constexpr auto b = ty::variable<"b", float, ty::shape<16>, ty::fill<0.1>>;
  return run_case(x, w, b) == 0 ? 0 : 1;
}
