// Replication as a transformation of a plan (the replication policy's half of the device
// layer; placement.hpp is the other): a plan P run by N towers becomes
//
//   N copies of P's tower part   every node that reads no replica_mean, directly or not, each
//                                copy on its tower's device and its share of every fed batch
//   one all-reduce node per      the N towers' values of a replica_mean node in, their
//   replica_mean of P            batch-weighted mean out (its kernel is the device's
//                                collective: threads on the CPU, NCCL between GPUs; MPI adds
//                                the processes' in distributed/mpi.hpp)
//   one copy of the rest         the nodes after an all-reduce (the optimizer's update), in
//                                tower 0, whose results are the run's
//
// The copies are not new node types: a tower's copy is the plan itself instantiated for its
// device, so N towers cost N placements at compile time, not N copies of every node type. This
// header computes, from P's node facts alone, which nodes belong to which part of the
// transformed graph and which of the tower part's values the rest reads (kept alive past the
// towers); runtime/replicate.hpp executes the transformed graph.
#pragma once
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "../ops/layout.hpp"

namespace typeflow {

namespace detail {
/// The transformation's table, templated on sizes only (see compile::layout_table).
template <std::size_t N, std::size_t S>
struct replication_table {
  std::array<bool, N> all_reduce{}; ///< the node is an all-reduce (a replica_mean of P)
  std::array<bool, N> once{};  ///< runs once after the all-reduces (reads one, maybe not directly)
  std::array<bool, N> batch{}; ///< the value depends on a fed batch (a placeholder)
  std::array<bool, S> read_once{}; ///< slot read by a node that runs once: kept past the towers
  std::size_t all_reduces = 0;
};
} // namespace detail

/// Whether node type N is an all-reduce of a replicated session (a replica_mean).
template <class N>
inline constexpr bool is_all_reduce_node = op_traits<typename N::op>::all_reduce;

/// The replication transformation of plan P: `replication<P>::value` is its table.
template <class P>
struct replication {
  using table = detail::replication_table<P::size, P::slots>;
  template <std::size_t... I>
  static consteval table make(std::index_sequence<I...>) {
    table r;
    const bool is_mean[] = {is_all_reduce_node<typename P::template node<I>>..., false};
    const auto& f = P::fact;
    for (std::size_t j = 0; j < P::size; ++j) {
      r.all_reduce[j] = is_mean[j];
      r.batch[j] = f.placeholder[j];
      for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e) {
        const std::size_t k = f.edges[e];
        r.once[j] = r.once[j] || r.once[k] || is_mean[k];
        r.batch[j] = r.batch[j] || r.batch[k];
      }
      if (r.once[j])
        for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e)
          r.read_once[P::edge_slot(e)] = true;
      r.all_reduces += is_mean[j] ? 1 : 0;
    }
    return r;
  }
  static constexpr table value = make(std::make_index_sequence<P::size>{});
};

} // namespace typeflow
