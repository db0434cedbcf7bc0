// The executor: runs a compiled plan (compile/plan.hpp) step by step on the devices its
// placement chose. It binds the feeds, gathers each step's frame from the run's values, and
// hands the step to its device's backend, device_backend<D> (the CPU's as any other's; a backend
// gets the session state `st_`, never the executor), which also binds variables, receives
// transfers, commits assignments and hands fetched values over. It checks numerics and traces.
// `repeat` loops run in loops.hpp, a run captured as one CUDA graph in graph_replay.hpp, and
// replication's phases in replicate.hpp: each through the public members below. The session
// (session.hpp) is its public face.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/common/backend.hpp"
#include "../backend/common/cost.hpp"
#include "../backend/common/value.hpp"
#include "../backend/cpu/backend.hpp"
#include "../backend/cpu/kernels.hpp"
#include "../backend/cpu/loops.hpp"
#include "../backend/cuda/kernels.hpp"
#include "../compile/plan.hpp"
#include "../core/compiled.hpp"
#include "../device/device.hpp"
#include "../device/replication.hpp"
#include "../ops/layout.hpp"
#include "../ops/matmul.hpp"
#include "../ops/nn.hpp"
#include "../ops/reduce.hpp"
#include "../ops/repeat.hpp"
#include "checks.hpp"
#include "feed.hpp"
#include "graph_replay.hpp"
#include "loops.hpp"
#include "options.hpp"
#include "trace.hpp"
#include "variables.hpp"

#if defined(__CUDACC__)
#include "../backend/cuda/backend.cuh" // the CUDA backend, wherever nvcc compiles
#endif

