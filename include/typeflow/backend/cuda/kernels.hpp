// The CUDA backend's kernels, declared (plain C++: every translation unit includes this, with or
// without nvcc). Each is an overload of
//   cuda_backend::kernel<I>(context&, Op*, T*, rt_value* values, region, operands...)
// defined in the op family's .cuh file (fused.cuh, matmul.cuh, reduce.cuh, nn.cuh, layout.cuh),
// compiled by nvcc. Whether the CUDA backend has a kernel for an op, `has_kernel_for<Op>`, is
// derived from these declarations, so placement means the same in every translation unit (a
// definition whose signature drifted from its declaration is an ambiguity, a declaration without
// a definition a link error: both fail in the CUDA builds).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../core/shape.hpp"
#include "../../graph/flat.hpp"
#include "../../ops/attention.hpp"
#include "../../ops/index.hpp"
#include "../../ops/layout.hpp"
#include "../../ops/leaves.hpp"
#include "../../ops/matmul.hpp"
#include "../../ops/nn.hpp"
#include "../../ops/norm.hpp"
#include "../../ops/reduce.hpp"
#include "../common/capabilities.hpp"
#include "../common/value.hpp"

namespace typeflow::cuda_backend {

struct context; // context.cuh: the GPU's stream, allocator and cuBLAS handle, the session state
using value = backend::rt_value;

/// Elementwise ops run in fused kernels from their scalar functors, unless the op says it runs
/// on the host only (a debug probe, which counts in a host atomic).
template <class Op>
concept fusable_on_gpu = Op::kind == node_kind::elementwise && !op_traits<Op>::host_only;

// ---- fused.cuh -------------------------------------------------------------------------------
template <std::size_t I, class Op, class T, class Out, class Ins, class Members, class IdxSeq,
          class... Refs>
requires fusable_on_gpu<Op>
void kernel(context&, Op*, T*, value*, graph::flat_region<Out, Ins, Members, IdxSeq>*, Refs*...);

// ---- matmul.cuh ------------------------------------------------------------------------------
template <std::size_t I, bool TA, bool TB, class T, class A, class B>
void kernel(context&, ops::matmul<TA, TB>*, T*, value*, void*, A*, B*);

// ---- reduce.cuh ------------------------------------------------------------------------------
template <std::size_t I, class Rd, bool K, std::int64_t... Ax, class T, class A>
requires(!std::is_same_v<Rd, ops::reducers::argmax>) void kernel(context&,
                                                                 ops::reduce<Rd, K, Ax...>*, T*,
                                                                 value*, void*, A*);

// ---- nn.cuh (dropout masks: layout.cuh) ---------------------------------------------------
template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class W>
void kernel(context&, ops::conv2d<P, SH, SW, DH, DW>*, T*, value*, void*, X*, W*);
template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class G, class W, class X>
void kernel(context&, ops::conv2d_backprop_input<P, SH, SW, DH, DW>*, T*, value*, void*, G*, W*,
            X*);
template <std::size_t I, padding P, std::int64_t SH, std::int64_t SW, std::int64_t DH,
          std::int64_t DW, class T, class X, class G, class W>
void kernel(context&, ops::conv2d_backprop_filter<P, SH, SW, DH, DW>*, T*, value*, void*, X*, G*,
            W*);
template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X>
void kernel(context&, ops::pool<K, P, KH, KW, SH, SW>*, T*, value*, void*, X*);
template <std::size_t I, ops::pool_kind K, padding P, std::int64_t KH, std::int64_t KW,
          std::int64_t SH, std::int64_t SW, class T, class X, class G>
void kernel(context&, ops::pool_grad<K, P, KH, KW, SH, SW>*, T*, value*, void*, X*, G*);
template <std::size_t I, class T, class L, class Y>
void kernel(context&, ops::sparse_softmax_xent*, T*, value*, void*, L*, Y*);
template <std::size_t I, class T, class L, class Y>
void kernel(context&, ops::sparse_softmax_xent_grad*, T*, value*, void*, L*, Y*);

// ---- index.cuh (atomicAdd: the scatter-add in float32 and float64 only) ----------------------
template <std::size_t I, class T, class P, class Ix>
void kernel(context&, ops::gather*, T*, value*, void*, P*, Ix*);
template <std::size_t I, class T, class P, class Ix, class G>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::gather_grad*, T*, value*, void*, P*,
                                                Ix*, G*);
template <std::size_t I, std::int64_t Depth, dtype U, class T, class Ix>
requires std::is_arithmetic_v<T>
void kernel(context&, ops::one_hot<Depth, U>*, T*, value*, void*, Ix*);
template <std::size_t I, std::int64_t L, std::int64_t U, ops::band_fill F, class T, class X>
requires std::is_arithmetic_v<T>
void kernel(context&, ops::band<L, U, F>*, T*, value*, void*, X*);
template <std::size_t I, dtype U, class Shape, std::size_t Axis, class T>
requires std::is_arithmetic_v<T>
void kernel(context&, ops::iota<U, Shape, Axis>*, T*, value*, void*);

// ---- attention.cuh (float32 and float64) ----------------------------------------------------
template <std::size_t I, bool C, attention_dropout D, class T, class Q, class K, class V>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::attention<C, D>*, T*, value*, void*,
                                                Q*, K*, V*);
template <std::size_t I, bool C, class T, class Q, class K, class V, class O, class G>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::attention_stats<C>*, T*, value*,
                                                void*, Q*, K*, V*, O*, G*);
template <std::size_t I, bool C, int W, attention_dropout D, class T, class Q, class K, class V,
          class G, class St>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::attention_grad<C, W, D>*, T*, value*,
                                                void*, Q*, K*, V*, G*, St*);
