// The compiler's tables (compile/): what each stage computes, as plain constexpr values over node
// positions, templated on sizes only. A type nested in a plan would be named after the whole
// graph, and clang names the LLVM type of every struct it emits by its full C++ name, printed
// without sharing (22 MB per name for the residual MLP at depth 4, and out of memory at depth 8).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "../core/shape.hpp"
#include "../device/device.hpp"
#include "../graph/flat.hpp"

namespace typeflow::compile {

/// A node's static shape as a value: rank and extents (`dyn` for a fed extent).
struct static_dims {
  std::size_t rank = 0;
  std::array<std::int64_t, max_rank> d{};
  std::string str() const { return dims_string(d.begin(), d.begin() + rank); }
};

/// How a node prints: its op's name and attributes, or a leaf's own text.
struct print_entry {
  std::string_view name;
  std::string (*leaf)();
  std::string (*attrs)();
  /// A leaf whose text is its name (a placeholder or a variable: no function per leaf).
  bool named_leaf = false;
};

/// facts: what the ops of the nodes say (compile/facts.hpp), and the edges.
template <std::size_t size, std::size_t n_edges>
struct node_facts_t {
  std::size_t edge_begin[size + 1]{};
  std::size_t edges[n_edges + 1]{};
  node_kind kind[size]{};
  bool elementwise[size]{}, constant[size]{}, fetched[size]{}, force_root[size]{},
      no_buffer[size]{}, placeholder[size]{}, variable[size]{}, group[size]{}, leaf[size]{};
  epilogue_role epilogue[size]{};
  bool fused_input[size]{}, pieces[size]{}, products[size]{}, stored[size]{}, reduction[size]{};
  /// shape_only[e]: edge e's reader reads only its operand's shape.
  bool shape_only[n_edges + 1]{};
  /// after_reduce[i]: node i reads an all-reduce point (replica_mean), maybe not directly: in a
  /// replicated session it runs once, after the towers (device/replication.hpp's `once`).
  bool after_reduce[size]{};
  /// Each node's op name ("conv2d"; a leaf's is its kind: "variable", "placeholder", ...), dtype
  /// ("float32"; empty for a group) and static shape (`dyn` for a fed extent).
  std::string_view op[size]{}, dtype[size]{};
  static_dims shape[size]{};
};

/// fuse and schedule: regions, steps, the execution order and the memory plan.
template <std::size_t size, std::size_t slots, std::size_t n_edges>
struct layout_table {
  /// root[i] == i: node i is materialized (a step); root[i] == r: node i is computed inside
  /// the fused loop of region r; root[i] == none: an inlined constant.
  std::size_t root[size]{};
  /// Last step that reads slot i's buffer (none for never, or for fetched nodes).
  std::size_t last_use[slots]{};
  /// Region r's members are region_members[member_begin[r] .. member_begin[r+1]) (topological).
  std::size_t member_begin[size + 1]{};
  std::size_t members[size + 1]{};
  /// Position of node i within its region's members.
  std::size_t local_pos[size]{};
  /// Region r's inputs (value slots of materialized nodes or transfers), deduplicated, and
  /// the node each one holds.
  std::size_t input_begin[size + 1]{};
  std::size_t inputs[n_edges + 1]{};
  std::size_t input_nodes[n_edges + 1]{};
  /// What the executor does with node i.
  graph::step_kind step[size]{};
  /// For an edge e inside a fused region: its operand kind (0 inlined constant, 1 member,
  /// 2 input) and position.
  int edge_kind[n_edges + 1]{};
  std::size_t edge_pos[n_edges + 1]{};
  /// The order the executor runs the nodes in: node order, except that a stored 16-bit copy
  /// (ops::save) runs right after what it copies, a region that only widens such copies right
  /// before its first reader, and a shrinking kernel (a weight or bias gradient) right after
  /// its operands (see compile/schedule.hpp). position[i]: node i's place in it.
  std::size_t order[size]{}, position[size]{};
  /// dying[r], for a fused elementwise step r (plain or chained): bit k when its k-th region
  /// input's buffer is last read by r, and for a chained step bit (inputs + q) when its
  /// producer's q-th operand's is (its output may be written over it: the CPU backend's
  /// context::allocate_in_place). 0 elsewhere.
  std::uint64_t dying[size]{};
  /// Buffers dropped after step s: releases[release_begin[s] .. release_begin[s+1]).
  std::size_t release_begin[size + 1]{};
  std::size_t releases[slots + 1]{};
  /// For an `epilogue` step r: its producer (a `deferred` step), the edge of its bias operand
  /// and whether relu follows; for a `chained` step r: its producer; none elsewhere.
  std::size_t producer[size]{}, bias_edge[size]{};
  bool relu[size]{};
  /// For a `prologue` step: the region root it evaluates (a `deferred` step); none elsewhere.
  std::size_t source[size]{};
  /// For a `chained` step r: which of its region's inputs its producer is; none elsewhere.
  std::size_t chain_input[size]{};
  std::size_t steps = 0, fused = 0, epilogues = 0, prologues = 0, chains = 0;
  /// Assignments computed and stored by another assignment's loop (`fused_output` steps).
  std::size_t merged_outputs = 0;
};

/// frames: the value slots each step reads, in its local numbering (compile/frames.hpp).
template <std::size_t size, std::size_t n_slots>
struct frame_table {
  std::size_t begin[size + 1]{};
  std::size_t slot[n_slots]{};
};

/// A plan's tables as plain pointers and counts: what tools that read a whole plan (describe,
/// pictures, traces, logs) take, so that their code is compiled once, not once per plan type.
struct plan_view {
  std::size_t size = 0, transfers = 0, steps = 0;
  const std::string& (*label)(std::size_t) = nullptr;  ///< node_label
  const std::string& (*string)(std::size_t) = nullptr; ///< node_string
  const std::string_view* op = nullptr;                ///< op_names
  const std::string_view* dtype = nullptr;             ///< dtype_names
  const static_dims* shape = nullptr;                  ///< static_shapes
  // fact
  const std::size_t *edge_begin = nullptr, *edges = nullptr;
  const node_kind* kind = nullptr;
  const bool *elementwise = nullptr, *constant = nullptr, *fetched = nullptr, *state = nullptr,
             *placeholder = nullptr, *variable = nullptr, *group = nullptr, *no_buffer = nullptr,
             *products = nullptr;
  // layout
  const std::size_t *root = nullptr, *member_begin = nullptr, *members = nullptr,
                    *producer = nullptr, *source = nullptr;
  const graph::step_kind* step = nullptr;
  const bool* relu = nullptr;
  // placement
  const device_id* device = nullptr;
  const bool* fell_back = nullptr;
  const std::size_t *edge_transfer = nullptr, *source_begin = nullptr, *by_source = nullptr;
  const device_id* transfer_device = nullptr;
};

} // namespace typeflow::compile
