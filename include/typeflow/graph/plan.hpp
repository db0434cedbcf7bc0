// The compiled plan of a set of fetches: topological order, fusion regions and memory plan.
//
// The traversal yields the node types; everything after it is plain constexpr computation over
// node indices (children lists, consumers, roots, last uses), linear in nodes plus edges, and the
// results are turned back into types only where a kernel needs them.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include "../device/device.hpp"
#include "../device/placement.hpp"
#include "../ops/leaves.hpp"
#include "../ops/state.hpp"
#include "flat.hpp"
#include "print.hpp"
#include "traverse.hpp"

namespace typeflow::graph {

namespace detail {
// Lookups are overload resolution among non-template functions (one pair per node), never
// template argument deduction: deducing through the index map made g++ walk node types as trees,
// exponential in the sharing of the graph.
template <class N, std::size_t I>
struct indexed {
  static std::integral_constant<std::size_t, I> index_of(N*);
  static N node_at(std::integral_constant<std::size_t, I>);
};
template <class N>
struct present {};

template <class List, class Seq>
struct index_map;
template <class... Ns, std::size_t... I>
struct index_map<type_list<Ns...>, std::index_sequence<I...>> : indexed<Ns, I>..., present<Ns>... {
  using indexed<Ns, I>::index_of...;
  using indexed<Ns, I>::node_at...;
};

// Membership is a base-class test, never a failed deduction: g++ spends time exponential in the
// sharing of a graph when a deduction through the index map fails.
template <class Map, class N>
using has_node = std::is_base_of<present<std::remove_cvref_t<N>>, Map>;

#if TYPEFLOW_NODE_REFS
/// The index of a plan's nodes by identity (graph/node.hpp's node_hash): a position is found by
/// a binary search over the sorted identities, and the node at a position from its identity
/// through the registry, so that each look-up costs O(log n) steps of constant evaluation
/// instead of overload resolution among n candidates (a quadratic plan).
struct hash_entry {
  std::uint64_t hash = 0;
  std::size_t index = 0;
};
template <class List>
struct hash_index;
template <class... Ns>
struct hash_index<type_list<Ns...>> {
  static constexpr std::size_t size = sizeof...(Ns);
  static constexpr std::array<std::uint64_t, size> hashes{
      typeflow::detail::node_hash<Ns>::value...};
  static constexpr std::array<hash_entry, size> sorted = [] {
    std::array<hash_entry, size> a{};
    for (std::size_t i = 0; i < size; ++i)
      a[i] = {hashes[i], i};
    std::sort(a.begin(), a.end(),
              [](const hash_entry& x, const hash_entry& y) { return x.hash < y.hash; });
    return a;
  }();
  /// Position of the node with identity h, or size.
  static constexpr std::size_t find(std::uint64_t h) {
    std::size_t lo = 0, hi = size;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (sorted[mid].hash < h)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo < size && sorted[lo].hash == h ? sorted[lo].index : size;
  }
};
/// index_c of a node that is not in the plan: not a constant expression.
inline std::size_t node_not_in_plan() {
  return 0;
}
constexpr std::size_t checked_index(std::size_t i, std::size_t size) {
  return i < size ? i : node_not_in_plan();
}
#endif

template <class N>
struct arity;
template <class Op, class... Cs>
struct arity<expr<Op, Cs...>> : std::integral_constant<std::size_t, sizeof...(Cs)> {};

template <class Seq>
struct seq_values;
template <std::size_t... K>
struct seq_values<std::index_sequence<K...>> {
  static constexpr std::array<std::size_t, sizeof...(K)> value{K...};
};

/// Operand of a fused member, by kind: 0 inlined constant, 1 another member, 2 an input.
template <int Kind, std::size_t Pos, class C>
struct operand;
template <std::size_t Pos, class C>
struct operand<0, Pos, C> {
  using type = ref_const<C::op::bits, typename C::value_type>;
};
template <std::size_t Pos, class C>
struct operand<1, Pos, C> {
  using type = ref_local<Pos>;
};
template <std::size_t Pos, class C>
struct operand<2, Pos, C> {
  using type = ref_input<Pos>;
};
/// Whether op Op is a with_device scope, and its device.
template <class Op>
struct scope_of {
  static constexpr bool value = false;
  static constexpr device_id id{};
};
template <class D>
struct scope_of<ops::device_scope<D>> {
  static constexpr bool value = true;
  static constexpr device_id id = id_of<D>;
};

struct print_entry {
  std::string_view name;
  std::string (*leaf)();
  std::string (*attrs)();
};
/// A node's static shape as a value: rank and extents (`dyn` for a fed extent).
struct static_dims {
  std::size_t rank = 0;
  std::array<std::int64_t, max_rank> d{};
  std::string str() const { return dims_string(d.begin(), d.begin() + rank); }
};
template <class T>
constexpr std::string_view dtype_or_empty() {
  if constexpr (std::is_void_v<T>)
    return {};
  else
    return dtype_name<T>;
}
template <class N>
constexpr static_dims static_dims_of() {
  static_dims s{N::shape_type::rank, {}};
  for (std::size_t i = 0; i < N::shape_type::rank; ++i)
    s.d[i] = N::shape_type::dims[i];
  return s;
}
template <class L>
struct op_name_table;
template <class L>
struct dtype_table;
template <class L>
struct shape_table;
template <class... Ns>
struct op_name_table<type_list<Ns...>> {
  static constexpr std::array<std::string_view, sizeof...(Ns)> value{Ns::op::name...};
};
template <class... Ns>
struct dtype_table<type_list<Ns...>> {
  static constexpr std::array<std::string_view, sizeof...(Ns)> value{
      dtype_or_empty<typename Ns::value_type>()...};
};
template <class... Ns>
struct shape_table<type_list<Ns...>> {
  static constexpr std::array<static_dims, sizeof...(Ns)> value{static_dims_of<Ns>()...};
};

/// Short labels of a plan's nodes (`conv2d(%3, conv1/weights, ...)`: operands by index, leaves
/// by name), from the nodes' print entries and the plan's edges. Compiled once, not per plan.
/// Strings are built by appending: g++ 12 warns falsely (-Wrestrict, bug 105329) on
/// `"literal" + std::string` at -O2.
inline std::vector<std::string> node_labels(const print_entry* entries, std::size_t size,
                                            const std::size_t* edge_begin,
                                            const std::size_t* edges) {
  std::vector<std::string> out(size);
  for (std::size_t i = 0; i < size; ++i) {
    const print_entry& e = entries[i];
    const bool no_operands = edge_begin[i] == edge_begin[i + 1];
    if (e.leaf && no_operands) {
      out[i] = e.leaf();
      continue;
    }
    std::string s(e.name);
    s += '(';
    for (std::size_t k = edge_begin[i]; k < edge_begin[i + 1]; ++k) {
      const std::size_t c = edges[k];
      if (k != edge_begin[i])
        s += ", ";
      if (edge_begin[c] == edge_begin[c + 1] && entries[c].leaf) {
        s += out[c];
      } else {
        s += '%';
        s += std::to_string(c);
      }
    }
    if (e.attrs) {
      const std::string a = e.attrs();
      if (!a.empty()) {
        if (!no_operands)
          s += ", ";
        s += a;
      }
    }
    s += ')';
    out[i] = std::move(s);
  }
  return out;
}

template <class Op>
constexpr print_entry entry_for() {
  print_entry e{};
  if constexpr (requires { Op::to_string(); })
    e.leaf = &Op::to_string;
  else
    e.name = Op::name;
  if constexpr (requires { Op::attrs(); })
    e.attrs = &Op::attrs;
  return e;
}
} // namespace detail

namespace detail {
// The plan's tables, outside plan_impl and templated on sizes only: a type nested in plan_impl
// is named after the whole plan, and clang names the LLVM type of every struct it emits by its
// full C++ name, printed without sharing (22 MB per name for the residual MLP at depth 4, and
// out of memory at depth 8).
template <std::size_t size, std::size_t n_edges>
struct node_facts_t {
  std::array<std::size_t, size + 1> edge_begin{};
  std::array<std::size_t, n_edges + 1> edges{};
  std::array<bool, size> elementwise{}, constant{}, fetched{}, force_root{}, no_buffer{},
      placeholder{}, variable{}, group{};
  std::array<epilogue_role, size> epilogue{};
  std::array<bool, size> fused_input{}, pieces{}, products{}, stored{}, reduction{};
  /// shape_only[e]: edge e's reader reads only its operand's shape (an op's mask names its
  /// first 32 operands; an operand past those is read for its values).
  std::array<bool, n_edges + 1> shape_only{};
  /// after_reduce[i]: node i reads an all-reduce point (replica_mean), maybe not directly: in a
  /// replicated session it runs once, after the towers (device/replication.hpp's `once`).
  std::array<bool, size> after_reduce{};
};

template <std::size_t size, std::size_t slots, std::size_t n_edges>
struct layout_table {
  /// root[i] == i: node i is materialized (a step); root[i] == r: node i is computed inside
  /// the fused loop of region r; root[i] == none: an inlined constant.
  std::array<std::size_t, size> root{};
  /// Last step that reads slot i's buffer (none for never, or for fetched nodes).
  std::array<std::size_t, slots> last_use{};
  /// Region r's members are region_members[member_begin[r] .. member_begin[r+1]) (topological).
  std::array<std::size_t, size + 1> member_begin{};
  std::array<std::size_t, size + 1> members{};
  /// Position of node i within its region's members.
  std::array<std::size_t, size> local_pos{};
  /// Region r's inputs (value slots of materialized nodes or transfers), deduplicated, and
  /// the node each one holds.
  std::array<std::size_t, size + 1> input_begin{};
  std::array<std::size_t, n_edges + 1> inputs{};
  std::array<std::size_t, n_edges + 1> input_nodes{};
  /// What the executor does with node i.
  std::array<step_kind, size> step{};
  /// For an edge e inside a fused region: its operand kind (0 inlined constant, 1 member,
  /// 2 input) and position.
  std::array<int, n_edges + 1> edge_kind{};
  std::array<std::size_t, n_edges + 1> edge_pos{};
  /// The order the executor runs the nodes in: node order, except that a stored 16-bit copy
  /// (ops::save) runs right after what it copies, a region that only widens such copies right
  /// before its first reader, and a shrinking kernel (a weight or bias gradient) right after
  /// its operands (see schedule()). position[i]: node i's place in it.
  std::array<std::size_t, size> order{}, position{};
  /// dying[r], for a fused elementwise step r (plain or chained): bit k when its k-th region
  /// input's buffer is last read by r, and for a chained step bit (inputs + q) when its
  /// producer's q-th operand's is (its output may be written over it: the CPU backend's
  /// context::allocate_in_place). 0 elsewhere.
  std::array<std::uint64_t, size> dying{};
  /// Buffers dropped after step s: releases[release_begin[s] .. release_begin[s+1]).
  std::array<std::size_t, size + 1> release_begin{};
  std::array<std::size_t, slots + 1> releases{};
  /// For an `epilogue` step r: its producer (a `deferred` step), the edge of its bias operand
  /// and whether relu follows; for a `chained` step r: its producer; none elsewhere.
  std::array<std::size_t, size> producer{}, bias_edge{};
  std::array<bool, size> relu{};
  /// For a `prologue` step: the region root it evaluates (a `deferred` step); none elsewhere.
  std::array<std::size_t, size> source{};
  /// For a `chained` step r: which of its region's inputs its producer is; none elsewhere.
  std::array<std::size_t, size> chain_input{};
  std::size_t steps = 0, fused = 0, epilogues = 0, prologues = 0, chains = 0;
  /// Assignments computed and stored by another assignment's loop (`fused_output` steps).
  std::size_t merged_outputs = 0;
};

template <std::size_t size, std::size_t n_slots>
struct frame_table {
  std::array<std::size_t, size + 1> begin{};
  std::array<std::size_t, n_slots> slot{};
};

} // namespace detail

/// A plan's tables as plain pointers and counts: what tools that read a whole plan (pictures,
/// traces, logs) take, so that their code is compiled once, not once per plan type.
struct plan_view {
  std::size_t size = 0, transfers = 0, steps = 0;
  const std::string& (*label)(std::size_t) = nullptr; ///< node_label
  const std::string_view* op = nullptr;               ///< op_names
  const std::string_view* dtype = nullptr;            ///< dtype_names
  const detail::static_dims* shape = nullptr;         ///< static_shapes
  // fact
  const std::size_t *edge_begin = nullptr, *edges = nullptr;
  const bool *elementwise = nullptr, *constant = nullptr, *fetched = nullptr, *state = nullptr,
             *placeholder = nullptr, *variable = nullptr, *group = nullptr;
  // layout
  const std::size_t *root = nullptr, *member_begin = nullptr, *members = nullptr,
                    *producer = nullptr, *source = nullptr;
  const step_kind* step = nullptr;
  const bool* relu = nullptr;
  // placement
  const device_id* device = nullptr;
  const std::size_t *edge_transfer = nullptr, *source_begin = nullptr, *by_source = nullptr;
  const device_id* transfer_device = nullptr;
};

template <class Placement, class... Fetches>
struct plan_impl;

/// Analysis of the subgraph that `Fetches` (a type_list) need, placed by `Placement`.
#if defined(__CUDA_ARCH__)
// nvcc's device pass: plan_impl<Placement, opaque<fetch>...>, no name of a fetch in the plan's
// type (traverse.hpp's `opaque`: there the executor's instantiations that name the plan would
// otherwise each cost the size of the fetches' expression trees).
namespace detail {
template <class Fetches, class Placement>
struct plan_of;
template <class... Fetches, class Placement>
struct plan_of<type_list<Fetches...>, Placement> {
  using type = plan_impl<Placement, opaque<std::remove_cvref_t<Fetches>>...>;
};
} // namespace detail
template <class Fetches, class Placement = on<cpu<0>>>
using plan = typename detail::plan_of<Fetches, Placement>::type;
#else
// Elsewhere a class named by its fetches, as it always was. (Not an alias of one plan_impl for
// both: g++ took three times as long on test/deep's model with `plan` an alias of
// plan_impl<Placement, type_list<fetch...>>, local classes or not; the cause is not known.)
template <class Fetches, class Placement = on<cpu<0>>>
struct plan;
template <class... Fetches, class Placement>
struct plan<type_list<Fetches...>, Placement>
    : plan_impl<Placement, std::remove_cvref_t<Fetches>...> {};
#endif

template <class Placement, class... Fetches>
struct plan_impl {
  using nodes = topological_order<detail::unwrap<Fetches>...>;
  static constexpr std::size_t size = nodes::size;

#if TYPEFLOW_NODE_REFS
private:
  using map = detail::hash_index<nodes>;

public:
  /// Position of node N in the topological order: index_c<N>::value.
  template <class N>
  using index_c = std::integral_constant<
      std::size_t,
      detail::checked_index(map::find(typeflow::detail::node_hash<std::remove_cvref_t<N>>::value),
                            size)>;
  /// Whether N is a node of this plan: contains_c<N>::value.
  template <class N>
  using contains_c =
      std::bool_constant<map::find(typeflow::detail::node_hash<std::remove_cvref_t<N>>::value) <
                         size>;
#else
private:
  using map = detail::index_map<nodes, std::make_index_sequence<size>>;

public:
  // Members that depend on a node type are aliases to small types, never variables or
  // functions: g++ mangles the name of every instantiated variable and function of the plan,
  // and a name that holds both the plan and a node grows with the graph (cubic in all).