template <std::size_t I, bool C, attention_dropout D, class T, class Q, class K, class V, class G,
          class St>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::attention_grads<C, D>*, T*, value*,
                                                void*, Q*, K*, V*, G*, St*);

// ---- norm.cuh (float32 and float64) ---------------------------------------------------------
template <std::size_t I, std::uint64_t E, class T, class X, class G, class B>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::layer_norm<E>*, T*, value*, void*,
                                                X*, G*, B*);
template <std::size_t I, std::uint64_t E, class T, class X, class G, class U>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::layer_norm_grad<E>*, T*, value*,
                                                void*, X*, G*, U*);
template <std::size_t I, std::uint64_t E, class T, class X, class U>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::layer_norm_grad_gamma<E>*, T*,
                                                value*, void*, X*, U*);
template <std::size_t I, class T, class X>
requires(std::is_same_v<T, float> || std::is_same_v<T, double>) void kernel(context&,
                                                                            ops::batch_moments*, T*,
                                                                            value*, void*, X*);
template <std::size_t I, std::uint64_t E, std::uint64_t D, class T, class X, class M, class G,
          class B, class MM, class MV>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::batch_norm<E, D>*, T*, value*, void*,
                                                X*, M*, G*, B*, MM*, MV*);
template <std::size_t I, std::uint64_t E, class T, class X, class M, class U>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::batch_norm_grad_stats<E>*, T*,
                                                value*, void*, X*, M*, U*);
template <std::size_t I, std::uint64_t E, class T, class X, class M, class G, class U, class S>
requires(std::is_same_v<T, float> ||
         std::is_same_v<T, double>) void kernel(context&, ops::batch_norm_grad<E>*, T*, value*,
                                                void*, X*, M*, G*, U*, S*);

// ---- layout.cuh ------------------------------------------------------------------------------
template <std::size_t I, std::int64_t... D, class T, class A>
void kernel(context&, ops::reshape<D...>*, T*, value*, void*, A*);
template <std::size_t I, std::int64_t... Ax, class T, class A>
void kernel(context&, ops::expand_dims<Ax...>*, T*, value*, void*, A*);
template <std::size_t I, class T, class A>
void kernel(context&, ops::replica_mean*, T*, value*, void*, A*);
template <std::size_t I, class T, class A, class X>
void kernel(context&, ops::reshape_like*, T*, value*, void*, A*, X*);
template <std::size_t I, std::int64_t... Perm, class T, class A>
void kernel(context&, ops::transpose<Perm...>*, T*, value*, void*, A*);
template <std::size_t I, class B, class S, class T, class A>
void kernel(context&, ops::slice<B, S>*, T*, value*, void*, A*);
template <std::size_t I, class B, class T, class G, class A>
void kernel(context&, ops::slice_like<B>*, T*, value*, void*, G*, A*);
template <std::size_t I, class B, class T, class A, class X>
void kernel(context&, ops::pad_like<B>*, T*, value*, void*, A*, X*);
template <std::size_t I, std::int64_t Axis, class T, class... Cs>
void kernel(context&, ops::concat<Axis>*, T*, value*, void*, Cs*...);
template <std::size_t I, bool K, std::int64_t... Ax, class T, class A>
void kernel(context&, ops::reduce<ops::reducers::argmax, K, Ax...>*, T*, value*, void*, A*);
template <std::size_t I, std::int64_t... Ax, class T, class A>
void kernel(context&, ops::element_count<Ax...>*, T*, value*, void*, A*);
template <std::size_t I, class T, class C, class X>
void kernel(context&, ops::sum_to_like*, T*, value*, void*, C*, X*);
template <std::size_t I, std::uint64_t Seed, class T, class X, class K>
void kernel(context&, ops::dropout_mask<Seed>*, T*, value*, void*, X*, K*);

// ---- what the backend has --------------------------------------------------------------------
namespace detail {
struct any_operand {};
template <class Op>
using probe_region =
    std::conditional_t<Op::kind == node_kind::elementwise,
                       graph::flat_region<float, type_list<>, type_list<>, std::index_sequence<>>,
                       void>;
template <class Op, class... Operands>
concept declared = requires(context& c, value* v) {
  kernel<0>(c, static_cast<Op*>(nullptr), static_cast<float*>(nullptr), v,
            static_cast<probe_region<Op>*>(nullptr), static_cast<Operands*>(nullptr)...);
};
template <class Op>
struct keeps : std::false_type {};
/// Variables placed on a GPU live there between runs (backend.cuh binds them).
template <class Name, dtype T, class Shape, class Init>
struct keeps<ops::variable<Name, T, Shape, Init>> : std::true_type {};
} // namespace detail

/// Whether the CUDA backend runs op Op: a kernel of it is declared above (with one to six
/// operands: batch_norm has six), or it is a variable (kept on the GPU).
template <class Op>
concept has_kernel_for = detail::keeps<Op>::value || detail::declared<Op, detail::any_operand> ||
    detail::declared<Op, detail::any_operand, detail::any_operand> ||
    detail::declared<Op, detail::any_operand, detail::any_operand, detail::any_operand> ||
    detail::declared<Op, detail::any_operand, detail::any_operand, detail::any_operand,
                     detail::any_operand> ||
    detail::declared<Op, detail::any_operand, detail::any_operand, detail::any_operand,
                     detail::any_operand, detail::any_operand> ||
    detail::declared<Op, detail::any_operand, detail::any_operand, detail::any_operand,
                     detail::any_operand, detail::any_operand, detail::any_operand>;

/// None of the compiler's folds yet: an epilogue would take cuBLASLt's or cuDNN's epilogues, a
/// prologue or chain a fused kernel that reads a reduction's or a kernel's pieces.
inline constexpr backend::device_folds folds{};

} // namespace typeflow::cuda_backend
