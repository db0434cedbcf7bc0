// The placement pass: which device runs each node, and the transfers between devices.
//
// Every node gets the policy's device, or the device of the innermost with_device scope above
// it; an assignment runs where its variable is; an op with no kernel on its device falls back to
// cpu<0> (soft placement, listed by describe_placement()) or is an error (strict policies). Each
// edge whose ends are on different devices reads through a transfer: one per (tensor,
// destination device), as TensorFlow's Send/Recv pairs. Constants are inlined where read and
// groups only order their operands, so neither needs one.
//
// Whether a device has a kernel for an op is the backends' answer, which the compiler asks
// (compile/capabilities.hpp) and hands to this pass as a table: placement never includes a
// backend.
//
// The pass itself is plain constexpr code over node indices (compile/place.hpp fills the request
// from its node types), linear in nodes times transfers.
#pragma once
#include <array>
#include <cstddef>

#include "../graph/traverse.hpp"
#include "device.hpp"

namespace typeflow {

namespace placement {

/// The graph and what the policy asks, for N nodes (topological order) and E edges.
template <std::size_t N, std::size_t E>
struct request {
  std::size_t edge_begin[N + 1]{}; ///< edges of node j: [edge_begin[j], edge_begin[j+1])
  std::size_t edges[E + 1]{};      ///< the child each edge reads
  bool constant[N]{}, fetched[N]{}, elementwise[N]{}, group[N]{}, leaf[N]{}, state[N]{};
  device_id policy[N]{};       ///< the policy's device of each node
  bool scope[N]{};             ///< node is a with_device scope ...
  device_id scope_device[N]{}; ///< ... of this device
  bool has_gpu_kernel[N]{};
  bool soft = true; ///< soft placement (else an op without a kernel is an error)
};

/// Devices and transfers.
template <std::size_t N, std::size_t E>
struct result {
  device_id device[N]{};
  bool fell_back[N]{};
  std::size_t strict_violation = static_cast<std::size_t>(-1);
  std::size_t edge_transfer[E + 1]{};
  std::size_t transfer_source[E + 1]{};
  device_id transfer_device[E + 1]{};
  /// Transfers of source node k: by_source[source_begin[k] .. source_begin[k+1]).
  std::size_t source_begin[N + 1]{};
  std::size_t by_source[E + 1]{};
  std::size_t transfers = 0;
};

template <std::size_t N, std::size_t E>
constexpr result<N, E> place(const request<N, E>& r) {
  constexpr std::size_t no = static_cast<std::size_t>(-1);
  result<N, E> p;
  bool scoped[N]{};
  device_id sdev[N]{};
  for (std::size_t j = N; j-- > 0;) {
    if (r.scope[j]) {
      scoped[j] = true;
      sdev[j] = r.scope_device[j];
    }
    if (!scoped[j])
      continue;
    for (std::size_t e = r.edge_begin[j]; e < r.edge_begin[j + 1]; ++e) {
      const std::size_t k = r.edges[e];
      if (!r.leaf[k] && !scoped[k]) {
        scoped[k] = true;
        sdev[k] = sdev[j];
      }
    }
  }
  for (std::size_t i = 0; i < N; ++i) {
    device_id d = scoped[i] ? sdev[i] : r.policy[i];
    if (r.state[i])
      d = p.device[r.edges[r.edge_begin[i]]]; // colocated with its variable
    if (!d.is_cpu && !r.has_gpu_kernel[i] && (r.group[i] || r.constant[i])) {
      d = device_id{}; // no kernel to run: constants are inlined, groups only order
    } else if (!d.is_cpu && !r.has_gpu_kernel[i]) {
      if (r.soft) {
        d = device_id{};
        p.fell_back[i] = true;
      } else if (p.strict_violation == no || (r.leaf[p.strict_violation] && !r.leaf[i])) {
        p.strict_violation = i; // the first op, else the first leaf
      }
    }
    p.device[i] = d;
  }
  // A constant is materialized (a host buffer, see compute_layout) when it is fetched or read
  // by an op other than an elementwise one; then its readers on other devices need a
  // transfer like any tensor. Otherwise it is inlined into the fused loops that read it.
  bool materialized[N]{};
  for (std::size_t j = 0; j < N; ++j) {
    materialized[j] = materialized[j] || (r.constant[j] && r.fetched[j]);
    for (std::size_t e = r.edge_begin[j]; e < r.edge_begin[j + 1]; ++e)
      if (r.constant[r.edges[e]] && !r.elementwise[j] && !r.group[j])
        materialized[r.edges[e]] = true;
  }
  std::array<std::size_t, N + 1> count{};
  // Each source's transfers as a list (head[k], then next[t]), so that finding the transfer of
  // (k, device) reads k's few transfers, not all of them (a scan of all was O(edges x transfers)).
  std::size_t head[N]{};
  fill_all(head, no);
  std::size_t next[E + 1]{};
  for (std::size_t j = 0; j < N; ++j)
    for (std::size_t e = r.edge_begin[j]; e < r.edge_begin[j + 1]; ++e) {
      const std::size_t k = r.edges[e];
      p.edge_transfer[e] = no;
      if (r.group[j] || (r.constant[k] && !materialized[k]) || p.device[k] == p.device[j])
        continue;
      std::size_t t = head[k];
      while (t != no && !(p.transfer_device[t] == p.device[j]))
        t = next[t];
      if (t == no) {
        t = p.transfers++;
        p.transfer_source[t] = k;
        p.transfer_device[t] = p.device[j];
        next[t] = head[k];
        head[k] = t;
        ++count[k];
      }
      p.edge_transfer[e] = t;
    }
  copy_all(p.source_begin, graph::bucket_begins(count));
  std::size_t fill[N + 1]{};
  copy_all(fill, p.source_begin);
  for (std::size_t t = 0; t < p.transfers; ++t)
    p.by_source[fill[p.transfer_source[t]]++] = t;
  return p;
}

} // namespace placement
} // namespace typeflow
