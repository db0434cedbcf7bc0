// Data-parallel replication: session<replicate<D0, D1, ...>> runs one tower per device on a share
// of every fed batch, with the variables shared by name, averages the towers' gradients (the
// replica_mean nodes that minimize() puts on every gradient) weighted by their shares of the
// batch, and applies the optimizer once: the seed's multi-GPU training, as a policy.
//
// It executes the plan's replication transformation (device/replication.hpp): the tower part of
// the plan in every tower (tower 0 on the calling thread, the others on their own), one
// all-reduce node per replica_mean through its device's collective kernel (threads on the CPU:
// backend/cpu/collective.hpp; NCCL between GPUs: backend/cuda/nccl.cuh) and the reducer across
// processes (mpi_reducer, distributed/mpi.hpp), then the rest of the plan once, in tower 0. The
// executor holds no kernel: it orders the parts and hands each tower's values to the kernels.
// The average is taken in a fixed order (tower 0, 1, ...), so results are deterministic.
// CPU towers whose plans differ only in which CPU they name run tower 0's plan (shares_plan),
// so its step functions are compiled once for all of them.
#pragma once
#include <array>
#include <exception>
#include <span>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../backend/common/allreduce.hpp"
#include "../backend/cpu/collective.hpp"
#include "../device/replication.hpp"
#include "session.hpp"

namespace typeflow {

/// The reducer of towers in one process: nothing beyond the in-process average.
struct in_process_reducer {
  static constexpr bool distributed = false;
  int rank() const { return 0; }
  int size() const { return 1; }
  void reduce(std::vector<replica_buffer>&, std::int64_t, const session_options&) {}
  void broadcast(backend::variable_store&, const session_options&) {}
};

/// Replication policy: one tower per device D..., tower k placed by Tower<Dk> (a placement
/// policy built from the tower's device), the towers' averages combined across processes by
/// Reducer (in_process_reducer: one process; mpi_reducer in distributed/mpi.hpp).
template <class Reducer, template <class> class Tower, class... D>
struct replicate_policy {
  static_assert(sizeof...(D) >= 1, "replicate: at least one tower");
  static constexpr std::size_t towers = sizeof...(D);
};

namespace detail {
template <class D>
using on_device = on<D>;
} // namespace detail

/// `replicate<D...>` places each tower on its device; the seed's towers are
/// `replicate_with<seed_tower, gpu<0>, gpu<1>>` with
/// `template <class D> using seed_tower = variables_on<cpu<0>, compute_on<D>>`.
template <template <class> class Tower, class... D>
using replicate_with = replicate_policy<in_process_reducer, Tower, D...>;
template <class... D>
using replicate = replicate_with<detail::on_device, D...>;

/// How a batch of B rows is split over N towers: the first B % N towers get one row more.
struct batch_split {
  std::int64_t begin, rows;
  static batch_split of(std::int64_t batch, std::size_t towers, std::size_t k) {
    const auto n = static_cast<std::int64_t>(towers), i = static_cast<std::int64_t>(k);
    const std::int64_t base = batch / n, extra = batch % n;
    return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
  }
};

namespace detail {
template <class P>
struct batch_axis_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("replicate: placeholder \"") << P::op::name
      << std::string_view("\" has a dyn extent that is not its first: towers split the batch "
                          "along the first axis");
    return b;
  }
};
} // namespace detail

template <class Reducer, template <class> class Tower, class... D>
class session<replicate_policy<Reducer, Tower, D...>> {
  using first_device = std::tuple_element_t<0, std::tuple<D...>>;
  /// Whether plans A and B put every node on the same device, counting all CPUs as one (they
  /// share the host's memory).
  template <class A, class B>
  static consteval bool same_but_cpu() {
    static_assert(A::size == B::size);
    for (std::size_t i = 0; i < A::size; ++i)
      if (!shares_memory(A::placement.device[i], B::placement.device[i]))
        return false;
    return true;
  }
  template <class Fs>
  static consteval bool same_plans() {
    return (same_but_cpu<compile::plan<Fs, Tower<first_device>>, compile::plan<Fs, Tower<D>>>() &&
            ...);
  }

public:
  static constexpr std::size_t towers = sizeof...(D);
  /// Whether every tower is on a CPU. CPU towers share one session type: they differ only in
  /// their threads (each has its own pool) and in the device their trace events and placement
  /// log name, so they need not compile their steps once per tower.
  static constexpr bool cpu_towers = (on_host_memory<D>() && ...);
  /// Whether the towers run the fetches F... with tower 0's plan: CPU towers whose plans place
  /// every node alike, up to which CPU (a GPU node on the same GPU in every tower). Then the
  /// step functions exist once, not once per tower; the seed's tower on CPUs (variables on
  /// cpu<0>, compute on cpu<k>) also loses its copies between the two CPUs.
  template <class... F>
  static constexpr bool shares_plan = (cpu_towers &&
                                       same_plans<type_list<std::remove_cvref_t<F>...>>());

