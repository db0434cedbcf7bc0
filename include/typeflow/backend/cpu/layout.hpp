// Layout kernels: transpose, concat and slice as strided copies.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

#include "../common/value.hpp"
#include "thread_pool.hpp"

namespace typeflow::cpu_backend {

namespace detail {
using backend::row_major_strides;

/// out[idx] = in[sum idx[i] * in_stride[i]] over the output's index space, innermost axis as a
/// strided inner loop; rows run in parallel.
template <class T>
void strided_copy(thread_pool& pool, const T* in,
                  const std::array<std::int64_t, max_rank>& in_stride, T* out,
                  const backend::rt_dims& od) {
  const std::int64_t total = od.numel();
  if (total == 0)
    return;
  if (od.rank == 0) {
    out[0] = in[0];
    return;
  }
  const std::size_t last = od.rank - 1;
  const std::int64_t inner = od.d[last], rows = total / inner, s_in = in_stride[last];
  pool.parallel_for(rows, std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(1, inner)),
                    [&](std::int64_t r0, std::int64_t r1) {
                      for (std::int64_t r = r0; r < r1; ++r) {
                        std::int64_t off = 0, q = r;
                        for (std::size_t i = last; i-- > 0;) {
                          off += (q % od.d[i]) * in_stride[i];
                          q /= od.d[i];
                        }
                        const T* src = in + off;
                        T* dst = out + r * inner;
                        if (s_in == 1)
                          std::copy_n(src, inner, dst);
                        else
                          for (std::int64_t j = 0; j < inner; ++j)
                            dst[j] = src[j * s_in];
                      }
                    });
}
} // namespace detail

template <class T, std::size_t R>
void transpose(thread_pool& pool, const T* in, const backend::rt_dims& id,
               const std::array<std::int64_t, R>& perm, T* out, const backend::rt_dims& od) {
  const auto s = detail::row_major_strides(id);
  std::array<std::int64_t, max_rank> in_stride{};
  for (std::size_t i = 0; i < R; ++i)
    in_stride[i] = s[perm[i]];
  detail::strided_copy(pool, in, in_stride, out, od);
}

template <class T, std::size_t R>
void slice(thread_pool& pool, const T* in, const backend::rt_dims& id,
           const std::array<std::int64_t, R>& begin, T* out, const backend::rt_dims& od) {
  const auto s = detail::row_major_strides(id);
  std::int64_t off = 0;
  for (std::size_t i = 0; i < R; ++i)
    off += begin[i] * s[i];
  detail::strided_copy(pool, in + off, s, out, od);
}

/// Where a slice of id at `begin` with dims od is one contiguous run of the input's row-major
/// buffer, that run's offset in elements: every axis after the first the slice cuts is whole, and
/// every axis before it has extent 1 (a slice that cuts nothing is the whole buffer; an empty
/// slice is not a view).
template <std::size_t R>
std::optional<std::int64_t> contiguous_block(const backend::rt_dims& id,
                                             const std::array<std::int64_t, R>& begin,
                                             const backend::rt_dims& od) {
  if (od.numel() == 0)
    return std::nullopt;
  std::size_t cut = R; // the first axis the slice does not take whole
  for (std::size_t i = 0; i < R; ++i)
    if (od.d[i] != id.d[i]) {
      cut = i;
      break;
    }
  for (std::size_t i = cut + 1; i < R; ++i)
    if (od.d[i] != id.d[i])
      return std::nullopt;
  for (std::size_t i = 0; i < cut && cut < R; ++i)
    if (od.d[i] != 1)
      return std::nullopt;
  const auto s = detail::row_major_strides(id);
  std::int64_t off = 0;
  for (std::size_t i = 0; i < R; ++i)
    off += begin[i] * s[i];
  return off;
}

/// out (dims od) = zeros with in (dims id) written at `begin`.
template <class T, std::size_t R>
void pad(const T* in, const backend::rt_dims& id, const std::array<std::int64_t, R>& begin, T* out,
         const backend::rt_dims& od) {
  std::fill_n(out, od.numel(), T(0));
  const std::int64_t total = id.numel();
  if (total == 0)
    return;
  const auto s = detail::row_major_strides(od);
  std::int64_t base = 0;
  for (std::size_t i = 0; i < R; ++i)
    base += begin[i] * s[i];
  if (R == 0) {
    out[0] = in[0];
    return;
  }
  const std::int64_t inner = id.d[R - 1], rows = total / inner;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t off = base, q = r;
    for (std::size_t i = R - 1; i-- > 0;) {
      off += (q % id.d[i]) * s[i];
      q /= id.d[i];
    }
    std::copy_n(in + r * inner, inner, out + off);
  }
}

/// Concatenation along `axis` of parts (pointer, dims) into out.
template <class T>
void concat(const std::int64_t axis, const T* const* parts, const backend::rt_dims* const* dims,
            std::size_t n_parts, T* out, const backend::rt_dims& od) {
  std::int64_t outer = 1;
  for (std::int64_t i = 0; i < axis; ++i)
    outer *= od.d[i];
  std::int64_t out_row = 1;
  for (std::size_t i = static_cast<std::size_t>(axis); i < od.rank; ++i)
    out_row *= od.d[i];
  std::int64_t col = 0;
  for (std::size_t p = 0; p < n_parts; ++p) {
    std::int64_t row = 1;
    for (std::size_t i = static_cast<std::size_t>(axis); i < dims[p]->rank; ++i)
      row *= dims[p]->d[i];
    for (std::int64_t o = 0; o < outer; ++o)
      std::copy_n(parts[p] + o * row, row, out + o * out_row + col);
    col += row;
  }
}

} // namespace typeflow::cpu_backend
