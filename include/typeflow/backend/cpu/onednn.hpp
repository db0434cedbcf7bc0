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
// Threads: the session's pool runs every oneDNN call, one slab of the batch (convolutions) or of
// the product (matmul) per task, each call single-threaded. Debian's oneDNN is built on OpenMP
// and sizes a primitive's team when it creates it; each creation and each call first sets the
// calling thread's OpenMP team to one, so oneDNN starts no threads of its own and the process
// runs exactly the session's thread count (no two runtimes competing for two cores; OpenMP's
// idle threads spin), and results do not depend on that count.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "../../core/compiled.hpp"
#include "../../core/error.hpp"
#include "nn.hpp"

#if defined(TYPEFLOW_HAS_ONEDNN)
// oneDNN's C API: its C++ header (dnnl.hpp) crashes nvcc 13's front end, and every translation
// unit, nvcc's included, must see the same CPU kernels.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
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

inline void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success)
    throw error(std::string("oneDNN: ") + what + " failed (dnnl_status_t " +
                std::to_string(static_cast<int>(s)) + ")");
}

/// The process's CPU engine.
inline dnnl_engine_t engine() {
  static const dnnl_engine_t e = [] {
    dnnl_engine_t r = nullptr;
    check(dnnl_engine_create(&r, dnnl_cpu, 0), "creating the CPU engine");
    return r;
  }();
  return e;
}

/// The calling thread's stream (in-order, on the CPU engine).
inline dnnl_stream_t stream() {
  struct holder {
    dnnl_stream_t s = nullptr;
    holder() { check(dnnl_stream_create(&s, engine(), dnnl_stream_default_flags), "a stream"); }
    ~holder() { dnnl_stream_destroy(s); }
  };
  thread_local holder h;
  return h.s;
}

using md = dnnl_memory_desc_t;

inline md tagged(std::initializer_list<std::int64_t> dims, dnnl_format_tag_t tag,
                 dnnl_data_type_t dt = dnnl_f32) {
  md d;
  dnnl_dims_t v{};
  int n = 0;
  for (auto x : dims)
    v[n++] = x;
  check(dnnl_memory_desc_init_by_tag(&d, n, v, dt, tag), "a memory descriptor");
  return d;
}
inline md strided(std::int64_t r, std::int64_t c, std::int64_t sr, std::int64_t sc,
                  dnnl_data_type_t dt = dnnl_f32) {
  md d;
  dnnl_dims_t v{r, c}, st{sr, sc};
  check(dnnl_memory_desc_init_by_strides(&d, 2, v, dt, st), "a memory descriptor");
  return d;
}

/// Whether oneDNN runs bfloat16 products natively on this CPU (AVX512-BF16 or AMX); elsewhere
/// it would emulate them, slower than float32, so a bfloat16 session computes in float32 there.
inline bool native_bf16() {
  // oneDNN's ISA values are sets of feature bits: any ISA that contains AVX512-BF16's
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & bf16) == bf16;
}

/// n float32 values rounded to bfloat16 (nearest, ties to even), on the calling thread.
inline void to_bf16(const float* src, std::int64_t n, bfloat16* dst) {
  for (std::int64_t i = 0; i < n; ++i)
    dst[i].bits = typeflow::detail::float_to_bf16_bits(src[i]);
}
inline bool equal(const md& a, const md& b) {
  return dnnl_memory_desc_equal(&a, &b) != 0;
}
inline std::size_t bytes(const md& d) {
  return dnnl_memory_desc_get_size(&d);
}

/// oneDNN's name for the ISA its kernels use on this CPU (e.g. "avx512_core_bf16").
TYPEFLOW_DECL std::string isa_name()
#if TYPEFLOW_BODIES
{
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_sse41:
    return "sse41";
  case dnnl_cpu_isa_avx:
    return "avx";
  case dnnl_cpu_isa_avx2:
    return "avx2";
  case dnnl_cpu_isa_avx512_mic:
  case dnnl_cpu_isa_avx512_mic_4ops:
    return "avx512_mic";
  case dnnl_cpu_isa_avx512_core:
    return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx:
    return "avx512_core_amx";
  case dnnl_cpu_isa_avx2_vnni:
    return "avx2_vnni";
  default:
    return "generic";
  }
}
#else
    ;
#endif

