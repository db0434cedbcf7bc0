// The compiled plan of a set of fetches: the compiler's stages over the fetches' node table.
//
//   graph::node_table      the nodes in topological order, their identities and edges (graph/)
//   facts                  what their ops say (compile/facts.hpp)
//   place                  devices and transfers (compile/place.hpp, device/placement.hpp)
//   fuse                   fused regions, steps and folds (compile/fuse.hpp)
//   schedule               the execution order and the memory plan (compile/schedule.hpp)
//   frames                 what each step reads, and its flat form (compile/frames.hpp)
//   describe               the plan in words (compile/describe.hpp)
//
// Every stage after the node table is plain constexpr computation over node positions, linear in
// nodes plus edges, templated on sizes only; results are turned back into types only where a
// kernel needs them (the flat forms).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../graph/table.hpp"
#include "describe.hpp"
#include "facts.hpp"
#include "frames.hpp"
#include "place.hpp"
#include "schedule.hpp"

namespace typeflow::compile {

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
  using type = plan_impl<Placement, graph::detail::opaque<std::remove_cvref_t<Fetches>>...>;
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
  /// The node table: the nodes in topological order (graph/table.hpp).
  using table = graph::node_table<Fetches...>;
  using nodes = typename table::nodes;
  static constexpr std::size_t size = table::size;
  /// Position of node N in the topological order: index_c<N>::value.
  template <class N>
  using index_c = typename table::template index_c<N>;
  /// Whether N is a node of this plan: contains_c<N>::value.
  template <class N>
  using contains_c = typename table::template contains_c<N>;
  /// The node at position I.
  template <std::size_t I>
  using node = typename table::template node<I>;
  /// The nodes as a Boost.Hana sequence of types (see graph::node_table::nodes_c).
  static constexpr auto nodes_c() { return table::nodes_c(); }

private:
  static constexpr std::size_t n_edges = table::n_edges;

public:
  static constexpr std::size_t none = compile::none;
  static constexpr std::size_t none_v = none;

  using node_facts = node_facts_t<size, n_edges>;
  /// facts: what the ops of the nodes say.
  static constexpr node_facts fact = gather_facts<table, Fetches...>();

  /// place: the device of every node, and the transfers.
  using placement_t = placement::result<size, n_edges>;
  static constexpr placement_t placement = compile::place<table, Placement>(fact);
  /// Transfers, and value slots: nodes first, then one per transfer.
  static constexpr std::size_t transfers = placement.transfers;
  static constexpr std::size_t slots = size + transfers;
  /// The value slot edge e reads: its child, or the transfer that brings the child over.
  static constexpr std::size_t edge_slot(std::size_t e) {
    return placed<size, n_edges>{fact, placement}.edge_slot(e);
  }
  /// The device tag node I runs on.
  template <std::size_t I>
  using device = typeflow::device_of<placement.device[I].is_cpu, placement.device[I].index>;
  /// The device tag transfer T brings its value to.
  template <std::size_t T>
  using transfer_device =
      typeflow::device_of<placement.transfer_device[T].is_cpu, placement.transfer_device[T].index>;

  /// fuse and schedule: regions, steps, the execution order and the memory plan, all indices
  /// into `nodes`.
  using layout_t = layout_table<size, slots, n_edges>;

private:
  static consteval layout_t compute_layout() {
    const placed<size, n_edges> g{fact, placement};
    layout_t L = fuse<slots>(g);
    schedule(g, L);
    release(g, L);
    return L;
  }

public:
  static constexpr layout_t layout = compute_layout();

  /// Number of kernels (materialized nodes other than placeholders and variables) and of nodes
  /// fused into them.
  static constexpr std::size_t steps = layout.steps;
  static constexpr std::size_t fused_nodes = layout.fused;

  /// frames: the value slots of each step (frames.slot[frames.begin[i] ..]).
  using frames_t = frame_table<size, 3 * size + 3 * n_edges + 1>;
  static constexpr frames_t frames =
      compile::frames(placed<size, n_edges>{fact, placement}, layout);

  /// The flat form of node I (see graph/flat.hpp), its operands by value slot.
  template <std::size_t I>
  using flat = typename forms::flat_of<plan_impl, I, none>::type;
  /// The epilogue of step R (layout.step[R] == step_kind::epilogue): its producer's flat form,
  /// the bias operand, whether relu follows.
  template <std::size_t R>
  using epilogue = forms::epilogue_of<plan_impl, R, none>;
  /// The chain of step R (layout.step[R] == step_kind::chained): its producer's flat form, its
  /// region, which input of the region the producer is.
  template <std::size_t R>
  using chained = forms::chained_of<plan_impl, R, none>;
  /// The fused region rooted at elementwise node R, in flat form.
  template <std::size_t R>
  using region = typename forms::region_of<plan_impl, R, none>::type;
  /// The prologue of step Q (layout.step[Q] == step_kind::prologue): its input's region.
  template <std::size_t Q>
  using prologue = graph::prologue<region<layout.source[Q]>>;

