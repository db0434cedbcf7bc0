// Host tensors: owning `tensor<T>` (returned by fetches) and non-owning `tensor_view<T>` (feeds).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dtype.hpp"
#include "error.hpp"
#include "shape.hpp"

namespace typeflow {

namespace detail {
inline constexpr std::size_t buffer_alignment = 64;

struct aligned_free {
  void operator()(void* p) const noexcept { std::free(p); }
};

/// The largest allocation typeflow asks for: byte counts past it cannot be addressed.
inline constexpr std::size_t max_bytes = static_cast<std::size_t>(PTRDIFF_MAX) / 2;

/// A 64-byte aligned block of `bytes` (at least one byte). Allocation failure is a
/// typeflow::error, not std::bad_alloc.
inline void* aligned_bytes(std::size_t bytes) {
  if (bytes > max_bytes)
    throw error("cannot allocate " + std::to_string(bytes) + " bytes: more than can be addressed");
  std::size_t rounded = (std::max<std::size_t>(bytes, 1) + buffer_alignment - 1) /
                        buffer_alignment * buffer_alignment;
  void* p = std::aligned_alloc(buffer_alignment, rounded);
  if (!p)
    throw error("out of memory allocating " + std::to_string(bytes) + " bytes");
  return p;
}

/// The element count of extents [first, last), or -1 when it overflows int64 or an extent is
/// negative (callers turn -1 into an error naming what they check).
template <class It>
constexpr std::int64_t numel_or_invalid(It first, It last) {
  std::int64_t n = 1;
  for (; first != last; ++first) {
    if (*first < 0 || __builtin_mul_overflow(n, static_cast<std::int64_t>(*first), &n))
      return -1;
  }
  return n;
}

/// `elements` of `elem` bytes each, or max_bytes + 1 when that is more than can be addressed.
constexpr std::size_t bytes_or_invalid(std::int64_t elements, std::size_t elem) {
  std::size_t b = 0;
  if (elements < 0 || __builtin_mul_overflow(static_cast<std::size_t>(elements), elem, &b) ||
      b > max_bytes)
    return max_bytes + 1;
  return b;
}

inline std::int64_t checked_numel(const std::vector<std::int64_t>& dims) {
  for (auto d : dims)
    if (d < 0)
      throw error("tensor: negative extent in shape " + dims_string(dims));
  const std::int64_t n = numel_or_invalid(dims.begin(), dims.end());
  if (n < 0)
    throw error("tensor: shape " + dims_string(dims) + " has more elements than an int64 counts");
  return n;
}
/// The bytes of a tensor of `dims` with elements of `elem` bytes, checked.
inline std::size_t checked_bytes(const std::vector<std::int64_t>& dims, std::size_t elem) {
  const std::size_t b = bytes_or_invalid(checked_numel(dims), elem);
  if (b > max_bytes)
    throw error("tensor: shape " + dims_string(dims) + " needs more bytes than can be addressed");
  return b;
}
} // namespace detail

/// A non-owning view of user memory in row-major order, usable as a feed.
template <dtype T>
struct tensor_view {
  const T* data = nullptr;
  std::vector<std::int64_t> dims;
  tensor_view() = default;
  tensor_view(const T* d, std::vector<std::int64_t> shape) : data(d), dims(std::move(shape)) {}
  tensor_view(std::span<const T> d, std::vector<std::int64_t> shape)
      : data(d.data()), dims(std::move(shape)) {
    if (static_cast<std::size_t>(detail::checked_numel(dims)) != d.size())
      throw error("tensor_view: " + std::to_string(d.size()) + " elements do not fill shape " +
                  dims_string(dims));
  }
  std::int64_t size() const { return detail::checked_numel(dims); }
};

/// An owning, row-major host tensor: shape, dtype, element access, printing.
template <dtype T>
class tensor {
public:
  using value_type = T;