  /// Position of node N in the topological order: index_c<N>::value.
  template <class N>
  using index_c = decltype(map::index_of(static_cast<std::remove_cvref_t<N>*>(nullptr)));
  /// Whether N is a node of this plan: contains_c<N>::value.
  template <class N>
  using contains_c = detail::has_node<map, N>;
#endif
  /// The nodes as a Boost.Hana sequence of types, in topological order, for introspection:
  /// `hana::for_each(P::nodes_c(), [](auto t) { using N = typename decltype(t)::type; })`.
  /// A function, so that the sequence is instantiated only by those who ask for it.
  static constexpr auto nodes_c() {
    return as_hana(static_cast<nodes*>(nullptr));
  }

private:
  template <class... Ns>
  static constexpr auto as_hana(type_list<Ns...>*) {
    return boost::hana::tuple_t<Ns...>;
  }

public:
  /// The node at position I.
#if TYPEFLOW_NODE_REFS
  template <std::size_t I>
  using node = typename detail::node_of<map::hashes[I]>::type;
#else
  template <std::size_t I>
  using node = decltype(map::node_at(std::integral_constant<std::size_t, I>{}));
#endif

private:
  template <class L>
  struct edge_count;
  template <class... Ns>
  struct edge_count<type_list<Ns...>> {
    // A loop, not a fold: clang limits a fold expression to 256 operands (-fbracket-depth).
    static constexpr std::size_t value = [] {
      const std::size_t arity[] = {detail::arity<def_t<Ns>>::value..., 0};
      std::size_t n = 0;
      for (std::size_t a : arity)
        n += a;
      return n;
    }();
  };
  static constexpr std::size_t n_edges = edge_count<nodes>::value;

