// The session: owns the variables' storage, the thread pool and the buffer pool, and runs the
// compiled plan of a set of fetches. Only the subgraph the fetches need is evaluated.
#pragma once
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../backend/cpu/fused.hpp"
#include "../backend/cpu/gemm.hpp"
#include "../backend/cpu/layout.hpp"
#include "../backend/cpu/reduce.hpp"
#include "../backend/cpu/thread_pool.hpp"
#include "../device/device.hpp"
#include "../graph/plan.hpp"
#include "../ops/layout.hpp"
#include "../ops/matmul.hpp"
#include "../ops/reduce.hpp"
#include "feed.hpp"
#include "value.hpp"

namespace typeflow {

struct session_options {
  int threads = 0;        ///< worker threads, BLAS included; 0: all hardware threads
  std::uint64_t seed = 0; ///< seeds every variable's initializer (with the variable's name)
  bool trace = false;     ///< record each executed step in stats().trace
};

using runtime::run_stats;

namespace detail {

template <class P, class... Feeds>
constexpr std::size_t feed_position() {
  std::size_t i = 0, r = static_cast<std::size_t>(-1);
  ((std::is_same_v<typename Feeds::placeholder, P> ? (r = i, ++i) : ++i), ...);
  return r;
}

template <class P>
struct unfed_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("run: placeholder \"") << P::op::name
      << std::string_view("\" is needed by the fetches but not fed");
    return b;
  }
};

template <class V>
struct duplicate_variable_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << std::string_view("variable \"") << V::op::name
      << std::string_view("\" is declared twice with different dtype, shape or initializer");
    return b;
  }
};

template <class E>
using fetch_result = std::conditional_t<E::kind == node_kind::group, std::tuple<>,
                                        std::tuple<tensor<typename E::value_type>>>;
} // namespace detail

/// Runs graphs. `Placement` maps each node to a device (for now every node is on `cpu<0>`).
template <class Placement = on<cpu<0>>>
class session {
public:
  session() : session(session_options{}) {}
  explicit session(session_options o)
      : opts_(o), pool_(std::make_unique<cpu_backend::thread_pool>(o.threads)),
        mem_(std::make_shared<runtime::buffer_pool>()) {
    cpu_backend::set_blas_threads(pool_->size());
  }

  int threads() const { return pool_->size(); }
  const run_stats& stats() const { return stats_; }

  /// Evaluates the fetches. Returns a tuple with one owning tensor per fetch that has a value
  /// (groups have none): `auto [loss] = s.run(fetch(loss, train), feed(x, images));`
  template <class... F, class... Feeds>
  auto run(fetch_t<F...>, const Feeds&... feeds) {
    using P = graph::plan<type_list<F...>>;
    check_variables<P>(std::make_index_sequence<P::size>{});
    stats_ = run_stats{};
    std::tuple<const Feeds&...> fed{feeds...};
    check_feeds<Feeds...>(fed);
    context<P> ctx;
    run_nodes<P>(ctx, fed, std::make_index_sequence<P::size>{});
    auto out = std::tuple_cat(fetch_one<P, F>(ctx)...);
    commit<P>(ctx, std::make_index_sequence<P::size>{});
    return out;
  }

  /// (Re)initializes the variables reachable from `roots` from their initializers.
  template <expression... E>
  void initialize(E...) {
    using P = graph::plan<type_list<E...>>;
    init_all<P>(std::make_index_sequence<P::size>{});
  }

  /// A copy of a variable's current value.
  template <expression V>
  tensor<typename V::value_type> read(V) {
    static_assert(is_variable<V>, "session::read: not a variable");
    tensor<typename V::value_type> t(std::vector<std::int64_t>(V::dims.begin(), V::dims.end()));
    std::memcpy(t.data(), bind_variable<V>(), sizeof(typename V::value_type) * t.size());
    return t;
  }

  /// Overwrites a variable's value; the shape must match.
  template <expression V>
  void write(V, const tensor<typename V::value_type>& t) {
    static_assert(is_variable<V>, "session::write: not a variable");
    if (!same_dims(t.shape(), V::dims))
      throw error("session::write: variable \"" + std::string(V::op::name) + "\" has shape " +
                  dims_string(V::dims) + ", given " + dims_string(t.shape()));
    std::memcpy(bind_variable<V>(), t.data(), sizeof(typename V::value_type) * t.size());
  }

private:
  template <class P>
  struct context {
    std::array<runtime::rt_value, P::size> vals;
  };

  struct var_record {
    std::string_view dtype;
    std::vector<std::int64_t> dims;
    std::unique_ptr<void, detail::aligned_free> data;
  };

  template <std::size_t R>
  static bool same_dims(const std::vector<std::int64_t>& a, const dims_t<R>& b) {
    if (a.size() != R)
      return false;
    for (std::size_t i = 0; i < R; ++i)
      if (a[i] != b[i])
        return false;
    return true;
  }