  session() : session(session_options{}) {}
  explicit session(session_options o)
      : opts_(o), vars_(std::make_shared<backend::variable_store>()),
        towers_(tower_executor<D>(share(o), vars_)...) {
    // Each tower draws its own random numbers: tower k of rank r counts its runs from g 2^40,
    // g = r towers + k, so its dropout masks are not another tower's (TF 1.x's towers, separate
    // ops, drew their own), and tower 0 of rank 0 draws what an unreplicated session draws.
    apply_towers([&](auto& t, std::size_t k) {
      t.state().runs = (static_cast<std::uint64_t>(reducer_.rank()) * towers + k) << 40;
    });
  }

  /// Threads of all towers together.
  int threads() const {
    return std::apply([](const auto&... t) { return (0 + ... + t.threads()); }, towers_);
  }
  /// Whether the towers' CPU products compute with bfloat16 operands (session_options::precision).
  bool products_in_bfloat16() const { return std::get<0>(towers_).products_in_bfloat16(); }
  bool products_in_float16() const { return std::get<0>(towers_).products_in_float16(); }
  /// Statistics of tower 0's part of the last run.
  const run_stats& stats() const { return std::get<0>(towers_).stats(); }

  /// Runs the fetches with every fed batch split over the towers. Fetched values that depend on
  /// the feeds are combined: along the batch axis when they have one (predictions), else as the
  /// batch-weighted mean of the towers' values (a mean loss); the others are tower 0's.
  template <class... F, class... Feeds>
  auto run(fetch_t<F...> fetches, const Feeds&... feeds) {
    using P = compile::plan<type_list<F...>, Tower<first_device>>;
    if constexpr (detail::plan_check<P, Feeds...>::problem != detail::plan_problem::none) {
      // one error naming the problem, and nothing else of a bad plan instantiated
      detail::check_plan<Tower<first_device>, P, Feeds...>();
      return detail::run_result<F...>{};
    } else {
      (check_batch_axis<typename Feeds::placeholder>(), ...);
      return run_checked<P, F...>(fetches, feeds...);
    }
  }

  // ---- variables: one store, shared by the towers ----------------------------------------
  template <class... E>
  requires expressions<E...>
  void initialize(E...) {
    if constexpr (!any_invalid<E...>)
      std::get<0>(towers_).variables().template initialize_all<graph::node_table<E...>>();
  }
  template <expression V>
  tensor<typename V::value_type> read(V) {
    static_assert(is_variable<V>, "session::read: not a variable");
    return std::get<0>(towers_).variables().template read<V>();
  }
  template <expression V>
  requires(V::shape_type::rank == 0) void write(V v, typename V::value_type x) {
    write(v, tensor<typename V::value_type>(std::vector<std::int64_t>{}, {x}));
  }
  template <expression V>
  void write(V, const tensor<typename V::value_type>& t) {
    static_assert(is_variable<V>, "session::write: not a variable");
    std::get<0>(towers_).variables().template write<V>(t);
  }
  template <class Fn>
  void for_each_variable(Fn&& f) {
    std::get<0>(towers_).variables().for_each(std::forward<Fn>(f));
  }
  std::size_t variable_count() const { return vars_->size(); }