  template <class Def>
  struct child_seq;
  template <class Op, class... Cs>
  struct child_seq<expr<Op, Cs...>> {
    using type = std::index_sequence<index_c<Cs>::value...>;
  };

  using node_facts = detail::node_facts_t<size, n_edges>;

  template <std::size_t... I>
  static consteval node_facts facts(std::index_sequence<I...>) {
    node_facts f;
    // Arrays and loops, not a fold over the nodes: clang limits a fold expression to 256
    // operands (-fbracket-depth), and a plan can have thousands of nodes.
    const std::size_t* const kids[] = {
        detail::seq_values<typename child_seq<def_t<node<I>>>::type>::value.data()..., nullptr};
    const std::size_t n_kids[] = {detail::arity<def_t<node<I>>>::value..., 0};
    f.elementwise = {(node<I>::op::kind == node_kind::elementwise)...};
    f.constant = {is_constant_t<node<I>>::value...};
    f.force_root = {is_state_op_t<node<I>>::value...};
    f.placeholder = {is_placeholder_t<node<I>>::value...};
    f.variable = {is_variable_t<node<I>>::value...};
    f.group = {(node<I>::op::kind == node_kind::group)...};
    const unsigned shape_only[] = {shape_only_operands<typename node<I>::op>()..., 0u};
    std::size_t e = 0;
    for (std::size_t i = 0; i < size; ++i) {
      f.no_buffer[i] = f.placeholder[i] || f.variable[i] || f.group[i];
      f.edge_begin[i] = e;
      for (std::size_t c = 0; c < n_kids[i]; ++c) {
        f.shape_only[e] = c < 32 && ((shape_only[i] >> c) & 1u) != 0;
        f.edges[e++] = kids[i][c];
      }
    }
    f.edge_begin[size] = e;
    f.epilogue = {epilogue_role_of<typename node<I>::op>()...};
    f.fused_input = {reads_fused_input<typename node<I>::op>()...};
    f.pieces = {writes_in_pieces<typename node<I>::op>()...};
    f.stored = {always_stored<typename node<I>::op>()...};
    f.products = {follows_precision<typename node<I>::op>()...};
    f.reduction = {(node<I>::op::kind == node_kind::reduction)...};
    const bool all_reduce[] = {is_all_reduce_op<typename node<I>::op>()..., false};
    for (std::size_t j = 0; j < size; ++j)
      for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e)
        f.after_reduce[j] =
            f.after_reduce[j] || f.after_reduce[f.edges[e]] || all_reduce[f.edges[e]];
    ((f.fetched[index_c<detail::unwrap<Fetches>>::value] = true), ...);
    return f;
  }

public:
  static constexpr node_facts fact = facts(std::make_index_sequence<size>{});

  using placement_t = typeflow::placement::result<size, n_edges>;

private:
  template <std::size_t... I>
  static consteval placement_t place(std::index_sequence<I...>) {
    typeflow::placement::request<size, n_edges> r;
    const node_facts& f = fact;
    r.edge_begin = f.edge_begin;
    r.edges = f.edges;
    r.constant = f.constant;
    r.fetched = f.fetched;
    r.elementwise = f.elementwise;
    r.group = f.group;
    r.policy = {id_of<typename Placement::template device<node<I>>>...};
    r.scope = {detail::scope_of<typename node<I>::op>::value...};
    r.scope_device = {detail::scope_of<typename node<I>::op>::id...};
    r.has_gpu_kernel = {has_gpu_kernel<typename node<I>::op>...};
    r.state = {is_state_op_t<node<I>>::value...};
    r.leaf = {(node<I>::op::kind == node_kind::leaf)...};
    r.soft = soft_placement<Placement>();
    return typeflow::placement::place(r);
  }

public:
  static constexpr placement_t placement = place(std::make_index_sequence<size>{});
  /// Transfers, and value slots: nodes first, then one per transfer.
  static constexpr std::size_t transfers = placement.transfers;
  static constexpr std::size_t slots = size + transfers;
  /// The value slot edge e reads: its child, or the transfer that brings the child over.
  static constexpr std::size_t edge_slot(std::size_t e) {
    return placement.edge_transfer[e] == static_cast<std::size_t>(-1)
               ? fact.edges[e]
               : size + placement.edge_transfer[e];
  }
  /// The device tag node I runs on.
  template <std::size_t I>
  using device = typeflow::device_of<placement.device[I].is_cpu, placement.device[I].index>;

