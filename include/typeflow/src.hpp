// The one translation unit of typeflow's non-template code, under TYPEFLOW_SEPARATE_COMPILATION
// (see core/compiled.hpp): a program that defines it includes this header in exactly one source
// file, compiled with the same definitions as its others.
#pragma once
#if !defined(TYPEFLOW_SEPARATE_COMPILATION)
#error                                                                                             \
    "typeflow/src.hpp: define TYPEFLOW_SEPARATE_COMPILATION for the whole program, or do not include this header (typeflow is header-only without it)"
#endif
#define TYPEFLOW_COMPILING_SOURCE 1

#include "typeflow.hpp"

#include "backend/cpu/machine.hpp"
#include "io/checkpoint.hpp"
#include "io/graph_dot.hpp"
#include "io/idx.hpp"
#include "io/trace.hpp"
