// Node types: an expression is an empty literal type `expr<Op, Children...>`; its op, attributes,
// children, dtype and static shape are all template parameters (docs/node-identities.md).
#pragma once
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/fixed_string.hpp"
#include "../core/pack.hpp"
#include "../core/shape.hpp"
#include "op_traits.hpp"

namespace typeflow {

/// A list of types. Its size is an enumerator, not a static data member: g++ names every
/// instantiated static member after its class, and a list of a model's variables or nodes is a
/// long name (bench/README.md, *Where g++'s time per block grows*).
template <class... T>
struct type_list {
  enum : std::size_t { size = sizeof...(T) };
};

/// Result of an op's shape rule; the same constexpr rule runs at compile time (with `dyn`)
/// and at run time (with the fed extents).
template <std::size_t R>
struct rule_result {
  std::string_view error{};
  dims_t<R> dims{};
  constexpr bool ok() const { return error.empty(); }
};

struct expr_tag {};

/// A node's definition: its op and its operands. Empty, literal, and fully described by its
/// type. A leaf (a placeholder, a variable, a constant) is its own node type; any other node is a
/// node_ref (below) whose definition this is, so that an operand is named by a number and no
/// node type spells its subgraph.
template <class Op, class... Cs>
struct expr : expr_tag {
  using op = Op;
  using children = type_list<Cs...>;
  using definition = expr;
  using value_type = typename Op::template value_type<Cs...>;
  using shape_type = shape_from<Op::rule(Cs::shape_type::dims...).dims>;
  // No static data members here: each would be a variable whose mangled name spells out the
  // whole subgraph (g++ mangles them all, cubic in the graph). Dims, rank and kind are
  // shape_type::dims, shape_type::rank and op::kind.
};

/// The definition (expr<Op, Operands...>) of node N: N itself for a leaf, what a node_ref
/// names otherwise. Specializations that look inside a node match def_t<N>, never N.
template <class N>
using def_t = typename N::definition;

// ---------------------------------------------------------------------------------------------
// Node identities (docs/node-identities.md). A node that has operands is `node_ref<H>`, where H
// is a 64-bit hash of its op's type and its operands' identities (hash-consing: the same op on
// the same operands is the same type, so common subexpressions are one node). The definition
// is found again from H through a function that make_node defines as it first makes the node
// (a friend of a class template that it instantiates: the registry is the set of those
// friends). A node type is so a number whatever the graph below it, and types, symbols, debug
// information and diagnostics grow with the number of distinct nodes, not with the size of
// the unshared tree. Two different definitions with one hash would be a redefinition error,
// never a silent mix-up.
//
// nvcc keeps the nested form (make_node returns the expr itself): its host pass is g++ compiling
// cudafe++'s output while its device pass is EDG, and the two would hash the op's name
// differently. Its device pass names nodes through graph/traverse.hpp's opaque keys instead.
#if defined(__CUDACC__)
#define TYPEFLOW_NODE_REFS 0
#else
#define TYPEFLOW_NODE_REFS 1
#endif

namespace detail {
/// A 64-bit hash of the compiler's spelling of T (the op's type: its name and attributes), eight
/// characters a step. Constant evaluation pays per step and per value (g++ allocates a tree for
/// each intermediate and each pointer step, and keeps them until its next collection): FNV-1a a
/// character a step through a string_view cost g++ five times the memory of eight a step on the
/// array itself (bench/README.md, *Plain arrays in the compiler's tables*).
template <class T>
consteval std::uint64_t type_hash() {
  constexpr std::size_t n = sizeof(__PRETTY_FUNCTION__) - 1;
  std::uint64_t h = 0xcbf29ce484222325ull ^ n;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w = 0;
    for (std::size_t k = 0; k < 8; ++k)
      w |= std::uint64_t{static_cast<unsigned char>(__PRETTY_FUNCTION__[i + k])} << (8 * k);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 32;
  }
  for (; i < n; ++i) {
    h = (h ^ static_cast<unsigned char>(__PRETTY_FUNCTION__[i])) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}
} // namespace detail

#if TYPEFLOW_NODE_REFS
namespace detail {
// The registry is split into 256 namespaces by the identity's low byte. A call node_def(key)
// is found by argument-dependent lookup, which both compilers answer by scanning every function
// of that name declared in the key's namespace (clang's ArgumentDependentLookup, g++'s
// ovl_skip_hidden and pushdecl): with one namespace that scan was the whole registry, O(n) per
// look-up and quadratic in all (a fifth of clang's time for a 4-block transformer). A shard holds
// n / 256 of them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-template-friend"
#endif
template <unsigned Shard>
struct registry_shard;
/// One registry in a shard: Key<H> declares Def(Key<H>), which Entry<H, D> defines as returning
/// D{} when it is instantiated. Nodes and the walk's structures (graph/traverse.hpp) have one
/// each, under names of their own, so that neither look-up scans the other's functions.
#define TYPEFLOW_REGISTRY(Key, Entry, Def)                                                         \
  template <std::uint64_t H>                                                                       \
  struct Key {                                                                                     \
    friend constexpr auto Def(Key);                                                                \
  };                                                                                               \
  template <std::uint64_t H, class D>                                                              \
  struct Entry {                                                                                   \
    friend constexpr auto Def(Key<H>) { return D{}; }                                              \
  };
#define TYPEFLOW_REGISTRY_SHARD(T, K)                                                              \
  namespace registry_##T##_##K {                                                                   \
    TYPEFLOW_REGISTRY(node_key, node_entry, node_def)                                              \
    TYPEFLOW_REGISTRY(walk_key, walk_entry, walk_def)                                              \
  }                                                                                                \
  template <>                                                                                      \
  struct registry_shard<T * 16 + K> {                                                              \
    template <std::uint64_t H>                                                                     \
    using key = registry_##T##_##K::node_key<H>;                                                   \
    template <std::uint64_t H, class Def>                                                          \
    using entry = registry_##T##_##K::node_entry<H, Def>;                                          \
    template <std::uint64_t H>                                                                     \
    using walk_key = registry_##T##_##K::walk_key<H>;                                              \
    template <std::uint64_t H, class Def>                                                          \
    using walk_entry = registry_##T##_##K::walk_entry<H, Def>;                                     \
  };
#define TYPEFLOW_REGISTRY_SHARDS16(T)                                                              \
  TYPEFLOW_REGISTRY_SHARD(T, 0)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 1)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 2)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 3)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 4)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 5)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 6)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 7)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 8)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 9)                                                                    \
  TYPEFLOW_REGISTRY_SHARD(T, 10)                                                                   \
  TYPEFLOW_REGISTRY_SHARD(T, 11)                                                                   \
  TYPEFLOW_REGISTRY_SHARD(T, 12)                                                                   \
  TYPEFLOW_REGISTRY_SHARD(T, 13)                                                                   \
  TYPEFLOW_REGISTRY_SHARD(T, 14)                                                                   \
  TYPEFLOW_REGISTRY_SHARD(T, 15)