namespace typeflow {

namespace detail {

// The run-time checks' error paths, out of line and shared by every step: a template per op
// (and per node) built each message inline, which g++ then optimized once per instantiation.
using node_name_fn = const std::string& (*)(std::size_t);

/// Throws the error of a step whose shape rule rejected its operands' extents.
[[gnu::cold, gnu::noinline]] TYPEFLOW_DECL void
shape_rule_failed(std::string_view op, std::string_view why, const backend::rt_dims* const* dims,
                  const std::size_t* refs, std::size_t count, std::size_t self, node_name_fn name)
#if TYPEFLOW_BODIES
{
  std::string shapes;
  for (std::size_t k = 0; k < count; ++k)
    shapes += (k ? " x " : "") + dims[refs[k]]->str();
  throw error(std::string(op) + ": " + std::string(why) + ": " + shapes + " (in " + name(self) +
              ")");
}
#else
    ;
#endif

/// A step's result must be countable, addressable and, on the host, fit in the machine's memory.
[[gnu::noinline]] TYPEFLOW_DECL void
check_result_size(const backend::rt_dims& d, std::size_t elem_bytes, bool on_host,
                  std::string_view op, std::string_view dtype, std::size_t self, node_name_fn name)
#if TYPEFLOW_BODIES
{
  if (!d.valid(elem_bytes))
    throw error(std::string(op) + ": result of shape " + d.str() + " has more " +
                std::string(dtype) + " elements than can be addressed (in " + name(self) + ")");
  if (on_host) {
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(d.numel());
    if (bytes > backend::host_memory_bytes())
      throw error(std::string(op) + ": result of shape " + d.str() + " needs " +
                  std::to_string(bytes) + " bytes, more than this machine's " +
                  std::to_string(backend::host_memory_bytes()) + " bytes of memory (in " +
                  name(self) + ")");
  }
}
#else
    ;
#endif

/// What a placeholder expects of its feed: its name, static extents (dyn for the batch), and its
/// dtype's size, alignment and name.
struct feed_expectation {
  std::string_view name;
  const std::int64_t* dims;
  std::size_t rank;
  std::size_t elem_bytes;
  std::size_t align;
  std::string_view dtype;
};
/// The batch extent that every feed's dyn extents share, and the feed it was first read from.
struct feed_batch {
  bool known = false;
  std::int64_t extent = 0;
  std::string from;
};
/// Checks one feed (extents `fed`, data at `data`) against its placeholder, the batch extent
/// against the feeds checked before it: one function for every feed of every run.
[[gnu::noinline]] TYPEFLOW_DECL void check_feed(const feed_expectation& e,
                                                const backend::rt_dims& fed, const void* data,
                                                feed_batch& batch)
#if TYPEFLOW_BODIES
{
  const auto fail = [&](const std::string& why) {
    throw error("feed: placeholder \"" + std::string(e.name) + "\" expects " +
                dims_string(e.dims, e.dims + e.rank) + ", fed " + fed.str() + why);
  };
  if (fed.rank != e.rank)
    fail(" (rank differs)");
  for (std::size_t i = 0; i < e.rank; ++i) {
    if (fed.d[i] < 0)
      fail(" (negative extent)");
    if (e.dims[i] == dyn) {
      if (!batch.known) {
        batch.known = true;
        batch.extent = fed.d[i];
        batch.from = "placeholder \"" + std::string(e.name) + "\" fed " + fed.str();
      } else if (fed.d[i] != batch.extent) {
        fail("; dyn extent " + std::to_string(fed.d[i]) + " disagrees with " +
             std::to_string(batch.extent) + " from " + batch.from);
      }
    } else if (fed.d[i] != e.dims[i]) {
      fail("");
    }
  }
  if (!fed.valid(e.elem_bytes))
    fail(" (more elements than can be addressed)");
  if (data == nullptr && fed.numel() != 0)
    fail(" (null data for " + std::to_string(fed.numel()) + " elements)");
  if (reinterpret_cast<std::uintptr_t>(data) % e.align != 0)
    fail(" (data not aligned to " + std::to_string(e.align) + " bytes for " + std::string(e.dtype) +
         ")");
}
#else
    ;
#endif
/// A step's frame (executor::run_kernel): copies of the values its kernel reads, in `local`'s
/// uninitialized storage for n values, position 0 the step's own value moved in. Gathered,
/// returned and released out of line: one function for every step, where the frame's copies
/// and releases of shared buffers were code in every step's instantiation.
[[gnu::noinline]] TYPEFLOW_DECL void gather_frame(backend::rt_value* local, backend::rt_value* vals,
                                                  const std::size_t* frame, std::size_t n) noexcept
#if TYPEFLOW_BODIES
{
  std::construct_at(local, std::move(vals[frame[0]]));
  for (std::size_t k = 1; k < n; ++k)
    std::construct_at(local + k, vals[frame[k]]);
}
#else
    ;
#endif
/// Destroys a frame's n values (a step whose kernel threw: its value stays moved out).
[[gnu::noinline]] TYPEFLOW_DECL void destroy_frame(backend::rt_value* local, std::size_t n) noexcept
#if TYPEFLOW_BODIES
{
  std::destroy_n(local, n);
}
#else
    ;
#endif
/// Returns a frame's step value (position 0) and its stored outputs (positions first..n) to
/// their slots, and destroys the frame.
[[gnu::noinline]] TYPEFLOW_DECL void
scatter_frame(backend::rt_value* local, backend::rt_value* vals, const std::size_t* frame,
              std::size_t n, std::size_t first) noexcept
#if TYPEFLOW_BODIES
{
  vals[frame[0]] = std::move(local[0]);
  for (std::size_t k = first; k < n; ++k)
    vals[frame[k]] = std::move(local[k]);
  std::destroy_n(local, n);
}
#else
    ;
#endif
/// The frame of a step of N values over the run's values `vals` (see gather_frame).
template <std::size_t N>
class step_frame {
public:
  step_frame(backend::rt_value* vals, const std::size_t* frame) : vals_(vals), frame_(frame) {
    gather_frame(v_, vals, frame, N);
  }
  step_frame(const step_frame&) = delete;
  step_frame& operator=(const step_frame&) = delete;
  ~step_frame() {
    if (live_)
      destroy_frame(v_, N);
  }
  backend::rt_value* data() { return v_; }
  static constexpr std::size_t size() { return N; }
  /// The step's value and the stored outputs from position `first` on go back to their slots.
  void commit(std::size_t first) {
    live_ = false;
    scatter_frame(v_, vals_, frame_, N, first);
  }

private:
  union {
    backend::rt_value v_[N];
  };
  backend::rt_value* vals_;
  const std::size_t* frame_;
  bool live_ = true;
};

/// What placeholder Ph expects of its feed.
template <class Ph>
inline constexpr feed_expectation feed_expectation_of{Ph::op::name,
                                                      Ph::shape_type::dims.data(),
                                                      Ph::shape_type::rank,
                                                      sizeof(typename Ph::value_type),
                                                      alignof(typename Ph::value_type),
                                                      dtype_name<typename Ph::value_type>};

/// check_numerics' error: element e of node `self` (extents d) is not finite.
[[gnu::cold, gnu::noinline]] TYPEFLOW_DECL void
not_finite(double x, std::int64_t e, const backend::rt_dims& d, std::size_t self, node_name_fn name)
#if TYPEFLOW_BODIES
{
  throw error("check_numerics: " + name(self) + " has " +
              (std::isnan(x) ? std::string("NaN") : std::string("Inf")) + " at element " +
              std::to_string(e) + " of " + d.str() + " (nothing was committed)");
}
#else
    ;
#endif

template <class F>
struct fetch_value_type {
  using type = std::conditional_t<F::op::kind == node_kind::group, void, typename F::value_type>;
};
template <class F>
using group_or_value = typename fetch_value_type<std::remove_cvref_t<F>>::type;
/// What run(fetch(F...)) returns: one tensor per fetch with a value.
template <class T>
struct fetched_tuple {
  using type = std::tuple<tensor<T>>;
};
template <class T>
requires std::is_void_v<T>
struct fetched_tuple<T> {
  using type = std::tuple<>;
};
template <class... F>
using run_result =
    decltype(std::tuple_cat(std::declval<typename fetched_tuple<group_or_value<F>>::type>()...));

} // namespace detail

/// Runs plans: see the top of this file.
template <class Placement = on<cpu<0>>>
class executor {
  using value = backend::rt_value;
  using name_fn = const std::string& (*)(std::size_t);
  using var_record = backend::variable_record;
  // The functions that check_numerics and commit_steps run on a node (defined below).
  template <class D, class T, bool Checked>
  struct numerics_of;
  /// Whether check_numerics looks at values of dtype T.
  template <class T>
  static constexpr bool finite_dtype = std::is_floating_point_v<T> || is_half<T>;
  template <class D, class T, bool Fetched, bool State>
  struct commit_of;

public:
  explicit executor(session_options o, std::shared_ptr<backend::variable_store> vars =
                                           std::make_shared<backend::variable_store>())
      : opts_(o), vars_(o.seed, std::move(vars)) {
    st_.host = std::make_shared<cpu_backend::host_state>(
        o.threads, o.precision == precision::bfloat16, o.precision == precision::float16);
    st_.allow_tf32 = o.allow_tf32;
    st_.convolutions = o.convolutions;
    st_.precision = o.precision;
    cpu_backend::set_blas_single_threaded();
  }