/// A primitive descriptor, owned.
struct pd_handle {
  dnnl_primitive_desc_t pd = nullptr;
  pd_handle() = default;
  explicit pd_handle(dnnl_primitive_desc_t p) : pd(p) {}
  pd_handle(const pd_handle&) = delete;
  pd_handle& operator=(const pd_handle&) = delete;
  ~pd_handle() {
    if (pd)
      dnnl_primitive_desc_destroy(pd);
  }
};

/// What a forward primitive applies to its output as it writes it (graph::epilogue): nothing,
/// a bias, or a bias then relu (an eltwise post-op).
enum class epilogue { none, bias, bias_relu };

/// Attributes asking for a user scratchpad (one primitive can then run on several threads at
/// once, each with its own scratchpad) and, for bias_relu, relu as a post-op.
struct user_scratchpad {
  dnnl_primitive_attr_t a = nullptr;
  explicit user_scratchpad(epilogue epi = epilogue::none) {
    check(dnnl_primitive_attr_create(&a), "primitive attributes");
    check(dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user), "scratchpad");
    if (epi == epilogue::bias_relu) {
      dnnl_post_ops_t po = nullptr;
      check(dnnl_post_ops_create(&po), "post-ops");
      const dnnl_status_t st = dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f);
      if (st == dnnl_success)
        check(dnnl_primitive_attr_set_post_ops(a, po), "post-ops");
      dnnl_post_ops_destroy(po);
      check(st, "a relu post-op");
    }
  }
  user_scratchpad(const user_scratchpad&) = delete;
  user_scratchpad& operator=(const user_scratchpad&) = delete;
  ~user_scratchpad() { dnnl_primitive_attr_destroy(a); }
};

/// A primitive with its scratchpad size and, for convolutions, the filter layout it wants and
/// the reorder between that layout and HWIO (none when it is HWIO).
struct primitive {
  dnnl_primitive_t p = nullptr;
  std::size_t scratch = 0;
  md w{};
  std::unique_ptr<primitive> reorder;
  primitive() = default;
  primitive(const primitive&) = delete;
  primitive& operator=(const primitive&) = delete;
  ~primitive() {
    if (p)
      dnnl_primitive_destroy(p);
  }
};

/// Sets the calling thread's OpenMP team to one. oneDNN sizes a primitive's team from the
/// creating thread's setting when it creates the descriptor and the primitive, and runs that
/// team at every execution: each creation and execution happens after this call, so oneDNN never
/// starts threads of its own (test_onednn.cpp checks, from a thread that asked OpenMP for four).
inline void team_of_one() {
  omp_set_num_threads(1);
}

TYPEFLOW_DECL std::unique_ptr<primitive> make(const pd_handle& pd, const char* what)
#if TYPEFLOW_BODIES
{
  team_of_one();
  auto r = std::make_unique<primitive>();
  check(dnnl_primitive_create(&r->p, pd.pd), what);
  r->scratch = bytes(*dnnl_primitive_desc_query_md(pd.pd, dnnl_query_scratchpad_md, 0));
  return r;
}
#else
    ;
#endif

/// A reorder from layout `from` to `to`.
TYPEFLOW_DECL std::unique_ptr<primitive> make_reorder(const md& from, const md& to)
#if TYPEFLOW_BODIES
{
  dnnl_primitive_desc_t pd = nullptr;
  team_of_one();
  check(dnnl_reorder_primitive_desc_create(&pd, &from, engine(), &to, engine(), nullptr),
        "a reorder");
  pd_handle h(pd);
  return make(h, "a reorder");
}
#else
    ;
#endif

/// The calling thread's scratchpad, at least `n` bytes long, 64-byte aligned and padded by a
/// cache line: oneDNN 2.7's JIT convolutions store 8 bytes at a time into a scratchpad whose
/// reported size is not a multiple of 8 (valgrind saw a store 4 bytes past a 236-byte
/// scratchpad of a strided 1x1 convolution's forward pass, and the heap corrupted).
inline void* thread_scratchpad(std::size_t n) {
  struct aligned_free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  thread_local std::unique_ptr<std::byte[], aligned_free> buf;
  thread_local std::size_t size = 0;
  if (n > size) {
    const std::size_t padded = (n + 63) / 64 * 64 + 64;
    buf.reset(static_cast<std::byte*>(::operator new[](padded, std::align_val_t{64})));
    size = padded - 64;
  }
  return buf.get();
}

/// One argument of an execution: oneDNN's argument index, layout, data.
struct arg {
  int index;
  const md* desc;
  const void* data;
};

