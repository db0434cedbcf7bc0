// schedule, the compiler's fourth stage: the order the executor runs the steps in, and the
// memory plan: the last reader of every buffer, the buffers dropped after each step, and which
// inputs of a fused step die there (its output may be written over them).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "fuse.hpp"

namespace typeflow::compile {

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
template <std::size_t size, std::size_t slots, std::size_t n_edges>
consteval void schedule(const placed<size, n_edges>& g, layout_table<size, slots, n_edges>& L) {
  const auto& f = g.fact;
  for (std::size_t i = 0; i < size; ++i)
    L.order[i] = L.position[i] = i;
  // runs_at[k]: the step that computes node k (its own, or the one it is deferred into).
  std::size_t runs_at[size]{};
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
    if (L.step[j] != graph::step_kind::kernel || L.root[j] != j ||
        L.member_begin[j + 1] - L.member_begin[j] != 1 || L.input_begin[j] == L.input_begin[j + 1])
      return false;
    for (std::size_t i = L.input_begin[j]; i < L.input_begin[j + 1]; ++i)
      if (L.inputs[i] >= size) // a transfer's slot
        return false;
    return true;
  };
  // after[j]: j runs right after node after[j]'s place (stored copies); early[j]: likewise,
  // after those (shrinking kernels); before[w]: w runs right before node before[w].
  std::size_t after[size]{}, early[size]{}, before[size]{};
  fill_all(after, none);
  fill_all(early, none);
  fill_all(before, none);
  // Widenings: regions of one node whose operands are all stored copies. First reader of
  // each: the earliest node that reads it (every node, a fused member or a deferred producer
  // too, infers its shape at its own place); and how many edges read it.
  bool widening[size]{};
  for (std::size_t w = 0; w < size; ++w) {
    if (f.stored[w] || !f.elementwise[w] || f.fetched[w] || f.force_root[w] || !plain_step(w))
      continue;
    bool all = true;
    for (std::size_t e = f.edge_begin[w]; e < f.edge_begin[w + 1]; ++e)
      all = all && f.stored[f.edges[e]];
    widening[w] = all;
  }
  std::size_t first[size]{}, readers[size]{};
  fill_all(first, none);
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
  const auto& shapes = f.shape;
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
  std::size_t head_after[size]{}, head_early[size]{}, head_before[size]{}, next[size]{};
  fill_all(head_after, none);
  fill_all(head_early, none);
  fill_all(head_before, none);
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
  bool affected[slots]{}, seen[slots]{};
  for (std::size_t j = 0; j < size; ++j)
    if (after[j] != none || before[j] != none || early[j] != none)
      for (std::size_t i = L.input_begin[j]; i < L.input_begin[j + 1]; ++i)
        affected[L.inputs[i]] = L.last_use[L.inputs[i]] != none;
  for (std::size_t n = 0; n < size; ++n) {
    if (L.root[n] == none)
      continue;
    const std::size_t r = runs_at[L.root[n]]; // where n's loop reads its operands' values
    for (std::size_t e = f.edge_begin[n]; e < f.edge_begin[n + 1]; ++e) {
      const std::size_t k = f.edges[e], s = g.edge_slot(e);
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

/// The memory plan after schedule(): fetched values and assignments live to the end of the run,
/// every other buffer is released after its last reader, and a fused step learns which of its
/// inputs die there.
template <std::size_t size, std::size_t slots, std::size_t n_edges>
consteval void release(const placed<size, n_edges>& g, layout_table<size, slots, n_edges>& L) {
  const auto& f = g.fact;
  // Fetched values and assignments (committed at the end) live to the end of the run.
  for (std::size_t i = 0; i < size; ++i)
    if (f.fetched[i] || f.force_root[i])
      L.last_use[i] = none;
  std::size_t per[size + 1]{};
  for (std::size_t i = 0; i < slots; ++i)
    if (L.last_use[i] != none)
      ++per[L.last_use[i]];
  std::size_t run = 0;
  for (std::size_t s = 0; s < size; ++s) {
    L.release_begin[s] = run;
    run += per[s];
  }
  L.release_begin[size] = run;
  std::size_t pos[size + 1]{};
  copy_all(pos, L.release_begin);
  for (std::size_t i = 0; i < slots; ++i)
    if (L.last_use[i] != none)
      L.releases[pos[L.last_use[i]]++] = i;
  // A slot read on both sides of an all-reduce (by nodes that do and do not read one) is
  // kept past the towers of a replicated run (replication's read_once) after its last
  // reader by node order: never written over.
  unsigned char sides[slots]{};
  for (std::size_t n = 0; n < size; ++n)
    for (std::size_t e = f.edge_begin[n]; e < f.edge_begin[n + 1]; ++e)
      sides[g.edge_slot(e)] |= f.after_reduce[n] ? 2 : 1;
  const auto dies_at = [&](std::size_t s, std::size_t r) {
    return L.last_use[s] == r && sides[s] != 3;
  };
  for (std::size_t r = 0; r < size; ++r) {
    if (!f.elementwise[r] || L.root[r] != r ||
        (L.step[r] != graph::step_kind::kernel && L.step[r] != graph::step_kind::chained))
      continue;
    const std::size_t nin = L.input_begin[r + 1] - L.input_begin[r];
    for (std::size_t k = 0; k < 64 && k < nin; ++k)
      if (dies_at(L.inputs[L.input_begin[r] + k], r))
        L.dying[r] |= std::uint64_t{1} << k;
    if (L.step[r] == graph::step_kind::chained) // then the producer's operands (its frame's order)
      for (std::size_t e = f.edge_begin[L.producer[r]], q = nin;
           e < f.edge_begin[L.producer[r] + 1] && q < 64; ++e, ++q)
        if (dies_at(g.edge_slot(e), r))
          L.dying[r] |= std::uint64_t{1} << q;
  }
}

} // namespace typeflow::compile
