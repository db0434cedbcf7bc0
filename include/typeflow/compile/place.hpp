// place, the compiler's second stage: the placement policy's device of every node, its
// with_device scopes and the backends' kernels, handed to the placement pass
// (device/placement.hpp), which decides devices and transfers.
#pragma once
#include <cstddef>
#include <utility>

#include "../device/placement.hpp"
#include "capabilities.hpp"
#include "tables.hpp"

namespace typeflow::compile {

namespace detail {
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
} // namespace detail

namespace detail {
/// What placement reads of node I of table T under Placement (indexed_table's generator).
struct node_request {
  device_id policy{}, scope_device{};
  bool scope = false, has_gpu_kernel = false;
};
template <class T, class Placement>
struct node_request_at {
  template <std::size_t I>
  struct at {
    using N = typename T::template node<I>;
    static constexpr node_request value{
        id_of<typename Placement::template device<N>>, scope_of<typename N::op>::id,
        scope_of<typename N::op>::value, has_gpu_kernel<typename N::op>};
  };
};
} // namespace detail

/// The devices and transfers of node table T's nodes (facts f) under Placement.
template <class T, class Placement>
consteval placement::result<T::size, T::n_edges> place(const node_facts_t<T::size, T::n_edges>& f) {
  placement::request<T::size, T::n_edges> r;
  copy_all(r.edge_begin, f.edge_begin);
  copy_all(r.edges, f.edges);
  copy_all(r.constant, f.constant);
  copy_all(r.fetched, f.fetched);
  copy_all(r.elementwise, f.elementwise);
  copy_all(r.group, f.group);
  copy_all(r.state, f.force_root);
  copy_all(r.leaf, f.leaf);
  // One table, built in chunks (core/pack.hpp's indexed_table), not a pack expansion per field.
  const auto nodes = indexed_table<detail::node_request, T::size,
                                   detail::node_request_at<T, Placement>::template at>();
  for (std::size_t i = 0; i < T::size; ++i) {
    r.policy[i] = nodes[i].policy;
    r.scope[i] = nodes[i].scope;
    r.scope_device[i] = nodes[i].scope_device;
    r.has_gpu_kernel[i] = nodes[i].has_gpu_kernel;
  }
  r.soft = soft_placement<Placement>();
  return placement::place(r);
}

} // namespace typeflow::compile
