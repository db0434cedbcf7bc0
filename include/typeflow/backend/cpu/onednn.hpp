// oneDNN, the CPU engine for float32 convolutions and matrix products (TYPEFLOW_HAS_ONEDNN).
//
// oneDNN picks its kernels from the CPU's features (AVX2, AVX-512, AMX...), not from a table of
// model numbers, so it stays fast on CPUs newer than the library build (Debian bookworm's
// OpenBLAS 0.3.21 falls back to SSE3 kernels on CPUs it does not know). TensorFlow and PyTorch
// use it on x86 for the same reason.
//
// Tensors stay in typeflow's layouts: activations NHWC, filters HWIO, matrices row-major. The
// convolution primitives are created with NHWC activations and let oneDNN choose the filter
// layout (`any`, usually a blocked one); the filter, or its gradient, is reordered from or to
// HWIO around the call (a few hundred KB at most; far cheaper than a slower kernel). Every
// primitive is created once per geometry and cached in the context's `onednn_cache`, so a plan
// step run with the same batch size reuses its primitive.
//
// Threads: Debian's oneDNN runs on OpenMP; each call sets the calling thread's OpenMP team
// size to the session's thread count, so oneDNN and the session's pool never run more threads
// than the session was given.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "../../core/error.hpp"
#include "nn.hpp"

#if defined(TYPEFLOW_HAS_ONEDNN)
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace typeflow::cpu_backend {

/// Whether float32 convolutions and matrix products run on oneDNN.
inline constexpr bool has_onednn =
#if defined(TYPEFLOW_HAS_ONEDNN)
    true;
#else
    false;
#endif

#if defined(TYPEFLOW_HAS_ONEDNN)

namespace onednn {

/// The process's CPU engine (oneDNN engines are cheap handles; one is enough).
inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
inline constexpr auto f32 = dnnl::memory::data_type::f32;

/// oneDNN's name for the ISA its kernels use on this CPU (e.g. "avx512_core_bf16").
inline std::string isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
  case dnnl::cpu_isa::sse41:
    return "sse41";
  case dnnl::cpu_isa::avx:
    return "avx";
  case dnnl::cpu_isa::avx2:
    return "avx2";
  case dnnl::cpu_isa::avx512_mic:
  case dnnl::cpu_isa::avx512_mic_4ops:
    return "avx512_mic";
  case dnnl::cpu_isa::avx512_core:
    return "avx512_core";
  case dnnl::cpu_isa::avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl::cpu_isa::avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl::cpu_isa::avx512_core_amx:
    return "avx512_core_amx";
  case dnnl::cpu_isa::avx2_vnni:
    return "avx2_vnni";
  default:
    return "generic";
  }
}

/// A primitive with its scratchpad size (primitives are created with a user scratchpad, so one
/// primitive can run on several threads at once, each with its own scratchpad).
template <class P>
struct prim {
  P p;
  std::size_t scratch = 0;
  dnnl::memory::desc w; ///< the layout the primitive wants for the filter (convolutions)
};

/// A convolution's primitives for one geometry (batch slab included).
struct conv_entry {
  dnnl::memory::desc src, dst, hwio;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  std::unique_ptr<prim<dnnl::convolution_forward>> fwd;
  std::unique_ptr<prim<dnnl::convolution_backward_data>> bwd_data;
  std::unique_ptr<prim<dnnl::convolution_backward_weights>> bwd_weights;
};

inline dims conv_padding_r(const window2d& g) {
  // Chosen so that oneDNN's output extent ((h + pl + pr - ((kh-1)*dh + 1)) / sh + 1) is oh;
  // when the last rows of the input are never read (VALID with a stride) zero does.
  const std::int64_t ekh = (g.kh - 1) * g.dh + 1, ekw = (g.kw - 1) * g.dw + 1;
  return {std::max<std::int64_t>(0, (g.oh - 1) * g.sh + ekh - g.h - g.ph),
          std::max<std::int64_t>(0, (g.ow - 1) * g.sw + ekw - g.w - g.pw)};
}

inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

/// The calling thread's scratchpad, at least `bytes` long.
inline void* thread_scratchpad(std::size_t bytes) {
  thread_local std::unique_ptr<std::byte[]> buf;
  thread_local std::size_t size = 0;
  if (bytes > size) {
    buf.reset(new std::byte[bytes]);
    size = bytes;
  }
  return buf.get();
}

} // namespace onednn

/// The oneDNN primitives a session created, by geometry: created once per plan step, batch
/// size and slab (see below) and reused by every later run. Thread-safe.
class onednn_cache {
public:
  using conv_key = std::array<std::int64_t, 15>;
  using matmul_key = std::array<std::int64_t, 8>;