TYPEFLOW_REGISTRY_SHARDS16(0)
TYPEFLOW_REGISTRY_SHARDS16(1)
TYPEFLOW_REGISTRY_SHARDS16(2)
TYPEFLOW_REGISTRY_SHARDS16(3)
TYPEFLOW_REGISTRY_SHARDS16(4)
TYPEFLOW_REGISTRY_SHARDS16(5)
TYPEFLOW_REGISTRY_SHARDS16(6)
TYPEFLOW_REGISTRY_SHARDS16(7)
TYPEFLOW_REGISTRY_SHARDS16(8)
TYPEFLOW_REGISTRY_SHARDS16(9)
TYPEFLOW_REGISTRY_SHARDS16(10)
TYPEFLOW_REGISTRY_SHARDS16(11)
TYPEFLOW_REGISTRY_SHARDS16(12)
TYPEFLOW_REGISTRY_SHARDS16(13)
TYPEFLOW_REGISTRY_SHARDS16(14)
TYPEFLOW_REGISTRY_SHARDS16(15)
#undef TYPEFLOW_REGISTRY_SHARDS16
#undef TYPEFLOW_REGISTRY_SHARD
#undef TYPEFLOW_REGISTRY
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
/// The registry's key of identity H: node_def(node_key<H>{}) returns node H's definition once
/// make_node has made the node.
template <std::uint64_t H>
using node_key = typename registry_shard<H & 255u>::template key<H>;
/// Defines node_def(node_key<H>) as returning Def (instantiated by make_node).
template <std::uint64_t H, class Def>
using node_entry = typename registry_shard<H & 255u>::template entry<H, Def>;
/// The same for the structures of graph/traverse.hpp's walk (its visited set's rows and its
/// stack's frames), under a name of their own: walk_def(walk_key<H>{}) returns the structure
/// registered as H by instantiating walk_entry<H, Def>.
template <std::uint64_t H>
using walk_key = typename registry_shard<H & 255u>::template walk_key<H>;
template <std::uint64_t H, class Def>
using walk_entry = typename registry_shard<H & 255u>::template walk_entry<H, Def>;
} // namespace detail