  const session_options& options() const { return opts_; }
  variable_set& variables() { return vars_; }
  const variable_set& variables() const { return vars_; }
  int threads() const { return host().pool.size(); }
  cpu_backend::thread_pool& pool() { return cpu_backend::host_of(st_).pool; }
  bool products_in_bfloat16() const { return host().dnnl.bf16(); }
  bool products_in_float16() const { return host().dnnl.f16(); }
  std::size_t onednn_primitives() const { return host().dnnl.primitives(); }
  const run_stats& stats() const { return st_.stats; }
  /// What the backends see (host buffers, statistics, the run counter, GPU state).
  backend::session_state& state() { return st_; }

  /// A whole run of plan P, whose compile-time checks (checks.hpp) passed: the feeds checked
  /// and bound, the steps run (or a captured CUDA graph replayed), the fetched values handed
  /// over and the assignments committed, nothing committed when anything throws.
  template <class P, class... F, class... Feeds>
  auto run(const Feeds&... feeds) {
    check_feeds(feeds...);
    check_empty_batch<P>(feeds...);
    const trace_scope traced(*this, opts_.trace ? opts_.trace->begin_run() : std::nullopt);
    try {
      std::array<backend::rt_value, P::slots> vals;
      begin_run<P>(vals.data(), feeds...);
      if constexpr (graph_replay<executor>::template capturable<P>())
        if (opts_.cuda_graphs && !tr_.run && !opts_.check_numerics &&
            replay_.template warmed_up<P>(vals.data())) {
          replay_.template run<P>(*this, vals.data());
          return fetch_all<P, F...>(vals.data());
        }
      run_steps<P, 0>(vals.data(), std::make_index_sequence<P::size>{});
      backend::end_steps(st_); // device-side checks (a bad label): throws before any commit
      if (opts_.check_numerics)
        check_numerics<P>(vals.data(), std::make_index_sequence<P::size>{});
      auto out = fetch_all<P, F...>(vals.data());
      commit_steps<P>(vals.data(), std::make_index_sequence<P::size>{});
      backend::end_commits(st_);
      return out;
    } catch (const std::bad_alloc&) { // from a library under a kernel (typeflow's own: error)
      throw error("session::run: out of memory (nothing was committed)");
    }
  }

  // The parts of a run, for replication's phases (replicate.hpp).
  template <class... Feeds>
  void check_feeds(const Feeds&... feeds) {
    detail::feed_batch batch;
    (detail::check_feed(detail::feed_expectation_of<typename Feeds::placeholder>, feeds.dims,
                        feeds.data, batch),
     ...);
  }

  /// A run that assigns variables (a training step) on an empty batch is an error: a mean over
  /// no examples is NaN, and a step counter would count a step that learned nothing.
  template <class P, class... Feeds>
  static void check_empty_batch(const Feeds&... feeds) {
    static constexpr bool assigns = assigns_any<P>(std::make_index_sequence<P::size>{});
    if constexpr (assigns && sizeof...(Feeds) > 0) {
      auto one = [](const auto& f) {
        using Ph = typename std::remove_cvref_t<decltype(f)>::placeholder;
        for (std::size_t i = 0; i < Ph::shape_type::rank; ++i)
          if (Ph::shape_type::dims[i] == dyn && f.dims.d[i] == 0)
            throw error("session::run: placeholder \"" + std::string(Ph::op::name) + "\" fed " +
                        f.dims.str() +
                        ", an empty batch, in a run that assigns variables: a training step "
                        "needs at least one example (nothing was run)");
      };
      (one(feeds), ...);
    }
  }

  template <class P, std::size_t... I>
  void check_numerics(const value* vals, std::index_sequence<I...>) {
    // One function per device and dtype: a table of a few instantiations, not one per node.
    static constexpr numerics_fn table[] = {
        numerics_of<typename P::template device<I>, typename P::template node<I>::value_type,
                    ((P::fact.fetched[I] || op_traits<typename P::template node<I>::op>::state) &&
                     finite_dtype<typename P::template node<I>::value_type>)>::fn...,
        nullptr};
    for (std::size_t i = 0; i < P::size; ++i)
      if (table[i])
        table[i](*this, vals[i], i, &P::node_string);
  }

  template <class P>
  static constexpr bool runs_loop_gradient = [] {
    for (std::string_view op : P::fact.op)
      if (op == "scan_grad" || op == "repeat_stored_grad")
        return true;
    return false;
  }();
  template <class P, class... Feeds>
  void begin_run(value* vals, const Feeds&... feeds) {
    st_.stats = run_stats{};
    ++st_.runs;
    loop_grads_ = runs_loop_gradient<P>;
    if (opts_.log_device_placement)
      log_placement<P>();
    if (tr_.run)
      tr_.plan = &trace_names<P>();
    (void)vals; // no feeds
    (bind_feed(P::template contains_c<typename Feeds::placeholder>::value, vals,
               feed_slot<P, Feeds>(), feeds),
     ...);
  }

