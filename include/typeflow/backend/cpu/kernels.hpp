// The CPU backend's kernels, one file per op family under kernels/. Each is an overload of
// `cpu_backend::kernel<I>(context&, Op*, T*, rt_value* values, region, operands...)`.
#pragma once
#include "context.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/layout.hpp"
#include "kernels/matmul.hpp"
#include "kernels/nn.hpp"
#include "kernels/reduce.hpp"