  // ---- variables -------------------------------------------------------------------------

  template <class V>
  void initialize_into(void* data) {
    using T = typename V::value_type;
    std::mt19937_64 rng(detail::hash_name(V::op::name, opts_.seed));
    V::op::initializer::template init<T>(static_cast<T*>(data), numel(V::dims), rng);
  }

  template <class V>
  void* bind_variable() {
    using T = typename V::value_type;
    auto it = vars_.find(V::op::name);
    if (it == vars_.end()) {
      var_record rec{dtype_name<T>, std::vector<std::int64_t>(V::dims.begin(), V::dims.end()),
                     std::unique_ptr<void, detail::aligned_free>(
                         detail::aligned_bytes(sizeof(T) * numel(V::dims)))};
      initialize_into<V>(rec.data.get());
      it = vars_.emplace(std::string(V::op::name), std::move(rec)).first;
    } else if (it->second.dtype != dtype_name<T> || !same_dims(it->second.dims, V::dims)) {
      throw error("variable \"" + std::string(V::op::name) + "\" exists as " +
                  std::string(it->second.dtype) + " " + dims_string(it->second.dims) +
                  " but this graph declares it " + std::string(dtype_name<T>) + " " +
                  dims_string(V::dims));
    }
    return it->second.data.get();
  }

  template <class P, std::size_t... I>
  void init_all(std::index_sequence<I...>) {
    auto one = [&]<class N>(N*) {
      if constexpr (is_variable<N>)
        initialize_into<N>(bind_variable<N>());
    };
    (one(static_cast<typename P::template node<I>*>(nullptr)), ...);
  }

  template <class P, std::size_t... I>
  static constexpr void check_variables(std::index_sequence<I...>) {
    constexpr auto first_clash = [] {
      std::array<std::string_view, P::size> names{};
      std::array<bool, P::size> var{};
      ((var[I] = is_variable<typename P::template node<I>>), ...);
      ((names[I] = var[I] ? variable_name<typename P::template node<I>>() : std::string_view{}),
       ...);
      for (std::size_t a = 0; a < P::size; ++a)
        for (std::size_t b = a + 1; b < P::size && var[a]; ++b)
          if (var[b] && names[a] == names[b])
            return a;
      return P::size;
    }();
    if constexpr (first_clash < P::size)
      detail::fail<detail::duplicate_variable_message<typename P::template node<first_clash>>>();
  }
  template <class N>
  static constexpr std::string_view variable_name() {
    if constexpr (is_variable<N>)
      return N::op::name;
    else
      return {};
  }

  // ---- feeds ---------------------------------------------------------------------------------

  template <class... Feeds>
  void check_feeds(const std::tuple<const Feeds&...>& fed) {
    std::int64_t batch = -1;
    std::string batch_from;
    auto one = [&](const auto& f) {
      using Ph = typename std::remove_cvref_t<decltype(f)>::placeholder;
      const std::string name(Ph::op::name);
      auto fail = [&](const std::string& why) {
        throw error("feed: placeholder \"" + name + "\" expects " + dims_string(Ph::dims) +
                    ", fed " + f.dims.str() + why);
      };
      if (f.dims.rank != Ph::rank)
        fail(" (rank differs)");
      for (std::size_t i = 0; i < Ph::rank; ++i) {
        if (Ph::dims[i] == dyn) {
          if (batch < 0) {
            batch = f.dims.d[i];
            batch_from = "placeholder \"" + name + "\" fed " + f.dims.str();
          } else if (f.dims.d[i] != batch) {
            fail("; dyn extent " + std::to_string(f.dims.d[i]) + " disagrees with " +
                 std::to_string(batch) + " from " + batch_from);
          }
        } else if (f.dims.d[i] != Ph::dims[i]) {
          fail("");
        }
      }
    };
    std::apply([&](const auto&... f) { (one(f), ...); }, fed);
    static_assert(((feed_count<typename Feeds::placeholder, Feeds...>() == 1) && ...),
                  "feed: a placeholder is fed twice");
  }
  template <class Ph, class... Feeds>
  static constexpr std::size_t feed_count() {
    return (std::size_t{0} + ... + std::is_same_v<typename Feeds::placeholder, Ph>);
  }

  // ---- execution -------------------------------------------------------------------------

  template <class P, class Fed, std::size_t... I>
  void run_nodes(context<P>& ctx, const Fed& fed, std::index_sequence<I...>) {
    (run_node<P, I>(ctx, fed), ...);
  }

