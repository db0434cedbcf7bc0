// The CPU backend's kernels, one file per op family under kernels/. Each is an overload of
// `cpu_backend::kernel<I>(context&, Op*, T*, rt_value* values, region, operands...)`.
#pragma once
#include "context.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/layout.hpp"
#include "kernels/matmul.hpp"
#include "kernels/nn.hpp"
#include "kernels/reduce.hpp"

namespace typeflow::cpu_backend {

/// Whether the CPU backend has a kernel for step I (op Op, dtype T, fused region Region,
/// operands Refs...): derived from the kernels' existence, the same in every translation unit.
template <std::size_t I, class Op, class T, class Region, class... Refs>
concept has_kernel = requires(context& c, value* v) {
  kernel<I>(c, static_cast<Op*>(nullptr), static_cast<T*>(nullptr), v,
            static_cast<Region*>(nullptr), static_cast<Refs*>(nullptr)...);
};

} // namespace typeflow::cpu_backend
