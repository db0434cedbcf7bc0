// Separate compilation of typeflow's non-template code.
//
// typeflow is header-only: by default every function is defined in its header, and a program
// includes what it uses. The non-template part (checkpoint files, traces and profiles, graph
// pictures, IDX, TFRecord and Example input, the batcher, describe_machine, and the run time's
// plain functions: the thread pool, the oneDNN primitive cache and its convolution calls, the
// buffer pool, feed and result checks, variable records, placement logs) is compiled again in
// every translation unit that calls it (its share of examples/mnist/main.cpp's compile:
// bench/README.md, *Figures moved from code comments* and *More of the run time compiled once*).
//
// With TYPEFLOW_SEPARATE_COMPILATION defined in every translation unit of a program (a compile
// definition of the target), those functions are only declared in the headers, and one
// translation unit compiles them all by including <typeflow/src.hpp> (Boost.Asio's
// ASIO_SEPARATE_COMPILATION, fmt's and spdlog's compiled modes work the same way). It must be
// compiled with the same definitions as the rest (TYPEFLOW_HAS_ONEDNN and the like): in CMake, a
// source of the same target. Mixing the two modes in one program breaks the one-definition rule.
#pragma once

#if defined(TYPEFLOW_SEPARATE_COMPILATION)
#define TYPEFLOW_DECL
#if defined(TYPEFLOW_COMPILING_SOURCE)
#define TYPEFLOW_BODIES 1
#else
#define TYPEFLOW_BODIES 0
#endif
#else
/// How an out-of-line-capable function is declared: `inline` when header-only.
#define TYPEFLOW_DECL inline
/// Whether this translation unit compiles the bodies of those functions.
#define TYPEFLOW_BODIES 1
#endif