  template <class N, class P>
  static runtime::rt_dims runtime_dims(const context<P>& ctx) {
    return runtime_dims_impl<P>(ctx, static_cast<N*>(nullptr));
  }
  template <class P, class Op, class... Cs>
  static runtime::rt_dims runtime_dims_impl(const context<P>& ctx, expr<Op, Cs...>*) {
    const auto r = Op::rule(ctx.vals[P::template index<Cs>].dims.template fixed<Cs::rank>()...);
    if (!r.ok()) {
      std::string shapes;
      bool first = true;
      ((shapes += (first ? "" : " x ") + ctx.vals[P::template index<Cs>].dims.str(), first = false),
       ...);
      throw error(std::string(Op::name) + ": " + std::string(r.error) + ": " + shapes + " (in " +
                  to_string(expr<Op, Cs...>{}) + ")");
    }
    return runtime::rt_dims::from(r.dims);
  }

  template <class P, std::size_t I, class Fed>
  void run_node(context<P>& ctx, const Fed& fed) {
    using N = typename P::template node<I>;
    using D = typename Placement::template device<N>;
    static_assert(D::is_cpu, "session: no backend for this device yet");
    constexpr auto& L = P::layout;
    auto& v = ctx.vals[I];
    if constexpr (is_placeholder<N>) {
      constexpr std::size_t pos = feed_index<N, Fed>();
      if constexpr (pos == static_cast<std::size_t>(-1)) {
        detail::fail<detail::unfed_message<N>>();
      } else {
        const auto& f = std::get<pos>(fed);
        v.data = const_cast<typename N::value_type*>(f.data);
        v.dims = f.dims;
      }
    } else if constexpr (is_variable<N>) {
      v.data = bind_variable<N>();
      v.dims = runtime::rt_dims::from(N::dims);
    } else if constexpr (is_constant<N>) {
      v.dims = runtime::rt_dims::from(N::dims);
      if constexpr (L.root[I] == I) {
        using T = typename N::value_type;
        v.owner = mem_->acquire(sizeof(T) * numel(N::dims), stats_);
        v.data = v.owner.get();
        std::fill_n(static_cast<T*>(v.data), numel(N::dims), static_cast<T>(N::op::value));
        note_step<N>();
      }
    } else if constexpr (N::kind == node_kind::group) {
      // nothing to compute: its children are in the plan
    } else {
      v.dims = runtime_dims<N>(ctx);
      if constexpr (L.root[I] == I) {
        execute<P, I>(ctx, static_cast<N*>(nullptr));
        note_step<N>();
        if constexpr (N::kind == node_kind::elementwise)
          stats_.fused_nodes += L.member_begin[I + 1] - L.member_begin[I] - 1;
      }
    }
    for (std::size_t r = L.release_begin[I]; r < L.release_begin[I + 1]; ++r)
      ctx.vals[L.releases[r]].owner.reset();
  }

  template <class N, class Fed>
  static constexpr std::size_t feed_index() {
    return feed_index_impl<N>(static_cast<Fed*>(nullptr));
  }
  template <class N, class... Feeds>
  static constexpr std::size_t feed_index_impl(std::tuple<const Feeds&...>*) {
    return detail::feed_position<N, Feeds...>();
  }

  template <class N>
  void note_step() {
    ++stats_.steps;
    if (opts_.trace)
      stats_.trace.push_back(to_string(N{}));
  }

  template <class T>
  T* allocate(runtime::rt_value& v) {
    v.owner = mem_->acquire(sizeof(T) * static_cast<std::size_t>(v.dims.numel()), stats_);
    v.data = v.owner.get();
    return static_cast<T*>(v.data);
  }

  template <class P, class N>
  const runtime::rt_value& val(const context<P>& ctx) {
    return ctx.vals[P::template index<N>];
  }

  // Elementwise region rooted at node I.
  template <class P, std::size_t I, class Op, class... Cs>
  requires(Op::kind == node_kind::elementwise) void execute(context<P>& ctx, expr<Op, Cs...>*) {
    using N = expr<Op, Cs...>;
    using kernel = cpu_backend::fused_region<N, typename P::template region_members<I>,
                                             typename P::template region_inputs<I>>;
    auto inputs =
        gather_inputs<P>(ctx, static_cast<typename P::template region_inputs<I>*>(nullptr));
    auto* out = allocate<typename N::value_type>(ctx.vals[I]);
    kernel::run(*pool_, out, ctx.vals[I].dims, inputs);
  }
  template <class P, class... Is>
  static std::array<const runtime::rt_value*, sizeof...(Is)> gather_inputs(const context<P>& ctx,
                                                                           type_list<Is...>*) {
    return {&ctx.vals[P::template index<Is>]...};
  }