/// A node with operands, named by its identity H. It is its definition (it derives from
/// expr<Op, Operands...>), so `N::op`, `N::children`, `N::value_type` and `N::shape_type` read
/// the same on every node type.
template <std::uint64_t H>
struct node_ref : decltype(node_def(detail::node_key<H>{})) {};
#endif

namespace detail {
/// A node's identity: H for node_ref<H>, its type's hash for a leaf.
template <class N>
struct node_hash : std::integral_constant<std::uint64_t, type_hash<N>()> {};
#if TYPEFLOW_NODE_REFS
template <std::uint64_t H>
struct node_hash<node_ref<H>> : std::integral_constant<std::uint64_t, H> {};
#endif
/// The identity of a node of op identity `op` on operands of identities `operands`. Not a
/// template: a function template instantiated per node cost g++ a copy of its body each time.
consteval std::uint64_t combined_hash(std::uint64_t op,
                                      std::initializer_list<std::uint64_t> operands) {
  std::uint64_t h = op ^ (operands.size() * 0x9e3779b97f4a7c15ull);
  // A loop, not a fold: a group can have thousands of operands (see core/pack.hpp's all_of).
  for (const std::uint64_t o : operands) {
    h = (h ^ o) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return h;
}
} // namespace detail

namespace detail {
/// Whether a node's value can differ between the towers of a replicated run: it reads a
/// placeholder (each tower is fed its share of a batch) or draws per run (a dropout mask),
/// directly or not. Variables (read as they were at the start of the run), constants and what is
/// computed from them alone (a weight-decay term) are the same in every tower. intern_node
/// instantiates it as each node is made, its operands' made before, so no look-up recurses
/// through the graph (a recursive flag nested one instantiation per graph level: a chain of 400
/// ops with weight decay stopped at g++'s template depth of 900).
template <class Def>
struct varies_def;
template <class N>
struct varies : varies_def<def_t<N>> {};
template <class Op, class... Cs>
struct varies_def<expr<Op, Cs...>>
    : std::bool_constant<op_traits<Op>::placeholder || op_traits<Op>::draws ||
                         any_of({varies<Cs>::value..., false})> {};
} // namespace detail

/// The node type of op Op on operands Cs (node types themselves), made without checks: what
/// make_node returns once its checks pass, and what a transformation that rebuilds a node with
/// other operands uses.
template <class Op, class... Cs>
consteval auto intern_node() {
#if TYPEFLOW_NODE_REFS
  if constexpr (sizeof...(Cs) == 0) {
    return expr<Op>{};
  } else {
    constexpr std::uint64_t h =
        detail::combined_hash(detail::type_hash<Op>(), {detail::node_hash<Cs>::value...});
    (void)detail::node_entry<h, expr<Op, Cs...>>{};
    (void)detail::varies<node_ref<h>>::value;
    return node_ref<h>{};
  }
#else
  (void)detail::varies<expr<Op, Cs...>>::value;
  return expr<Op, Cs...>{};
#endif
}
template <class Op, class... Cs>
using node_t = decltype(intern_node<Op, Cs...>());

/// Any graph node.
template <class T>
concept expression = std::is_base_of<expr_tag, std::remove_cvref_t<T>>::value && requires {
  typename std::remove_cvref_t<T>::op;
};
/// Every E a graph node: `template <class... E> requires expressions<E...>` where a pack can be as
/// long as a model is wide (`template <expression... E>` is a fold expression, limited to 256
/// operands under clang; a training op groups an assignment per variable and slot).
template <class... E>
concept expressions = all_of({expression<E>..., true});

/// What an op that reads only the shape of operand X takes instead of X: X itself, or for a
/// forward value that a gradient reads rounded to 16 bits (autodiff's saved_in<H> policy wraps
/// it as cast<float>(cast<H>(Z)), specialized in ops/elementwise.hpp) Z, so that the rounded
/// copy is neither computed nor kept alive for a shape.
template <class X>
struct shape_source {
  using type = X;
};
template <class X>
using shape_source_t = typename shape_source<X>::type;

/// What an op whose kernels read a 16-bit operand themselves (`takes_half`) takes instead of X:
/// X itself, or for a saved value that a kernel would read widened (widen(save<H>(Z)),
/// specialized in ops/elementwise.hpp) the 16-bit copy save<H>(Z), so no float32 widening is
/// stored.
template <class X>
struct stored_source {
  using type = X;
};
template <class X>
using stored_source_t = typename stored_source<X>::type;

/// Returned by a factory whose static_assert failed, so that one mistake gives one error: every
/// factory takes it (it is an `expression`) and make_node passes it on, and session::run and
/// session::initialize do nothing with it, so that a mistake, then used, reports nothing more.
/// Its members let a factory's body read it as a float scalar.
struct invalid_op {
  static constexpr std::string_view name = "invalid";
  static constexpr node_kind kind = node_kind::leaf;
};
struct invalid_expr : expr_tag {
  using op = invalid_op;
  using children = type_list<>;
  using definition = invalid_expr;
  using value_type = float;
  using shape_type = shape<>;
};
/// What a factory of a training op (minimize) returns after a mistake: a group, so that the
/// run that fetches it still binds one name per value.
struct invalid_group_op : invalid_op {
  static constexpr node_kind kind = node_kind::group;
};
struct invalid_group : invalid_expr {
  using op = invalid_group_op;
};

template <class... T>
inline constexpr bool
    any_invalid = any_of({std::is_base_of<invalid_expr, std::remove_cvref_t<T>>::value..., false});

namespace detail {

template <class Op>
concept has_weak = requires {
  Op::weak;
};

/// Whether node E is weakly typed: a scalar literal, or an elementwise op of weakly typed
/// operands only (`constant<1> - constant<0.9>`), which computes in double and adopts the dtype
/// of the expression it meets, as the literals themselves do; an op that sets its dtype
/// (`cast<T>`, marked `sets_dtype`) or computes another one (a comparison) is strongly typed.
/// (A class, not a variable template: see expr.)
template <class E>
struct weak_of : std::false_type {};
template <class E>
requires has_weak<typename E::op>
struct weak_of<E> : std::bool_constant<E::op::weak> {
};
template <class E>
struct weak_t : weak_of<E> {};
#if TYPEFLOW_NODE_REFS
template <std::uint64_t H>
struct weak_t<node_ref<H>> : weak_of<typename node_ref<H>::definition> {};
#endif
/// Ops whose result dtype is their own choice (cast<T>).
template <class Op>
concept op_sets_dtype = op_traits<Op>::sets_dtype;
template <class Op, class... Cs>
requires(!has_weak<Op> && Op::kind == node_kind::elementwise && sizeof...(Cs) > 0 &&
         !op_sets_dtype<Op>) struct weak_of<expr<Op, Cs...>>
    : std::bool_constant<all_of({weak_t<Cs>::value..., true}) &&
                         std::is_same_v<typename expr<Op, Cs...>::value_type, double>> {
};

/// What an op's dtype rule may know of an operand: dtype, weak literal, variable. Dtype rules
/// take these, not node types, so that no function is instantiated per node type.
template <class T, bool Weak, bool Variable>
struct operand_info {
  using value_type = T;
  static constexpr bool variable = Variable;
};
template <class T, bool W, bool V>
struct weak_t<operand_info<T, W, V>> : std::bool_constant<W> {};

template <class Op>
struct op_is_variable : std::bool_constant<op_traits<Op>::variable> {};

template <class E>
using info_of =
    operand_info<typename E::value_type, weak_t<E>::value, op_is_variable<typename E::op>::value>;

template <class Op>
concept has_attrs_message = requires(msg_buf& b) {
  Op::attrs_message(b);
};

template <class Op, class... Cs>
struct shape_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << Op::name << std::string_view(": ") << Op::rule(Cs::shape_type::dims...).error;
    if constexpr (sizeof...(Cs) > 0) {
      b << std::string_view(": ");
      bool first = true;
      [[maybe_unused]] const int seq[] = {((b << std::string_view(first ? "" : " x "),
                                            append_dims(b, Cs::shape_type::dims), first = false),
                                           0)...,
                                          0};
    }
    if constexpr (has_attrs_message<Op>)
      Op::attrs_message(b);
    return b;
  }
};

