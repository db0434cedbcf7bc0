// Run-time values of plan nodes, variable storage, run statistics and the buffer pool behind
// the memory plan: what executors and the kernels of every backend share (below all of them).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "../../core/compiled.hpp"
#include "../../core/error.hpp"
#include "../../core/shape.hpp"
#include "../../core/tensor.hpp"

namespace typeflow::backend {

/// The bytes of one element of a value of dtype T (0 for void: a group has no value).
template <class T>
constexpr std::size_t value_bytes() {
  if constexpr (std::is_void_v<T>)
    return 0;
  else
    return sizeof(T);
}

/// Run-time extents of a node (rank fixed by its type).
struct rt_dims {
  std::array<std::int64_t, max_rank> d{};
  std::size_t rank = 0;
  /// The element count; extents are checked when a step's shape is computed (see valid()), so
  /// this product cannot overflow for a value of a run.
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < rank; ++i)
      n *= d[i];
    return n;
  }
  /// Whether the extents are non-negative and `elem`-byte elements of them can be addressed.
  bool valid(std::size_t elem) const {
    const std::int64_t n = detail::numel_or_invalid(d.begin(), d.begin() + rank);
    return n >= 0 && detail::bytes_or_invalid(n, elem) <= detail::max_bytes;
  }
  friend bool operator==(const rt_dims& a, const rt_dims& b) {
    return a.rank == b.rank && std::equal(a.d.begin(), a.d.begin() + a.rank, b.d.begin());
  }
  template <std::size_t R>
  dims_t<R> fixed() const {
    dims_t<R> a{};
    for (std::size_t i = 0; i < R; ++i)
      a[i] = d[i];
    return a;
  }
  template <std::size_t R>
  static rt_dims from(const dims_t<R>& a) {
    return from(a.data(), R);
  }
  /// The extents `a[0..rank)` (rank at most max_rank).
  static rt_dims from(const std::int64_t* a, std::size_t rank) {
    rt_dims r;
    r.rank = rank;
    for (std::size_t i = 0; i < rank; ++i)
      r.d[i] = a[i];
    return r;
  }
  std::string str() const { return dims_string(d.begin(), d.begin() + rank); }
  std::vector<std::int64_t> vec() const { return {d.begin(), d.begin() + rank}; }
};

/// The host's physical memory in bytes (an upper bound on any buffer a CPU step can allocate).
inline std::size_t host_memory_bytes() {
  static const std::size_t bytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                 : detail::max_bytes;
  }();
  return bytes;
}

/// Row-major strides of d.
inline std::array<std::int64_t, max_rank> row_major_strides(const rt_dims& d) {
  std::array<std::int64_t, max_rank> s{};
  std::int64_t acc = 1;
  for (std::size_t i = d.rank; i-- > 0;) {
    s[i] = acc;
    acc *= d.d[i];
  }
  return s;
}

/// sum_to_like's reduced axes: those of `in` (rank R) that `out` broadcasts (leading axes it
/// lacks, and its extents of 1 where `in` has more); throws when `in` is not a broadcast of out.
template <std::size_t R>
std::array<bool, R> sum_to_mask(const rt_dims& in, const rt_dims& out) {
  std::array<bool, R> mask{};
  const std::size_t lead = R - out.rank;
  for (std::size_t i = 0; i < R; ++i) {
    mask[i] = i < lead || (out.d[i - lead] == 1 && in.d[i] != 1);
    if (i >= lead && !mask[i] && out.d[i - lead] != in.d[i])
      throw error("sum_to_like: " + in.str() + " is not a broadcast of " + out.str());
  }
  return mask;
}

/// A (batched) matmul's extents: out[batch] (m x n) = op(a) (m x k) op(b) (k x n).
struct matmul_extents {
  std::int64_t m, n, k, batch;
  /// From the output's dims and the operands', a transposed when TA. A batch times one matrix
  /// (b of rank 2, a of a higher rank) is one product whose rows are the batch's rows.
  static matmul_extents of(const rt_dims& a, const rt_dims& b, const rt_dims& out, bool ta) {
    const std::size_t r = out.rank;
    if (b.rank == 2 && r > 2 && !ta) {
      std::int64_t rows = 1;
      for (std::size_t i = 0; i + 1 < r; ++i)
        rows *= out.d[i];
      return {rows, out.d[r - 1], a.d[r - 1], 1};
    }
    std::int64_t batch = 1;
    for (std::size_t i = 0; i + 2 < r; ++i)
      batch *= out.d[i];
    return {out.d[r - 2], out.d[r - 1], ta ? a.d[a.rank - 2] : a.d[a.rank - 1], batch};
  }
};