  /// Fusion and memory plan, all indices into `nodes`.
  using layout_t = detail::layout_table<size, slots, n_edges>;
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

private:
  static consteval layout_t compute_layout() {
    const node_facts& f = fact;
    layout_t L;
    constexpr std::size_t no_consumer = none, conflict = none - 1;
    std::array<std::size_t, size> consumer_root{};
    std::array<bool, size> boundary{};
    consumer_root.fill(no_consumer);
    // Merged assignments: the loop of assignment r runs in that of merged[r] (see mergeable).
    std::array<std::size_t, size> merged{};
    for (std::size_t i = 0; i < size; ++i)
      merged[i] = i;
    const auto find = [&](std::size_t r) {
      while (merged[r] != r)
        r = merged[r];
      return r;
    };
    const auto groups_only = read_by_groups_only();
    // Reverse topological order: every consumer is decided before its children.
    for (std::size_t j = size; j-- > 0;) {
      if (f.constant[j]) {
        L.root[j] = (f.fetched[j] || boundary[j]) ? j : none;
      } else if (f.elementwise[j] && !f.fetched[j] && !f.force_root[j] && !boundary[j] &&
                 !f.stored[j] && consumer_root[j] != no_consumer && consumer_root[j] != conflict) {
        L.root[j] = find(consumer_root[j]);
      } else {
        L.root[j] = j;
      }
      for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e) {
        const std::size_t k = f.edges[e];
        const bool local = f.constant[k] || placement.device[k] == placement.device[j];
        if (f.elementwise[j] && L.root[j] != none && local) {
          const std::size_t mine = find(L.root[j]);
          if (consumer_root[k] == no_consumer) {
            consumer_root[k] = mine;
          } else if (consumer_root[k] != conflict && find(consumer_root[k]) != mine) {
            const std::size_t other = find(consumer_root[k]);
            // Only a node that can become a member of the merged loop merges two assignments
            // (not a shared constant, leaf or stored value).
            const bool member = f.elementwise[k] && !f.constant[k] && !f.fetched[k] &&
                                !f.force_root[k] && !boundary[k];
            if (member && mergeable(other, mine, groups_only)) {
              merged[std::min(other, mine)] = std::max(other, mine);
              consumer_root[k] = std::max(other, mine);
            } else {
              consumer_root[k] = conflict;
            }
          }
        } else {
          boundary[k] = true;
        }
      }
    }
    for (std::size_t i = 0; i < size; ++i)
      if (L.root[i] != none)
        L.root[i] = find(L.root[i]);
    // Group members by region (counting sort keeps topological order within a region).
    std::array<std::size_t, size + 1> count{};
    for (std::size_t i = 0; i < size; ++i)
      if (L.root[i] != none)
        ++count[L.root[i]];
    L.member_begin = graph::bucket_begins(count);
    std::array<std::size_t, size + 1> fill = L.member_begin;
    for (std::size_t i = 0; i < size; ++i)
      if (L.root[i] != none) {
        L.local_pos[i] = fill[L.root[i]] - L.member_begin[L.root[i]];
        L.members[fill[L.root[i]]++] = i;
      }
    // Region inputs and last uses.
    std::array<std::size_t, slots> mark{}, mark_pos{}, shape_last{};
    mark.fill(none);
    shape_last.fill(none);
    L.last_use.fill(none);
    std::size_t in = 0;
    for (std::size_t r = 0; r < size; ++r) {
      L.input_begin[r] = in;
      if (L.root[r] != r)
        continue;
      if (!f.no_buffer[r])
        ++L.steps;
      for (std::size_t m = L.member_begin[r]; m < L.member_begin[r + 1]; ++m) {
        const std::size_t i = L.members[m];
        if (i != r)
          ++L.fused;
        for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e) {
          const std::size_t k = f.edges[e];
          if (L.root[k] == none) {
            L.edge_kind[e] = 0;
            continue;
          }
          if (L.root[k] == r && placement.edge_transfer[e] == none) {
            L.edge_kind[e] = 1;
            L.edge_pos[e] = L.local_pos[k];
            continue;
          }
          const std::size_t slot = edge_slot(e);
          if (mark[slot] != r) {
            mark[slot] = r;
            mark_pos[slot] = in - L.input_begin[r];
            L.input_nodes[in] = k;
            L.inputs[in++] = slot;
          }
          L.edge_kind[e] = 2;
          L.edge_pos[e] = mark_pos[slot];
          auto& last = f.shape_only[e] ? shape_last[slot] : L.last_use[slot];
          last = (last == none || last < r) ? r : last;
        }
      }
    }
    L.input_begin[size] = in;
    // A buffer read only for its shape lives as long as those readers (nothing reads its values).
    for (std::size_t s = 0; s < slots; ++s)
      if (L.last_use[s] == none)
        L.last_use[s] = shape_last[s];
    for (std::size_t i = 0; i < size; ++i)
      L.step[i] = f.placeholder[i]                     ? step_kind::placeholder
                  : f.variable[i]                      ? step_kind::variable
                  : f.constant[i] && L.root[i] == none ? step_kind::inline_constant
                  : f.constant[i]                      ? step_kind::constant
                  : f.group[i]                         ? step_kind::group
                  : L.root[i] != i && f.force_root[i]  ? step_kind::fused_output
                  : L.root[i] != i                     ? step_kind::fused_member
                                                       : step_kind::kernel;
    for (std::size_t i = 0; i < size; ++i)
      L.merged_outputs += L.step[i] == step_kind::fused_output ? 1 : 0;
    fold_epilogues(L);
    fold_prologues(L);
    fold_chains(L);
    schedule(L);
    // Fetched values and assignments (committed at the end) live to the end of the run.
    for (std::size_t i = 0; i < size; ++i)
      if (f.fetched[i] || f.force_root[i])
        L.last_use[i] = none;
    std::array<std::size_t, size + 1> per{};
    for (std::size_t i = 0; i < slots; ++i)
      if (L.last_use[i] != none)
        ++per[L.last_use[i]];
    std::size_t run = 0;
    for (std::size_t s = 0; s < size; ++s) {
      L.release_begin[s] = run;
      run += per[s];
    }
    L.release_begin[size] = run;
    std::array<std::size_t, size + 1> pos = L.release_begin;
    for (std::size_t i = 0; i < slots; ++i)
      if (L.last_use[i] != none)
        L.releases[pos[L.last_use[i]]++] = i;
    // A slot read on both sides of an all-reduce (by nodes that do and do not read one) is
    // kept past the towers of a replicated run (replication's read_once) after its last
    // reader by node order: never written over.
    std::array<unsigned char, slots> sides{};
    for (std::size_t n = 0; n < size; ++n)
      for (std::size_t e = f.edge_begin[n]; e < f.edge_begin[n + 1]; ++e)
        sides[edge_slot(e)] |= f.after_reduce[n] ? 2 : 1;
    const auto dies_at = [&](std::size_t s, std::size_t r) {
      return L.last_use[s] == r && sides[s] != 3;
    };
    for (std::size_t r = 0; r < size; ++r) {
      if (!f.elementwise[r] || L.root[r] != r ||
          (L.step[r] != step_kind::kernel && L.step[r] != step_kind::chained))
        continue;
      const std::size_t nin = L.input_begin[r + 1] - L.input_begin[r];
      for (std::size_t k = 0; k < 64 && k < nin; ++k)
        if (dies_at(L.inputs[L.input_begin[r] + k], r))
          L.dying[r] |= std::uint64_t{1} << k;
      if (L.step[r] == step_kind::chained) // then the producer's operands (its frame's order)
        for (std::size_t e = f.edge_begin[L.producer[r]], q = nin;
             e < f.edge_begin[L.producer[r] + 1] && q < 64; ++e, ++q)
          if (dies_at(edge_slot(e), r))
            L.dying[r] |= std::uint64_t{1} << q;
    }
    return L;
  }

  /// Whether each node is read by group nodes only (or by nothing).
  static consteval std::array<bool, size> read_by_groups_only() {
    std::array<bool, size> only{};
    only.fill(true);
    for (std::size_t j = 0; j < size; ++j)
      for (std::size_t e = fact.edge_begin[j]; e < fact.edge_begin[j + 1]; ++e)
        only[fact.edges[e]] = only[fact.edges[e]] && fact.group[j];
    return only;
  }

  /// Merged assignments (a multi-output loop): two regions rooted at elementwise assignments
  /// (`assign`, `assign_add`, `assign_sub`) that would share a member, on one CPU device, of one
  /// dtype and one fully static shape, each read by group nodes only (the optimizer's training
  /// op), in the same phase of a replicated run (both after the all-reduce, or neither), become
  /// one loop that stores both values: the Momentum update of a variable and of its
  /// slot read the gradient and the new slot value once instead of through two stored
  /// intermediates. The loop runs where the later assignment stands; the earlier assignment is
  /// a `fused_output` step (its shape is checked where it stands) that nothing reads before the
  /// end of the run, when assignments are committed.
  static consteval bool mergeable(std::size_t a, std::size_t b,
                                  const std::array<bool, size>& groups_only) {
    const node_facts& f = fact;
    constexpr const auto& dtypes = detail::dtype_table<nodes>::value;
    constexpr const auto& shapes = detail::shape_table<nodes>::value;
    if (a == b || !f.force_root[a] || !f.force_root[b] || !f.elementwise[a] || !f.elementwise[b] ||
        !groups_only[a] || !groups_only[b] || !placement.device[a].is_cpu ||
        !(placement.device[a] == placement.device[b]) || dtypes[a] != dtypes[b] ||
        f.after_reduce[a] != f.after_reduce[b] || shapes[a].rank != shapes[b].rank)
      return false;
    for (std::size_t d = 0; d < shapes[a].rank; ++d)
      if (shapes[a].d[d] < 0 || shapes[a].d[d] != shapes[b].d[d])
        return false;
    return true;
  }

  /// How many edges read each node.
  static consteval std::array<std::size_t, size> reader_counts() {
    std::array<std::size_t, size> readers{};
    for (std::size_t e = 0; e < fact.edge_begin[size]; ++e)
      ++readers[fact.edges[e]];
    return readers;
  }

  /// Epilogues (graph::epilogue_role): a region `bias_add(k, b)` or `relu(bias_add(k, b))` on
  /// the CPU whose producer k (conv2d, matmul) is a kernel that nothing else reads, on the same
  /// device, with a variable or placeholder for the bias, becomes one step: k is `deferred` (its
  /// shape is checked where it stands) and the region's root an `epilogue` step that runs k's
  /// kernel with the bias and relu (oneDNN post-ops), writing the region's output. k's operands
  /// live until then (between k and the root stand only the bias and bias_add). CPU only for
  /// now: the CUDA backend would need cuBLASLt's or cuDNN's epilogues.
  static consteval void fold_epilogues(layout_t& L) {
    const node_facts& f = fact;
    const auto readers = reader_counts();
    L.producer.fill(none);
    L.bias_edge.fill(none);
    for (std::size_t r = 0; r < size; ++r) {
      if (L.root[r] != r || L.step[r] != step_kind::kernel || !f.elementwise[r] ||
          !placement.device[r].is_cpu)
        continue;
      const std::size_t n = L.member_begin[r + 1] - L.member_begin[r];
      const bool relu = n == 2 && f.epilogue[r] == epilogue_role::activation &&
                        f.edge_begin[r + 1] - f.edge_begin[r] == 1;
      if (n != 1 && !relu)
        continue;
      const std::size_t j = relu ? f.edges[f.edge_begin[r]] : r;
      if (f.epilogue[j] != epilogue_role::bias || L.root[j] != r)
        continue;
      const std::size_t e = f.edge_begin[j], k = f.edges[e], b = f.edges[e + 1];
      // The bias a variable or a placeholder: a computed one could belong to a later phase of
      // a replicated run (after the gradients' average) than the producer's operands.
      if (!f.variable[b] && !f.placeholder[b])
        continue;
      if (f.epilogue[k] != epilogue_role::producer || L.step[k] != step_kind::kernel ||
          f.fetched[k] || readers[k] != 1 || placement.edge_transfer[e] != none ||
          L.edge_kind[e] != 2 || L.edge_kind[e + 1] != 2)
        continue;
      L.producer[r] = k;
      L.bias_edge[r] = e + 1;
      L.relu[r] = relu;
      L.step[k] = step_kind::deferred;
      L.step[r] = step_kind::epilogue;
      --L.steps;
      ++L.epilogues;
      for (std::size_t q = f.edge_begin[k]; q < f.edge_begin[k + 1]; ++q) {
        const std::size_t slot = edge_slot(q);
        if (L.last_use[slot] != none && L.last_use[slot] < r)
          L.last_use[slot] = r;
      }
    }
  }

  /// Prologues: a reduction (an op that `reads_fused_input`) on the CPU whose one operand is a
  /// fused elementwise region that nothing else reads, on its device, evaluates that region in
  /// pieces as it reduces them: the region's root becomes `deferred` (its shape is checked where
  /// it stands) and the reduction a `prologue` step; the region's inputs live until then.
  static consteval void fold_prologues(layout_t& L) {
    const node_facts& f = fact;
    const auto readers = reader_counts();
    L.source.fill(none);
    for (std::size_t q = 0; q < size; ++q) {
      if (!f.fused_input[q] || L.step[q] != step_kind::kernel || !placement.device[q].is_cpu ||
          f.edge_begin[q + 1] - f.edge_begin[q] != 1)
        continue;
      const std::size_t e = f.edge_begin[q], c = f.edges[e];
      if (!f.elementwise[c] || L.step[c] != step_kind::kernel || L.root[c] != c || f.fetched[c] ||
          f.force_root[c] || readers[c] != 1 || placement.edge_transfer[e] != none)
        continue;
      L.source[q] = c;
      L.step[c] = step_kind::deferred;
      L.step[q] = step_kind::prologue;
      --L.steps;
      ++L.prologues;
      for (std::size_t i = L.input_begin[c]; i < L.input_begin[c + 1]; ++i) {
        const std::size_t slot = L.inputs[i];
        if (L.last_use[slot] != none && L.last_use[slot] < q)
          L.last_use[slot] = q;
      }
    }
  }

  /// Chains: a fused elementwise region on the CPU (its root a kernel step) one of whose inputs
  /// is a kernel k that `writes_in_pieces`, on the same device, that only the region's members
  /// read (not fetched, not transferred), and whose other inputs are k's operands, variables,
  /// placeholders or constants, runs k's kernel itself and is evaluated on each piece of k's
  /// output as k finishes it: k becomes `deferred` (its shape is checked where it stands), the
  /// root a `chained` step, and k's operands live until then. (The inputs rule keeps the region
  /// in the replicated phase of its producer: device/replication.hpp.) `relu`'s gradient after
  /// `max_pool_grad` is one pass: the pool's gradient of an image is masked while in cache.
  static consteval void fold_chains(layout_t& L) {
    const node_facts& f = fact;
    L.chain_input.fill(none);
    for (std::size_t r = 0; r < size; ++r) {
      if (L.root[r] != r || L.step[r] != step_kind::kernel || !f.elementwise[r] ||
          f.force_root[r] || !placement.device[r].is_cpu)
        continue;
      std::size_t k = none, pos = none;
      for (std::size_t i = L.input_begin[r]; i < L.input_begin[r + 1] && k == none; ++i) {
        const std::size_t n = L.input_nodes[i];
        if (f.pieces[n] && L.inputs[i] == n && L.step[n] == step_kind::kernel && !f.fetched[n] &&
            placement.device[n] == placement.device[r])
          k = n, pos = i - L.input_begin[r];
      }
      if (k == none)
        continue;
      bool ok = true;
      for (std::size_t e = 0; e < f.edge_begin[size] && ok; ++e) // k's readers: members of r
        if (f.edges[e] == k) {
          std::size_t reader = 0;
          while (f.edge_begin[reader + 1] <= e)
            ++reader;
          ok = L.root[reader] == r;
        }
      for (std::size_t e = f.edge_begin[k]; e < f.edge_begin[k + 1] && ok; ++e)
        ok = placement.edge_transfer[e] == none;
      for (std::size_t i = L.input_begin[r]; i < L.input_begin[r + 1] && ok; ++i) {
        const std::size_t n = L.input_nodes[i];
        // (or a 16-bit saved copy, which is computed in the same replicated phase as what it
        // copies: the op's operand, widened, is such a copy's in autodiff's saved_in)
        bool operand = n == k || f.variable[n] || f.placeholder[n] || f.constant[n] ||
                       (f.stored[n] && f.after_reduce[n] == f.after_reduce[k]);
        for (std::size_t e = f.edge_begin[k]; e < f.edge_begin[k + 1] && !operand; ++e)
          operand = L.inputs[i] == edge_slot(e);
        ok = operand;
      }
      if (!ok)
        continue;
      L.producer[r] = k;
      L.chain_input[r] = pos;
      L.step[k] = step_kind::deferred;
      L.step[r] = step_kind::chained;
      --L.steps;
      ++L.chains;
      for (std::size_t e = f.edge_begin[k]; e < f.edge_begin[k + 1]; ++e) {
        const std::size_t slot = edge_slot(e);
        if (L.last_use[slot] != none && L.last_use[slot] < r)
          L.last_use[slot] = r;
      }
    }
  }

  /// The execution order (layout_t::order). Node order is a topological order in which a node
  /// runs where the depth-first walk from the fetches first meets it. Three kinds of step move:
  /// - a 16-bit copy that a gradient saves (autodiff's saved_in<H>) would run where the
  ///   backward pass first reads it, keeping the float32 value it copies alive through the
  ///   forward pass: a stored copy whose inputs are all steps runs right after the last of them;
  /// - an elementwise region whose inputs are all stored copies (their float32 widening, read by
  ///   a kernel) runs right before its first reader;
  /// - a shrinking kernel, a reduction or a product (follows_precision: a convolution, its
  ///   gradients, a matmul) whose output is smaller than one of the operands it reads values of
  ///   (a convolution's weight gradient, a bias gradient's sum; a batch extent counted as 32),
  ///   runs right after its last operand is ready,
  ///   with the widenings that only it reads: the backward pass's weight gradients come late
  ///   in node order, and what they read stayed alive until then.
  /// Each move keeps every input ready before its reader. The last use of the buffers the moved
  /// steps read is then decided by run position.
  static consteval void schedule(layout_t& L) {
    const node_facts& f = fact;
    for (std::size_t i = 0; i < size; ++i)
      L.order[i] = L.position[i] = i;
    // runs_at[k]: the step that computes node k (its own, or the one it is deferred into).
    std::array<std::size_t, size> runs_at{};
    for (std::size_t i = 0; i < size; ++i)
      runs_at[i] = i;
    for (std::size_t r = 0; r < size; ++r) {
      if (L.producer[r] != none)
        runs_at[L.producer[r]] = r;
      if (L.source[r] != none)
        runs_at[L.source[r]] = r;
    }
    // A step that moves is a kernel of one node (the members of a region infer their shapes at
    // their own places in the order) that reads only buffers of this device.
    const auto plain_step = [&](std::size_t j) {
      if (L.step[j] != step_kind::kernel || L.root[j] != j ||
          L.member_begin[j + 1] - L.member_begin[j] != 1 ||
          L.input_begin[j] == L.input_begin[j + 1])
        return false;
      for (std::size_t i = L.input_begin[j]; i < L.input_begin[j + 1]; ++i)
        if (L.inputs[i] >= size) // a transfer's slot
          return false;
      return true;
    };
    // after[j]: j runs right after node after[j]'s place (stored copies); early[j]: likewise,
    // after those (shrinking kernels); before[w]: w runs right before node before[w].
    std::array<std::size_t, size> after{}, early{}, before{};
    after.fill(none);
    early.fill(none);
    before.fill(none);
    // Widenings: regions of one node whose operands are all stored copies. First reader of
    // each: the earliest node that reads it (every node, a fused member or a deferred producer
    // too, infers its shape at its own place); and how many edges read it.
    std::array<bool, size> widening{};
    for (std::size_t w = 0; w < size; ++w) {
      if (f.stored[w] || !f.elementwise[w] || f.fetched[w] || f.force_root[w] || !plain_step(w))
        continue;
      bool all = true;
      for (std::size_t e = f.edge_begin[w]; e < f.edge_begin[w + 1]; ++e)
        all = all && f.stored[f.edges[e]];
      widening[w] = all;
    }
    std::array<std::size_t, size> first{}, readers{};
    first.fill(none);
    for (std::size_t n = 0; n < size; ++n)
      for (std::size_t e = f.edge_begin[n]; e < f.edge_begin[n + 1]; ++e) {
        const std::size_t k = f.edges[e];
        if (widening[k]) {
          first[k] = std::min(first[k], n);
          ++readers[k];
        }
      }
    // Stored copies. A widening they read (a copy of a gradient's widened copy, under a nested
    // policy) may be sunk as late as its first reader: it is ready there.
    bool moved = false;
    for (std::size_t j = 0; j < size; ++j) {
      if (!f.stored[j] || !plain_step(j))
        continue;
      std::size_t h = 0;
      for (std::size_t i = L.input_begin[j]; i < L.input_begin[j + 1]; ++i) {
        const std::size_t k = L.input_nodes[i];
        h = std::max(h, widening[k] ? std::max(k, first[k]) : runs_at[k]);
      }
      if (h + 1 < j) {
        after[j] = h;
        moved = true;
      }
    }
    // The place after which node k's value is ready, for a shrinking kernel j that reads it: a
    // moved stored copy's, a widening's that only j reads (it moves with j) from its own
    // inputs, and any other widening's at the latest place it can move to (its first reader).
    const auto ready = [&](std::size_t k, std::size_t j) {
      if (after[k] != none)
        return after[k];
      if (early[k] != none)
        return early[k];
      if (!widening[k])
        return runs_at[k];
      if (first[k] != j || readers[k] != 1)
        return std::max(k, first[k]);
      std::size_t h = 0;
      for (std::size_t i = L.input_begin[k]; i < L.input_begin[k + 1]; ++i) {
        const std::size_t c = L.input_nodes[i];
        h = std::max(h, after[c] != none ? after[c] : runs_at[c]);
      }
      return h;
    };
    constexpr const auto& shapes = detail::shape_table<nodes>::value;
    // Elements of node n's value, an extent known only when fed (a batch) counted as 32: a
    // kernel moves where that pays from batches of 32 up.
    const auto elements = [&](std::size_t n) {
      std::int64_t e = 1;
      for (std::size_t d = 0; d < shapes[n].rank; ++d)
        e *= shapes[n].d[d] < 0 ? 32 : shapes[n].d[d];
      return e;
    };
    for (std::size_t j = 0; j < size; ++j) {
      if ((!f.reduction[j] && !f.products[j]) || f.stored[j] || f.after_reduce[j] ||
          f.force_root[j] || !plain_step(j))
        continue;
      const std::int64_t out = elements(j);
      bool shrinks = false;
      std::size_t h = 0;
      for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e) {
        const std::int64_t in = elements(f.edges[e]);
        shrinks = shrinks || (!f.shape_only[e] && in > out);
      }
      for (std::size_t i = L.input_begin[j]; i < L.input_begin[j + 1]; ++i)
        h = std::max(h, ready(L.input_nodes[i], j));
      if (!shrinks || h + 1 >= j)
        continue;
      early[j] = h;
      moved = true;
      for (std::size_t i = L.input_begin[j]; i < L.input_begin[j + 1]; ++i) {
        const std::size_t w = L.input_nodes[i];
        if (widening[w] && first[w] == j && readers[w] == 1)
          before[w] = j;
      }
    }
    if (!moved)
      return;
    for (std::size_t w = 0; w < size; ++w)
      if (widening[w] && before[w] == none && first[w] != none && after[first[w]] == none &&
          early[first[w]] == none && first[w] > w + 1)
        before[w] = first[w];
    // The order: node order with each moved node at its place; at each place, the widenings
    // sunk before the node, the node, the stored copies hoisted after it, then the shrinking
    // kernels hoisted after it, each behind its own widenings (in node order within each list).
    std::array<std::size_t, size> head_after{}, head_early{}, head_before{}, next{};
    head_after.fill(none);
    head_early.fill(none);
    head_before.fill(none);
    for (std::size_t j = size; j-- > 0;) {
      if (after[j] != none) {
        next[j] = head_after[after[j]];
        head_after[after[j]] = j;
      } else if (early[j] != none) {
        next[j] = head_early[early[j]];
        head_early[early[j]] = j;
      } else if (before[j] != none) {
        next[j] = head_before[before[j]];
        head_before[before[j]] = j;
      }
    }
    std::size_t q = 0;
    const auto emit = [&](std::size_t i) {
      for (std::size_t w = head_before[i]; w != none; w = next[w])
        L.order[q++] = w;
      L.order[q++] = i;
    };
    for (std::size_t i = 0; i < size; ++i) {
      if (after[i] == none && before[i] == none && early[i] == none)
        emit(i);
      for (std::size_t j = head_after[i]; j != none; j = next[j])
        L.order[q++] = j;
      for (std::size_t j = head_early[i]; j != none; j = next[j])
        emit(j);
    }
    for (std::size_t p = 0; p < size; ++p)
      L.position[L.order[p]] = p;
    // The last use of every buffer a moved step reads, by run position (a buffer kept to the
    // end stays kept).
    std::array<bool, slots> affected{}, seen{};
    for (std::size_t j = 0; j < size; ++j)
      if (after[j] != none || before[j] != none || early[j] != none)
        for (std::size_t i = L.input_begin[j]; i < L.input_begin[j + 1]; ++i)
          affected[L.inputs[i]] = L.last_use[L.inputs[i]] != none;
    for (std::size_t n = 0; n < size; ++n) {
      if (L.root[n] == none)
        continue;
      const std::size_t r = runs_at[L.root[n]]; // where n's loop reads its operands' values
      for (std::size_t e = f.edge_begin[n]; e < f.edge_begin[n + 1]; ++e) {
        const std::size_t k = f.edges[e], s = edge_slot(e);
        if (f.shape_only[e] || L.root[k] == none || (L.root[k] == L.root[n] && s == k) ||
            !affected[s])
          continue;
        if (!seen[s] || L.position[r] > L.position[L.last_use[s]]) {
          L.last_use[s] = r;
          seen[s] = true;
        }
      }
    }
  }