  /// This process's rank and the number of processes (0 and 1 in one process).
  int rank() const { return reducer_.rank(); }
  int ranks() const { return reducer_.size(); }
  /// Copies rank 0's variables to every rank (done before the first run; call it again after
  /// restoring a checkpoint on rank 0 only).
  void broadcast_variables() {
    std::get<0>(towers_).variables().for_each([](const auto&) {}); // host copies current
    reducer_.broadcast(*vars_, opts_);
  }

private:
  template <class P, class... F, class... Feeds>
  auto run_checked(fetch_t<F...>, const Feeds&... feeds) {
    auto& t0 = std::get<0>(towers_);
    t0.check_feeds(feeds...);
    tower_executor<first_device>::template check_empty_batch<P>(feeds...);
    std::int64_t batch = -1;
    ((batch = batch >= 0 ? batch : batch_of(feeds)), ...);
    if (batch < 0) // nothing to split: every tower would compute the same
      return t0.template run<P, F...>(feeds...);
    t0.variables().template create_all<P>();
    if (!broadcast_done_) {
      broadcast_variables();
      broadcast_done_ = true;
    }
    return run_towers<P, F...>(batch, std::index_sequence_for<D...>{}, feeds...);
  }

  using value = backend::rt_value;
  /// The executor type of the tower on Dk (see cpu_towers).
  template <class Dk>
  using tower_executor = executor<Tower<std::conditional_t<cpu_towers, first_device, Dk>>>;

  static session_options share(session_options o) {
    const int total =
        o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
    o.threads = std::max(1, total / static_cast<int>(towers));
    return o;
  }

  template <class Ph>
  static constexpr void check_batch_axis() {
    constexpr auto& dims = Ph::shape_type::dims;
    constexpr bool later_dyn = [] {
      for (std::size_t i = 1; i < Ph::shape_type::rank; ++i)
        if (dims[i] == dyn)
          return true;
      return false;
    }();
    if constexpr (later_dyn)
      using invalid [[maybe_unused]] = detail::reject<detail::batch_axis_message<Ph>>;
  }
  template <class Feed>
  static std::int64_t batch_of(const Feed& f) {
    using Ph = typename Feed::placeholder;
    if constexpr (Ph::shape_type::rank > 0 && Ph::shape_type::dims[0] == dyn)
      return f.dims.d[0];
    else
      return -1;
  }
  template <class Feed>
  static Feed slice_feed(Feed f, batch_split part) {
    using Ph = typename Feed::placeholder;
    if constexpr (Ph::shape_type::rank > 0 && Ph::shape_type::dims[0] == dyn) {
      std::int64_t row = 1;
      for (std::size_t i = 1; i < f.dims.rank; ++i)
        row *= f.dims.d[i];
      f.data += part.begin * row;
      f.dims.d[0] = part.rows;
    }
    return f;
  }

  /// Tower K's plan: tower 0's where the towers share it (shares_plan).
  template <std::size_t K, class Fs>
  using tower_plan =
      compile::plan<Fs, Tower<std::conditional_t<cpu_towers && same_plans<Fs>(), first_device,
                                                 std::tuple_element_t<K, std::tuple<D...>>>>>;

