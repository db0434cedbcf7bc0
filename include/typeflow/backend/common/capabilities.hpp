// What a backend tells the compiler (compile/) about its device, beside the kernels it has
// (`has_kernel_for<Op>` in each backend): which of the compiler's folds its kernels implement.
// Each backend states its own `folds` value (backend/cpu/capabilities.hpp,
// backend/cuda/kernels.hpp) and the compiler asks compile/capabilities.hpp's folds_on(device)
// instead of testing for the CPU.
#pragma once

namespace typeflow::backend {

/// The folds of compile/fuse.hpp that a backend's kernels implement on its devices.
struct device_folds {
  /// `relu(bias_add(k, b))` into k's kernel (k a conv2d or matmul): an `epilogue` step.
  bool epilogue = false;
  /// A fused region read only by a reduction, evaluated in pieces by it: a `prologue` step.
  bool prologue = false;
  /// A fused region chained to a kernel that writes its output in pieces: a `chained` step.
  bool chain = false;
  /// Two assignments' loops that share a member, merged into one loop that stores both.
  bool merged_outputs = false;
};

} // namespace typeflow::backend
