// The variables a session holds: one record per name (dtype, extents, host and device copies),
// created and initialized from the variable's initializer when a graph that uses it first runs
// or is initialized, kept across runs, and shared by the towers of a replicated session. The
// executor binds the records to its steps; the session reads, writes and checkpoints them.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../backend/common/backend.hpp"
#include "../backend/common/value.hpp"
#include "../core/compiled.hpp"
#include "../core/error.hpp"
#include "../core/pack.hpp"
#include "../core/shape.hpp"
#include "../core/tensor.hpp"
#include "../graph/node.hpp"
#include "../ops/leaves.hpp"

namespace typeflow {

/// One variable a session holds, as seen by `for_each_variable`.
struct variable_entry {
  std::string_view name;                 ///< the variable's name, as declared
  std::string_view dtype;                ///< "float32", "float64", "int32", "int64" or "bool"
  const std::vector<std::int64_t>& dims; ///< its extents
  void* data;                            ///< dense row-major storage of `bytes` bytes, writable
  std::size_t bytes;                     ///< the size of `data`
};

/// A variable op as the run time needs it, as data: one constant per variable
/// (variable_desc_of), and one initializing function per (initializer, dtype, shape), shared by
/// every variable that has them. A session's code per variable is then a few instructions, not
/// a record lookup, an initializer and a step of its own (bench/README.md, *Variables as data*).
struct variable_desc {
  std::string_view name;    ///< the variable's name, as declared
  std::string_view dtype;   ///< its dtype's name ("float32", ...)
  const std::int64_t* dims; ///< `rank` extents (null for a scalar)
  std::size_t rank;         ///< how many extents
  std::size_t elem_bytes;   ///< the size of one element
  /// Fills `data` with the initializer's values, drawn from a generator seeded by the
  /// variable's name and the session's seed.
  void (*init)(std::string_view name, std::uint64_t seed, void* data);
};

namespace detail {
template <class Init, class T, class Shape>
void initialize_variable(std::string_view name, std::uint64_t seed, void* data) {
  std::mt19937_64 rng(hash_name(name, seed));
  if constexpr (requires { Init::shaped; })
    Init::template init<T>(static_cast<T*>(data), Shape::dims, rng);
  else
    Init::template init<T>(static_cast<T*>(data), numel(Shape::dims), rng);
}
} // namespace detail

/// Variable V's (`expr<ops::variable<...>>`) description.
template <class V>
inline constexpr variable_desc variable_desc_of{
    V::op::name,
    dtype_name<typename V::value_type>,
    V::shape_type::dims.data(),
    V::shape_type::dims.size(),
    sizeof(typename V::value_type),
    &detail::initialize_variable<typename V::op::initializer, typename V::value_type,
                                 typename V::shape_type>};

namespace detail {
/// The description of a node whose op is Op if it is a variable, else null.
template <bool IsVariable, class Op>
inline constexpr const variable_desc* variable_desc_if = nullptr;
template <class Op>
inline constexpr const variable_desc* variable_desc_if<true, Op> = &variable_desc_of<expr<Op>>;
/// Node I of table T: its description if it is a variable (indexed_table's generator).
template <class T>
struct variable_desc_at {
  template <std::size_t I>
  struct at {
    using N = typename T::template node<I>;
    static constexpr const variable_desc* value =
        variable_desc_if<is_variable_t<N>::value, typename N::op>;
  };
};
} // namespace detail

/// The descriptions of node table T's variables, null for its other nodes (`T::size`,
/// `T::node<I>`): data, no code per variable.
template <class T>
inline constexpr std::array<const variable_desc*, T::size> variable_table =
    indexed_table<const variable_desc*, T::size, detail::variable_desc_at<T>::template at>();

/// The store of named variables and how a variable node's record is found in it.
class variable_set {
public:
  /// A variable's record: dtype, extents, host and device copies and which is current.
  using record_type = backend::variable_record;

  /// An empty set (or a view of `store`, shared with other sets) whose variables are
  /// initialized from `seed` and their names.
  explicit variable_set(std::uint64_t seed, std::shared_ptr<backend::variable_store> store =
                                                std::make_shared<backend::variable_store>())
      : seed_(seed), store_(std::move(store)) {}