  onednn::conv_entry& conv(const window2d& g) {
    std::lock_guard lock(mu_);
    return conv_locked(g);
  }

  const onednn::prim<dnnl::convolution_forward>& conv_forward(const window2d& g) {
    std::lock_guard lock(mu_);
    auto& e = conv_locked(g);
    if (!e.fwd) {
      auto p = std::make_unique<onednn::prim<dnnl::convolution_forward>>();
      p->p = dnnl::convolution_forward(e.fwd_pd);
      p->scratch = e.fwd_pd.scratchpad_desc().get_size();
      p->w = e.fwd_pd.weights_desc();
      e.fwd = std::move(p);
      ++primitives_;
    }
    return *e.fwd;
  }

  const onednn::prim<dnnl::convolution_backward_data>& conv_backward_data(const window2d& g) {
    std::lock_guard lock(mu_);
    auto& e = conv_locked(g);
    if (!e.bwd_data) {
      using namespace dnnl;
      convolution_backward_data::desc d(algorithm::convolution_direct, e.src, any_filter(g), e.dst,
                                        {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.ph, g.pw},
                                        onednn::conv_padding_r(g));
      convolution_backward_data::primitive_desc pd(d, onednn::user_scratchpad(), onednn::engine(),
                                                   e.fwd_pd);
      auto p = std::make_unique<onednn::prim<convolution_backward_data>>();
      p->p = convolution_backward_data(pd);
      p->scratch = pd.scratchpad_desc().get_size();
      p->w = pd.weights_desc();
      e.bwd_data = std::move(p);
      ++primitives_;
    }
    return *e.bwd_data;
  }

  const onednn::prim<dnnl::convolution_backward_weights>& conv_backward_weights(const window2d& g) {
    std::lock_guard lock(mu_);
    auto& e = conv_locked(g);
    if (!e.bwd_weights) {
      using namespace dnnl;
      convolution_backward_weights::desc d(algorithm::convolution_direct, e.src, any_filter(g),
                                           e.dst, {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.ph, g.pw},
                                           onednn::conv_padding_r(g));
      convolution_backward_weights::primitive_desc pd(d, onednn::user_scratchpad(),
                                                      onednn::engine(), e.fwd_pd);
      auto p = std::make_unique<onednn::prim<convolution_backward_weights>>();
      p->p = convolution_backward_weights(pd);
      p->scratch = pd.scratchpad_desc().get_size();
      p->w = pd.diff_weights_desc();
      e.bwd_weights = std::move(p);
      ++primitives_;
    }
    return *e.bwd_weights;
  }

  /// C[m,n] = op(A) op(B) with row strides lda, ldb, ldc (A stored [k,m] when ta, B stored
  /// [n,k] when tb).
  const onednn::prim<dnnl::matmul>& matmul(bool ta, bool tb, std::int64_t m, std::int64_t n,
                                           std::int64_t k, std::int64_t lda, std::int64_t ldb,
                                           std::int64_t ldc) {
    std::lock_guard lock(mu_);
    const matmul_key key{ta, tb, m, n, k, lda, ldb, ldc};
    auto it = matmuls_.find(key);
    if (it != matmuls_.end())
      return *it->second;
    using namespace dnnl;
    const memory::desc a({m, k}, onednn::f32, ta ? onednn::dims{1, lda} : onednn::dims{lda, 1});
    const memory::desc b({k, n}, onednn::f32, tb ? onednn::dims{1, ldb} : onednn::dims{ldb, 1});
    const memory::desc c({m, n}, onednn::f32, onednn::dims{ldc, 1});
    matmul::primitive_desc pd(matmul::desc(a, b, c), onednn::user_scratchpad(), onednn::engine());
    auto p = std::make_unique<onednn::prim<dnnl::matmul>>();
    p->p = dnnl::matmul(pd);
    p->scratch = pd.scratchpad_desc().get_size();
    ++primitives_;
    return *matmuls_.emplace(key, std::move(p)).first->second;
  }

