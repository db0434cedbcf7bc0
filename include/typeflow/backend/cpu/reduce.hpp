// Reductions: the input's axes are coalesced into alternating kept/reduced groups; contiguous
// inner reductions run with independent accumulator lanes (vectorizable), outer reductions
// vectorize along the kept axis, and any other pattern walks the reduced sub-space. Partial sums
// use fixed chunks, so results do not depend on the thread count.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../../ops/reduce.hpp"
#include "../common/reducers.hpp"
#include "../common/value.hpp"
#include "simd.hpp"
#include "thread_pool.hpp"

namespace typeflow::cpu_backend {

namespace detail {
template <class T>
using accum_t = std::conditional_t<std::is_same_v<T, float>, double,
                                   std::conditional_t<std::is_integral_v<T>, std::int64_t, T>>;

using backend::combine;
using backend::is_extremum_v;

#if defined(TYPEFLOW_HAS_XSIMD)
/// combine() on batches: NaN propagates from either side.
template <class R, class T>
inline simd::vec<T> combine_batch(simd::vec<T> acc, simd::vec<T> v) {
  if constexpr (is_extremum_v<R>) {
    constexpr bool is_max = std::is_same_v<R, ops::reducers::max>;
#if defined(__SSE2__)
    // x86's maxps/minps (xsimd::max/min(a, b)) return b when either is NaN or they tie, so
    // max(v, acc) keeps acc on a tie (combine()'s rule: -0 and +0 keep the first) and when acc
    // is NaN, and the select lets v's NaN through: three instructions, not four.
    const auto m = is_max ? xsimd::max(v, acc) : xsimd::min(v, acc);
    return xsimd::select(xsimd::isnan(v), v, m);
#else
    // A lane keeps its value when it is NaN or wins the comparison (xsimd's != is ordered).
    const auto keep = (is_max ? acc >= v : acc <= v) | !(acc == acc);
    return xsimd::select(keep, acc, v);
#endif
  } else {
    return acc + v;
  }
}
#endif

/// acc[c] = combine(acc[c], row[c]) for c < n.
template <class R, class T>
inline void combine_row(T* __restrict acc, const T* __restrict row, std::int64_t n) {
  std::int64_t c = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_floating_point_v<T>) {
    using B = simd::vec<T>;
    for (; c + std::int64_t{B::size} <= n; c += B::size)
      combine_batch<R>(B::load_unaligned(acc + c), B::load_unaligned(row + c))
          .store_unaligned(acc + c);
  }
#endif
  for (; c < n; ++c)
    acc[c] = combine<R>(acc[c], row[c]);
}

/// acc[c] = combine(acc[c], combine(combine(r0[c], r1[c]), combine(r2[c], r3[c]))) for c < n, with
/// rows r_i = row + i * stride: one pass over the accumulators per four rows.
template <class R, class T>
inline void combine_rows4(T* __restrict acc, const T* __restrict row, std::int64_t stride,
                          std::int64_t n) {
  const T *r0 = row, *r1 = row + stride, *r2 = row + 2 * stride, *r3 = row + 3 * stride;
  std::int64_t c = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_floating_point_v<T>) {
    using B = simd::vec<T>;
    for (; c + std::int64_t{B::size} <= n; c += B::size) {
      const B a = combine_batch<R>(B::load_unaligned(r0 + c), B::load_unaligned(r1 + c));
      const B b = combine_batch<R>(B::load_unaligned(r2 + c), B::load_unaligned(r3 + c));
      combine_batch<R>(B::load_unaligned(acc + c), combine_batch<R>(a, b)).store_unaligned(acc + c);
    }
  }
#endif
  for (; c < n; ++c)
    acc[c] = combine<R>(acc[c], combine<R>(combine<R>(r0[c], r1[c]), combine<R>(r2[c], r3[c])));
}

#if defined(TYPEFLOW_HAS_XSIMD)
/// Whether combine_narrow_rows takes rows of k2 elements: a whole number of vectors that
/// divides eight.
template <class T>
inline bool narrow_in_registers(std::int64_t k2) {
  constexpr std::int64_t W = simd::vec<T>::size;
  return std::is_floating_point_v<T> && k2 % W == 0 && k2 / W >= 1 && 8 % (k2 / W) == 0;
}

