// The fused element evaluator, shared by the CPU loop (its scalar path) and the CUDA kernel:
// a region's members in topological order (the root last), each computed once per element into
// a local from the inputs' values there, locals and constants (per-element common
// subexpressions). Its template arguments hold only op types and positions, never node types.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "../../core/dtype.hpp"
#include "../../core/pack.hpp"
#include "../../graph/flat.hpp"

namespace typeflow::backend {

template <class Out, class Ins, class Members>
struct element_eval;

template <class Out, class... Ins, class... Ms>
struct element_eval<Out, type_list<Ins...>, type_list<Ms...>> {
  using in_tuple = pack<Ins...>;
  using val_tuple = pack<typename Ms::value_type...>;

  template <std::size_t J>
  TYPEFLOW_HD static auto value_of(graph::ref_local<J>*, const val_tuple& v, const in_tuple&) {
    return pack_get<J>(v);
  }
  template <std::size_t K>
  TYPEFLOW_HD static auto value_of(graph::ref_input<K>*, const val_tuple&, const in_tuple& in) {
    return pack_get<K>(in);
  }
  template <std::uint64_t Bits, class T>
  TYPEFLOW_HD static T value_of(graph::ref_const<Bits, T>*, const val_tuple&, const in_tuple&) {
    return static_cast<T>(std::bit_cast<double>(Bits));
  }
  template <class Op, class C, class T, class... Refs>
  TYPEFLOW_HD static T compute(graph::member<Op, C, T, Refs...>*, const val_tuple& v,
                               const in_tuple& in) {
    return static_cast<T>(Op::template eval<C>(value_of(static_cast<Refs*>(nullptr), v, in)...));
  }
  template <std::size_t... M>
  TYPEFLOW_HD static Out eval_members(const in_tuple& in, std::index_sequence<M...>) {
    val_tuple v{};
    [[maybe_unused]] const int seq[] = {
        ((pack_get<M>(v) = compute(static_cast<Ms*>(nullptr), v, in)), 0)..., 0};
    return pack_get<sizeof...(Ms) - 1>(v);
  }
  /// The root's value at one element, given the inputs' values there.
  TYPEFLOW_HD static Out eval(Ins... x) {
    return eval_members(in_tuple{{x}...}, std::index_sequence_for<Ms...>{});
  }
  /// Every member's value at one element (a region that stores members besides its root).
  template <std::size_t... M>
  TYPEFLOW_HD static val_tuple eval_all_members(const in_tuple& in, std::index_sequence<M...>) {
    val_tuple v{};
    [[maybe_unused]] const int seq[] = {
        ((pack_get<M>(v) = compute(static_cast<Ms*>(nullptr), v, in)), 0)..., 0};
    return v;
  }
  TYPEFLOW_HD static val_tuple eval_all(Ins... x) {
    return eval_all_members(in_tuple{{x}...}, std::index_sequence_for<Ms...>{});
  }
};

} // namespace typeflow::backend