/// Where the products of a batched matmul read their operands when its batch dimensions
/// broadcast (np.matmul's): product i, counted row-major over the output's batch dimensions,
/// reads a at a(i) and b at b(i) elements from their starts; a batch dimension an operand lacks
/// or has as 1 gets stride 0. Without broadcasting a(i) = i m k and b(i) = i k n.
struct matmul_batch {
  std::size_t rank = 0; ///< the output's batch dimensions
  std::array<std::int64_t, max_rank> extent{}, stride_a{}, stride_b{};
  bool broadcast = false; ///< some operand is read again by several products
  static matmul_batch of(const rt_dims& a, const rt_dims& b, const rt_dims& out) {
    matmul_batch r;
    r.rank = out.rank - 2;
    for (std::size_t j = 0; j < r.rank; ++j)
      r.extent[j] = out.d[j];
    const auto strides = [&](const rt_dims& x, std::array<std::int64_t, max_rank>& s) {
      const std::size_t lead = r.rank - (x.rank - 2); // leading batch dimensions x lacks
      std::int64_t step = x.d[x.rank - 2] * x.d[x.rank - 1];
      for (std::size_t j = r.rank; j-- > 0;) {
        const std::int64_t e = j < lead ? 1 : x.d[j - lead];
        s[j] = e == 1 && out.d[j] != 1 ? 0 : step;
        r.broadcast = r.broadcast || s[j] == 0;
        step *= e;
      }
    };
    strides(a, r.stride_a);
    strides(b, r.stride_b);
    return r;
  }
  std::int64_t a(std::int64_t i) const { return offset(i, stride_a); }
  std::int64_t b(std::int64_t i) const { return offset(i, stride_b); }
  /// The products as runs of `inner` products along the last batch dimension: run q starts at
  /// product q * inner, and within it a and b advance by inner_a and inner_b elements.
  std::int64_t inner() const { return rank == 0 ? 1 : extent[rank - 1]; }
  std::int64_t inner_a() const { return rank == 0 ? 0 : stride_a[rank - 1]; }
  std::int64_t inner_b() const { return rank == 0 ? 0 : stride_b[rank - 1]; }

private:
  std::int64_t offset(std::int64_t i, const std::array<std::int64_t, max_rank>& s) const {
    std::int64_t off = 0;
    for (std::size_t j = rank; j-- > 0 && i > 0;) {
      off += i % extent[j] * s[j];
      i /= extent[j];
    }
    return off;
  }
};

/// What a kernel keeps beside a value for the value's gradient (rt_value::aux): each kind of
/// record derives from this header, whose tag (the address of a constant of that kind) says
/// which kind it is before anything downcasts it.
struct aux_header {
  const void* tag = nullptr;
};

/// A node's value during a run: data (owned through `owner` when it is a pool buffer) and dims.
struct rt_value {
  std::shared_ptr<void> owner;
  void* data = nullptr;
  rt_dims dims;
  void* variable = nullptr; ///< a variable node's storage record (the session's)
  /// What the kernel that computed the value keeps beside it for its gradient (a loop's kept
  /// activations, runtime/loops.hpp; attention's log-sum-exp per query row,
  /// backend/cpu/kernels/attention.hpp); empty otherwise. Copies of the value share it.
  std::shared_ptr<aux_header> aux;
};

/// A variable's storage, shared by the sessions of one replicated session. Its value lives in
/// the host copy, in a copy on one GPU, or in both (the *_valid flags): a run that places the
/// variable on a GPU keeps it there between runs, and host access (read, write,
/// for_each_variable, a CPU placement) copies it back first through `download`.
struct variable_record {
  std::string_view dtype;
  std::vector<std::int64_t> dims;
  std::unique_ptr<void, detail::aligned_free> data;
  std::size_t bytes = 0;
  bool host_valid = true;
  bool device_valid = false;
  int gpu = -1;                      ///< the GPU holding device_data
  std::shared_ptr<void> device_data; ///< set by the CUDA backend
  void (*download)(void* context, variable_record&) = nullptr;
  void* download_context = nullptr; ///< the GPU's backend state
};
/// Variables by name.
using variable_store = std::map<std::string, variable_record, std::less<>>;