/// acc[c] = combine(acc[c], rows[r][c]) over `rows` contiguous rows of k2 elements
/// (narrow_in_registers): eight vector accumulators stay in registers over the stream, the
/// j-th taking every eighth vector (so always the same block of columns), and are folded in
/// order (a tie keeps the lower one, which holds the earlier rows); rows that do not fill the
/// eight go through combine_row. Bytes up to `limit` are fetched 8 KB ahead: a part's rows are
/// one stream whose loads otherwise wait on memory.
template <class R, class T>
inline void combine_narrow_rows(T* __restrict acc, const T* __restrict p, std::int64_t rows,
                                std::int64_t k2, const T* limit) {
  using B = simd::vec<T>;
  constexpr std::int64_t W = B::size, G = 8 * W, ahead = 8192 / std::int64_t{sizeof(T)};
  const std::int64_t v = k2 / W, per = 8 / v, n = rows / per * G;
  const B id(R::template identity<T>());
  B a0 = id, a1 = id, a2 = id, a3 = id, a4 = id, a5 = id, a6 = id, a7 = id;
  for (std::int64_t i = 0; i < n; i += G) {
    if (p + i + ahead + G <= limit)
      for (std::int64_t b = 0; b < G * std::int64_t{sizeof(T)}; b += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(p + i + ahead) + b);
    a0 = combine_batch<R>(a0, B::load_unaligned(p + i));
    a1 = combine_batch<R>(a1, B::load_unaligned(p + i + W));
    a2 = combine_batch<R>(a2, B::load_unaligned(p + i + 2 * W));
    a3 = combine_batch<R>(a3, B::load_unaligned(p + i + 3 * W));
    a4 = combine_batch<R>(a4, B::load_unaligned(p + i + 4 * W));
    a5 = combine_batch<R>(a5, B::load_unaligned(p + i + 5 * W));
    a6 = combine_batch<R>(a6, B::load_unaligned(p + i + 6 * W));
    a7 = combine_batch<R>(a7, B::load_unaligned(p + i + 7 * W));
  }
  if (n > 0) {
    alignas(64) T lane[G];
    a0.store_aligned(lane), a1.store_aligned(lane + W), a2.store_aligned(lane + 2 * W);
    a3.store_aligned(lane + 3 * W), a4.store_aligned(lane + 4 * W), a5.store_aligned(lane + 5 * W);
    a6.store_aligned(lane + 6 * W), a7.store_aligned(lane + 7 * W);
    for (std::int64_t j = v; j < 8; ++j)
      for (std::int64_t l = 0; l < W; ++l)
        lane[(j % v) * W + l] = combine<R>(lane[(j % v) * W + l], lane[j * W + l]);
    combine_row<R>(acc, lane, k2);
  }
  for (std::int64_t r = n / k2; r < rows; ++r)
    combine_row<R>(acc, p + r * k2, k2);
}
#endif

