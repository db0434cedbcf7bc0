// What the executor's loops (ops/repeat.hpp, run by runtime/loops.hpp) need of the CPU: a body's
// value made independent of the buffers bound to the body, and a layer's or step's gradients
// written (or, for a scan's shared variables, added) into the slices of a packed result.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "context.hpp"

namespace typeflow::cpu_backend {

/// `v` as a value that owns its buffer: one that views something else (no owner: a body's value
/// that is its carry or a layer of a stacked variable) is copied into a buffer of the pool.
template <class T>
value owned_copy(context& ctx, value v) {
  if (v.owner)
    return v;
  value c;
  c.dims = v.dims;
  std::memcpy(ctx.allocate<T>(c), v.data, sizeof(T) * static_cast<std::size_t>(v.dims.numel()));
  return c;
}

/// Copies `n` elements of `src` to `dst + at`: one layer's gradient into its slice of a packed
/// result, or the carried gradient into the packed tail. A gradient without a buffer (a
/// constant folded into its readers: a gradient is linear in its seed, so only zero can be one)
/// writes zeros.
template <class T>
void write_slice(T* dst, std::int64_t at, const void* src, std::int64_t n) {
  if (src)
    std::memcpy(dst + at, src, sizeof(T) * static_cast<std::size_t>(n));
  else
    std::fill_n(dst + at, n, T(0));
}

/// Adds `n` elements of `src` to `dst + at`: a step's gradient of a variable a scan shares, summed
/// over the steps. A gradient without a buffer (zero, as above) adds nothing.
template <class T>
void add_slice(T* dst, std::int64_t at, const void* src, std::int64_t n) {
  if (!src)
    return;
  const T* s = static_cast<const T*>(src);
  T* d = dst + at;
  for (std::int64_t i = 0; i < n; ++i)
    d[i] += s[i];
}

} // namespace typeflow::cpu_backend