template <class Op, class... Cs>
struct dtype_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << Op::name << std::string_view(": ") << Op::template dtype_error<info_of<Cs>...>();
    if constexpr (sizeof...(Cs) > 0) {
      b << std::string_view(": ");
      bool first = true;
      [[maybe_unused]] const int seq[] = {
          ((b << std::string_view(first ? "" : ", ") << dtype_name<typename Cs::value_type>,
            first = false),
           0)...,
          0};
    }
    return b;
  }
};

} // namespace detail

/// The part of the op contract (ops/contract.hpp) every op satisfies on its own.
template <class Op>
concept op_contract = requires {
  { Op::name } -> std::convertible_to<std::string_view>;
  { Op::kind } -> std::convertible_to<node_kind>;
};

/// The part that depends on the operands: dtype rule and shape rule.
template <class Op, class... Cs>
concept op_contract_for = op_contract<Op> && requires {
  { Op::template dtype_error<detail::info_of<Cs>...>() } -> std::convertible_to<std::string_view>;
  { Op::rule(Cs::shape_type::dims...).ok() } -> std::convertible_to<bool>;
};

namespace detail {
/// An elementwise op of weakly typed literals whose functor is a constant expression in double
/// (arithmetic, min, max...; g++ also evaluates exp, sqrt or pow at compile time, other
/// compilers may not) is folded into one literal at construction; one that is not (a probe)
/// stays a weakly typed node.
template <class Op, class... Cs>
constexpr std::uint64_t folded_bits() {
  return std::bit_cast<std::uint64_t>(
      static_cast<double>(Op::template eval<double>(Cs::op::value...)));
}
template <class C>
concept literal_node = has_weak<typename C::op> && requires {
  typename C::op::template with_bits<0>;
};
template <class Op, class... Cs>
concept constant_evaluable = requires {
  typename std::integral_constant<std::uint64_t, folded_bits<Op, Cs...>()>;
};
template <class Op, class... Cs>
concept foldable = Op::kind == node_kind::elementwise && sizeof...(Cs) > 0 && !op_sets_dtype<Op> &&
                   all_of({literal_node<Cs>..., true}) &&
                   std::is_same_v<typename Op::template value_type<Cs...>, double> &&
                   constant_evaluable<Op, Cs...>;
} // namespace detail

