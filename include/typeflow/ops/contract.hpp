// The op contract: what an op declares, where each part lives, and the concepts that check it.
// (dlib's layers_abstract.h is the model: the interface written down once, next to the code.)
//
// An op is an empty class, usually a template over its attributes (strides, axes, a name...).
// Adding one with kernels of its own means: one op file under ops/, one kernel file per backend,
// tests. Nothing else changes: the graph, the compiler and the session find it through
// op_traits<Op> (graph/op_traits.hpp), the backends' capabilities (compile/capabilities.hpp) and
// its kernels' overloads.
//
//  ops/<family>.hpp          the op itself. Required:
//    static constexpr std::string_view name;     printed in every message and trace ("conv2d")
//    static constexpr node_kind kind;            leaf, elementwise, reduction, matmul, layout,
//                                                nn or group: how the compiler treats its node
//                                                (elementwise ops fuse; the rest are region
//                                                boundaries with a kernel of their own)
//    template <class... Cs> static constexpr std::string_view dtype_error();
//                                                "" when the operand dtypes are valid, else
//                                                what is wrong (no_dtype_rule: none)
//    template <class... Cs> using value_type;    the result's dtype
//    static constexpr rule_result<R> rule(const dims_t<R>&...);
//                                                the shape rule, run at compile time on the
//                                                static shapes (`dyn` unknown) and at run time
//                                                on the fed extents; an error names the problem
//    elementwise ops: template <class C, class... A> static R eval(A...);
//                                                the scalar functor (host and device), computed
//                                                in C; the backends instantiate fused loops
//                                                from it
//  Optional, each read in one place, graph/op_traits.hpp's op_traits<Op> (default: absent):
//    static std::string attrs();                 attributes for printing
//    roles:
//    static constexpr leaf_kind leaf;            a leaf's kind: placeholder, variable, constant
//    static constexpr bool is_state;             an assignment: operand 0 is its variable and
//                                                its value the variable's new one; runs where
//                                                the variable is, committed at the end of the
//                                                run (assign, ops/state.hpp's update ops)
//    static constexpr bool all_reduce;           the all-reduce point of a replicated run
//                                                (replica_mean)
//    static constexpr bool draws;                draws anew each run (a dropout mask): not
//                                                captured as a CUDA graph, differs per tower
//    static constexpr bool control_flow;         a loop the executor runs itself (repeat)
//    static constexpr bool has_updates;          with `static consteval auto updates(operands...)`
//                                                returning assignments: every training step
//                                                (minimize) whose loss reads the node runs them
//                                                too, and update_ops(e) gathers them (batch
//                                                norm's moving averages, TF's UPDATE_OPS)
//    hints to the compiler:
//    static constexpr unsigned shape_only;       bit k set when its kernels read only the dims
//                                                of operand k (the buffer may be dropped before
//                                                it runs)
//    static constexpr bool stored;               always a step of its own, never fused into
//                                                its readers (ops::save)
//    static constexpr epilogue_role epilogue;    its part in a bias(+relu) epilogue
//    static constexpr bool reads_fused_input;    a reduction that reads a fused input as it
//                                                goes (graph::prologue)
//    static constexpr bool writes_in_pieces;     its CPU kernel hands its output to a fused
//                                                reader in pieces: add a kernel_pieces overload
//                                                to its kernel file (graph::chained)
//    precision:
//    static constexpr bool follows_precision;    its products follow the session's precision
//                                                (describe_placement() says so)
//    static constexpr bool keeps_float32;        its gradient reads its operands exactly under
//                                                autodiff's saved_in<H> (no 16-bit copy)
//    static constexpr bool takes_half;           a reduction, product or nn op whose kernels
//                                                read bfloat16/float16 operands
//                                                (max_pool_grad's x); others reject them
//    elementwise ops:
//    static constexpr bool sets_dtype;           the result's dtype is the op's own choice
//                                                (cast<T>), so the op applied to literals only
//                                                is not a weakly typed literal itself
//    static constexpr bool scalar_only;          no vector form: its fused CPU loops may run
//                                                scalar (otherwise a missing vector form is a
//                                                compile error)
//    static constexpr bool host_only;            the functor runs on the host only, so the op
//                                                has no GPU kernel (soft placement moves it to
//                                                cpu<0>, describe_placement() says so)
//  ops/<family>_grad.hpp     grad_rule<Op>: the gradient, written as expressions of other ops
//                            (the gradient of sin is grad * cos(x))
//  backend/cpu/kernels/<family>.hpp
//                            cpu_backend::kernel<I>(context&, Op*, T*, rt_value* values,
//                            region, operand refs...): reads its operands' values, allocates
//                            its result through the context, never sees the session; an op
//                            with no CPU kernel does not compile when a plan places it on the
//                            CPU (runtime/checks.hpp names it)
//  backend/cpu/simd.hpp      batch_op<Op>: the vector form of an elementwise op
//  backend/cuda/kernels.hpp  cuda_backend::kernel<I>(context&, Op*, ...) declared (plain C++,
//                            seen by the compiler in every translation unit: an op has a GPU
//                            kernel exactly when one is declared here) ...
//  backend/cuda/<family>.cuh ... and defined, compiled by nvcc (elementwise ops need nothing:
//                            their fused kernel comes from the scalar functor)
//
//  backend/common/cost.hpp  op_cost<Op>: the FLOPs of a step, for traces, where the kind's
//                            default (one per element, none for layout) is wrong: matmul,
//                            conv2d and its gradients, pooling. (Not yet a member of the op: its
//                            formula reads the backends' run-time dims.)
//  test/                     the op's shape and dtype rules (test_ops.cpp), its gradient against
//                            central differences (test_autodiff.cpp), its kernels against a
//                            reference (test_cpu_kernels.cpp, cuda/test_cuda_ops.cu)
//
// So a new op family with kernels of its own touches: ops/<family>.hpp and <family>_grad.hpp,
// backend/cpu/kernels/<family>.hpp, backend/cuda/kernels.hpp (one declaration) and
// backend/cuda/<family>.cuh, cost.hpp when its FLOPs are not the default, and its tests; a new
// elementwise op its family's two op files, simd.hpp (its vector form) and its tests.
//
// Semantics both backends need (window geometry, reducers, the dropout hash) live once, below
// both: in the op's file or backend/common/.
#pragma once
#include "../graph/node.hpp"

// The concepts themselves (op_contract, op_contract_for) sit in graph/node.hpp, where make_node
// checks every node against them; this file is their documentation.
