// The one translation unit of typeflow's non-template code, under TYPEFLOW_SEPARATE_COMPILATION
// (see core/compiled.hpp): a program that defines it includes this header in exactly one source
// file, compiled with the same definitions as its others.
#pragma once
#if !defined(TYPEFLOW_SEPARATE_COMPILATION)
// Without it typeflow is header-only, and this header has nothing to do.
#error "typeflow/src.hpp: define TYPEFLOW_SEPARATE_COMPILATION for the whole program"
#endif
#if defined(TYPEFLOW_BODIES)
// A typeflow header read before this one was read without its bodies.
#error "typeflow/src.hpp: include it before any other typeflow header of its unit"
#endif
#define TYPEFLOW_COMPILING_SOURCE 1

#include "typeflow.hpp"

#include "backend/cpu/machine.hpp"
#include "io/checkpoint.hpp"
#include "io/graph_dot.hpp"
#include "io/idx.hpp"
#include "io/trace.hpp"
