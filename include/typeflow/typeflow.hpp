// typeflow: a header-only C++20 library in which a TensorFlow-style static computation graph
// lives in the type system. Include this one header.
#pragma once

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/fixed_string.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "device/device.hpp"
#include "graph/node.hpp"
#include "graph/plan.hpp"
#include "graph/print.hpp"
#include "graph/traverse.hpp"
#include "ops/debug.hpp"
#include "ops/elementwise.hpp"
#include "ops/layout.hpp"
#include "ops/leaves.hpp"
#include "ops/matmul.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "runtime/feed.hpp"
#include "runtime/session.hpp"