  template <class P, class... F, std::size_t... K, class... Feeds>
  auto run_towers(std::int64_t batch, std::index_sequence<K...>, const Feeds&... feeds) {
    using Fs = type_list<F...>;
    // A traced run: every tower records its steps; tower 0 also the all-reduce and the run's
    // span, and all of it goes to the recorder however the run ends.
    const std::optional<std::uint64_t> traced =
        opts_.trace ? opts_.trace->begin_run() : std::nullopt;
    (std::get<K>(towers_).trace_start(traced), ...);
    struct trace_guard {
      session& s;
      double start;
      ~trace_guard() {
        if (!s.opts_.trace)
          return;
        auto& t0 = std::get<0>(s.towers_);
        if (t0.tracing()) {
          t0.trace_cost(0, -1);
          t0.trace_push(trace_event::type::run, 0, device_id{true, -1}, start);
        }
        std::apply([](auto&... t) { (t.trace_finish(false), ...); }, s.towers_);
      }
    } guard{*this, traced ? opts_.trace->now() : 0};
    // A tower running tower 0's plan names its own plan's devices in its trace and log.
    (std::get<K>(towers_).name_devices(
         K > 0 && cpu_towers && same_plans<Fs>()
             ? compile::plan<Fs, Tower<std::tuple_element_t<K, std::tuple<D...>>>>::placement.device
             : nullptr),
     ...);
    std::tuple<std::array<value, tower_plan<K, Fs>::slots>...> vals;
    std::array<batch_split, towers> parts{};
    for (std::size_t k = 0; k < towers; ++k)
      parts[k] = batch_split::of(batch, towers, k);
    // Phase 1: every tower with rows, tower 0 on this thread, the others on their own.
    std::array<std::exception_ptr, towers> failed{};
    auto phase1 = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      try {
        auto& t = std::get<J>(towers_);
        using PJ = tower_plan<J, Fs>;
        value* v = std::get<J>(vals).data();
        t.template begin_run<PJ>(v, slice_feed(feeds, parts[J])...);
        t.template run_steps<PJ, 1>(v, std::make_index_sequence<PJ::size>{});
        backend::end_steps(t.state()); // device-side checks of the tower's steps
      } catch (...) {
        failed[J] = std::current_exception();
      }
    };
    {
      std::vector<std::jthread> threads;
      (
          [&] {
            if constexpr (K > 0)
              if (parts[K].rows > 0)
                threads.emplace_back([&] { phase1(std::integral_constant<std::size_t, K>{}); });
          }(),
          ...);
      phase1(std::integral_constant<std::size_t, 0>{});
    }
    for (auto& e : failed)
      if (e)
        std::rethrow_exception(e);
    // The average, in tower order, into tower 0's replica_mean values.
    std::array<const value*, towers> tower_vals{std::get<K>(vals).data()...};
    std::vector<replica_buffer> averaged;
    auto& t0 = std::get<0>(towers_);
    const double reduce_start = traced ? opts_.trace->now() : 0;
    average<P, Fs>(tower_vals, parts, batch, averaged, std::make_index_sequence<P::size>{});
    reducer_.reduce(averaged, batch, opts_); // across processes
    if (traced) {
      std::uint64_t bytes = 0;
      for (const auto& b : averaged)
        bytes += static_cast<std::uint64_t>(b.count) * (b.is_double ? 8 : 4);
      t0.trace_cost(bytes, -1);
      t0.trace_push(trace_event::type::all_reduce, 0, device_id{true, -1}, reduce_start);
    }
    // Phase 2 in tower 0, then the fetches and the commits.
    value* v0 = std::get<0>(vals).data();
    t0.template run_steps<P, 2>(v0, std::make_index_sequence<P::size>{});
    backend::end_steps(t0.state());
    if (opts_.check_numerics) // every tower's fetched values, and the updates (tower 0's)
      (
          [&] {
            using PK = tower_plan<K, Fs>;
            if (parts[K].rows > 0)
              std::get<K>(towers_).template check_numerics<PK>(
                  std::get<K>(vals).data(), std::make_index_sequence<PK::size>{});
          }(),
          ...);
    auto out = std::tuple_cat(combine_fetch<P, F>(tower_vals, parts, batch)...);
    t0.template commit_steps<P>(v0, std::make_index_sequence<P::size>{});
    backend::end_commits(t0.state());
    return out;
  }

  template <class P, class Fs, std::size_t... I>
  void average(std::array<const value*, towers>& tv, const std::array<batch_split, towers>& parts,
               std::int64_t batch, std::vector<replica_buffer>& out, std::index_sequence<I...>) {
    (
        [&] {
          if constexpr (replication<P>::value.all_reduce[I]) {
            using T = typename P::template node<I>::value_type;
            static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                          "replicate: gradients are float32 or float64");
            if constexpr (on_host_memory<typename P::template device<I>>()) {
              average_one<T>(tv, parts, batch, I);
              out.push_back({tv[0][I].data, tv[0][I].dims.numel(), std::is_same_v<T, double>});
            } else {
              static_assert(!Reducer::distributed,
                            "mpi::replicate: GPU towers across processes (NCCL across nodes) are "
                            "not supported yet");
              average_gpu<T, I, Fs>(tv, parts, batch, std::index_sequence_for<D...>{});
            }
          }
        }(),
        ...);
  }
  /// The towers' values of GPU node I, averaged in place by one NCCL all-reduce.
  template <class T, std::size_t I, class Fs, std::size_t... K>
  void average_gpu(std::array<const value*, towers>& tv,
                   const std::array<batch_split, towers>& parts, std::int64_t batch,
                   std::index_sequence<K...>) {
    std::vector<gpu_replica> reps;
    (
        [&] {
          using Dev = typename tower_plan<K, Fs>::template device<I>;
          static_assert(!on_host_memory<Dev>(),
                        "replicate: a gradient is on a GPU in tower 0 but on the "
                        "CPU in another tower");
          auto ctx = device_backend<Dev>::context(std::get<K>(towers_).state());
          reps.push_back({Dev::index, parts[K].rows > 0 ? tv[K][I].data : nullptr, &ctx.gpu,
                          static_cast<double>(parts[K].rows) / static_cast<double>(batch)});
        }(),
        ...);
    nccl_average<T>::run(reps, tv[0][I].dims.numel(), nccl_state_);
  }

  /// All-reduce node i of CPU towers: their values averaged by the CPU's collective kernel into
  /// tower 0's value of the node.
  template <class T>
  void average_one(std::array<const value*, towers>& tv,
                   const std::array<batch_split, towers>& parts, std::int64_t batch,
                   std::size_t i) {
    auto& t0 = std::get<0>(towers_);
    std::array<tower_part, towers> in;
    for (std::size_t k = 0; k < towers; ++k)
      in[k] = {parts[k].rows > 0 ? tv[k][i].data : nullptr, parts[k].rows};
    auto ctx = t0.cpu_context();
    cpu_backend::all_reduce_mean<T>(ctx, in, batch, const_cast<value*>(tv[0])[i]);
  }

  template <class P, class F>
  auto combine_fetch(std::array<const value*, towers>& tv,
                     const std::array<batch_split, towers>& parts, std::int64_t batch) {
    using E = std::remove_cvref_t<F>;
    constexpr std::size_t f = P::template index_c<E>::value;
    constexpr auto& R = replication<P>::value;
    auto& t0 = std::get<0>(towers_);
    using Dev = typename P::template device<f>;
    using T = detail::group_or_value<F>;
    if constexpr (std::is_void_v<T>) {
      return std::tuple<>{};
    } else if constexpr (R.once[f] || !R.batch[f]) {
      return t0.template fetch_value<T, Dev>(tv[0][f]);
    } else {
      std::vector<tensor<T>> parts_v;
      std::array<tower_part, towers> in;
      apply_towers([&](auto& t, std::size_t k) {
        if (parts[k].rows > 0)
          parts_v.push_back(std::get<0>(t.template fetch_value<T, Dev>(tv[k][f])));
        else
          parts_v.emplace_back();
        in[k] = {parts_v.back().data(), parts[k].rows};
      });
      if constexpr (E::shape_type::rank > 0 && E::shape_type::dims[0] == dyn) {
        // a value with a batch axis (predictions): the towers' rows, joined in tower order
        std::vector<std::int64_t> shape = parts_v[0].shape();
        std::int64_t row = 1;
        for (std::size_t a = 1; a < shape.size(); ++a)
          row *= shape[a];
        for (std::size_t k = 0; k < towers; ++k)
          if (parts[k].rows > 0 && parts_v[k].size() != parts[k].rows * row)
            throw error("replicate: tower " + std::to_string(k) + "'s fetched value has " +
                        std::to_string(parts_v[k].size()) + " elements for its " +
                        std::to_string(parts[k].rows) +
                        " rows of the batch: a fetched value with a batch axis must keep "
                        "one row per fed row to be joined");
        shape[0] = batch;
        tensor<T> all(shape);
        cpu_backend::concat_rows<T>(in, row, all.data());
        return std::tuple<tensor<T>>{std::move(all)};
      } else if constexpr (std::is_floating_point_v<T>) {
        // a value of the whole batch (a mean loss): the batch-weighted mean of the towers'
        tensor<T> mean(parts_v[0].shape());
        cpu_backend::tower_mean<T>(t0.pool(), in, batch, mean.data(), mean.size());
        return std::tuple<tensor<T>>{std::move(mean)};
      } else {
        return std::tuple<tensor<T>>{std::move(parts_v[0])};
      }
    }
  }
  template <class Fn>
  void apply_towers(Fn&& fn) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (fn(std::get<K>(towers_), K), ...);
    }
    (std::index_sequence_for<D...>{});
  }

  session_options opts_;
  std::shared_ptr<backend::variable_store> vars_;
  std::tuple<tower_executor<D>...> towers_;
  Reducer reducer_;
  std::shared_ptr<void> nccl_state_; ///< the GPU towers' communicators
  bool broadcast_done_ = !Reducer::distributed;
};

} // namespace typeflow
