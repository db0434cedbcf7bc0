// The flat form of a plan, which the executor and the kernels are instantiated from. A node type
// nests its whole subgraph, so code templated on node types grows with the depth of the graph
// (and so do symbol names: quadratic in all). Flat types name an op, dtypes, ranks and node
// positions only, so each step's code has a size independent of the graph around it.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "node.hpp"

namespace typeflow::graph {

/// What the executor does with a node.
enum class step_kind {
  placeholder,     // bound to its feed
  variable,        // bound to the session's storage
  inline_constant, // folded into the fused loops that read it
  constant,        // materialized constant (fetched, or read by a non-elementwise op)
  group,           // no value
  fused_member,    // computed inside its region's loop; only its run-time shape is checked
  fused_output,    // an assignment computed and stored by another's loop (shape checked here)
  kernel,          // a materialized node: one kernel
  deferred,        // a producer whose kernel runs in its consumer's epilogue step: shape only
  epilogue,        // the root of a bias(+relu) region: runs its producer's kernel with it
  prologue,        // a reduction that evaluates its input region (a deferred step) as it reads it
  chained,         // the root of a region that runs its input's kernel (a deferred step) in pieces
};

/// An operand of a step: node position, dtype, rank.
template <std::size_t Index, class T, std::size_t Rank>
struct ref {
  static constexpr std::size_t index = Index;
  static constexpr std::size_t rank = Rank;
  using value_type = T;
};

/// One step of the plan: what to do, the op, its dtype and rank, its operands.
template <step_kind Kind, class Op, class T, std::size_t Rank, class... Refs>
struct flat_node {
  static constexpr step_kind kind = Kind;
  using op = Op;
  using value_type = T;
  static constexpr std::size_t rank = Rank;
};

/// Operands inside a fused region: another member (by position), an input (by position), or an
/// inlined constant.
template <std::size_t J>
struct ref_local {};
template <std::size_t K>
struct ref_input {};
template <std::uint64_t Bits, class T>
struct ref_const {};

/// One member of a fused region: op, compute dtype, value dtype, operands.
template <class Op, class C, class T, class... Refs>
struct member {
  using value_type = T;
  using compute = C;
};

/// A fused region: output dtype, input dtypes, members (topological, the root last), the plan
/// positions of its inputs, and what it stores besides its root (assignments merged into one
/// loop: compile::plan's merged outputs), as pairs (member position, plan position).
template <class Seq>
struct index_array;
template <std::size_t... K>
struct index_array<std::index_sequence<K...>> {
  static constexpr std::array<std::size_t, sizeof...(K)> value{K...};
};

/// (The input positions are a type, not a std::array template argument: nvcc's host code
/// generation cannot spell class-type template arguments of that kind.)
template <class Out, class Ins, class Members, class InputIndices,
          class Stores = std::index_sequence<>>
struct flat_region {
  using out_type = Out;
  using inputs = Ins;
  using members = Members;
  static constexpr auto input_indices = index_array<InputIndices>::value;
  static constexpr auto stores = index_array<Stores>::value;
};

/// What an `epilogue` step runs: its producer (a flat_node), the bias operand and whether relu
/// follows. Backends take it by reference (never as the `void*` region of other kernels).
template <class Producer, class BiasRef, bool Relu>
struct epilogue {
  using producer = Producer;
  using bias = BiasRef;
  static constexpr bool relu = Relu;
};

/// What a `prologue` step reads: the fused region (flat_region) of its input, evaluated in
/// pieces as the reduction reads them instead of into a buffer of its own.
template <class Region>
struct prologue {
  using region = Region;
};

/// What a `chained` step runs: the kernel of its producer (a flat_node, an op that
/// `writes_in_pieces`), which hands each piece of its output to the step's fused region
/// (a flat_region whose input number Input is the producer) as it finishes it: the region is
/// evaluated on that piece while it is in cache, and the producer's output is never stored.
template <class Producer, class Region, std::size_t Input>
struct chained {
  using producer = Producer;
  using region = Region;
  static constexpr std::size_t input = Input;
};

} // namespace typeflow::graph