/// Statistics of the last run, the instrumentation behind the tests of the plan.
struct run_stats {
  std::size_t steps = 0;              // kernels executed (materialized nodes, leaves excluded)
  std::size_t fused_nodes = 0;        // elementwise nodes computed inside fused loops
  std::size_t buffers_allocated = 0;  // fresh heap allocations by the pool during the run
  std::size_t buffers_reused = 0;     // buffers the pool handed out again
  std::size_t buffers_in_place = 0;   // outputs written over an input that died with the step
  std::size_t peak_bytes = 0;         // peak bytes of live intermediate buffers
  std::size_t transfers = 0;          // tensors sent from one device to another
  std::size_t transfer_bytes = 0;     // ... and their bytes
  std::size_t graph_captures = 0;     // the run captured its steps as a CUDA graph (1) ...
  std::size_t graph_launches = 0;     // ... and launched a captured graph (1)
  std::size_t cudnn_convolutions = 0; // convolution steps that ran on cuDNN
};

/// Size-bucketed pool: a buffer goes back to its bucket when its last reference is dropped, so
/// steady-state runs allocate nothing.
class buffer_pool : public std::enable_shared_from_this<buffer_pool> {
public:
  ~buffer_pool() {
    for (auto& [bytes, list] : free_)
      for (void* p : list)
        std::free(p);
  }
  std::shared_ptr<void> acquire(std::size_t bytes, run_stats& stats);

  /// Whether `owner` holds a buffer of a pool with exactly `holders` holders.
  static bool pool_buffer_held_by(const std::shared_ptr<void>& owner, long holders) {
    return owner && owner.use_count() == holders && std::get_deleter<returner>(owner) != nullptr;
  }

  /// Makes the buffer `owner` holds a variable's `storage` (of `storage_bytes`) and gives the
  /// storage's old memory to the pool instead: an assignment's value becomes the variable's
  /// value without a copy. Only for a buffer of a pool whose sole holder is `owner`, of the
  /// storage's size (both come from detail::aligned_bytes, rounded alike); else returns false
  /// and changes nothing. `owner` is empty afterwards.
  static bool adopt(std::shared_ptr<void>& owner,
                    std::unique_ptr<void, detail::aligned_free>& storage,
                    std::size_t storage_bytes);
  void reset_live() {
    std::lock_guard lock(mu_);
    live_ = 0;
  }

private:
  /// A buffer's deleter: gives it back to its pool (frees it when the pool is gone), unless
  /// adopt() kept it as a variable's storage.
  struct returner {
    std::weak_ptr<buffer_pool> pool;
    std::size_t bytes;
    bool kept = false;
    void operator()(void* q) const {
      if (kept)
        return;
      if (auto p = pool.lock())
        p->give_back(q, bytes);
      else
        std::free(q);
    }
  };
  static std::size_t round(std::size_t b) {
    const std::size_t a = detail::buffer_alignment;
    return (std::max<std::size_t>(b, 1) + a - 1) / a * a;
  }
  void give_back(void* p, std::size_t bytes) {
    std::lock_guard lock(mu_);
    free_[bytes].push_back(p);
    live_ -= std::min(live_, bytes);
  }
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t live_ = 0;
};

#if TYPEFLOW_BODIES
TYPEFLOW_DECL std::shared_ptr<void> buffer_pool::acquire(std::size_t bytes, run_stats& stats) {
  bytes = round(bytes);
  void* p = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      ++stats.buffers_reused;
    }
    live_ += bytes;
    stats.peak_bytes = std::max(stats.peak_bytes, live_);
  }
  if (!p) {
    p = detail::aligned_bytes(bytes);
    ++stats.buffers_allocated;
  }
  return {p, returner{weak_from_this(), bytes}};
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL bool buffer_pool::adopt(std::shared_ptr<void>& owner,
                                      std::unique_ptr<void, detail::aligned_free>& storage,
                                      std::size_t storage_bytes) {
  auto* d = std::get_deleter<returner>(owner);
  if (!d || owner.use_count() != 1 || !storage || d->bytes != round(storage_bytes))
    return false;
  auto pool = d->pool.lock();
  if (!pool)
    return false;
  std::lock_guard lock(pool->mu_);
  const std::size_t bytes = d->bytes; // d dies with owner's control block below
  auto& list = pool->free_[bytes];
  list.reserve(list.size() + 1); // the only step that can throw: before anything changes
  d->kept = true;
  void* buffer = owner.get();
  owner.reset();
  list.push_back(storage.release());
  storage.reset(buffer);
  // The buffer left the pool's live set; the old storage is free.
  pool->live_ -= std::min(pool->live_, bytes);
  return true;
}
#endif

} // namespace typeflow::backend