  /// Primitives created so far (a test checks that a second run creates none).
  std::size_t primitives() const {
    std::lock_guard lock(mu_);
    return primitives_;
  }

private:
  static dnnl::memory::desc any_filter(const window2d& g) {
    return {{g.o, g.c, g.kh, g.kw}, onednn::f32, onednn::tag::any};
  }
  onednn::conv_entry& conv_locked(const window2d& g) {
    const conv_key k{g.n,  g.h,  g.w,  g.c,  g.kh, g.kw, g.o, g.oh,
                     g.ow, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw};
    auto it = convs_.find(k);
    if (it != convs_.end())
      return *it->second;
    auto e = std::make_unique<onednn::conv_entry>();
    using namespace dnnl;
    e->src = memory::desc({g.n, g.c, g.h, g.w}, onednn::f32, onednn::tag::nhwc);
    e->dst = memory::desc({g.n, g.o, g.oh, g.ow}, onednn::f32, onednn::tag::nhwc);
    e->hwio = memory::desc({g.o, g.c, g.kh, g.kw}, onednn::f32, onednn::tag::hwio);
    convolution_forward::desc fd(prop_kind::forward_training, algorithm::convolution_direct, e->src,
                                 any_filter(g), e->dst, {g.sh, g.sw}, {g.dh - 1, g.dw - 1},
                                 {g.ph, g.pw}, onednn::conv_padding_r(g));
    e->fwd_pd =
        convolution_forward::primitive_desc(fd, onednn::user_scratchpad(), onednn::engine());
    return *convs_.emplace(k, std::move(e)).first->second;
  }

  mutable std::mutex mu_;
  std::map<conv_key, std::unique_ptr<onednn::conv_entry>> convs_;
  std::map<matmul_key, std::unique_ptr<onednn::prim<dnnl::matmul>>> matmuls_;
  std::size_t primitives_ = 0;
};

namespace onednn {

/// Runs primitive `p` on the calling thread (an OpenMP team of one: the session's pool owns the
/// cores, so oneDNN never starts threads of its own), with a thread-local scratchpad.
template <class P>
void execute(const prim<P>& p, std::unordered_map<int, dnnl::memory> args) {
  omp_set_num_threads(1);
  dnnl::stream s(engine());
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory({{static_cast<dnnl::memory::dim>(p.scratch)},
                                                  dnnl::memory::data_type::u8,
                                                  tag::x},
                                                 engine(), thread_scratchpad(p.scratch + 1)));
  p.p.execute(s, args);
  s.wait();
}

inline dnnl::memory mem(const dnnl::memory::desc& d, const void* p) {
  return dnnl::memory(d, engine(), const_cast<void*>(p));
}

/// Copies between two layouts of one filter on the calling thread.
inline void reorder(const dnnl::memory::desc& from, const float* src, const dnnl::memory::desc& to,
                    float* dst) {
  omp_set_num_threads(1);
  dnnl::stream s(engine());
  dnnl::memory a = mem(from, src), b = mem(to, dst);
  dnnl::reorder(a, b).execute(s, a, b);
  s.wait();
}

/// Images [b0, b1) of the batch as a geometry of their own.
inline window2d slab(window2d g, std::int64_t b0, std::int64_t b1) {
  g.n = b1 - b0;
  return g;
}

/// A filter in the layout `want`: the HWIO buffer itself, or a copy reordered into `buf`.
inline const float* filter_in(const dnnl::memory::desc& hwio, const float* w,
                              const dnnl::memory::desc& want, std::unique_ptr<float[]>& buf) {
  if (want == hwio)
    return w;
  buf.reset(new float[want.get_size() / sizeof(float) + 1]);
  reorder(hwio, w, want, buf.get());
  return buf.get();
}

} // namespace onednn

// The convolutions split the batch into conv_parts fixed slabs (by the batch size alone, as the
// im2col kernels do), each a single-threaded oneDNN call on one of the pool's threads; the
// filter gradient sums the slabs' partial gradients in slab order. So the arithmetic, and the
// bits of every result, do not depend on the thread count.

/// y = conv(x, w): NHWC x and y, HWIO w.
inline void onednn_conv2d_forward(onednn_cache& cache, thread_pool& pool, const float* x,
                                  const float* w, const window2d& g, float* y) {
  const std::int64_t parts = std::min(conv_parts, g.n);
  // The filter reordered once per distinct slab layout (slabs differ by one image at most).
  std::unique_ptr<float[]> buf[2];
  const float* wf[2] = {};
  dnnl::memory::desc layout[2];
  for (int i = 0; i < 2; ++i) {
    const std::int64_t q = i == 0 ? 0 : parts - 1;
    const auto& p = cache.conv_forward(onednn::slab(g, g.n * q / parts, g.n * (q + 1) / parts));
    wf[i] = onednn::filter_in(cache.conv(g).hwio, w, p.w, buf[i]);
    layout[i] = p.w;
  }
  pool.parallel_for(parts, 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int64_t b0 = g.n * q / parts, b1 = g.n * (q + 1) / parts;
      const window2d s = onednn::slab(g, b0, b1);
      const auto& p = cache.conv_forward(s);
      const auto& e = cache.conv(s);
      const float* wq = p.w == layout[0] ? wf[0] : wf[1];
      onednn::execute(p, {{DNNL_ARG_SRC, onednn::mem(e.src, x + b0 * g.h * g.w * g.c)},
                          {DNNL_ARG_WEIGHTS, onednn::mem(p.w, wq)},
                          {DNNL_ARG_DST, onednn::mem(e.dst, y + b0 * g.oh * g.ow * g.o)}});
    }
  });
}

