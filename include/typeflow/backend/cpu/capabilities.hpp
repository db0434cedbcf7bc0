// What the CPU backend has (for the compiler: compile/capabilities.hpp): a kernel for every op
// (a missing one is a compile error at the session, naming the op), and every fold.
#pragma once
#include "../common/capabilities.hpp"

namespace typeflow::cpu_backend {

/// Whether the CPU backend runs op Op: always (kernels.hpp names an op whose kernel is missing).
template <class Op>
inline constexpr bool has_kernel_for = true;

/// Epilogues through oneDNN's post-ops (or the GEMM's), prologues and chains in the fused loops
/// (backend/cpu/fused.hpp), merged assignments.
inline constexpr backend::device_folds folds{true, true, true, true};

} // namespace typeflow::cpu_backend
