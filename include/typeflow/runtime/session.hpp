// The session: the public face of running graphs. It owns an executor (executor.hpp: the
// variables' storage, the thread pool, the buffer pool and the steps) and runs the compiled plan
// of a set of fetches; only the subgraph the fetches need is evaluated. A run's problems that
// the compiler can see are one error each (checks.hpp); the rest throw typeflow::error and
// commit nothing.
//
//   ty::session s;                                    // ty::session<Placement>, on<cpu<0>> by
//   default s.initialize(train);                              // the variables train reaches auto
//   [l] = s.run(ty::fetch(loss, train), ty::feed(x, images), ty::feed(y, labels)); auto w =
//   s.read(weights);                         // s.write(weights, t) to set one
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "checks.hpp"
#include "executor.hpp"
#include "options.hpp"
#include "variables.hpp"

namespace typeflow {

namespace detail {
/// Whether a session under Placement builds no plan in this pass: only in nvcc's device pass
/// (__CUDA_ARCH__), and only for a placement of every node on a CPU. That pass emits no host
/// code; it reads host code for the kernels it launches, and such a session launches none. What
/// it saves a unit that checks each GPU result against a CPU session's: bench/README.md (*CPU
/// sessions out of nvcc's device pass*).
template <class Placement>
inline constexpr bool plans_skipped = false;
#if defined(__CUDA_ARCH__)
template <int I>
inline constexpr bool plans_skipped<on<cpu<I>>> = true;
#endif
} // namespace detail

/// Runs graphs under the placement policy `Placement`, which maps each node to a device.
template <class Placement = on<cpu<0>>>
class session {
public:
  /// A session with the default options (every hardware thread, seed 0).
  session() : session(session_options{}) {}
  /// A session with options `o`.
  explicit session(session_options o) : ex_(o) {}
  /// A tower of a replicated session: its own options and threads, the variables shared.
  session(session_options o, std::shared_ptr<backend::variable_store> vars)
      : ex_(o, std::move(vars)) {}

  /// The worker threads of the session's CPU kernels (BLAS included).
  int threads() const { return ex_.threads(); }
  /// Whether this session's CPU convolutions and matrix products compute with bfloat16
  /// operands (session_options::precision on a CPU that runs them natively).
  bool products_in_bfloat16() const { return ex_.products_in_bfloat16(); }
  /// Whether the CPU's convolutions and matrix products read float16-rounded operands.
  bool products_in_float16() const { return ex_.products_in_float16(); }
  /// describe_placement() of the plan of `fetches` under this session's placement, with the
  /// compute dtypes this session uses: bfloat16 or float16 products where the CPU runs them
  /// (products_in_bfloat16(), products_in_float16()), on the GPUs the session's precision, and
  /// TF32 where allow_tf32 is set and the precision is float32.
  template <class... F>
  std::string describe_placement(F...) const {
    const precision cpu = products_in_bfloat16()  ? precision::bfloat16
                          : products_in_float16() ? precision::float16
                                                  : precision::float32;
    return compile::plan<type_list<std::remove_cvref_t<F>...>, Placement>::describe_placement(
        cpu, ex_.options().allow_tf32, ex_.options().precision);
  }
  /// oneDNN primitives this session has created (each once per geometry; 0 without oneDNN).
  std::size_t onednn_primitives() const { return ex_.onednn_primitives(); }
  /// What the last run did: steps, fused nodes, buffers allocated and reused, peak bytes,
  /// transfers.
  const run_stats& stats() const { return ex_.stats(); }

  /// Evaluates the fetches. Returns a tuple with one owning tensor per fetch that has a value
  /// (groups have none): `auto [loss] = s.run(fetch(loss, train), feed(x, images));`
  template <class... F, class... Feeds>
  auto run(fetch_t<F...>, const Feeds&... feeds) {
    if constexpr (any_invalid<F...>) { // its factory's static_assert said why: nothing more
      return detail::run_result<F...>{};
    } else if constexpr (detail::plans_skipped<Placement>) {
      ((void)feeds, ...);
      return detail::run_result<F...>{};
    } else {
      using P = compile::plan<type_list<F...>, Placement>;
      if constexpr (detail::plan_check<P, Feeds...>::problem != detail::plan_problem::none) {
        detail::check_plan<Placement, P, Feeds...>();
        return detail::run_result<F...>{};
      } else {
        return ex_.template run<P, F...>(feeds...);
      }
    }
  }

  /// (Re)initializes the variables reachable from `roots` from their initializers.
  template <class... E>
  requires expressions<E...>
  void initialize(E...) {
    // The node table only: initializing needs the variables, not a plan (whose facts,
    // placement and layout cost as much again to compile as the table).
    if constexpr (!any_invalid<E...>)
      ex_.variables().template initialize_all<graph::node_table<E...>>();
  }

  /// A copy of a variable's current value.
  template <expression V>
  tensor<typename V::value_type> read(V) {
    static_assert(is_variable<V>, "session::read: not a variable");
    return ex_.variables().template read<V>();
  }

  /// Sets a scalar variable (a run-time hyper-parameter such as a learning rate).
  template <expression V>
  requires(V::shape_type::rank == 0) void write(V v, typename V::value_type x) {
    write(v, tensor<typename V::value_type>(std::vector<std::int64_t>{}, {x}));
  }

  /// Overwrites a variable's value; the shape must match.
  template <expression V>
  void write(V, const tensor<typename V::value_type>& t) {
    static_assert(is_variable<V>, "session::write: not a variable");
    ex_.variables().template write<V>(t);
  }

  /// One variable the session holds, as `for_each_variable` shows it (variables.hpp).
  using variable_entry = typeflow::variable_entry;

  /// Calls `f(variable_entry)` for every variable the session holds, in name order (variables
  /// come into being when a graph using them first runs or is initialized).
  template <class F>
  void for_each_variable(F&& f) {
    ex_.variables().for_each(std::forward<F>(f));
  }

  /// How many variables the session holds.
  std::size_t variable_count() const { return ex_.variables().size(); }

private:
  executor<Placement> ex_;
};

} // namespace typeflow