namespace detail {
/// bfloat16 and float16 are storage types so far: elementwise ops (computed in float32), layout
/// ops, casts, variables and checkpoints take them; reductions, products and the nn ops have no
/// kernel for them yet.
template <class Op, class... Cs>
inline constexpr bool half_without_kernel = (Op::kind == node_kind::reduction ||
                                             Op::kind == node_kind::matmul ||
                                             Op::kind == node_kind::nn) &&
                                            !op_traits<Op>::takes_half &&
                                            any_of({is_half<typename Cs::value_type>..., false});
template <class Op, class... Cs>
struct half_kernel_message {
  static constexpr msg_buf message() {
    msg_buf b;
    b << Op::name << std::string_view(": no kernel takes bfloat16 or float16 yet: ");
    bool first = true;
    [[maybe_unused]] const int seq[] = {
        ((b << std::string_view(first ? "" : ", ") << dtype_name<typename Cs::value_type>,
          first = false),
         0)...,
        0};
    b << std::string_view(" (cast<float> first)");
    return b;
  }
};
} // namespace detail

/// The one place where nodes are made: checks the op's dtype and shape rules and fails with a
/// message naming the op, the problem and the offending shapes.
template <class Op, class... Cs>
consteval auto make_node() {
  static_assert(op_contract<Op>, "make_node: the op lacks `name` or `kind` (see ops/contract.hpp)");
  if constexpr (any_invalid<Cs...>) {
    return invalid_expr{};
  } else if constexpr (!op_contract_for<Op, Cs...>) {
    static_assert(op_contract_for<Op, Cs...>, "make_node: the op's dtype_error<...>() or "
                                              "rule(dims...) cannot take these operands (see "
                                              "ops/contract.hpp)");
    return invalid_expr{};
  } else if constexpr (detail::half_without_kernel<Op, Cs...>) {
    using invalid [[maybe_unused]] = detail::reject<detail::half_kernel_message<Op, Cs...>>;
    return invalid_expr{};
  } else if constexpr (!Op::template dtype_error<detail::info_of<Cs>...>().empty()) {
    using invalid [[maybe_unused]] = detail::reject<detail::dtype_message<Op, Cs...>>;
    return invalid_expr{};
  } else if constexpr (!Op::rule(Cs::shape_type::dims...).ok()) {
    using invalid [[maybe_unused]] = detail::reject<detail::shape_message<Op, Cs...>>;
    return invalid_expr{};
  } else if constexpr (detail::foldable<Op, Cs...>) {
    // Literals only (`constant<1> - constant<0.9>`): the literal of the value, computed here.
    using first = std::tuple_element_t<0, std::tuple<Cs...>>;
    return expr<typename first::op::template with_bits<detail::folded_bits<Op, Cs...>()>>{};
  } else {
    return intern_node<Op, Cs...>();
  }
}