/// Runs `p` on the calling thread (an OpenMP team of one: the session's pool owns the cores,
/// so oneDNN never starts threads of its own), with a thread-local scratchpad.
TYPEFLOW_DECL void execute(const primitive& p, std::initializer_list<arg> args)
#if TYPEFLOW_BODIES
{
  team_of_one();
  std::array<dnnl_exec_arg_t, 8> a{};
  std::array<md, 1> scratch_md{};
  int n = 0;
  const auto add = [&](int index, const md& d, const void* data) {
    dnnl_memory_t m = nullptr;
    check(dnnl_memory_create(&m, &d, engine(), const_cast<void*>(data)), "a memory object");
    a[static_cast<std::size_t>(n++)] = {index, m};
  };
  struct release {
    std::array<dnnl_exec_arg_t, 8>& a;
    int& n;
    ~release() {
      for (int i = 0; i < n; ++i)
        dnnl_memory_destroy(a[static_cast<std::size_t>(i)].memory);
    }
  } guard{a, n};
  for (const arg& x : args)
    add(x.index, *x.desc, x.data);
  if (p.scratch > 0) {
    dnnl_dims_t d{static_cast<dnnl_dim_t>(p.scratch)};
    check(dnnl_memory_desc_init_by_tag(&scratch_md[0], 1, d, dnnl_u8, dnnl_x), "a scratchpad");
    add(DNNL_ARG_SCRATCHPAD, scratch_md[0], thread_scratchpad(p.scratch));
  }
  check(dnnl_primitive_execute(p.p, stream(), n, a.data()), "executing a primitive");
  check(dnnl_stream_wait(stream()), "waiting for a stream");
}
#else
    ;
#endif

/// A convolution's primitives for one geometry (batch slab included); the forward ones by
/// epilogue.
struct conv_entry {
  // What the primitives read and write: float32 everywhere, except that a bfloat16 entry reads
  // its input and its output's gradient as bfloat16 (src_in, dst_in); outputs and gradients
  // are float32 either way (float32 accumulation).
  md src_in{}, src{}, dst_in{}, dst{}, hwio{}, bias{};
  pd_handle fwd_pd;
  std::unique_ptr<primitive> fwd[3], bwd_data, bwd_weights;
};

inline dnnl_dims_t* padding_r(const window2d& g, dnnl_dims_t& pr) {
  // Chosen so that oneDNN's output extent ((h + pl + pr - ((kh-1)*dh + 1)) / sh + 1) is oh;
  // when the last rows of the input are never read (VALID with a stride) zero does.
  const std::int64_t ekh = (g.kh - 1) * g.dh + 1, ekw = (g.kw - 1) * g.dw + 1;
  pr[0] = std::max<std::int64_t>(0, (g.oh - 1) * g.sh + ekh - g.h - g.ph);
  pr[1] = std::max<std::int64_t>(0, (g.ow - 1) * g.sw + ekw - g.w - g.pw);
  return &pr;
}

} // namespace onednn

/// The oneDNN primitives a session created, by geometry: created once per plan step, batch
/// size and slab (see below) and reused by every later run. Thread-safe.
class onednn_cache {
public:
  using conv_key = std::array<std::int64_t, 15>;
  using matmul_key = std::array<std::int64_t, 9>;

  const onednn::conv_entry& conv(const window2d& g) {
    std::lock_guard lock(mu_);
    return conv_locked(g);
  }

  const onednn::primitive& conv_forward(const window2d& g,
                                        onednn::epilogue epi = onednn::epilogue::none);

  const onednn::primitive& conv_backward_data(const window2d& g);

  const onednn::primitive& conv_backward_weights(const window2d& g);

  /// C[m,n] = op(A) op(B) with row strides lda, ldb, ldc (A stored [k,m] when ta, B stored
  /// [n,k] when tb); `descs` receives A's, B's and C's layouts.
  /// With an epilogue, descs[3] receives the bias's layout ([1, n]).
  const onednn::primitive& matmul(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                                  std::int64_t lda, std::int64_t ldb, std::int64_t ldc,
                                  std::array<onednn::md, 4>& descs,
                                  onednn::epilogue epi = onednn::epilogue::none);