  template <class P, std::size_t I, class R, bool K, std::int64_t... Ax, class A>
  void execute(context<P>& ctx, expr<ops::reduce<R, K, Ax...>, A>*) {
    using N = expr<ops::reduce<R, K, Ax...>, A>;
    const auto& in = val<P, A>(ctx);
    auto* out = allocate<typename N::value_type>(ctx.vals[I]);
    cpu_backend::reduce<R>(*pool_, static_cast<const typename A::value_type*>(in.data), in.dims,
                           ops::reduce<R, K, Ax...>::template mask<A::rank>(), out);
  }

  template <class P, std::size_t I, bool TA, bool TB, class A, class B>
  void execute(context<P>& ctx, expr<ops::matmul<TA, TB>, A, B>*) {
    using T = typename A::value_type;
    const auto &a = val<P, A>(ctx), &b = val<P, B>(ctx);
    auto& o = ctx.vals[I];
    T* out = allocate<T>(o);
    const std::size_t R = o.dims.rank;
    const std::int64_t m = o.dims.d[R - 2], n = o.dims.d[R - 1];
    const std::int64_t k = TA ? a.dims.d[R - 2] : a.dims.d[R - 1];
    std::int64_t batch = 1;
    for (std::size_t i = 0; i + 2 < R; ++i)
      batch *= o.dims.d[i];
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    for (std::int64_t i = 0; i < batch; ++i)
      cpu_backend::gemm<T>(*pool_, TA, TB, m, n, k, pa + i * m * k, pb + i * k * n,
                           out + i * m * n);
  }

  template <class P, std::size_t I, std::int64_t... D, class A>
  void execute(context<P>& ctx, expr<ops::reshape<D...>, A>*) {
    const auto& in = val<P, A>(ctx);
    ctx.vals[I].owner = in.owner; // a view: shares the input's buffer
    ctx.vals[I].data = in.data;
  }

  template <class P, std::size_t I, std::int64_t... Perm, class A>
  void execute(context<P>& ctx, expr<ops::transpose<Perm...>, A>*) {
    using T = typename A::value_type;
    const auto& in = val<P, A>(ctx);
    T* out = allocate<T>(ctx.vals[I]);
    cpu_backend::transpose(*pool_, static_cast<const T*>(in.data), in.dims,
                           ops::transpose<Perm...>::perm, out, ctx.vals[I].dims);
  }

  template <class P, std::size_t I, class B, class S, class A>
  void execute(context<P>& ctx, expr<ops::slice<B, S>, A>*) {
    using T = typename A::value_type;
    const auto& in = val<P, A>(ctx);
    T* out = allocate<T>(ctx.vals[I]);
    cpu_backend::slice(*pool_, static_cast<const T*>(in.data), in.dims, B::values, out,
                       ctx.vals[I].dims);
  }

  template <class P, std::size_t I, std::int64_t Axis, class... Cs>
  void execute(context<P>& ctx, expr<ops::concat<Axis>, Cs...>*) {
    using T = typename expr<ops::concat<Axis>, Cs...>::value_type;
    T* out = allocate<T>(ctx.vals[I]);
    const T* parts[] = {static_cast<const T*>(val<P, Cs>(ctx).data)...};
    const runtime::rt_dims* dims[] = {&val<P, Cs>(ctx).dims...};
    const std::int64_t rank = static_cast<std::int64_t>(ctx.vals[I].dims.rank);
    cpu_backend::concat(Axis < 0 ? Axis + rank : Axis, parts, dims, sizeof...(Cs), out,
                        ctx.vals[I].dims);
  }

  template <class P, class F>
  auto fetch_one(const context<P>& ctx) {
    if constexpr (F::kind == node_kind::group) {
      return std::tuple<>{};
    } else {
      using T = typename F::value_type;
      const auto& v = ctx.vals[P::template index<F>];
      tensor<T> t(v.dims.vec());
      if (t.size() > 0)
        std::memcpy(t.data(), v.data, sizeof(T) * t.size());
      return std::tuple<tensor<T>>{std::move(t)};
    }
  }

  template <class P, std::size_t... I>
  void commit(context<P>& ctx, std::index_sequence<I...>) {
    auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      using N = typename P::template node<J>;
      if constexpr (is_state_op<N>) {
        commit_one<P, J>(ctx, static_cast<N*>(nullptr));
      }
    };
    (one(std::integral_constant<std::size_t, I>{}), ...);
  }
  template <class P, std::size_t J, class Op, class V, class X>
  void commit_one(context<P>& ctx, expr<Op, V, X>*) {
    using T = typename V::value_type;
    std::memmove(ctx.vals[P::template index<V>].data, ctx.vals[J].data,
                 sizeof(T) * static_cast<std::size_t>(numel(V::dims)));
  }

  session_options opts_;
  std::unique_ptr<cpu_backend::thread_pool> pool_;
  std::shared_ptr<runtime::buffer_pool> mem_;
  std::map<std::string, var_record, std::less<>> vars_;
  run_stats stats_;
};

} // namespace typeflow