public:
  static constexpr layout_t layout = compute_layout();
  static constexpr std::size_t none_v = none;

  /// Number of kernels (materialized nodes other than placeholders and variables) and of nodes
  /// fused into them.
  static constexpr std::size_t steps = layout.steps;
  static constexpr std::size_t fused_nodes = layout.fused;

private:
  static constexpr std::size_t arity_of(std::size_t i) {
    return fact.edge_begin[i + 1] - fact.edge_begin[i];
  }
  /// Operand C of node I in a flat form: its value slot in the plan (Base == none), or Base + C
  /// (a local form: the operand's place in the step's frame).
  static constexpr std::size_t operand_index(std::size_t i, std::size_t c, std::size_t base) {
    return base == none ? edge_slot(fact.edge_begin[i] + c) : base + c;
  }
  template <std::size_t I, std::size_t Base, class N = def_t<node<I>>,
            class Seq = std::make_index_sequence<detail::arity<N>::value>>
  struct flat_of;
  template <std::size_t I, std::size_t Base, class Op, class... Cs, std::size_t... C>
  struct flat_of<I, Base, expr<Op, Cs...>, std::index_sequence<C...>> {
    using type =
        flat_node<layout.step[I], Op, typename expr<Op, Cs...>::value_type,
                  expr<Op, Cs...>::shape_type::rank,
                  ref<operand_index(I, C, Base), typename Cs::value_type, Cs::shape_type::rank>...>;
  };

  template <std::size_t R, std::size_t M, class Seq>
  struct member_of;
  template <std::size_t R, std::size_t M, std::size_t... C>
  struct member_of<R, M, std::index_sequence<C...>> {
    using op = typename node<M>::op;
    using type =
        member<op, op_compute_type<op, node<fact.edges[fact.edge_begin[M] + C]>...>,
               typename node<M>::value_type,
               typename detail::operand<layout.edge_kind[fact.edge_begin[M] + C],
                                        layout.edge_pos[fact.edge_begin[M] + C],
                                        node<fact.edges[fact.edge_begin[M] + C]>>::type...>;
  };
  template <std::size_t R, std::size_t M>
  using member_t = typename member_of<
      R, M, std::make_index_sequence<fact.edge_begin[M + 1] - fact.edge_begin[M]>>::type;

  /// Input K of region R: its value slot (Base == none), or Base + K in a local form.
  static constexpr std::size_t input_index(std::size_t r, std::size_t k, std::size_t base) {
    return base == none ? layout.inputs[layout.input_begin[r] + k] : base + k;
  }
  /// The merged outputs of region R (members other than R that are assignments): how many, and
  /// entry Q of its stores list, pairs (member position, value slot or, in a local form, frame
  /// position Base + inputs + q).
  static constexpr std::size_t stores_of(std::size_t r) {
    std::size_t n = 0;
    for (std::size_t m = layout.member_begin[r]; m < layout.member_begin[r + 1]; ++m)
      n += layout.step[layout.members[m]] == step_kind::fused_output ? 1 : 0;
    return n;
  }
  static constexpr std::size_t store_entry(std::size_t r, std::size_t base, std::size_t q) {
    std::size_t n = 0;
    for (std::size_t m = layout.member_begin[r]; m < layout.member_begin[r + 1]; ++m) {
      const std::size_t i = layout.members[m];
      if (layout.step[i] != step_kind::fused_output)
        continue;
      if (n == q / 2)
        return q % 2 == 0     ? layout.local_pos[i]
               : base == none ? i
                              : base + layout.input_begin[r + 1] - layout.input_begin[r] + q / 2;
      ++n;
    }
    return none;
  }
  template <std::size_t R, std::size_t Base, class Q = std::make_index_sequence<2 * stores_of(R)>>
  struct stores_seq;
  template <std::size_t R, std::size_t Base, std::size_t... Q>
  struct stores_seq<R, Base, std::index_sequence<Q...>> {
    using type = std::index_sequence<store_entry(R, Base, Q)...>;
  };

  template <
      std::size_t R, std::size_t Base,
      class MSeq = std::make_index_sequence<layout.member_begin[R + 1] - layout.member_begin[R]>,
      class KSeq = std::make_index_sequence<layout.input_begin[R + 1] - layout.input_begin[R]>>
  struct region_of;
  template <std::size_t R, std::size_t Base, std::size_t... M, std::size_t... K>
  struct region_of<R, Base, std::index_sequence<M...>, std::index_sequence<K...>> {
    using type = flat_region<
        typename node<R>::value_type,
        type_list<typename node<layout.input_nodes[layout.input_begin[R] + K]>::value_type...>,
        type_list<member_t<R, layout.members[layout.member_begin[R] + M]>...>,
        std::index_sequence<input_index(R, K, Base)...>, typename stores_seq<R, Base>::type>;
  };
  template <std::size_t R, std::size_t Base>
  using chained_of = graph::chained<
      typename flat_of<layout.producer[R], Base == none ? none
                                                        : Base + layout.input_begin[R + 1] -
                                                              layout.input_begin[R]>::type,
      typename region_of<R, Base>::type, layout.chain_input[R]>;
  template <std::size_t R, std::size_t Base>
  using epilogue_of = graph::epilogue<
      typename flat_of<layout.producer[R], Base>::type,
      ref<Base == none ? edge_slot(layout.bias_edge[R]) : Base + arity_of(layout.producer[R]),
          typename node<fact.edges[layout.bias_edge[R]]>::value_type, 1>,
      layout.relu[R]>;