  /// A cache of float32 primitives, or with `bf16` (see session_options::precision) of bfloat16
  /// ones: convolutions and matrix products read their inputs rounded to bfloat16 and
  /// accumulate and write float32. On a CPU without native bfloat16 it holds float32 ones. The
  /// precision is fixed for the cache's life.
  explicit onednn_cache(bool bf16 = false, bool f16 = false)
      : bf16_(bf16 && onednn::native_bf16()), f16_(f16) {}
  /// Whether the primitives take bfloat16 inputs.
  bool bf16() const { return bf16_; }
  /// Whether inputs are rounded to float16 before float32 primitives read them (float16
  /// products, emulated: oneDNN has float16 kernels only for AVX512-FP16 CPUs).
  bool f16() const { return f16_; }

  /// Primitives created so far (a test checks that a second run creates none).
  std::size_t primitives() const {
    std::lock_guard lock(mu_);
    return primitives_;
  }

private:
  /// The filter as the primitives read it: bfloat16 in a bfloat16 cache.
  onednn::md any_filter(const window2d& g) const {
    return any_filter(g, bf16_ ? dnnl_bf16 : dnnl_f32);
  }
  static onednn::md any_filter(const window2d& g, dnnl_data_type_t dt) {
    return onednn::tagged({g.o, g.c, g.kh, g.kw}, dnnl_format_tag_any, dt);
  }
  static dnnl_primitive_desc_t create_pd(const void* op_desc, const_dnnl_primitive_desc_t hint,
                                         onednn::epilogue epi = onednn::epilogue::none);
  onednn::conv_entry& conv_locked(const window2d& g);

  mutable std::mutex mu_;
  const bool bf16_, f16_;
  std::map<conv_key, std::unique_ptr<onednn::conv_entry>> convs_;
  std::map<matmul_key, std::unique_ptr<onednn::primitive>> matmuls_;
  std::size_t primitives_ = 0;
};