/// Reduce n contiguous elements. With xsimd, floating point runs four vectors of independent
/// lanes over the longest prefix that fills them: a sum adds each lane in T over chunks of 4096
/// elements (64 per lane with 16-wide vectors) and flushes every lane into its own wider
/// accumulator, and the accumulators are combined pairwise at the end, all in vector
/// registers (adding the 64 lanes one by one after each chunk cost a fifth of a sum's
/// bandwidth). The rest, and every other type, runs 16 scalar lanes with the same chunks. The
/// order of operations depends only on n.
template <class R, class T>
inline accum_t<T> reduce_contiguous(const T* p, std::int64_t n) {
  using A = accum_t<T>;
  constexpr std::int64_t chunk = is_extremum_v<R> ? std::numeric_limits<std::int64_t>::max() : 4096;
  A total = R::template identity<A>();
  std::int64_t i = 0;
#if defined(TYPEFLOW_HAS_XSIMD)
  if constexpr (std::is_floating_point_v<T>) {
    using B = simd::vec<T>;
    constexpr std::int64_t W = B::size, L = 4 * W;
    static_assert(4096 % L == 0, "a sum's chunk must hold whole vector groups");
    if (n >= L) {
      alignas(64) A wide[L];
      alignas(64) T lane[L];
      std::fill_n(wide, L, R::template identity<A>());
      const std::int64_t body = n - n % L;
      while (i < body) {
        const std::int64_t end = body - i > chunk ? i + chunk : body;
        B a0(R::template identity<T>()), a1 = a0, a2 = a0, a3 = a0;
        for (; i < end; i += L) {
          a0 = combine_batch<R>(a0, B::load_unaligned(p + i));
          a1 = combine_batch<R>(a1, B::load_unaligned(p + i + W));
          a2 = combine_batch<R>(a2, B::load_unaligned(p + i + 2 * W));
          a3 = combine_batch<R>(a3, B::load_unaligned(p + i + 3 * W));
        }
        a0.store_aligned(lane), a1.store_aligned(lane + W);
        a2.store_aligned(lane + 2 * W), a3.store_aligned(lane + 3 * W);
        for (std::int64_t l = 0; l < L; ++l)
          wide[l] = combine<R>(wide[l], static_cast<A>(lane[l]));
      }
      // Pairwise; a tie keeps the lower lane, which holds the earlier elements.
      for (std::int64_t s = L / 2; s >= 1; s /= 2)
        for (std::int64_t l = 0; l < s; ++l)
          wide[l] = combine<R>(wide[l], wide[l + s]);
      total = wide[0];
    }
  }
#endif
  constexpr int lanes = 16;
  while (i < n) {
    const std::int64_t m = std::min(chunk, n - i);
    T acc[lanes];
    std::fill_n(acc, lanes, R::template identity<T>());
    std::int64_t j = 0;
    for (; j + lanes <= m; j += lanes)
      for (int l = 0; l < lanes; ++l)
        acc[l] = combine<R>(acc[l], p[i + j + l]);
    T r = R::template identity<T>();
    for (auto v : acc)
      r = combine<R>(r, v);
    for (; j < m; ++j)
      r = combine<R>(r, p[i + j]);
    total = combine<R>(total, static_cast<A>(r));
    i += m;
  }
  return total;
}

struct reduce_geometry {
  // Groups outermost-first; reduced[g] says whether group g is reduced.
  std::size_t groups = 0;
  std::array<std::int64_t, max_rank> dims{};
  std::array<bool, max_rank> reduced{};
  std::int64_t out_n = 1, red_n = 1;
  reduce_geometry(const backend::rt_dims& in, std::span<const bool> mask) {
    for (std::size_t a = 0; a < in.rank; ++a) {
      (mask[a] ? red_n : out_n) *= in.d[a];
      if (in.d[a] == 1)
        continue;
      if (groups > 0 && reduced[groups - 1] == mask[a]) {
        dims[groups - 1] *= in.d[a];
      } else {
        dims[groups] = in.d[a];
        reduced[groups] = mask[a];
        ++groups;
      }
    }
  }
};
} // namespace detail

namespace detail {
/// A reduction's input in memory, read in place.
template <class T>
struct buffer_input {
  using value_type = T;
  static constexpr bool in_memory = true;
  const T* p;
  const T* piece(std::int64_t off, std::int64_t, T*) const { return p + off; }
};
} // namespace detail