public:
  /// The flat form of node I (see flat.hpp), its operands by value slot.
  template <std::size_t I>
  using flat = typename flat_of<I, none>::type;

  /// The epilogue of step R (layout.step[R] == step_kind::epilogue): its producer's flat form,
  /// the bias operand, whether relu follows.
  template <std::size_t R>
  using epilogue = epilogue_of<R, none>;

  /// The chain of step R (layout.step[R] == step_kind::chained): its producer's flat form, its
  /// region, which input of the region the producer is.
  template <std::size_t R>
  using chained = chained_of<R, none>;

  /// The fused region rooted at elementwise node R, in flat form.
  template <std::size_t R>
  using region = typename region_of<R, none>::type;

  /// The prologue of step Q (layout.step[Q] == step_kind::prologue): its input's region.
  template <std::size_t Q>
  using prologue = graph::prologue<region<layout.source[Q]>>;

  // Local forms. The executor instantiates each step from the local form of its node, in which
  // operands are numbered by their place in the step's *frame* instead of by value slot: 0 is the
  // step's own value, 1.. its operands, then what its region, epilogue or prologue reads. Steps
  // that differ only in where they sit in the graph (every block of a deep model) then share
  // one instantiation, so the executor's code grows with the kinds of steps, not their number.
  // frames.slot[frames.begin[i] ..] are the value slots of node i's frame, in that order.

  /// The local flat form of node I.
  template <std::size_t I>
  using local_flat = typename flat_of<I, 1>::type;
  /// The local form of the region of kernel step R.
  template <std::size_t R>
  using local_region = typename region_of<R, 1 + arity_of(R)>::type;
  /// The local form of the epilogue of step R.
  template <std::size_t R>
  using local_epilogue = epilogue_of<R, 1 + arity_of(R)>;
  /// The local form of the prologue of step Q.
  template <std::size_t Q>
  using local_prologue =
      graph::prologue<typename region_of<layout.source[Q], 1 + arity_of(Q)>::type>;
  /// The local form of the chain of step R: its region's inputs, then its producer's operands.
  template <std::size_t R>
  using local_chained = chained_of<R, 1 + arity_of(R)>;

  using frames_t = detail::frame_table<size, 3 * size + 3 * n_edges + 1>;