  template <class P, int Phase, std::size_t... I>
  void run_steps(value* vals, std::index_sequence<I...> seq, const bool* skip = nullptr) {
    const step_fn* table = step_table<P>(seq);
    constexpr auto& L = P::layout;
    static constexpr std::size_t elem_bytes[] = {
        backend::value_bytes<typename P::template node<I>::value_type>()..., 0};
    for (std::size_t q = 0; q < P::size; ++q) {
      const std::size_t i = L.order[q]; // node order, but for the moves of compile::plan::schedule
      if constexpr (Phase != 0) {
        constexpr auto& R = replication<P>::value;
        if (R.once[i] != (Phase == 2)) {
          if (Phase == 2 && R.all_reduce[i])
            run_transfers<P>(vals, i, elem_bytes[i]);
          continue;
        }
      }
      st_.dying = L.dying[i]; // what the step's CPU kernel may write over
      if (skip && skip[i]) {
        // bound already (run_body)
      } else if (tr_.run) {
        const std::size_t before = st_.stats.steps;
        const double t0 = opts_.trace->now();
        run_step<P>(table, vals, i);
        if (st_.stats.steps > before)
          trace_push(trace_event::type::step, i, P::placement.device[i], t0);
      } else {
        run_step<P>(table, vals, i);
      }
      st_.dying = 0;
      if constexpr (Phase == 1) {
        if (!replication<P>::value.all_reduce[i])
          run_transfers<P>(vals, i, elem_bytes[i]);
        for (std::size_t r = L.release_begin[i]; r < L.release_begin[i + 1]; ++r)
          if (!replication<P>::value.read_once[L.releases[r]])
            vals[L.releases[r]].owner.reset();
      } else {
        run_transfers<P>(vals, i, elem_bytes[i]);
        release(vals, &L.releases[L.release_begin[i]], L.release_begin[i + 1] - L.release_begin[i]);
      }
    }
  }

  template <class P, std::size_t... I>
  void commit_steps(value* vals, std::index_sequence<I...>) {
    // The function of an assignment depends on its device, dtype and whether it is fetched, not
    // on the node: a table of a few instantiations, and the variable's slot from the plan's edges.
    static constexpr commit_fn table[] = {
        commit_of<typename P::template device<I>, typename P::template node<I>::value_type,
                  P::fact.fetched[I], op_traits<typename P::template node<I>::op>::state>::fn...,
        nullptr};
    static constexpr std::array<std::size_t, P::size> var = [] {
      std::array<std::size_t, P::size> v{};
      for (std::size_t i = 0; i < P::size; ++i)
        if (P::fact.edge_begin[i + 1] > P::fact.edge_begin[i])
          v[i] = P::edge_slot(P::fact.edge_begin[i]);
      return v;
    }();
    for (std::size_t i = 0; i < P::size; ++i)
      if (table[i])
        table[i](*this, vals, i, var[i]);
  }

  /// A fetched value as a tensor (none for a group), from its device's backend: a const value
  /// is copied; a CPU backend hands a run's own buffer over when nothing else holds it.
  template <class T, class D, class V>
  auto fetch_value(V& v) {
    if constexpr (std::is_void_v<T>)
      return std::tuple<>{};
    else
      return std::tuple<tensor<T>>{device_backend<D>::template fetch<T>(st_, v)};
  }

  /// What this session's CPU kernels get (its pool, buffers, statistics, oneDNN primitives):
  /// for the host-side work of loops and replication.
  cpu_backend::context cpu_context() { return device_backend<cpu<0>>::context(st_); }

  /// Binds plan P's variables to their storage on their devices (a GPU's copy uploaded when the
  /// host's is newer): what a captured run (graph_replay.hpp) does outside its capture.
  template <class P>
  void bind_variables(value* vals) {
    const step_fn* table = step_table<P>(std::make_index_sequence<P::size>{});
    for (std::size_t i = 0; i < P::size; ++i)
      if (P::layout.step[i] == graph::step_kind::variable)
        run_step<P>(table, vals, i);
  }

  /// Runs a loop body's plan P (runtime/loops.hpp) on the bound values for layer `layer`:
  /// untraced, with the layer's run salt (random ops draw per layer, and the gradient's
  /// recomputation draws as the forward did).
  /// With `skip`, the steps of the nodes i with skip[i] do not run: their values are bound
  /// (a loop's kept activations).
  template <class P>
  void run_body(std::vector<value>& v, std::int64_t layer, const bool* skip = nullptr) {
    const auto traced = tr_.run;
    const std::uint64_t runs = st_.runs;
    tr_.run.reset();
    st_.runs = runs ^ (static_cast<std::uint64_t>(layer + 1) * 0x9E3779B97F4A7C15ull);
    try {
      run_steps<P, 0>(v.data(), std::make_index_sequence<P::size>{}, skip);
    } catch (...) {
      tr_.run = traced;
      st_.runs = runs;
      throw;
    }
    tr_.run = traced;
    st_.runs = runs;
  }