  tensor() : tensor(std::vector<std::int64_t>{}) {}
  explicit tensor(std::vector<std::int64_t> shape) : tensor(uninitialized, std::move(shape)) {
    std::fill_n(data_, size_, T{});
  }
  /// Tag: a tensor whose elements are left uninitialized, for callers that write all of them.
  struct uninitialized_t {};
  static constexpr uninitialized_t uninitialized{};
  tensor(uninitialized_t, std::vector<std::int64_t> shape) : dims_(std::move(shape)) {
    size_ = detail::checked_numel(dims_);
    owner_.reset(detail::aligned_bytes(detail::checked_bytes(dims_, sizeof(T))),
                 detail::aligned_free{});
    data_ = static_cast<T*>(owner_.get());
  }
  /// A tensor over `size(shape)` elements at `data`, kept alive by `owner` (a session hands a
  /// run's result buffer to its fetch this way, without a copy).
  tensor(std::vector<std::int64_t> shape, std::shared_ptr<void> owner, T* data)
      : dims_(std::move(shape)), owner_(std::move(owner)), data_(data) {
    size_ = detail::checked_numel(dims_);
  }
  tensor(std::vector<std::int64_t> shape, std::initializer_list<T> values)
      : tensor(std::move(shape), std::span<const T>(values.begin(), values.size())) {}
  tensor(std::vector<std::int64_t> shape, std::span<const T> values) : tensor(std::move(shape)) {
    if (values.size() != static_cast<std::size_t>(size_))
      throw error("tensor: " + std::to_string(values.size()) + " values given for shape " +
                  dims_string(dims_) + " (" + std::to_string(size_) + " elements)");
    std::copy(values.begin(), values.end(), data_);
  }
  tensor(const tensor& o) : tensor(uninitialized, o.dims_) { std::copy_n(o.data(), size_, data_); }
  tensor(tensor&& o) noexcept
      : dims_(std::move(o.dims_)), size_(std::exchange(o.size_, 0)), owner_(std::move(o.owner_)),
        data_(std::exchange(o.data_, nullptr)) {}
  tensor& operator=(const tensor& o) {
    if (this != &o)
      *this = tensor(o);
    return *this;
  }
  tensor& operator=(tensor&& o) noexcept {
    dims_ = std::move(o.dims_);
    size_ = std::exchange(o.size_, 0);
    owner_ = std::move(o.owner_);
    data_ = std::exchange(o.data_, nullptr);
    return *this;
  }

  static constexpr std::string_view dtype() { return dtype_name<T>; }
  const std::vector<std::int64_t>& shape() const { return dims_; }
  std::size_t rank() const { return dims_.size(); }
  std::int64_t size() const { return size_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }

  /// Flat (row-major) element access, bounds-checked.
  T& operator[](std::int64_t i) { return data_[check_flat(i)]; }
  const T& operator[](std::int64_t i) const { return data_[check_flat(i)]; }

  /// Multi-index access, bounds-checked: `t(i, j)`.
  template <class... I>
  T& operator()(I... idx) {
    return data_[offset({static_cast<std::int64_t>(idx)...})];
  }
  template <class... I>
  const T& operator()(I... idx) const {
    return data_[offset({static_cast<std::int64_t>(idx)...})];
  }

  /// The value of a one-element tensor.
  T item() const {
    if (size_ != 1)
      throw error("tensor::item: tensor of shape " + dims_string(dims_) + " has " +
                  std::to_string(size_) + " elements, not 1");
    return data_[0];
  }

  tensor_view<T> view() const { return {data(), dims_}; }
  operator tensor_view<T>() const { return view(); } // NOLINT: feeds accept tensors

  std::string to_string() const {
    std::ostringstream os;
    os << *this;
    return os.str();
  }

  friend std::ostream& operator<<(std::ostream& os, const tensor& t) {
    os << "tensor<" << dtype_name<T> << ", " << dims_string(t.dims_) << ">";
    if (t.rank() == 0)
      return os << "(" << print_value(t.data_[0]) << ")";
    os << "\n";
    std::int64_t idx = 0;
    t.print_level(os, 0, idx);
    return os;
  }

private:
  static auto print_value(T v) {
    if constexpr (std::is_same_v<T, bool>)
      return v ? "true" : "false";
    else
      return v;
  }
  void print_level(std::ostream& os, std::size_t level, std::int64_t& idx) const {
    constexpr std::int64_t limit = 12;
    os << "[";
    std::int64_t n = dims_[level];
    for (std::int64_t i = 0; i < n; ++i) {
      if (i)
        os << (level + 1 == rank() ? ", " : ",\n" + std::string(level + 1, ' '));
      if (n > limit && i == limit / 2) {
        os << "...";
        std::int64_t stride = 1;
        for (std::size_t k = level + 1; k < rank(); ++k)
          stride *= dims_[k];
        idx += (n - limit) * stride;
        i = n - limit / 2 - 1;
        continue;
      }
      if (level + 1 == rank())
        os << print_value(data_[idx++]);
      else
        print_level(os, level + 1, idx);
    }
    os << "]";
  }
  std::int64_t check_flat(std::int64_t i) const {
    if (i < 0 || i >= size_)
      throw error("tensor: flat index " + std::to_string(i) + " out of range for shape " +
                  dims_string(dims_));
    return i;
  }
  std::int64_t offset(std::initializer_list<std::int64_t> idx) const {
    if (idx.size() != dims_.size())
      throw error("tensor: " + std::to_string(idx.size()) + " indices for shape " +
                  dims_string(dims_));
    std::int64_t off = 0;
    std::size_t k = 0;
    for (auto i : idx) {
      if (i < 0 || i >= dims_[k])
        throw error("tensor: index " + std::to_string(i) + " out of range on axis " +
                    std::to_string(k) + " of shape " + dims_string(dims_));
      off = off * dims_[k++] + i;
    }
    return off;
  }

  std::vector<std::int64_t> dims_;
  std::int64_t size_ = 0;
  std::shared_ptr<void> owner_;
  T* data_ = nullptr;
};

} // namespace typeflow