private:
  static consteval frames_t compute_frames() {
    frames_t F;
    const node_facts& f = fact;
    const layout_t& L = layout;
    std::size_t n = 0;
    auto operands = [&](std::size_t i) {
      for (std::size_t e = f.edge_begin[i]; e < f.edge_begin[i + 1]; ++e)
        F.slot[n++] = edge_slot(e);
    };
    auto inputs = [&](std::size_t r) {
      for (std::size_t k = L.input_begin[r]; k < L.input_begin[r + 1]; ++k)
        F.slot[n++] = L.inputs[k];
    };
    for (std::size_t i = 0; i < size; ++i) {
      F.begin[i] = n;
      F.slot[n++] = i;
      operands(i);
      if (L.step[i] == step_kind::kernel && f.elementwise[i]) {
        inputs(i);
        for (std::size_t m = L.member_begin[i]; m < L.member_begin[i + 1]; ++m)
          if (L.step[L.members[m]] == step_kind::fused_output)
            F.slot[n++] = L.members[m];
      } else if (L.step[i] == step_kind::epilogue) {
        operands(L.producer[i]);
        F.slot[n++] = edge_slot(L.bias_edge[i]);
      } else if (L.step[i] == step_kind::prologue) {
        inputs(L.source[i]);
      } else if (L.step[i] == step_kind::chained) {
        inputs(i);
        operands(L.producer[i]);
      }
    }
    F.begin[size] = n;
    return F;
  }