  void trace_start(std::optional<std::uint64_t> run) {
    tr_.run = run;
    tr_.events.clear();
    if (run)
      tr_.start = opts_.trace->now();
  }

  /// Hands the events over (with the run's span when `whole_run`) and stops tracing.
  void trace_finish(bool whole_run) {
    if (!tr_.run)
      return;
    if (whole_run) {
      tr_.bytes = 0;
      tr_.flops = -1;
      trace_push(trace_event::type::run, 0, device_id{true, -1}, tr_.start);
    }
    opts_.trace->add(tr_.events);
    tr_.run.reset();
  }

  void trace_push(trace_event::type what, std::size_t node, device_id d, double start) {
    const double end = opts_.trace->now();
    if (own_devices_ && what == trace_event::type::step)
      d = own_devices_[node];
    tr_.events.push_back(trace_event{what, tr_.plan, static_cast<std::uint32_t>(node), d,
                                     trace_recorder::thread_index(), *tr_.run, start, end - start,
                                     tr_.bytes, tr_.flops});
  }

  /// Whether the running plan has a scan's or a stored repeat's gradient: such a loop keeps
  /// its activations for it only then (runtime/loops.hpp).
  bool loop_gradients() const { return loop_grads_; }

  /// Whether the running run is traced, and the cost of the event trace_push records next.
  bool tracing() const { return tr_.run.has_value(); }
  void trace_cost(std::uint64_t bytes, double flops) {
    tr_.bytes = bytes;
    tr_.flops = flops;
  }
  /// The devices that this executor's trace events and placement log name for the running
  /// plan's nodes (null: the plan's own); see own_devices_.
  void name_devices(const device_id* d) { own_devices_ = d; }

private:
  // ---- feeds ---------------------------------------------------------------------------------

  template <class P, std::size_t... I>
  static consteval bool assigns_any(std::index_sequence<I...>) {
    const bool state[] = {op_traits<typename P::template node<I>::op>::state...,
                          false}; // not a fold
    for (bool b : state)
      if (b)
        return true;
    return false;
  }

  /// check_numerics: every fetched floating value and every assignment's new value is finite.
  using numerics_fn = void (*)(executor&, const value&, std::size_t, name_fn);
  /// One function per device and dtype (the node is an argument): every element of v is finite.
  template <class D, class T>
  static void check_finite(executor& s, const value& v, std::size_t self, name_fn name) {
    const std::int64_t n = v.dims.numel();
    if (n == 0 || !v.data)
      return;
    auto scan = [&](const T* p) {
      for (std::int64_t e = 0; e < n; ++e)
        if (const auto x = static_cast<compute_of<T>>(p[e]); !std::isfinite(x))
          detail::not_finite(static_cast<double>(x), e, v.dims, self, name);
    };
    device_backend<D>::template read<T>(s.st_, v, scan);
  }
  /// What check_numerics runs on a node of device D and dtype T: check_finite where Checked
  /// (the node is fetched or assigned, and of a floating dtype), else nothing.
  template <class D, class T, bool Checked>
  struct numerics_of {
    static constexpr numerics_fn fn = nullptr;
  };
  template <class D, class T>
  struct numerics_of<D, T, true> {
    static constexpr numerics_fn fn = &check_finite<D, T>;
  };

  template <class P, class... F>
  auto fetch_all([[maybe_unused]] value* vals) { // (unread for an empty fetch list)
    return std::tuple_cat(
        fetch_value<
            detail::group_or_value<F>,
            typename P::template device<P::template index_c<std::remove_cvref_t<F>>::value>>(
            vals[P::template index_c<std::remove_cvref_t<F>>::value])...);
  }

  template <class P, class Feed>
  static constexpr std::size_t feed_slot() {
    if constexpr (P::template contains_c<typename Feed::placeholder>::value)
      return P::template index_c<typename Feed::placeholder>::value;
    else
      return 0;
  }
  template <class Feed>
  static void bind_feed(bool used, value* vals, std::size_t slot, const Feed& f) {
    if (!used)
      return;
    vals[slot].data = const_cast<typename Feed::value_type*>(f.data);
    vals[slot].dims = f.dims;
  }

  // ---- execution -------------------------------------------------------------------------
  //
  // Every function below that runs per node is instantiated from the node's flat form
  // (graph/flat.hpp), never from the node type or the plan type.

  /// A step: the session, the values, the step's frame (its value slots, see compile::plan's
  /// local forms), the plan's node names. A plain function pointer: g++'s -fsanitize=bounds
  /// miscompiles calls through arrays of pointers to member functions.
  /// What every step of a plan is given beside its frame: how to name a node (for errors) and
  /// the plan's variables (variable_table, indexed by node).
  struct step_info {
    name_fn name;
    const variable_desc* const* variables;
  };
  template <class P>
  static constexpr step_info step_info_of{&P::node_string, variable_table<P>.data()};
  using step_fn = void (*)(executor&, value*, const std::size_t*, const step_info&);
  template <class P, std::size_t... I>
  static const step_fn* step_table(std::index_sequence<I...>) {
    // The plan's frame table and the executor's local forms count each frame independently.
    // An array, not a fold: clang limits a fold expression to 256 operands.
    static constexpr std::size_t sizes[] = {
        frame_size<typename P::template local_flat<I>,
                   typename detail::step_region_of<P, I>::type>::value...,
        0};
    static_assert(
        [] {
          for (std::size_t i = 0; i < P::size; ++i)
            if (P::frames.begin[i + 1] - P::frames.begin[i] != sizes[i])
              return false;
          return true;
        }(),
        "typeflow internal error: a step's frame in compile::plan::frames and its local form "
        "disagree");
    static constexpr step_fn table[] = {
        entry_of<typename P::template device<I>, typename P::template local_flat<I>,
                 typename detail::step_region_of<P, I>::type>::value...,
        nullptr};
    return table;
  }
  template <class P>
  void run_step(const step_fn* table, value* vals, std::size_t i) {
    table[i](*this, vals, &P::frames.slot[P::frames.begin[i]], step_info_of<P>);
  }