/// Default for ops with no dtype constraint.
struct no_dtype_rule {
  template <class...>
  static constexpr std::string_view dtype_error() {
    return {};
  }
};

/// All strongly typed children share one dtype (weakly typed scalar literals adopt it).
template <class... Cs>
constexpr bool same_dtype() {
  std::string_view name{};
  bool ok = true;
  auto visit = [&](bool weak, std::string_view n) {
    if (weak)
      return;
    if (name.empty())
      name = n;
    else if (name != n)
      ok = false;
  };
  [[maybe_unused]] const int seq[] = {
      (visit(detail::weak_t<Cs>::value, dtype_name<typename Cs::value_type>), 0)..., 0};
  return ok;
}

namespace detail {
template <class... Cs>
struct first_strong {
  using type = double; // all weak: double
};
template <class C, class... Cs>
struct first_strong<C, Cs...> {
  using type = std::conditional_t<weak_t<C>::value, typename first_strong<Cs...>::type,
                                  typename C::value_type>;
};
} // namespace detail

/// The dtype in which an elementwise op computes: that of its strongly typed children.
template <class... Cs>
using compute_type = typename detail::first_strong<Cs...>::type;

namespace detail {
template <class Op, class... Cs>
struct op_compute {
  using type = compute_of<compute_type<Cs...>>; // bfloat16 and float16 compute in float32
};
template <class Op, class... Cs>
requires requires {
  typename Op::template compute<Cs...>;
}
struct op_compute<Op, Cs...> {
  using type = typename Op::template compute<Cs...>;
};
} // namespace detail

/// The dtype in which elementwise op `Op` computes on children `Cs` (an op may say otherwise
/// with a member alias `compute<Cs...>`, as `where` does).
template <class Op, class... Cs>
using op_compute_type = typename detail::op_compute<Op, Cs...>::type;

} // namespace typeflow