/// dx = the input gradient of a convolution given dy and w.
inline void onednn_conv2d_backprop_input(onednn_cache& cache, thread_pool& pool, const float* dy,
                                         const float* w, const window2d& g, float* dx) {
  const std::int64_t parts = std::min(conv_parts, g.n);
  std::unique_ptr<float[]> buf[2];
  const float* wf[2] = {};
  dnnl::memory::desc layout[2];
  for (int i = 0; i < 2; ++i) {
    const std::int64_t q = i == 0 ? 0 : parts - 1;
    const auto& p =
        cache.conv_backward_data(onednn::slab(g, g.n * q / parts, g.n * (q + 1) / parts));
    wf[i] = onednn::filter_in(cache.conv(g).hwio, w, p.w, buf[i]);
    layout[i] = p.w;
  }
  pool.parallel_for(parts, 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int64_t b0 = g.n * q / parts, b1 = g.n * (q + 1) / parts;
      const window2d s = onednn::slab(g, b0, b1);
      const auto& p = cache.conv_backward_data(s);
      const auto& e = cache.conv(s);
      const float* wq = p.w == layout[0] ? wf[0] : wf[1];
      onednn::execute(p, {{DNNL_ARG_DIFF_DST, onednn::mem(e.dst, dy + b0 * g.oh * g.ow * g.o)},
                          {DNNL_ARG_WEIGHTS, onednn::mem(p.w, wq)},
                          {DNNL_ARG_DIFF_SRC, onednn::mem(e.src, dx + b0 * g.h * g.w * g.c)}});
    }
  });
}

/// dw = the filter gradient of a convolution given x and dy (HWIO); `partial` holds
/// conv_parts filters.
inline void onednn_conv2d_backprop_filter(onednn_cache& cache, thread_pool& pool, const float* x,
                                          const float* dy, const window2d& g, float* partial,
                                          float* dw) {
  const std::int64_t parts = std::min(conv_parts, g.n), size = g.patch() * g.o;
  pool.parallel_for(parts, 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int64_t b0 = g.n * q / parts, b1 = g.n * (q + 1) / parts;
      const window2d s = onednn::slab(g, b0, b1);
      const auto& p = cache.conv_backward_weights(s);
      const auto& e = cache.conv(s);
      float* out = partial + q * size;
      std::unique_ptr<float[]> blocked;
      float* dst = out;
      if (!(p.w == e.hwio)) {
        blocked.reset(new float[p.w.get_size() / sizeof(float) + 1]);
        dst = blocked.get();
      }
      onednn::execute(p, {{DNNL_ARG_SRC, onednn::mem(e.src, x + b0 * g.h * g.w * g.c)},
                          {DNNL_ARG_DIFF_DST, onednn::mem(e.dst, dy + b0 * g.oh * g.ow * g.o)},
                          {DNNL_ARG_DIFF_WEIGHTS, onednn::mem(p.w, dst)}});
      if (blocked)
        onednn::reorder(p.w, blocked.get(), e.hwio, out);
    }
  });
  if (parts == 1)
    std::copy_n(partial, size, dw);
  else
    for (std::int64_t i = 0; i < size; ++i) {
      float acc = partial[i];
      for (std::int64_t q = 1; q < parts; ++q)
        acc += partial[q * size + i];
      dw[i] = acc;
    }
}

/// C[m,n] = op(A) op(B) (row strides lda, ldb, ldc) on the calling thread.
inline void onednn_gemm_serial(onednn_cache& cache, bool ta, bool tb, std::int64_t m,
                               std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                               const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  const auto& p = cache.matmul(ta, tb, m, n, k, lda, ldb, ldc);
  using dnnl::memory;
  onednn::execute(
      p, {{DNNL_ARG_SRC, onednn::mem(memory::desc({m, k}, onednn::f32,
                                                  ta ? onednn::dims{1, lda} : onednn::dims{lda, 1}),
                                     a)},
          {DNNL_ARG_WEIGHTS,
           onednn::mem(
               memory::desc({k, n}, onednn::f32, tb ? onednn::dims{1, ldb} : onednn::dims{ldb, 1}),
               b)},
          {DNNL_ARG_DST, onednn::mem(memory::desc({m, n}, onednn::f32, onednn::dims{ldc, 1}), c)}});
}

#else

/// Without oneDNN there is nothing to cache.
class onednn_cache {
public:
  std::size_t primitives() const { return 0; }
};

#endif

} // namespace typeflow::cpu_backend