  // The steps run from a table of member-function pointers, one per node: a single fold
  // expression over hundreds of steps made g++'s call-graph construction quadratic.
  // Phase 0 runs every step. A replicated session (device/replication.hpp) runs phase 1 in each
  // tower (the plan's tower part, keeping the buffers the rest reads), its all-reduce nodes, then
  // phase 2 in tower 0 (the rest, after the transfers of the all-reduced values).
  template <class P>
  void run_transfers(value* vals, std::size_t i, std::size_t elem_bytes) {
    constexpr auto& T = P::placement;
    for (std::size_t q = T.source_begin[i]; q < T.source_begin[i + 1]; ++q) {
      const std::size_t t = T.by_source[q];
      transfers<P>(std::make_index_sequence<P::transfers>{})[t](*this, vals, i, P::size + t,
                                                                elem_bytes, &P::node_string);
    }
  }

  template <class D, class Flat, class Region>
  static void step_entry(executor& s, value* vals, const std::size_t* frame,
                         const step_info& info) {
    s.step<D>(static_cast<Flat*>(nullptr), vals, frame, info.name, static_cast<Region>(nullptr));
  }
  /// Every variable's step on device D: its value is the variable's record, bound to D.
  template <class D>
  static void variable_entry(executor& s, value* vals, const std::size_t* frame,
                             const step_info& info) {
    s.bind_variable<D>(vals[frame[0]], *info.variables[frame[0]]);
  }
  /// A node's entry in the step table: its local form's step, or for a variable the one
  /// variable step of its device (no code per variable).
  template <class D, class Flat, class Region>
  struct entry_of {
    static constexpr step_fn value = &executor::step_entry<D, Flat, Region>;
  };
  template <class D, class Op, class T, std::size_t R, class... Refs, class Region>
  struct entry_of<D, graph::flat_node<graph::step_kind::variable, Op, T, R, Refs...>, Region> {
    static constexpr step_fn value = &executor::variable_entry<D>;
  };

  /// Sends node `from`'s value to device `to` into slot `slot`: the destination's backend
  /// receives it (between CPU devices, one host memory, the buffer is shared).
  using transfer_fn = void (*)(executor&, value*, std::size_t, std::size_t, std::size_t, name_fn);
  /// One function per transfer of plan P, instantiated from its (source, destination) devices.
  template <class P, std::size_t... T>
  static const transfer_fn* transfers(std::index_sequence<T...>) {
    static constexpr transfer_fn table[] = {
        &executor::transfer_entry<typename P::template device<P::placement.transfer_source[T]>,
                                  typename P::template transfer_device<T>>...,
        nullptr};
    return table;
  }
  template <class Src, class Dst>
  static void transfer_entry(executor& s, value* vals, std::size_t from, std::size_t slot,
                             std::size_t elem_bytes, name_fn name) {
    s.transfer<Src, Dst>(vals, from, slot, elem_bytes, name);
  }
  template <class Src, class Dst>
  void transfer(value* vals, std::size_t from, std::size_t slot, std::size_t elem_bytes, name_fn) {
    const double t0 = tr_.run ? opts_.trace->now() : 0;
    device_backend<Dst>::template receive<Src>(st_, vals[from], vals[slot], elem_bytes);
    const std::size_t bytes = elem_bytes * static_cast<std::size_t>(vals[from].dims.numel());
    ++st_.stats.transfers;
    st_.stats.transfer_bytes += bytes;
    if (tr_.run) {
      device_backend<Dst>::synchronize(st_); // the transfer's time is the devices'
      device_backend<Src>::synchronize(st_);
      tr_.bytes = bytes;
      tr_.flops = 0;
      trace_push(trace_event::type::transfer, from, id_of<Dst>, t0);
    }
  }

  static void release(value* vals, const std::size_t* which, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k)
      vals[which[k]].owner.reset();
  }