#if TYPEFLOW_BODIES
TYPEFLOW_DECL const onednn::primitive& onednn_cache::conv_forward(const window2d& g,
                                                                  onednn::epilogue epi) {
  std::lock_guard lock(mu_);
  auto& e = conv_locked(g);
  auto& slot = e.fwd[static_cast<int>(epi)];
  if (!slot) {
    onednn::pd_handle own;
    const onednn::pd_handle* pd = &e.fwd_pd;
    if (epi != onednn::epilogue::none) {
      // The same convolution with a bias operand (and relu after it).
      dnnl_convolution_desc_t d;
      const onednn::md w = any_filter(g);
      dnnl_dims_t st{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pl{g.ph, g.pw}, pr;
      onednn::padding_r(g, pr);
      onednn::check(dnnl_dilated_convolution_forward_desc_init(
                        &d, dnnl_forward_training, dnnl_convolution_direct, &e.src_in, &w, &e.bias,
                        &e.dst, st, dil, pl, pr),
                    "a convolution with a bias");
      own.pd = create_pd(&d, nullptr, epi);
      pd = &own;
    }
    auto p = onednn::make(*pd, "a convolution");
    p->w = *dnnl_primitive_desc_query_md(pd->pd, dnnl_query_weights_md, 0);
    if (!onednn::equal(p->w, e.hwio))
      p->reorder = onednn::make_reorder(e.hwio, p->w);
    slot = std::move(p);
    ++primitives_;
  }
  return *slot;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL const onednn::primitive& onednn_cache::conv_backward_data(const window2d& g) {
  std::lock_guard lock(mu_);
  auto& e = conv_locked(g);
  if (!e.bwd_data) {
    dnnl_convolution_desc_t d;
    const onednn::md w = any_filter(g);
    dnnl_dims_t st{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pl{g.ph, g.pw}, pr;
    onednn::padding_r(g, pr);
    onednn::check(dnnl_dilated_convolution_backward_data_desc_init(
                      &d, dnnl_convolution_direct, &e.src, &w, &e.dst_in, st, dil, pl, pr),
                  "a convolution's input gradient");
    onednn::pd_handle pd(create_pd(&d, e.fwd_pd.pd));
    auto p = onednn::make(pd, "a convolution's input gradient");
    p->w = *dnnl_primitive_desc_query_md(pd.pd, dnnl_query_weights_md, 0);
    if (!onednn::equal(p->w, e.hwio))
      p->reorder = onednn::make_reorder(e.hwio, p->w);
    e.bwd_data = std::move(p);
    ++primitives_;
  }
  return *e.bwd_data;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL const onednn::primitive& onednn_cache::conv_backward_weights(const window2d& g) {
  std::lock_guard lock(mu_);
  auto& e = conv_locked(g);
  if (!e.bwd_weights) {
    dnnl_convolution_desc_t d;
    const onednn::md wg = any_filter(g, dnnl_f32); // the filter gradient: float32
    dnnl_dims_t st{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pl{g.ph, g.pw}, pr;
    onednn::padding_r(g, pr);
    onednn::check(dnnl_dilated_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct,
                                                                      &e.src_in, &wg, nullptr,
                                                                      &e.dst_in, st, dil, pl, pr),
                  "a convolution's filter gradient");
    onednn::pd_handle pd(create_pd(&d, e.fwd_pd.pd));
    auto p = onednn::make(pd, "a convolution's filter gradient");
    p->w = *dnnl_primitive_desc_query_md(pd.pd, dnnl_query_diff_weights_md, 0);
    if (!onednn::equal(p->w, e.hwio))
      p->reorder = onednn::make_reorder(p->w, e.hwio);
    e.bwd_weights = std::move(p);
    ++primitives_;
  }
  return *e.bwd_weights;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL const onednn::primitive&
onednn_cache::matmul(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                     std::int64_t lda, std::int64_t ldb, std::int64_t ldc,
                     std::array<onednn::md, 4>& descs, onednn::epilogue epi) {
  const dnnl_data_type_t in = bf16_ ? dnnl_bf16 : dnnl_f32;
  descs = {ta ? onednn::strided(m, k, 1, lda, in) : onednn::strided(m, k, lda, 1, in),
           tb ? onednn::strided(k, n, 1, ldb, in) : onednn::strided(k, n, ldb, 1, in),
           onednn::strided(m, n, ldc, 1), onednn::strided(1, n, n, 1)};
  std::lock_guard lock(mu_);
  const matmul_key key{ta, tb, m, n, k, lda, ldb, ldc, static_cast<std::int64_t>(epi)};
  auto it = matmuls_.find(key);
  if (it != matmuls_.end())
    return *it->second;
  dnnl_matmul_desc_t d;
  onednn::check(dnnl_matmul_desc_init(&d, &descs[0], &descs[1],
                                      epi == onednn::epilogue::none ? nullptr : &descs[3],
                                      &descs[2]),
                "a matmul");
  onednn::pd_handle pd(create_pd(&d, nullptr, epi));
  auto p = onednn::make(pd, "a matmul");
  ++primitives_;
  return *matmuls_.emplace(key, std::move(p)).first->second;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL onednn::conv_entry& onednn_cache::conv_locked(const window2d& g) {
  const conv_key k{g.n,  g.h,  g.w,  g.c,  g.kh, g.kw, g.o, g.oh,
                   g.ow, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw};
  auto it = convs_.find(k);
  if (it != convs_.end())
    return *it->second;
  auto e = std::make_unique<onednn::conv_entry>();
  const dnnl_data_type_t in = bf16_ ? dnnl_bf16 : dnnl_f32;
  e->src = onednn::tagged({g.n, g.c, g.h, g.w}, dnnl_nhwc);
  e->dst = onednn::tagged({g.n, g.o, g.oh, g.ow}, dnnl_nhwc);
  e->src_in = onednn::tagged({g.n, g.c, g.h, g.w}, dnnl_nhwc, in);
  e->dst_in = onednn::tagged({g.n, g.o, g.oh, g.ow}, dnnl_nhwc, in);
  e->hwio = onednn::tagged({g.o, g.c, g.kh, g.kw}, dnnl_hwio);
  e->bias = onednn::tagged({g.o}, dnnl_x);
  const onednn::md w = any_filter(g);
  dnnl_convolution_desc_t d;
  dnnl_dims_t st{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pl{g.ph, g.pw}, pr;
  onednn::padding_r(g, pr);
  onednn::check(dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_training,
                                                           dnnl_convolution_direct, &e->src_in, &w,
                                                           nullptr, &e->dst, st, dil, pl, pr),
                "a convolution");
  e->fwd_pd.pd = create_pd(&d, nullptr);
  return *convs_.emplace(k, std::move(e)).first->second;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL dnnl_primitive_desc_t onednn_cache::create_pd(const void* op_desc,
                                                            const_dnnl_primitive_desc_t hint,
                                                            onednn::epilogue epi) {
  onednn::user_scratchpad attr(epi);
  dnnl_primitive_desc_t pd = nullptr;
  onednn::team_of_one();
  onednn::check(dnnl_primitive_desc_create(&pd, op_desc, attr.a, onednn::engine(), hint),
                "a primitive descriptor");
  return pd;
}
#endif

namespace onednn {

/// Images [b0, b1) of the batch as a geometry of their own.
inline window2d slab(window2d g, std::int64_t b0, std::int64_t b1) {
  g.n = b1 - b0;
  return g;
}

/// A filter in the layout primitive `p` wants: the HWIO buffer itself, or a copy reordered
/// into `buf`.
inline const float* filter_for(const primitive& p, const md& hwio, const float* w,
                               std::unique_ptr<float[]>& buf) {
  if (!p.reorder)
    return w;
  buf.reset(new float[bytes(p.w) / sizeof(float) + 1]);
  execute(*p.reorder, {{DNNL_ARG_FROM, &hwio, w}, {DNNL_ARG_TO, &p.w, buf.get()}});
  return buf.get();
}

/// n float32 values rounded to float16 and back (nearest, ties to even; what a float16 operand
/// holds), on the calling thread.
inline void round_to_f16(const float* src, std::int64_t n, float* dst) {
  for (std::int64_t i = 0; i < n; ++i)
    dst[i] = typeflow::detail::f16_bits_to_float(typeflow::detail::float_to_f16_bits(src[i]));
}

/// An input converted for a cache's primitives (bfloat16, or float32 rounded to float16).
struct input_buffer {
  std::unique_ptr<bfloat16[]> b16;
  std::unique_ptr<float[]> f16;
};

/// `src` (n float32 values) as a primitive of the cache reads it: rounded to bfloat16 (a
/// bfloat16 cache) or to float16 values (a float16 one) into `buf`, or `src` itself.
inline const void* input_for(const onednn_cache& cache, const float* src, std::int64_t n,
                             input_buffer& buf) {
  const auto size = static_cast<std::size_t>(std::max<std::int64_t>(n, 1));
  if (cache.bf16()) {
    buf.b16.reset(new bfloat16[size]);
    to_bf16(src, n, buf.b16.get());
    return buf.b16.get();
  }
  if (cache.f16()) {
    buf.f16.reset(new float[size]);
    round_to_f16(src, n, buf.f16.get());
    return buf.f16.get();
  }
  return src;
}

/// n float32 values rounded to bfloat16 on the pool's threads.
inline void to_bf16(thread_pool& pool, const float* src, std::int64_t n, bfloat16* dst) {
  pool.parallel_for(n, std::int64_t{1} << 16,
                    [&](std::int64_t b, std::int64_t e) { to_bf16(src + b, e - b, dst + b); });
}

/// The slab count of a batch of n images, and slab q's first image.
inline std::int64_t slabs(std::int64_t n) {
  return std::min(conv_parts, n);
}
inline std::int64_t slab_begin(std::int64_t n, std::int64_t q) {
  return n * q / slabs(n);
}

} // namespace onednn

// The convolutions split the batch into conv_parts fixed slabs (by the batch size alone, as the
// im2col kernels do), each a single-threaded oneDNN call on one of the pool's threads; the
// filter gradient sums the slabs' partial gradients in slab order. So the arithmetic, and the
// bits of every result, do not depend on the thread count.

/// Whether oneDNN runs a float32 convolution of geometry g: every extent non-empty (an empty
/// batch or channel count takes the portable loops, which zero-fill the gradients).
inline bool onednn_runs(const window2d& g) {
  return g.n > 0 && g.c > 0 && g.o > 0 && g.oh > 0 && g.ow > 0;
}

namespace onednn {

/// Runs `call(p, e, w_p, b0, q)` for every slab q (images [b0, ...)) of g's batch on the pool:
/// p = get(slab), the slab's primitive; e its geometry's entry; w_p the filter w in p's layout,
/// reordered once per distinct slab geometry (slabs differ by one image at most, so there are
/// two at most), or nullptr when w is.
template <class Get, class Call>
void for_each_slab(onednn_cache& cache, thread_pool& pool, const window2d& g, const float* w,
                   Get&& get, Call&& call) {
  const std::int64_t parts = slabs(g.n);
  std::unique_ptr<float[]> buf[2], w16;
  if (w && cache.f16()) { // the filter as a float16 operand holds it
    w16.reset(new float[static_cast<std::size_t>(g.patch() * g.o)]);
    round_to_f16(w, g.patch() * g.o, w16.get());
    w = w16.get();
  }
  const float* wf[2] = {w, w};
  const primitive* pf[2] = {};
  for (int i = 0; i < 2; ++i) {
    const std::int64_t q = i == 0 ? 0 : parts - 1;
    const window2d s = slab(g, slab_begin(g.n, q), slab_begin(g.n, q + 1));
    pf[i] = &get(s);
    if (w && (i == 0 || pf[1] != pf[0]))
      wf[i] = filter_for(*pf[i], cache.conv(s).hwio, w, buf[i]);
    else if (w)
      wf[1] = wf[0];
  }
  pool.parallel_for(parts, 1, [&](std::int64_t q0, std::int64_t q1) {
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int64_t b0 = slab_begin(g.n, q);
      const window2d s = slab(g, b0, slab_begin(g.n, q + 1));
      const primitive& p = get(s);
      call(p, cache.conv(s), &p == pf[0] ? wf[0] : wf[1], b0, q);
    }
  });
}

} // namespace onednn

/// y = conv(x, w), or with an epilogue (bias [O] given) relu?(conv(x, w) + bias): NHWC x and y,
/// HWIO w.
TYPEFLOW_DECL void onednn_conv2d_forward(onednn_cache& cache, thread_pool& pool, const float* x,
                                         const float* w, const window2d& g, float* y,
                                         const float* bias = nullptr,
                                         onednn::epilogue epi = onednn::epilogue::none)
#if TYPEFLOW_BODIES
{
  using namespace onednn;
  for_each_slab(
      cache, pool, g, w,
      [&](const window2d& s) -> const primitive& { return cache.conv_forward(s, epi); },
      [&](const primitive& p, const conv_entry& e, const float* wq, std::int64_t b0, std::int64_t) {
        const std::int64_t images = e.src.dims[0];
        input_buffer buf;
        const void* src = input_for(cache, x + b0 * g.h * g.w * g.c, images * g.h * g.w * g.c, buf);
        float* dst = y + b0 * g.oh * g.ow * g.o;
        if (epi == epilogue::none)
          execute(p, {{DNNL_ARG_SRC, &e.src_in, src},
                      {DNNL_ARG_WEIGHTS, &p.w, wq},
                      {DNNL_ARG_DST, &e.dst, dst}});
        else
          execute(p, {{DNNL_ARG_SRC, &e.src_in, src},
                      {DNNL_ARG_WEIGHTS, &p.w, wq},
                      {DNNL_ARG_BIAS, &e.bias, bias},
                      {DNNL_ARG_DST, &e.dst, dst}});
      });
}
#else
    ;
#endif

/// dx = the input gradient of a convolution given dy and w.
TYPEFLOW_DECL void onednn_conv2d_backprop_input(onednn_cache& cache, thread_pool& pool,
                                                const float* dy, const float* w, const window2d& g,
                                                float* dx)
#if TYPEFLOW_BODIES
{
  using namespace onednn;
  for_each_slab(
      cache, pool, g, w,
      [&](const window2d& s) -> const primitive& { return cache.conv_backward_data(s); },
      [&](const primitive& p, const conv_entry& e, const float* wq, std::int64_t b0, std::int64_t) {
        const std::int64_t images = e.src.dims[0];
        input_buffer buf;
        const void* d =
            input_for(cache, dy + b0 * g.oh * g.ow * g.o, images * g.oh * g.ow * g.o, buf);
        execute(p, {{DNNL_ARG_DIFF_DST, &e.dst_in, d},
                    {DNNL_ARG_WEIGHTS, &p.w, wq},
                    {DNNL_ARG_DIFF_SRC, &e.src, dx + b0 * g.h * g.w * g.c}});
      });
}
#else
    ;
#endif

/// dw = the filter gradient of a convolution given x and dy (HWIO); `partial` holds
/// conv_parts filters. The slabs' partial gradients stay in the layout oneDNN writes them in
/// (usually a blocked one) when every slab's primitive writes the same one: they are summed
/// there, in slab order, and the sum alone is reordered to HWIO (one reorder, not one per
/// slab). A reorder copies values, so the bits are those of summing reordered partials.
TYPEFLOW_DECL void onednn_conv2d_backprop_filter(onednn_cache& cache, thread_pool& pool,
                                                 const float* x, const float* dy, const window2d& g,
                                                 float* partial, float* dw)
#if TYPEFLOW_BODIES
{
  using namespace onednn;
  const std::int64_t parts = slabs(g.n), size = g.patch() * g.o;
  const window2d first_slab = slab(g, 0, slab_begin(g.n, 1));
  const primitive& first = cache.conv_backward_weights(first_slab);
  const primitive& last = cache.conv_backward_weights(slab(g, slab_begin(g.n, parts - 1), g.n));
  const bool blocked = first.reorder && equal(first.w, last.w);
  // The floats of one slab's partial gradient, padding included, and where they go.
  const std::int64_t stride =
      blocked ? static_cast<std::int64_t>(bytes(first.w) / sizeof(float)) : size;
  std::unique_ptr<float[]> own;
  if (stride > size) { // a padded layout: partial is too small
    own.reset(new float[static_cast<std::size_t>(parts * stride)]);
    partial = own.get();
  }
  for_each_slab(
      cache, pool, g, nullptr,
      [&](const window2d& s) -> const primitive& { return cache.conv_backward_weights(s); },
      [&](const primitive& p, const conv_entry& e, const float*, std::int64_t b0, std::int64_t q) {
        float* out = partial + q * stride;
        std::unique_ptr<float[]> tmp; // this slab's gradient in p's layout, when not kept so
        if (p.reorder && !blocked)
          tmp.reset(new float[bytes(p.w) / sizeof(float) + 1]);
        const std::int64_t images = e.src.dims[0];
        input_buffer xb, db;
        const void* xs = input_for(cache, x + b0 * g.h * g.w * g.c, images * g.h * g.w * g.c, xb);
        const void* ds =
            input_for(cache, dy + b0 * g.oh * g.ow * g.o, images * g.oh * g.ow * g.o, db);
        execute(p, {{DNNL_ARG_SRC, &e.src_in, xs},
                    {DNNL_ARG_DIFF_DST, &e.dst_in, ds},
                    {DNNL_ARG_DIFF_WEIGHTS, &p.w, tmp ? tmp.get() : out}});
        if (tmp)
          execute(*p.reorder, {{DNNL_ARG_FROM, &p.w, tmp.get()}, {DNNL_ARG_TO, &e.hwio, out}});
      });
  // The sum in slab order, into dw (HWIO) or, blocked, into the first slab's partial.
  float* sum = blocked ? partial : dw;
  pool.parallel_for(stride, 4096, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      float acc = partial[i];
      for (std::int64_t q = 1; q < parts; ++q)
        acc += partial[q * stride + i];
      sum[i] = acc;
    }
  });
  if (blocked)
    execute(*first.reorder,
            {{DNNL_ARG_FROM, &first.w, partial}, {DNNL_ARG_TO, &cache.conv(first_slab).hwio, dw}});
}
#else
    ;
#endif

/// C[m,n] = op(A) op(B) (row strides lda, ldb, ldc) on the calling thread; with an epilogue
/// (bias [n] given), relu?(op(A) op(B) + bias). A and B are float32, or bfloat16 in a bfloat16
/// cache (C float32 either way).
template <class In>
void onednn_gemm_serial(onednn_cache& cache, bool ta, bool tb, std::int64_t m, std::int64_t n,
                        std::int64_t k, const In* a, std::int64_t lda, const In* b,
                        std::int64_t ldb, float* c, std::int64_t ldc, const float* bias = nullptr,
                        onednn::epilogue epi = onednn::epilogue::none) {
  static_assert(std::is_same_v<In, float> || std::is_same_v<In, bfloat16>);
  if (cache.bf16() != std::is_same_v<In, bfloat16>)
    throw error("onednn_gemm_serial: operands of the wrong precision for this cache");
  std::array<onednn::md, 4> d;
  const auto& p = cache.matmul(ta, tb, m, n, k, lda, ldb, ldc, d, epi);
  if (epi == onednn::epilogue::none)
    onednn::execute(
        p, {{DNNL_ARG_SRC, &d[0], a}, {DNNL_ARG_WEIGHTS, &d[1], b}, {DNNL_ARG_DST, &d[2], c}});
  else
    onednn::execute(p, {{DNNL_ARG_SRC, &d[0], a},
                        {DNNL_ARG_WEIGHTS, &d[1], b},
                        {DNNL_ARG_BIAS, &d[3], bias},
                        {DNNL_ARG_DST, &d[2], c}});
}

#else

/// Without oneDNN there is nothing to cache.
class onednn_cache {
public:
  explicit onednn_cache(bool = false, bool = false) {}
  bool bf16() const { return false; }
  bool f16() const { return false; }
  std::size_t primitives() const { return 0; }
};

#endif

} // namespace typeflow::cpu_backend
