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

/// The devices and transfers of node table T's nodes (facts f) under Placement.
template <class T, class Placement, std::size_t... I>
consteval placement::result<T::size, T::n_edges> place(const node_facts_t<T::size, T::n_edges>& f,
                                                       std::index_sequence<I...>) {
  placement::request<T::size, T::n_edges> r;
  r.edge_begin = f.edge_begin;
  r.edges = f.edges;
  r.constant = f.constant;
  r.fetched = f.fetched;
  r.elementwise = f.elementwise;
  r.group = f.group;
  r.state = f.force_root;
  r.leaf = f.leaf;
  r.policy = {id_of<typename Placement::template device<typename T::template node<I>>>...};
  r.scope = {detail::scope_of<typename T::template node<I>::op>::value...};
  r.scope_device = {detail::scope_of<typename T::template node<I>::op>::id...};
  r.has_gpu_kernel = {has_gpu_kernel<typename T::template node<I>::op>...};
  r.soft = soft_placement<Placement>();
  return placement::place(r);
}

} // namespace typeflow::compile