  /// How many values the frame of a step with this local form holds.
  template <class Region>
  struct frame_extra : std::integral_constant<std::size_t, 0> {};
  template <class Out, class Ins, class Members, class IdxSeq, class Stores>
  struct frame_extra<graph::flat_region<Out, Ins, Members, IdxSeq, Stores>*>
      : std::integral_constant<std::size_t, Ins::size + Stores::size() / 2> {};
  template <graph::step_kind K, class Op, class T, std::size_t R, class... Refs, class B, bool Relu>
  struct frame_extra<graph::epilogue<graph::flat_node<K, Op, T, R, Refs...>, B, Relu>*>
      : std::integral_constant<std::size_t, sizeof...(Refs) + 1> {};
  template <class Region>
  struct frame_extra<graph::prologue<Region>*> : frame_extra<Region*> {};
  template <graph::step_kind K, class Op, class T, std::size_t R, class... Refs, class Region,
            std::size_t In>
  struct frame_extra<graph::chained<graph::flat_node<K, Op, T, R, Refs...>, Region, In>*>
      : std::integral_constant<std::size_t, frame_extra<Region*>::value + sizeof...(Refs)> {};
  /// How many merged outputs a region stores (the last positions of its frame).
  template <class Region>
  struct stored_outputs : std::integral_constant<std::size_t, 0> {};
  template <class Out, class Ins, class Members, class IdxSeq, class Stores>
  struct stored_outputs<graph::flat_region<Out, Ins, Members, IdxSeq, Stores>*>
      : std::integral_constant<std::size_t, Stores::size() / 2> {};
  /// How many values a step with this local form gathers (see run_kernel).
  template <class Flat, class Region>
  struct frame_size;
  template <graph::step_kind K, class Op, class T, std::size_t R, class... Refs, class Region>
  struct frame_size<graph::flat_node<K, Op, T, R, Refs...>, Region>
      : std::integral_constant<std::size_t, 1 + sizeof...(Refs) + frame_extra<Region>::value> {};