public:
  static constexpr frames_t frames = compute_frames();

  /// The readable form of node i (as to_string), built once from a table of op names and
  /// attributes: no per-node printing code is instantiated.
  static const std::string& node_string(std::size_t i) {
    static const std::vector<std::string> table = build_strings(std::make_index_sequence<size>{});
    return table[i];
  }

  /// A readable listing of the steps: `%index = kind text`, with the number of fused ops.
  static std::string describe() {
    std::string s;
    for (std::size_t i = 0; i < size; ++i) {
      if (layout.root[i] != i)
        continue;
      s += "%" + std::to_string(i) + " = " + std::string(kinds[i]) + " " + node_string(i);
      const std::size_t fused = layout.member_begin[i + 1] - layout.member_begin[i] - 1;
      if (layout.step[i] == step_kind::deferred && fused)
        s += "  [fused " + std::to_string(fused + 1) + " ops, evaluated in its reader's step]";
      else if (layout.step[i] == step_kind::deferred)
        s += "  [runs in its reader's step]";
      else if (layout.step[i] == step_kind::prologue)
        s += "  [reads %" + std::to_string(layout.source[i]) + "'s fused loop]";
      else if (layout.step[i] == step_kind::epilogue)
        s += std::string("  [epilogue of %") + std::to_string(layout.producer[i]) +
             (layout.relu[i] ? ": bias_add, relu]" : ": bias_add]");
      else if (layout.step[i] == step_kind::chained)
        s += "  [fused " + std::to_string(fused + 1) + " ops, chained to %" +
             std::to_string(layout.producer[i]) + "'s pieces]";
      else if (fused)
        s += "  [fused " + std::to_string(fused + 1) + " ops]";
      for (std::size_t m = layout.member_begin[i]; m < layout.member_begin[i + 1]; ++m)
        if (layout.step[layout.members[m]] == step_kind::fused_output)
          s += "  [also stores %" + std::to_string(layout.members[m]) + "]";
      s += "\n";
    }
    return s;
  }

  /// What step i computes in, given the products' precision on the CPU (`cpu`) and on the
  /// GPUs (`gpu`), and whether the GPUs' float32 products may use TF32: its dtype, or, for a
  /// convolution or matmul (alone or with its epilogue) of float32 whose products follow a lower
  /// precision, that precision's products with float32 sums.
  static std::string compute_dtype(std::size_t i, precision cpu, bool gpu_tf32,
                                   precision gpu = precision::float32) {
    const std::size_t p = layout.step[i] == step_kind::epilogue ? layout.producer[i] : i;
    constexpr const auto& dtypes = detail::dtype_table<nodes>::value;
    if (fact.products[p] && dtypes[p] == "float32") {
      const bool on_cpu = placement.device[i].is_cpu;
      const precision q = on_cpu ? cpu : gpu;
      if (q == precision::bfloat16)
        return "bfloat16 products, float32 sums";
      if (q == precision::float16)
        return "float16 products, float32 sums";
      if (!on_cpu && gpu_tf32)
        return "tf32 products, float32 sums";
    }
    return std::string(dtypes[i]);
  }

  /// describe() with each step's device and compute dtype (see compute_dtype; a session's
  /// describe_placement passes its own precision), and every transfer after the step that
  /// produces its tensor: `%3 = matmul matmul(x, w)  @/job:localhost/.../device:CPU:1
  /// [float32]`, then `  transfer %3 -> /job:localhost/.../device:CPU:0`. Leaves have no
  /// compute dtype.
  static std::string describe_placement(precision cpu = precision::float32, bool gpu_tf32 = false,
                                        precision gpu = precision::float32) {
    std::string s;
    for (std::size_t i = 0; i < size; ++i) {
      const bool step = layout.root[i] == i;
      if (step) {
        s += "%" + std::to_string(i) + " = " + std::string(kinds[i]) + " " + node_string(i) +
             "  @" + placement.device[i].name();
        if (placement.fell_back[i])
          s += " (soft placement: no kernel on the requested device)";
        if (!fact.no_buffer[i] && layout.step[i] != step_kind::inline_constant)
          s += "  [" + compute_dtype(i, cpu, gpu_tf32, gpu) + "]";
        s += "\n";
      }
      for (std::size_t q = placement.source_begin[i]; q < placement.source_begin[i + 1]; ++q) {
        const std::size_t t = placement.by_source[q];
        s += "  transfer %" + std::to_string(i) + " -> " + placement.transfer_device[t].name() +
             "\n";
      }
    }
    return s;
  }

  /// The plan's tables as a plan_view.
  static plan_view view() {
    plan_view v;
    v.size = size;
    v.transfers = transfers;
    v.steps = steps;
    v.label = &node_label;
    v.op = op_names.data();
    v.dtype = dtype_names.data();
    v.shape = static_shapes.data();
    v.edge_begin = fact.edge_begin.data();
    v.edges = fact.edges.data();
    v.elementwise = fact.elementwise.data();
    v.constant = fact.constant.data();
    v.fetched = fact.fetched.data();
    v.state = fact.force_root.data();
    v.placeholder = fact.placeholder.data();
    v.variable = fact.variable.data();
    v.group = fact.group.data();
    v.root = layout.root.data();
    v.member_begin = layout.member_begin.data();
    v.members = layout.members.data();
    v.producer = layout.producer.data();
    v.source = layout.source.data();
    v.step = layout.step.data();
    v.relu = layout.relu.data();
    v.device = placement.device.data();
    v.edge_transfer = placement.edge_transfer.data();
    v.source_begin = placement.source_begin.data();
    v.by_source = placement.by_source.data();
    v.transfer_device = placement.transfer_device.data();
    return v;
  }

  /// A short label of node i for pictures, traces and logs: `conv2d(%3, conv1/weights, ...)`,
  /// its operands by index (leaves by name), where node_string spells the whole subexpression.
  static const std::string& node_label(std::size_t i) {
    static const std::vector<std::string> table = build_labels(std::make_index_sequence<size>{});
    return table[i];
  }
  /// Each node's op name ("conv2d"; a leaf's is its kind: "variable", "placeholder", ...).
  static constexpr std::array<std::string_view, size> op_names = [] {
    std::array<std::string_view, size> n{};
    const auto ops = detail::op_name_table<nodes>::value;
    for (std::size_t i = 0; i < size; ++i)
      n[i] = fact.variable[i] ? "variable" : fact.placeholder[i] ? "placeholder" : ops[i];
    return n;
  }();
  /// Each node's dtype ("float32"; empty for a group) and static shape (`dyn` for a fed extent).
  static constexpr std::array<std::string_view, size> dtype_names =
      detail::dtype_table<nodes>::value;
  static constexpr std::array<detail::static_dims, size> static_shapes =
      detail::shape_table<nodes>::value;

private:
  template <std::size_t... I>
  static std::vector<std::string> build_labels(std::index_sequence<I...>) {
    static constexpr detail::print_entry entries[] = {detail::entry_for<typename node<I>::op>()...};
    return detail::node_labels(entries, size, fact.edge_begin.data(), fact.edges.data());
  }

private:
  template <std::size_t... I>
  static std::vector<std::string> build_strings(std::index_sequence<I...>) {
    static constexpr detail::print_entry entries[] = {detail::entry_for<typename node<I>::op>()...};
    std::vector<std::string> out(size);
    for (std::size_t i = 0; i < size; ++i) {
      const detail::print_entry& e = entries[i];
      const bool leaf = fact.edge_begin[i] == fact.edge_begin[i + 1];
      if (e.leaf && leaf) {
        out[i] = e.leaf();
        continue;
      }
      std::string s = std::string(e.name) + "(";
      bool first = true;
      for (std::size_t k = fact.edge_begin[i]; k < fact.edge_begin[i + 1]; ++k) {
        s += (first ? "" : ", ") + out[fact.edges[k]];
        first = false;
      }
      if (e.attrs) {
        const std::string a = e.attrs();
        if (!a.empty())
          s += (first ? "" : ", ") + a;
      }
      out[i] = s + ")";
    }
    return out;
  }
  template <std::size_t... I>
  static consteval std::array<std::string_view, size> kind_names(std::index_sequence<I...>) {
    return {kind_name(node<I>::op::kind)...};
  }
  static constexpr std::string_view kind_name(node_kind k) {
    switch (k) {
    case node_kind::leaf:
      return "leaf";
    case node_kind::elementwise:
      return "fused";
    case node_kind::reduction:
      return "reduce";
    case node_kind::matmul:
      return "matmul";
    case node_kind::layout:
      return "layout";
    case node_kind::nn:
      return "nn";
    case node_kind::group:
      return "group";
    }
    return "?";
  }
  static constexpr std::array<std::string_view, size> kinds =
      kind_names(std::make_index_sequence<size>{});
};

} // namespace typeflow::graph