  // Local forms (compile/frames.hpp): operands numbered by their place in the step's frame.
  /// The local flat form of node I.
  template <std::size_t I>
  using local_flat = typename forms::flat_of<plan_impl, I, 1>::type;
  /// The local form of the region of kernel step R.
  template <std::size_t R>
  using local_region =
      typename forms::region_of<plan_impl, R, 1 + forms::arity_of<plan_impl>(R)>::type;
  /// The local form of the epilogue of step R.
  template <std::size_t R>
  using local_epilogue = forms::epilogue_of<plan_impl, R, 1 + forms::arity_of<plan_impl>(R)>;
  /// The local form of the prologue of step Q.
  template <std::size_t Q>
  using local_prologue =
      graph::prologue<typename forms::region_of<plan_impl, layout.source[Q],
                                                1 + forms::arity_of<plan_impl>(Q)>::type>;
  /// The local form of the chain of step R: its region's inputs, then its producer's operands.
  template <std::size_t R>
  using local_chained = forms::chained_of<plan_impl, R, 1 + forms::arity_of<plan_impl>(R)>;

  // describe

  /// Each node's op name ("conv2d"; a leaf's is its kind: "variable", "placeholder", ...).
  static constexpr const std::string_view (&op_names)[size] = fact.op;
  /// Each node's dtype ("float32"; empty for a group) and static shape (`dyn` for a fed extent).
  static constexpr const std::string_view (&dtype_names)[size] = fact.dtype;
  static constexpr const static_dims (&static_shapes)[size] = fact.shape;

  /// The readable form of node i (as to_string), built once from a table of op names and
  /// attributes: no per-node printing code is instantiated.
  static const std::string& node_string(std::size_t i) {
    static const std::vector<std::string> table =
        node_texts(entries.data(), size, fact.edge_begin, fact.edges, true);
    return table[i];
  }
  /// A short label of node i for pictures, traces and logs: `conv2d(%3, conv1/weights, ...)`,
  /// its operands by index (leaves by name), where node_string spells the whole subexpression.
  static const std::string& node_label(std::size_t i) {
    static const std::vector<std::string> table =
        node_texts(entries.data(), size, fact.edge_begin, fact.edges, false);
    return table[i];
  }

  /// A readable listing of the steps: `%index = kind text`, with the number of fused ops.
  static std::string describe() { return compile::describe(view()); }

  /// What step i computes in (see compile::compute_dtype).
  static std::string compute_dtype(std::size_t i, precision cpu, bool gpu_tf32,
                                   precision gpu = precision::float32) {
    return compile::compute_dtype(view(), i, cpu, gpu_tf32, gpu);
  }

  /// describe() with each step's device and compute dtype (see compute_dtype; a session's
  /// describe_placement passes its own precision), and every transfer after the step that
  /// produces its tensor: `%3 = matmul matmul(x, w)  @/job:localhost/.../device:CPU:1
  /// [float32]`, then `  transfer %3 -> /job:localhost/.../device:CPU:0`. Leaves have no
  /// compute dtype.
  static std::string describe_placement(precision cpu = precision::float32, bool gpu_tf32 = false,
                                        precision gpu = precision::float32) {
    return compile::describe_placement(view(), cpu, gpu_tf32, gpu);
  }

  /// The plan's tables as a plan_view.
  static plan_view view() {
    plan_view v;
    v.size = size;
    v.transfers = transfers;
    v.steps = steps;
    v.label = &node_label;
    v.string = &node_string;
    v.op = fact.op;
    v.dtype = fact.dtype;
    v.shape = fact.shape;
    v.edge_begin = fact.edge_begin;
    v.edges = fact.edges;
    v.kind = fact.kind;
    v.elementwise = fact.elementwise;
    v.constant = fact.constant;
    v.fetched = fact.fetched;
    v.state = fact.force_root;
    v.placeholder = fact.placeholder;
    v.variable = fact.variable;
    v.group = fact.group;
    v.no_buffer = fact.no_buffer;
    v.products = fact.products;
    v.root = layout.root;
    v.member_begin = layout.member_begin;
    v.members = layout.members;
    v.producer = layout.producer;
    v.source = layout.source;
    v.step = layout.step;
    v.relu = layout.relu;
    v.device = placement.device;
    v.fell_back = placement.fell_back;
    v.edge_transfer = placement.edge_transfer;
    v.source_begin = placement.source_begin;
    v.by_source = placement.by_source;
    v.transfer_device = placement.transfer_device;
    return v;
  }

private:
  template <std::size_t... I>
  static constexpr std::array<print_entry, size> make_entries(std::index_sequence<I...>) {
    return {detail::entry_for<typename node<I>::op>()...};
  }
  static constexpr std::array<print_entry, size> entries =
      make_entries(std::make_index_sequence<size>{});
};

} // namespace typeflow::compile
