// The seed model's two convolutions at batch 128: NHWC, 5x5 filters (HWIO), SAME, stride 1,
// bench_threads() threads; items = FLOPs, fwd: 2*N*OH*OW*KH*KW*C*O, bwd: that times the number
// of gradients computed:
//   typeflow_conv1_fwd   x [128, 28, 28, 1] -> 32 channels
//   typeflow_conv1_bwd   the filter gradient only: what training needs, the images having none
//   typeflow_conv2_fwd   x [128, 14, 14, 32] -> 64 channels
//   typeflow_conv2_bwd   the input and the filter gradients, fetched by one run
// (bench/torch_baselines.py computes the same gradients.) The backward graphs use the ops that
// ty::grad itself emits for conv2d, conv2d_backprop_input(dy, w, x) and
// conv2d_backprop_filter(x, dy, w), with dy fed as a placeholder, so the forward is not timed.
// Every run's whole cost is timed, fetching the outputs included (a fetch hands over the run's
// own buffer, which returns to the session's pool when the tensor dies). Each result is checked
// once against double-precision sums at sampled positions.
#include "common.hpp"

#include <array>

namespace {

constexpr std::int64_t batch = 128, k = 5, pad = 2; // SAME with a 5x5 filter: 2 on each side

template <std::int64_t H, std::int64_t C, std::int64_t O>
struct layer {
  static constexpr auto x = ty::placeholder<"x", float, ty::shape<ty::dyn, H, H, C>>;
  static constexpr auto w = ty::placeholder<"w", float, ty::shape<k, k, C, O>>;
  static constexpr auto dy = ty::placeholder<"dy", float, ty::shape<ty::dyn, H, H, O>>;
  static constexpr auto y = ty::conv2d<ty::padding::same>(x, w);
  static constexpr auto dx = ty::conv2d_backprop_input<ty::padding::same, 1, 1, 1, 1>(dy, w, x);
  static constexpr auto dw = ty::conv2d_backprop_filter<ty::padding::same, 1, 1, 1, 1>(x, dy, w);
  static constexpr double flops = 2.0 * batch * H * H * k * k * C * O;

  ty::tensor<float> xs{{batch, H, H, C}}, ws{{k, k, C, O}}, dys{{batch, H, H, O}};
  layer() { fill_uniform(xs, -1, 1, 1), fill_uniform(ws, -1, 1, 2), fill_uniform(dys, -1, 1, 3); }

  float xv(std::int64_t n, std::int64_t i, std::int64_t j, std::int64_t c) const {
    return i < 0 || i >= H || j < 0 || j >= H ? 0.0f : xs[((n * H + i) * H + j) * C + c];
  }
  float dyv(std::int64_t n, std::int64_t i, std::int64_t j, std::int64_t o) const {
    return i < 0 || i >= H || j < 0 || j >= H ? 0.0f : dys[((n * H + i) * H + j) * O + o];
  }
  float wv(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t o) const {
    return ws[((a * k + b) * C + c) * O + o];
  }

  /// `got` (flat, row-major over `dims`) agrees with term-by-term double sums at 16 sampled
  /// positions: |got - ref| <= 1e-5 * sum |terms|. `terms(p, add)` calls add(u, v) per product.
  template <class Terms>
  static bool check(const float* got, std::array<std::int64_t, 4> dims, Terms terms) {
    for (std::int64_t s = 0; s < 16; ++s) {
      std::array<std::int64_t, 4> p{};
      std::int64_t flat = 0;
      for (int d = 0; d < 4; ++d) {
        p[d] = (s * 7919 + d * 104729) % dims[d];
        flat = flat * dims[d] + p[d];
      }
      double ref = 0, scale = 0;
      terms(p, [&](double u, double v) { ref += u * v, scale += std::abs(u * v); });
      if (!within(got[flat], ref, 1e-5, scale))
        return false;
    }
    return true;
  }
  bool check_y(const float* got) const {
    return check(got, {batch, H, H, O}, [&](auto p, auto add) {
      for (std::int64_t a = 0; a < k; ++a)
        for (std::int64_t b = 0; b < k; ++b)
          for (std::int64_t c = 0; c < C; ++c)
            add(xv(p[0], p[1] + a - pad, p[2] + b - pad, c), wv(a, b, c, p[3]));
    });
  }
  bool check_dx(const float* got) const {
    return check(got, {batch, H, H, C}, [&](auto p, auto add) {
      for (std::int64_t a = 0; a < k; ++a)
        for (std::int64_t b = 0; b < k; ++b)
          for (std::int64_t o = 0; o < O; ++o)
            add(dyv(p[0], p[1] - a + pad, p[2] - b + pad, o), wv(a, b, p[3], o));
    });
  }
  bool check_dw(const float* got) const {
    return check(got, {k, k, C, O}, [&](auto p, auto add) {
      for (std::int64_t n = 0; n < batch; ++n)
        for (std::int64_t i = 0; i < H; ++i)
          for (std::int64_t j = 0; j < H; ++j)
            add(xv(n, i + p[0] - pad, j + p[1] - pad, p[2]), dyv(n, i, j, p[3]));
    });
  }
};

using conv1 = layer<28, 1, 32>;
using conv2 = layer<14, 32, 64>;

enum class pass { fwd, bwd_filter, bwd_both };

template <class L, pass P>
void typeflow_conv(benchmark::State& state) {
  const L l;
  ty::session s(bench_options());
  const auto run = [&] {
    const auto feeds = [&](auto... fetches) {
      return s.run(ty::fetch(fetches...), ty::feed(L::x, l.xs), ty::feed(L::w, l.ws),
                   ty::feed(L::dy, l.dys));
    };
    if constexpr (P == pass::fwd)
      return feeds(L::y);
    else if constexpr (P == pass::bwd_filter)
      return feeds(L::dw);
    else
      return feeds(L::dx, L::dw);
  };
  const auto out = run();
  bool ok;
  if constexpr (P == pass::fwd)
    ok = l.check_y(std::get<0>(out).data());
  else if constexpr (P == pass::bwd_filter)
    ok = l.check_dw(std::get<0>(out).data());
  else
    ok = l.check_dx(std::get<0>(out).data()) && l.check_dw(std::get<1>(out).data());
  if (!ok)
    return state.SkipWithError("typeflow result differs from the double reference");
  for (auto _ : state)
    benchmark::DoNotOptimize(run());
  const double gradients = P == pass::bwd_both ? 2 : 1;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * L::flops * gradients));
}

// Real time: the work runs on several threads.
BENCHMARK(typeflow_conv<conv1, pass::fwd>)->Name("typeflow_conv1_fwd")->UseRealTime();
BENCHMARK(typeflow_conv<conv1, pass::bwd_filter>)->Name("typeflow_conv1_bwd")->UseRealTime();
BENCHMARK(typeflow_conv<conv2, pass::fwd>)->Name("typeflow_conv2_fwd")->UseRealTime();
BENCHMARK(typeflow_conv<conv2, pass::bwd_both>)->Name("typeflow_conv2_bwd")->UseRealTime();

} // namespace