  /// V's record, created and initialized on first use (its value may be on a GPU).
  template <class V>
  record_type& record() {
    return record(variable_desc_of<V>);
  }
  /// The record of the variable `d` describes, created and initialized on first use; throws
  /// if the set holds a variable of that name with another dtype or shape.
  record_type& record(const variable_desc& d);
  /// V's record with its host copy up to date.
  template <class V>
  record_type& host() {
    record_type& rec = record<V>();
    backend::sync_host(rec);
    return rec;
  }

  /// (Re)initializes every variable among the nodes of table T (`T::size`, `T::node<I>`).
  template <class T>
  void initialize_all() {
    for (const variable_desc* d : variable_table<T>)
      if (d) {
        record_type& rec = record(*d);
        d->init(d->name, seed_, rec.data.get());
        rec.host_valid = true;
        rec.device_valid = false;
      }
  }
  /// Creates (and initializes) the variables among the nodes of table T that do not exist yet.
  template <class T>
  void create_all() {
    for (const variable_desc* d : variable_table<T>)
      if (d)
        record(*d);
  }

  /// A copy of variable V's current value.
  template <class V>
  tensor<typename V::value_type> read() {
    tensor<typename V::value_type> t(
        std::vector<std::int64_t>(V::shape_type::dims.begin(), V::shape_type::dims.end()));
    std::memcpy(t.data(), host<V>().data.get(), sizeof(typename V::value_type) * t.size());
    return t;
  }
  /// Overwrites variable V's value; the shape must match.
  template <class V>
  void write(const tensor<typename V::value_type>& t) {
    constexpr auto& dims = V::shape_type::dims;
    // A loop, not std::equal: a rank-0 variable's extents are an empty std::array whose data()
    // is null, and g++ warns of the memcmp that std::equal becomes (-Wnonnull).
    bool same = t.shape().size() == dims.size();
    for (std::size_t i = 0; same && i < dims.size(); ++i)
      same = t.shape()[i] == dims[i];
    if (!same)
      throw error("session::write: variable \"" + std::string(V::op::name) + "\" has shape " +
                  dims_string(dims) + ", given " + dims_string(t.shape()));
    record_type& rec = host<V>();
    std::memcpy(rec.data.get(), t.data(), sizeof(typename V::value_type) * t.size());
    rec.device_valid = false; // the host copy is the value now
  }

  /// Calls `f(variable_entry)` for every variable, in name order.
  template <class F>
  void for_each(F&& f) {
    for (auto& [name, rec] : *store_) {
      backend::sync_host(rec);
      rec.device_valid = false; // f may write: the host copy is the value from now on
      f(variable_entry{name, rec.dtype, rec.dims, rec.data.get(), rec.bytes});
    }
  }

  /// How many variables the set holds.
  std::size_t size() const { return store_->size(); }
  /// The store itself (shared with the other towers of a replicated session).
  const std::shared_ptr<backend::variable_store>& store() const { return store_; }

private:
  std::uint64_t seed_;
  std::shared_ptr<backend::variable_store> store_;
};

#if TYPEFLOW_BODIES
[[gnu::noinline]] TYPEFLOW_DECL variable_set::record_type&
variable_set::record(const variable_desc& d) {
  const std::string_view name = d.name, dtype = d.dtype;
  const std::int64_t* dims = d.dims;
  const std::size_t rank = d.rank;
  auto it = store_->find(name);
  // Loops, not std::equal (see write): a rank-0 variable's `dims` is null.
  const auto same_dims = [&](const std::vector<std::int64_t>& have) {
    bool same = have.size() == rank;
    for (std::size_t k = 0; same && k < rank; ++k)
      same = have[k] == dims[k];
    return same;
  };
  if (it == store_->end()) {
    std::int64_t n = 1;
    for (std::size_t k = 0; k < rank; ++k)
      n *= dims[k];
    const std::size_t bytes = d.elem_bytes * static_cast<std::size_t>(n);
    record_type rec;
    rec.dtype = dtype;
    rec.dims.assign(dims, dims + rank);
    rec.data.reset(detail::aligned_bytes(bytes));
    rec.bytes = bytes;
    d.init(name, seed_, rec.data.get());
    it = store_->emplace(std::string(name), std::move(rec)).first;
  } else if (it->second.dtype != dtype || !same_dims(it->second.dims)) {
    throw error("variable \"" + std::string(name) + "\" exists as " +
                std::string(it->second.dtype) + " " + dims_string(it->second.dims) +
                " but this graph declares it " + std::string(dtype) + " " +
                dims_string(dims, dims + rank));
  }
  return it->second;
}
#endif

} // namespace typeflow
