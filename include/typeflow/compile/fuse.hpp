// fuse, the compiler's third stage: which nodes are computed inside which fused loop (regions
// rooted at a materialized node), each region's inputs, what the executor does with each node
// (graph::step_kind), and the folds that the backend of each node's device implements
// (compile/capabilities.hpp): epilogues, prologues, chains and merged assignments. Plain constexpr
// code over node positions, templated on sizes only, linear in nodes plus edges.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "../device/placement.hpp"
#include "../graph/traverse.hpp"
#include "capabilities.hpp"
#include "tables.hpp"

namespace typeflow::compile {

/// "No node": an inlined constant's root, a step without a producer, a buffer never released.
inline constexpr std::size_t none = static_cast<std::size_t>(-1);

/// The most members of one fused region: a longer elementwise chain (a sum of 300 squares)
/// becomes several regions, each stored. A region's kernel is a class template over its members
/// and inputs, and each of its per-member functions is named after all of them: unbounded, a
/// region of n members cost the compiler O(n^2) (a 300-term sum took g++ 13 minutes); bounded,
/// a plan costs O(nodes). One more stored intermediate per 64 members costs little at run time.
inline constexpr std::size_t max_region_members = 64;

/// What the stages after placement read: the facts and the placement of a plan's nodes.
template <std::size_t size, std::size_t n_edges>
struct placed {
  const node_facts_t<size, n_edges>& fact;
  const placement::result<size, n_edges>& placement;
  /// The value slot edge e reads: its child, or the transfer that brings the child over
  /// (slots: the nodes first, then one per transfer).
  constexpr std::size_t edge_slot(std::size_t e) const {
    return placement.edge_transfer[e] == none ? fact.edges[e] : size + placement.edge_transfer[e];
  }
};

namespace detail {
/// Whether each node is read by group nodes only (or by nothing).
template <std::size_t size, std::size_t n_edges>
consteval std::array<bool, size> read_by_groups_only(const placed<size, n_edges>& g) {
  const auto& f = g.fact;
  std::array<bool, size> only{};
  only.fill(true);
  for (std::size_t j = 0; j < size; ++j)
    for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e)
      only[f.edges[e]] = only[f.edges[e]] && f.group[j];
  return only;
}

/// Whether two nodes have the same fully static shape.
template <class Shape>
consteval bool same_static_shape(const Shape& a, const Shape& b) {
  if (a.rank != b.rank)
    return false;
  for (std::size_t d = 0; d < a.rank; ++d)
    if (a.d[d] < 0 || a.d[d] != b.d[d])
      return false;
  return true;
}

/// Merged assignments (a multi-output loop): two regions rooted at elementwise assignments
/// (`assign`, `assign_add`, `assign_sub`, the optimizers' update ops) that would share a member
/// or read one array whole, on one CPU device, of one dtype and one fully static shape, each
/// read by group nodes only (the optimizer's training op), in the same phase of a replicated run
/// (both after the all-reduce, or neither), become one loop that stores both values: the
/// Momentum update of a variable and of its slot read the gradient and the slot once instead of
/// twice. The loop runs where the later assignment stands; the earlier assignment is
/// a `fused_output` step (its shape is checked where it stands) that nothing reads before the
/// end of the run, when assignments are committed.
template <std::size_t size, std::size_t n_edges>
consteval bool mergeable(const placed<size, n_edges>& g, std::size_t a, std::size_t b,
                         const std::array<bool, size>& groups_only) {
  const auto& f = g.fact;
  const auto& p = g.placement;
  const auto& dtypes = f.dtype;
  const auto& shapes = f.shape;
  if (a == b || !f.force_root[a] || !f.force_root[b] || !f.elementwise[a] || !f.elementwise[b] ||
      !groups_only[a] || !groups_only[b] || !folds_on(p.device[a]).merged_outputs ||
      !(p.device[a] == p.device[b]) || dtypes[a] != dtypes[b] ||
      f.after_reduce[a] != f.after_reduce[b])
    return false;
  return same_static_shape(shapes[a], shapes[b]);
}

/// How many edges read each node.
template <std::size_t size, std::size_t n_edges>
consteval std::array<std::size_t, size> reader_counts(const placed<size, n_edges>& g) {
  const auto& f = g.fact;
  std::array<std::size_t, size> readers{};
  for (std::size_t e = 0; e < f.edge_begin[size]; ++e)
    ++readers[f.edges[e]];
  return readers;
}

/// Epilogues (graph::epilogue_role): a region `bias_add(k, b)` or `relu(bias_add(k, b))` on
/// the CPU whose producer k (conv2d, matmul) is a kernel that nothing else reads, on the same
/// device, with a variable or placeholder for the bias, becomes one step: k is `deferred` (its
/// shape is checked where it stands) and the region's root an `epilogue` step that runs k's
/// kernel with the bias and relu (oneDNN post-ops), writing the region's output. k's operands
/// live until then (between k and the root stand only the bias and bias_add). CPU only for
/// now: the CUDA backend would need cuBLASLt's or cuDNN's epilogues.
template <std::size_t size, std::size_t slots, std::size_t n_edges>
consteval void fold_epilogues(const placed<size, n_edges>& g,
                              layout_table<size, slots, n_edges>& L) {
  const auto& f = g.fact;
  const auto& p = g.placement;
  const auto readers = reader_counts(g);
  fill_all(L.producer, none);
  fill_all(L.bias_edge, none);
  for (std::size_t r = 0; r < size; ++r) {
    if (L.root[r] != r || L.step[r] != graph::step_kind::kernel || !f.elementwise[r] ||
        !folds_on(p.device[r]).epilogue)
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
    if (f.epilogue[k] != epilogue_role::producer || L.step[k] != graph::step_kind::kernel ||
        f.fetched[k] || readers[k] != 1 || p.edge_transfer[e] != none || L.edge_kind[e] != 2 ||
        L.edge_kind[e + 1] != 2)
      continue;
    L.producer[r] = k;
    L.bias_edge[r] = e + 1;
    L.relu[r] = relu;
    L.step[k] = graph::step_kind::deferred;
    L.step[r] = graph::step_kind::epilogue;
    --L.steps;
    ++L.epilogues;
    for (std::size_t q = f.edge_begin[k]; q < f.edge_begin[k + 1]; ++q) {
      const std::size_t slot = g.edge_slot(q);
      if (L.last_use[slot] != none && L.last_use[slot] < r)
        L.last_use[slot] = r;
    }
  }
}

/// Prologues: a reduction (an op that `reads_fused_input`) on the CPU whose one operand is a
/// fused elementwise region that nothing else reads, on its device, evaluates that region in
/// pieces as it reduces them: the region's root becomes `deferred` (its shape is checked where
/// it stands) and the reduction a `prologue` step; the region's inputs live until then.
template <std::size_t size, std::size_t slots, std::size_t n_edges>
consteval void fold_prologues(const placed<size, n_edges>& g,
                              layout_table<size, slots, n_edges>& L) {
  const auto& f = g.fact;
  const auto& p = g.placement;
  const auto readers = reader_counts(g);
  fill_all(L.source, none);
  for (std::size_t q = 0; q < size; ++q) {
    if (!f.fused_input[q] || L.step[q] != graph::step_kind::kernel ||
        !folds_on(p.device[q]).prologue || f.edge_begin[q + 1] - f.edge_begin[q] != 1)
      continue;
    const std::size_t e = f.edge_begin[q], c = f.edges[e];
    if (!f.elementwise[c] || L.step[c] != graph::step_kind::kernel || L.root[c] != c ||
        f.fetched[c] || f.force_root[c] || readers[c] != 1 || p.edge_transfer[e] != none)
      continue;
    L.source[q] = c;
    L.step[c] = graph::step_kind::deferred;
    L.step[q] = graph::step_kind::prologue;
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
template <std::size_t size, std::size_t slots, std::size_t n_edges>
consteval void fold_chains(const placed<size, n_edges>& g, layout_table<size, slots, n_edges>& L) {
  const auto& f = g.fact;
  const auto& p = g.placement;
  fill_all(L.chain_input, none);
  for (std::size_t r = 0; r < size; ++r) {
    if (L.root[r] != r || L.step[r] != graph::step_kind::kernel || !f.elementwise[r] ||
        f.force_root[r] || !folds_on(p.device[r]).chain)
      continue;
    std::size_t k = none, pos = none;
    for (std::size_t i = L.input_begin[r]; i < L.input_begin[r + 1] && k == none; ++i) {
      const std::size_t n = L.input_nodes[i];
      if (f.pieces[n] && L.inputs[i] == n && L.step[n] == graph::step_kind::kernel &&
          !f.fetched[n] && p.device[n] == p.device[r])
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
      ok = p.edge_transfer[e] == none;
    for (std::size_t i = L.input_begin[r]; i < L.input_begin[r + 1] && ok; ++i) {
      const std::size_t n = L.input_nodes[i];
      // (or a 16-bit saved copy, which is computed in the same replicated phase as what it
      // copies: the op's operand, widened, is such a copy's in autodiff's saved_in)
      bool operand = n == k || f.variable[n] || f.placeholder[n] || f.constant[n] ||
                     (f.stored[n] && f.after_reduce[n] == f.after_reduce[k]);
      for (std::size_t e = f.edge_begin[k]; e < f.edge_begin[k + 1] && !operand; ++e)
        operand = L.inputs[i] == g.edge_slot(e);
      ok = operand;
    }
    if (!ok)
      continue;
    L.producer[r] = k;
    L.chain_input[r] = pos;
    L.step[k] = graph::step_kind::deferred;
    L.step[r] = graph::step_kind::chained;
    --L.steps;
    ++L.chains;
    for (std::size_t e = f.edge_begin[k]; e < f.edge_begin[k + 1]; ++e) {
      const std::size_t slot = g.edge_slot(e);
      if (L.last_use[slot] != none && L.last_use[slot] < r)
        L.last_use[slot] = r;
    }
  }
}

} // namespace detail

/// The regions, steps and folds of a placed graph, with `slots` value slots (nodes, then
/// transfers); the execution order and the memory plan come after (compile/schedule.hpp).
template <std::size_t slots, std::size_t size, std::size_t n_edges>
consteval layout_table<size, slots, n_edges> fuse(const placed<size, n_edges>& g) {
  const auto& f = g.fact;
  const auto& p = g.placement;
  layout_table<size, slots, n_edges> L;
  constexpr std::size_t no_consumer = none, conflict = none - 1;
  std::size_t consumer_root[size]{};
  bool boundary[size]{};
  fill_all(consumer_root, no_consumer);
  // Merged assignments: the loop of assignment r runs in that of merged[r] (see mergeable).
  std::size_t merged[size]{};
  for (std::size_t i = 0; i < size; ++i)
    merged[i] = i;
  const auto find = [&](std::size_t r) {
    while (merged[r] != r)
      r = merged[r];
    return r;
  };
  const auto groups_only = detail::read_by_groups_only(g);
  // Members of each region so far, at its root (see max_region_members).
  std::size_t members_of[size]{};
  // Reverse topological order: every consumer is decided before its children.
  for (std::size_t j = size; j-- > 0;) {
    if (f.constant[j]) {
      L.root[j] = (f.fetched[j] || boundary[j]) ? j : none;
    } else if (f.elementwise[j] && !f.fetched[j] && !f.force_root[j] && !boundary[j] &&
               !f.stored[j] && consumer_root[j] != no_consumer && consumer_root[j] != conflict &&
               members_of[find(consumer_root[j])] < max_region_members) {
      L.root[j] = find(consumer_root[j]);
    } else {
      L.root[j] = j;
    }
    if (L.root[j] != none)
      ++members_of[L.root[j]];
    for (std::size_t e = f.edge_begin[j]; e < f.edge_begin[j + 1]; ++e) {
      const std::size_t k = f.edges[e];
      const bool local = f.constant[k] || p.device[k] == p.device[j];
      if (f.elementwise[j] && L.root[j] != none && local) {
        const std::size_t mine = find(L.root[j]);
        if (consumer_root[k] == no_consumer) {
          consumer_root[k] = mine;
        } else if (consumer_root[k] != conflict && find(consumer_root[k]) != mine) {
          const std::size_t other = find(consumer_root[k]);
          // A node that can become a member of the merged loop merges two assignments, and so
          // does an array that both read whole (not a constant, nor a scalar such as a shared
          // hyper-parameter): Adam's and Momentum's update ops read the gradient and the slots.
          const bool member = f.elementwise[k] && !f.constant[k] && !f.fetched[k] &&
                              !f.force_root[k] && !boundary[k];
          const bool whole = !f.constant[k] && detail::same_static_shape(f.shape[k], f.shape[mine]);
          if ((member || whole) && members_of[other] + members_of[mine] <= max_region_members &&
              detail::mergeable(g, other, mine, groups_only)) {
            members_of[std::max(other, mine)] += members_of[std::min(other, mine)];
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
  copy_all(L.member_begin, graph::bucket_begins(count));
  std::size_t fill[size + 1]{};
  copy_all(fill, L.member_begin);
  for (std::size_t i = 0; i < size; ++i)
    if (L.root[i] != none) {
      L.local_pos[i] = fill[L.root[i]] - L.member_begin[L.root[i]];
      L.members[fill[L.root[i]]++] = i;
    }
  // Region inputs and last uses.
  std::size_t mark[slots]{}, mark_pos[slots]{}, shape_last[slots]{};
  fill_all(mark, none);
  fill_all(shape_last, none);
  fill_all(L.last_use, none);
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
        if (L.root[k] == r && p.edge_transfer[e] == none) {
          L.edge_kind[e] = 1;
          L.edge_pos[e] = L.local_pos[k];
          continue;
        }
        const std::size_t slot = g.edge_slot(e);
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
    L.step[i] = f.placeholder[i]                     ? graph::step_kind::placeholder
                : f.variable[i]                      ? graph::step_kind::variable
                : f.constant[i] && L.root[i] == none ? graph::step_kind::inline_constant
                : f.constant[i]                      ? graph::step_kind::constant
                : f.group[i]                         ? graph::step_kind::group
                : L.root[i] != i && f.force_root[i]  ? graph::step_kind::fused_output
                : L.root[i] != i                     ? graph::step_kind::fused_member
                                                     : graph::step_kind::kernel;
  for (std::size_t i = 0; i < size; ++i)
    L.merged_outputs += L.step[i] == graph::step_kind::fused_output ? 1 : 0;
  detail::fold_epilogues(g, L);
  detail::fold_prologues(g, L);
  detail::fold_chains(g, L);
  return L;
}

} // namespace typeflow::compile
