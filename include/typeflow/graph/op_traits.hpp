// What the graph and the compiler read of an op, in one place: `op_traits<Op>`. Every fact an op
// may declare (ops/contract.hpp lists them all) is read here and nowhere else, with its default
// when the op says nothing, so that a role (a leaf's kind, an assignment, an all-reduce point, a
// random draw) or a hint (shape-only operands, fold roles, precision) means the same to
// placement, fusion, replication, differentiation and the session.
//
//   op_traits<Op>::kind                node_kind (required)
//   op_traits<Op>::leaf_code           a leaf's leaf_kind as an int (-1 for other ops)
//   op_traits<Op>::placeholder, ::variable, ::constant   the leaf roles, as flags
//   op_traits<Op>::state               an assignment (assign, assign_add, ...): `is_state`
//   op_traits<Op>::all_reduce          replica_mean, the all-reduce point of a replicated run
//   op_traits<Op>::draws               draws random numbers anew each run (a dropout mask)
//   op_traits<Op>::shape_only          bit k: operand k is read for its shape only
//   op_traits<Op>::stored              always a step of its own (ops::save)
//   op_traits<Op>::follows_precision   its products follow the session's precision
//   op_traits<Op>::reads_fused_input   a reduction that evaluates a fused input as it goes
//   op_traits<Op>::writes_in_pieces    its CPU kernel hands its output over in pieces
//   op_traits<Op>::epilogue            its part in a bias(+relu) epilogue
//   op_traits<Op>::keeps_float32       its gradient reads its operands exactly (no 16-bit copy)
//   op_traits<Op>::takes_half          a kernel op that reads bfloat16/float16 operands
//   op_traits<Op>::sets_dtype          an elementwise op whose result dtype is its own choice
//   op_traits<Op>::scalar_only         an elementwise op with no vector form
//   op_traits<Op>::host_only           an elementwise op whose functor runs on the host only
//   op_traits<Op>::control_flow        a loop the executor runs itself (repeat)
//   op_traits<Op>::has_updates         a training step that reads it also runs Op::updates(...)
//                                      (batch norm's moving averages: TF's UPDATE_OPS)
#pragma once

namespace typeflow {

/// What the transformation stage needs to know of an op.
enum class node_kind {
  leaf,        // placeholder, variable, constant
  elementwise, // fused into loops
  reduction,   // region boundary
  matmul,      // region boundary (BLAS)
  layout,      // reshape, transpose, concat, slice: region boundary
  nn,          // conv2d, pooling, cross-entropy: region boundary with its own kernel
  group,       // no value: runs its children
};

/// What an op can be in an epilogue, the pattern `relu(bias_add(producer(...), b))` (or without
/// the relu) that the plan folds into the producer's kernel: a backend then adds the bias and
/// applies the activation as the producer writes its output (oneDNN's post-ops on the CPU), with
/// no pass of its own. An op says so with `static constexpr epilogue_role epilogue = ...;`.
enum class epilogue_role {
  none,
  producer,   // conv2d, matmul: a kernel that can take the epilogue
  bias,       // bias_add
  activation, // relu
};

/// The kind of a leaf op (`static constexpr leaf_kind leaf = ...;` in ops/leaves.hpp).
enum class leaf_kind { placeholder, variable, constant };

namespace detail {
template <class Op>
constexpr int leaf_code() {
  if constexpr (Op::kind == node_kind::leaf && requires { Op::leaf; })
    return static_cast<int>(Op::leaf);
  else
    return -1;
}
template <class Op>
constexpr unsigned shape_only_of() {
  if constexpr (requires { Op::shape_only; })
    return Op::shape_only;
  else
    return 0;
}
// An optional boolean fact `Op::F`: false when the op does not declare it.
#define TYPEFLOW_OP_FLAG(F)                                                                        \
  template <class Op>                                                                              \
  constexpr bool F##_flag() {                                                                      \
    if constexpr (requires { Op::F; })                                                             \
      return static_cast<bool>(Op::F);                                                             \
    else                                                                                           \
      return false;                                                                                \
  }
TYPEFLOW_OP_FLAG(all_reduce)
TYPEFLOW_OP_FLAG(draws)
TYPEFLOW_OP_FLAG(stored)
TYPEFLOW_OP_FLAG(follows_precision)
TYPEFLOW_OP_FLAG(reads_fused_input)
TYPEFLOW_OP_FLAG(writes_in_pieces)
TYPEFLOW_OP_FLAG(keeps_float32)
TYPEFLOW_OP_FLAG(takes_half)
TYPEFLOW_OP_FLAG(sets_dtype)
TYPEFLOW_OP_FLAG(scalar_only)
TYPEFLOW_OP_FLAG(host_only)
TYPEFLOW_OP_FLAG(control_flow)
TYPEFLOW_OP_FLAG(has_updates)
#undef TYPEFLOW_OP_FLAG
template <class Op>
constexpr epilogue_role epilogue_of() {
  if constexpr (requires { Op::epilogue; })
    return Op::epilogue;
  else
    return epilogue_role::none;
}
} // namespace detail

/// The facts of op Op (see the top of this file).
template <class Op>
struct op_traits {
  static constexpr node_kind kind = Op::kind;
  static constexpr int leaf_code = detail::leaf_code<Op>();
  static constexpr bool placeholder = leaf_code == static_cast<int>(leaf_kind::placeholder);
  static constexpr bool variable = leaf_code == static_cast<int>(leaf_kind::variable);
  static constexpr bool constant = leaf_code == static_cast<int>(leaf_kind::constant);
  static constexpr bool state = requires { Op::is_state; };
  static constexpr bool all_reduce = detail::all_reduce_flag<Op>();
  static constexpr bool draws = detail::draws_flag<Op>();
  static constexpr unsigned shape_only = detail::shape_only_of<Op>();
  static constexpr bool stored = detail::stored_flag<Op>();
  static constexpr bool follows_precision = detail::follows_precision_flag<Op>();
  static constexpr bool reads_fused_input = detail::reads_fused_input_flag<Op>();
  static constexpr bool writes_in_pieces = detail::writes_in_pieces_flag<Op>();
  static constexpr epilogue_role epilogue = detail::epilogue_of<Op>();
  static constexpr bool keeps_float32 = detail::keeps_float32_flag<Op>();
  static constexpr bool takes_half = detail::takes_half_flag<Op>();
  static constexpr bool sets_dtype = detail::sets_dtype_flag<Op>();
  static constexpr bool scalar_only = detail::scalar_only_flag<Op>();
  static constexpr bool host_only = detail::host_only_flag<Op>();
  static constexpr bool control_flow = detail::control_flow_flag<Op>();
  static constexpr bool has_updates = detail::has_updates_flag<Op>();
};

} // namespace typeflow