  /// Runs one step from its local form. The step's frame (its own value, its operands, what
  /// its region reads) is gathered from the values, the kernel runs on the frame, and the step's
  /// value goes back: the kernels see positions in the frame, never in the plan.
  template <class D, graph::step_kind K, class Op, class T, std::size_t R, class... Refs,
            class Region>
  void step(graph::flat_node<K, Op, T, R, Refs...>*, value* vals, const std::size_t* frame,
            name_fn name, Region* region) {
    using graph::step_kind;
    const std::size_t self = frame[0];
    value& v = vals[self];
    if constexpr (K == step_kind::placeholder) {
      // bound before the steps run
    } else if constexpr (K == step_kind::variable) {
      static_assert(K != step_kind::variable,
                    "typeflow internal error: a variable's step is variable_entry (entry_of)");
    } else if constexpr (K == step_kind::inline_constant) {
      v.dims = backend::rt_dims::from(expr<Op>::shape_type::dims);
    } else if constexpr (K == step_kind::constant) {
      v.dims = backend::rt_dims::from(expr<Op>::shape_type::dims);
      std::fill_n(allocate<T>(v), v.dims.numel(), static_cast<T>(Op::value));
      if (tr_.run) {
        tr_.bytes = sizeof(T) * static_cast<std::uint64_t>(v.dims.numel());
        tr_.flops = 0;
      }
      note_step(self, name);
    } else if constexpr (K == step_kind::group) {
      // nothing to compute: its operands are steps of the plan
    } else {
      std::array<const backend::rt_dims*, 1 + sizeof...(Refs)> dims{&v.dims};
      for (std::size_t k = 1; k < dims.size(); ++k)
        dims[k] = &vals[frame[k]].dims;
      v.dims = shape_of<Op, Refs...>(dims.data(), self, name);
      if constexpr (!std::is_void_v<T>)
        check_size<D, Op, T>(v.dims, self, name);
      if constexpr (K != step_kind::fused_member && K != step_kind::fused_output &&
                    K != step_kind::deferred)
        run_kernel<D, K, Op, T, Refs...>(vals, frame, self, name, region);
    }
  }
  /// A variable's step: its value is the variable's record, bound to device D.
  template <class D>
  void bind_variable(value& v, const variable_desc& d) {
    var_record* rec = &vars_.record(d);
    v.data = device_backend<D>::bind_variable(st_, *rec);
    v.variable = rec;
    v.dims = backend::rt_dims::from(d.dims, d.rank);
  }
  /// A step that runs a kernel: on a frame gathered from the values (see step).
  template <class D, graph::step_kind K, class Op, class T, class... Refs, class Region>
  void run_kernel(value* vals, const std::size_t* frame, std::size_t self, name_fn name,
                  Region* region) {
    using graph::step_kind;
    detail::step_frame<1 + sizeof...(Refs) + frame_extra<Region*>::value> local(vals, frame);
    value* fr = local.data();
    using B = device_backend<D>;
    if constexpr (K == step_kind::kernel && control_flow_op<Op>) {
      static_assert(B::host_memory, "repeat: its loops run on the CPU");
      loop_interpreter<executor>::run(*this, static_cast<Op*>(nullptr), fr,
                                      static_cast<Refs*>(nullptr)...);
    } else if constexpr (!B::template has_kernel<K, Op, T, Region, Refs...>) {
      using invalid [[maybe_unused]] = detail::reject<detail::no_cpu_kernel_message<Op>>;
    } else {
      B::template step<K>(st_, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), fr,
                          local.size(), region, static_cast<Refs*>(nullptr)...);
    }
    if (tr_.run) {
      B::synchronize(st_); // the step's time is the device's
      using cost = backend::step_cost<Op, T, Region, Refs...>;
      static_assert(cost::size == local.size(), "typeflow internal error: a step's cost model "
                                                "and its frame disagree");
      tr_.bytes = cost::bytes(fr);
      tr_.flops = cost::flops(fr);
    }
    // The step's value goes back to its slot, and a region's merged outputs (assignments
    // stored by this loop) to theirs.
    constexpr std::size_t stored =
        K == step_kind::kernel ? stored_outputs<Region*>::value : std::size_t{0};
    local.commit(local.size() - stored);
    note_step(self, name);
  }
  /// The run-time shape of a step from its operands' extents (dims[k]: frame position k).
  template <class Op, class... Refs>
  static backend::rt_dims shape_of(const backend::rt_dims* const* dims, std::size_t self,
                                   name_fn name) {
    const auto r = Op::rule(dims[Refs::index]->template fixed<Refs::rank>()...);
    if (!r.ok()) [[unlikely]] {
      static constexpr std::size_t refs[] = {Refs::index..., 0};
      detail::shape_rule_failed(Op::name, r.error, dims, refs, sizeof...(Refs), self, name);
    }
    return backend::rt_dims::from(r.dims);
  }

  /// A step's result must be countable, addressable and, on the host, fit in the machine's
  /// memory: checked before its kernel allocates anything.
  template <class D, class Op, class T>
  static void check_size(const backend::rt_dims& d, std::size_t self, name_fn name) {
    detail::check_result_size(d, sizeof(T), device_backend<D>::host_memory, Op::name, dtype_name<T>,
                              self, name);
  }

  void note_step(std::size_t, name_fn) { ++st_.stats.steps; }

  template <class T>
  T* allocate(value& v) {
    v.owner =
        st_.host_mem->acquire(sizeof(T) * static_cast<std::size_t>(v.dims.numel()), st_.stats);
    v.data = v.owner.get();
    return static_cast<T*>(v.data);
  }

  using commit_fn = void (*)(executor&, value*, std::size_t self, std::size_t var);
  /// An assignment runs on its variable's device, so both buffers are there: that device's
  /// backend makes the new value the variable's (keeping the value's own buffer when fetched).
  template <class D, bool Fetched, class T>
  static void commit_assignment(executor& s, value* vals, std::size_t self, std::size_t var) {
    const std::size_t bytes = sizeof(T) * static_cast<std::size_t>(vals[self].dims.numel());
    auto* rec = static_cast<var_record*>(vals[var].variable);
    device_backend<D>::commit(s.st_, vals[var], vals[self], *rec, Fetched, bytes);
  }
  /// The commit function of a node: commit_assignment for an assignment, else nullptr.
  template <class D, class T, bool Fetched, bool State>
  struct commit_of {
    static constexpr commit_fn fn = nullptr;
  };
  template <class D, class T, bool Fetched>
  struct commit_of<D, T, Fetched, true> {
    static constexpr commit_fn fn = &commit_assignment<D, Fetched, T>;
  };

  // ---- traces and logs -------------------------------------------------------------------

  /// The run being traced: its number in the recorder (none: not traced), the events so far,
  /// the names of its plan, and the cost of the step that just ran.
  struct trace_state {
    std::optional<std::uint64_t> run;
    std::vector<trace_event> events;
    const trace_plan* plan = nullptr;
    double start = 0;
    std::uint64_t bytes = 0;
    double flops = -1;
  };
  /// Starts tracing a run numbered `run` (none: not traced) and, when it ends however it ends,
  /// hands its events to the recorder with the run's own span.
  struct trace_scope {
    executor& s;
    trace_scope(executor& owner, std::optional<std::uint64_t> run) : s(owner) {
      s.trace_start(run);
    }
    trace_scope(const trace_scope&) = delete;
    trace_scope& operator=(const trace_scope&) = delete;
    ~trace_scope() { s.trace_finish(true); }
  };

  /// The names of plan P's steps for traces: built once, the first time P is traced.
  template <class P>
  static const trace_plan& trace_names() {
    static const trace_plan names = detail::make_trace_plan(P::view());
    return names;
  }

  /// log_device_placement: every node of plan P with its device, once per plan and session.
  template <class P>
  void log_placement() {
    static char key; // one per plan type
    if (!logged_.insert(&key).second)
      return;
    const std::string text = detail::placement_log(P::view(), own_devices_);
    // One writer at a time: a replicated session's towers log from their own threads, often
    // into one stream.
    const std::lock_guard lock(detail::placement_log_mutex());
    std::ostream& os = opts_.log ? *opts_.log : std::clog;
    os << text << std::flush;
  }

  trace_state tr_;
  std::set<const void*> logged_; ///< plans whose placement was logged
  /// The device of each node of the running plan as this session's trace events and placement
  /// log name a CPU node (null: the plan's own): a replicated session's CPU tower running tower
  /// 0's plan names its own plan's devices.
  const device_id* own_devices_ = nullptr;
  bool loop_grads_ = true; ///< loop_gradients(): set by each run's begin_run
  session_options opts_;
  variable_set vars_;
  /// What the backends of its devices see (host buffers, statistics, the run counter, the
  /// CPU's threads and oneDNN primitives, GPU state): a backend gets this, never the session.
  backend::session_state st_;
  graph_replay<executor> replay_; ///< the runs captured as CUDA graphs (after st_: they hold its
                                  ///< GPUs' buffers)

  const cpu_backend::host_state& host() const { return cpu_backend::host_of(st_); }
};

} // namespace typeflow