/// out = reduce(input) over the axes in `mask` (already validated by the op's rule). `input` is
/// a detail::buffer_input, or a source of pieces that is not in memory (`in_memory` false):
/// `piece(offset, n, scratch)` writes elements [offset, offset + n) of the row-major input into
/// scratch and returns it, and `materialize()` returns a pointer to all of it (for the
/// patterns that read across rows). A contiguous reduction (over trailing axes) reads such a
/// source in the pieces it reduces, with the same arithmetic as from memory. (The mask is a
/// span: one instantiation per reducer and dtypes, whatever the rank.)
template <class R, class Input, class Out>
void reduce_from(thread_pool& pool, const Input& input, const backend::rt_dims& in_dims,
                 std::span<const bool> mask, Out* out) {
  using T = typename Input::value_type;
  using acc_t = detail::accum_t<T>;
  const detail::reduce_geometry g(in_dims, mask);
  constexpr bool is_mean = std::is_same_v<R, ops::reducers::mean>;
  constexpr bool is_argmax = std::is_same_v<R, ops::reducers::argmax>;
  using base_r = std::conditional_t<is_mean, ops::reducers::sum, R>;
  if (g.out_n == 0)
    return;
  if (g.red_n == 0) {
    if constexpr (is_argmax) {
      throw error("argmax: reduction over an empty axis: " + in_dims.str());
    } else {
      Out v;
      if constexpr (is_mean)
        v = std::numeric_limits<Out>::has_quiet_NaN ? std::numeric_limits<Out>::quiet_NaN()
                                                    : Out(0);
      else
        v = base_r::template identity<Out>();
      std::fill_n(out, g.out_n, v);
      return;
    }
  }
  auto finish = [&](acc_t v) -> Out {
    if constexpr (is_mean)
      return static_cast<Out>(v / static_cast<acc_t>(g.red_n));
    else
      return static_cast<Out>(v);
  };

  // Express the pattern as [outer kept, reduced, inner kept] when it has that form.
  std::int64_t k1 = 1, rn = 1, k2 = 1;
  bool simple = true;
  {
    int phase = 0; // 0: leading kept, 1: reduced, 2: trailing kept
    for (std::size_t i = 0; i < g.groups; ++i) {
      if (g.reduced[i]) {
        if (phase == 2)
          simple = false;
        phase = 1;
        rn *= g.dims[i];
      } else if (phase == 0) {
        k1 *= g.dims[i];
      } else {
        phase = 2;
        k2 *= g.dims[i];
      }
    }
  }

  if constexpr (!Input::in_memory) {
    if (is_argmax || !simple || k2 != 1) {
      const auto all = input.materialize();
      reduce_from<R>(pool, detail::buffer_input<T>{static_cast<const T*>(all.get())}, in_dims, mask,
                     out);
      return;
    }
  }
  [[maybe_unused]] const T* in = nullptr;
  if constexpr (Input::in_memory)
    in = input.p;

  if constexpr (is_argmax) {
    // argmax has one axis, so the pattern is always simple.
    const std::int64_t tiles = k1 * ((k2 + 255) / 256);
    pool.parallel_for(tiles, 4, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t a = t / ((k2 + 255) / 256), c0 = (t % ((k2 + 255) / 256)) * 256;
        const std::int64_t c1 = std::min(k2, c0 + 256);
        for (std::int64_t c = c0; c < c1; ++c) {
          const T* p = in + a * rn * k2 + c;
          T best = p[0];
          std::int64_t arg = 0;
          for (std::int64_t r = 1; r < rn; ++r) {
            const T v = p[r * k2];
            if (v > best || (v != v && best == best)) {
              best = v;
              arg = r;
            }
          }
          out[a * k2 + c] = static_cast<Out>(arg);
        }
      }
    });
    return;
  } else {
    if (simple && k2 == 1) {
      // Contiguous inner reduction, chunked so long rows split across threads.
      constexpr std::int64_t chunk = 1 << 16;
      const std::int64_t per_row = (rn + chunk - 1) / chunk;
      // Scratch for a source that is not in memory: one piece per task.
      const auto scratch = [&](std::int64_t n) {
        return std::vector<T>(Input::in_memory ? 0 : static_cast<std::size_t>(n));
      };
      if (per_row == 1) {
        pool.parallel_for(
            k1, std::max<std::int64_t>(1, chunk / rn), [&](std::int64_t a, std::int64_t b) {
              auto buf = scratch(rn);
              for (std::int64_t o = a; o < b; ++o)
                out[o] = finish(
                    detail::reduce_contiguous<base_r>(input.piece(o * rn, rn, buf.data()), rn));
            });
      } else {
        std::vector<acc_t> part(static_cast<std::size_t>(k1 * per_row));
        pool.parallel_for(k1 * per_row, 1, [&](std::int64_t a, std::int64_t b) {
          auto buf = scratch(chunk);
          for (std::int64_t t = a; t < b; ++t) {
            const std::int64_t o = t / per_row, c = (t % per_row) * chunk;
            const std::int64_t n = std::min(chunk, rn - c);
            part[t] = detail::reduce_contiguous<base_r>(input.piece(o * rn + c, n, buf.data()), n);
          }
        });
        for (std::int64_t o = 0; o < k1; ++o) {
          acc_t acc = part[o * per_row];
          for (std::int64_t c = 1; c < per_row; ++c)
            acc = detail::combine<base_r>(acc, part[o * per_row + c]);
          out[o] = finish(acc);
        }
      }
      return;
    }
    if (simple && k1 <= 4 && rn >= 64 && k1 * 8 * k2 <= (std::int64_t{1} << 22)) {
      // [k1, rn, k2] with few outer slices: the rows are cut into fixed parts (results do not
      // depend on the thread count), each part streams its rows front to back into a row of
      // accumulators four rows per pass (one load and store of an accumulator per four input
      // vectors: 0.6x -> 0.9x the read loop for [8192, 8192]), and the parts are combined in
      // order. Walking down columns in tiles instead touches a new page per row, and runs one
      // tile on one thread when rows are short; tiling the accumulator row to 8 KB was slower.
      constexpr std::int64_t parts = 8;
      // A sum combines in T up to 64 values per accumulator, then adds them into the wider one
      // (as reduce_contiguous does with its chunks); max/min are exact in T.
      constexpr std::int64_t flush =
          detail::is_extremum_v<base_r> ? std::numeric_limits<std::int64_t>::max() : 64;
      std::vector<acc_t> part(static_cast<std::size_t>(k1 * parts * k2));
      // Narrow rows (a bias gradient's [N*H*W, C]) make one contiguous stream per part, whose
      // loads wait on memory unless fetched ahead (8 KB). Up to eight vectors wide, they keep
      // their accumulators in registers (combine_narrow_rows); bench/reduce's sum_narrow0
      // races them against the read loop (bench/README.md, *Figures moved from code
      // comments*).
      const bool narrow = k2 * std::int64_t{sizeof(T)} <= 512;
      const std::int64_t ahead = std::max<std::int64_t>(4, 8192 / (k2 * std::int64_t{sizeof(T)}));
      [[maybe_unused]] bool in_registers = false;
      std::int64_t block = flush; // rows per flush
#if defined(TYPEFLOW_HAS_XSIMD)
      if constexpr (std::is_floating_point_v<T>) {
        in_registers = detail::narrow_in_registers<T>(k2);
        if (in_registers && !detail::is_extremum_v<base_r>)
          block = flush * (8 / (k2 / std::int64_t{simd::vec<T>::size}));
      }
#endif
      pool.parallel_for(k1 * parts, 1, [&](std::int64_t t0, std::int64_t t1) {
        std::vector<T> row_acc(static_cast<std::size_t>(k2));
        for (std::int64_t t = t0; t < t1; ++t) {
          const std::int64_t a = t / parts, q = t % parts;
          acc_t* acc = part.data() + t * k2;
          std::fill_n(acc, k2, base_r::template identity<acc_t>());
          const std::int64_t r0 = rn * q / parts, r1 = rn * (q + 1) / parts;
          for (std::int64_t rb = r0; rb < r1; rb += std::min(block, r1 - rb)) {
            std::fill_n(row_acc.data(), k2, base_r::template identity<T>());
            const std::int64_t re = rb + std::min(block, r1 - rb);
            std::int64_t r = rb;
#if defined(TYPEFLOW_HAS_XSIMD)
            if (in_registers) {
              detail::combine_narrow_rows<base_r>(row_acc.data(), in + (a * rn + rb) * k2, re - rb,
                                                  k2, in + (a * rn + r1) * k2);
              r = re;
            }
#endif
            for (; r + 4 <= re; r += 4) {
              if (narrow && r + ahead + 4 <= r1) // 4 rows of the stream, `ahead` rows early
                for (std::int64_t b = 0; b < 4 * k2 * std::int64_t{sizeof(T)}; b += 64)
                  __builtin_prefetch(reinterpret_cast<const char*>(in + (a * rn + r + ahead) * k2) +
                                     b);
              detail::combine_rows4<base_r>(row_acc.data(), in + (a * rn + r) * k2, k2, k2);
            }
            for (; r < re; ++r)
              detail::combine_row<base_r>(row_acc.data(), in + (a * rn + r) * k2, k2);
            for (std::int64_t c = 0; c < k2; ++c)
              acc[c] = detail::combine<base_r>(acc[c], static_cast<acc_t>(row_acc[c]));
          }
        }
      });
      pool.parallel_for(k1 * k2, 1024, [&](std::int64_t o0, std::int64_t o1) {
        for (std::int64_t o = o0; o < o1; ++o) {
          const std::int64_t a = o / k2, c = o % k2;
          acc_t acc = part[static_cast<std::size_t>(a * parts * k2 + c)];
          for (std::int64_t q = 1; q < parts; ++q)
            acc = detail::combine<base_r>(acc,
                                          part[static_cast<std::size_t>((a * parts + q) * k2 + c)]);
          out[o] = finish(acc);
        }
      });
      return;
    }
    if (simple) {
      // [k1, rn, k2]: accumulate rows, vectorized along k2.
      const std::int64_t tile = 512, tiles_per = (k2 + tile - 1) / tile;
      pool.parallel_for(k1 * tiles_per, 1, [&](std::int64_t t0, std::int64_t t1) {
        std::array<acc_t, tile> acc;
        for (std::int64_t t = t0; t < t1; ++t) {
          const std::int64_t a = t / tiles_per, c0 = (t % tiles_per) * tile;
          const std::int64_t m = std::min(tile, k2 - c0);
          const T* base = in + a * rn * k2 + c0;
          for (std::int64_t c = 0; c < m; ++c)
            acc[c] = static_cast<acc_t>(base[c]);
          for (std::int64_t r = 1; r < rn; ++r) {
            const T* row = base + r * k2;
            for (std::int64_t c = 0; c < m; ++c)
              acc[c] = detail::combine<base_r>(acc[c], static_cast<acc_t>(row[c]));
          }
          for (std::int64_t c = 0; c < m; ++c)
            out[a * k2 + c0 + c] = finish(acc[c]);
        }
      });
      return;
    }
    // General pattern: walk the reduced sub-space for each output element.
    std::array<std::int64_t, max_rank> stride{};
    std::int64_t s = 1;
    for (std::size_t i = g.groups; i-- > 0;) {
      stride[i] = s;
      s *= g.dims[i];
    }
    pool.parallel_for(g.out_n, 64, [&](std::int64_t o0, std::int64_t o1) {
      for (std::int64_t o = o0; o < o1; ++o) {
        std::int64_t base = 0, rest = o;
        for (std::size_t i = g.groups; i-- > 0;)
          if (!g.reduced[i]) {
            base += (rest % g.dims[i]) * stride[i];
            rest /= g.dims[i];
          }
        acc_t acc = base_r::template identity<acc_t>();
        for (std::int64_t r = 0; r < g.red_n; ++r) {
          std::int64_t off = base, q = r;
          for (std::size_t i = g.groups; i-- > 0;)
            if (g.reduced[i]) {
              off += (q % g.dims[i]) * stride[i];
              q /= g.dims[i];
            }
          acc = detail::combine<base_r>(acc, static_cast<acc_t>(in[off]));
        }
        out[o] = finish(acc);
      }
    });
  }
}

/// out = reduce(in) over the axes in `mask`, `in` in memory.
template <class R, class T, class Out, std::size_t Rank>
void reduce(thread_pool& pool, const T* in, const backend::rt_dims& in_dims,
            const std::array<bool, Rank>& mask, Out* out) {
  reduce_from<R>(pool, detail::buffer_input<T>{in}, in_dims, mask, out);
}

} // namespace typeflow::cpu_backend
