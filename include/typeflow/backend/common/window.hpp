// Window geometry of the 2-D window ops (convolutions, pooling) over NHWC data: what every
// backend's kernels share, computed once from the op's attributes and the run-time extents.
#pragma once
#include <algorithm>
#include <cstdint>

#include "../../ops/nn.hpp"
#include "value.hpp"

namespace typeflow::backend {

/// Geometry of a 2-D window op over NHWC data.
struct window2d {
  std::int64_t n, h, w, c;     // input
  std::int64_t kh, kw, o;      // window (and output channels of a convolution)
  std::int64_t oh, ow;         // output
  std::int64_t sh, sw, dh, dw; // strides, dilations
  std::int64_t ph, pw;         // padding before
  std::int64_t patch() const { return kh * kw * c; }
  std::int64_t rows() const { return n * oh * ow; }
};

/// Output pixel (oy, ox)'s window of a pool, clipped to the input: rows [y0, y1), columns
/// [x0, x1); empty when it lies wholly in the padding.
struct clipped_window {
  std::int64_t y0, y1, x0, x1;
  clipped_window(const window2d& g, std::int64_t oy, std::int64_t ox)
      : y0(std::max<std::int64_t>(oy * g.sh - g.ph, 0)),
        y1(std::min<std::int64_t>(oy * g.sh - g.ph + g.kh, g.h)),
        x0(std::max<std::int64_t>(ox * g.sw - g.pw, 0)),
        x1(std::min<std::int64_t>(ox * g.sw - g.pw + g.kw, g.w)) {}
  bool empty() const { return y1 <= y0 || x1 <= x0; }
  std::int64_t size() const { return (y1 - y0) * (x1 - x0); }
};

template <class Op>
window2d window_of(const backend::rt_dims& x, std::int64_t kh, std::int64_t kw, std::int64_t o,
                   std::int64_t sh, std::int64_t sw, std::int64_t dh, std::int64_t dw) {
  const auto gh = detail::window_axis(x.d[1], kh, sh, dh, Op::pad);
  const auto gw = detail::window_axis(x.d[2], kw, sw, dw, Op::pad);
  return {x.d[0], x.d[1], x.d[2], x.d[3],        kh,           kw, o, gh.out, gw.out, sh,
          sw,     dh,     dw,     gh.pad_before, gw.pad_before};
}
template <class Op>
window2d conv_window(const backend::rt_dims& x, const backend::rt_dims& w) {
  return window_of<Op>(x, w.d[0], w.d[1], w.d[3], Op::sh, Op::sw, Op::dh, Op::dw);
}
template <class Op>
window2d pool_window(const backend::rt_dims& x) {
  return window_of<Op>(x, Op::kh, Op::kw, x.d[3], Op::sh, Op::sw, 1, 1);
}

} // namespace typeflow::backend
