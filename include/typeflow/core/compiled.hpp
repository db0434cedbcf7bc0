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

// Header-only, a non-template inline function is parsed in every translation unit, and g++ then
// instantiates every template its body uses at the end of the unit, whether or not the program
// calls it: nlohmann-json's DOM, parser and serializer for the checkpoint and trace files, the
// containers of the graph pictures and descriptions. The free functions a program may never
// call are therefore declared TYPEFLOW_DECL_DEFERRED (TYPEFLOW_INLINE_DEFERRED where they were
// inline in both modes): header-only, a function template with one defaulted parameter, so a
// call `f(args)` reads as before and nothing is instantiated until a program calls it
// (bench/README.md, *Deferred bodies*).
// With TYPEFLOW_SEPARATE_COMPILATION they are the ordinary functions TYPEFLOW_DECL declares.
#if defined(TYPEFLOW_SEPARATE_COMPILATION)
#define TYPEFLOW_DECL
#if defined(TYPEFLOW_COMPILING_SOURCE)
#define TYPEFLOW_BODIES 1
#else
#define TYPEFLOW_BODIES 0
#endif
#define TYPEFLOW_DECL_DEFERRED
#define TYPEFLOW_INLINE_DEFERRED inline
#else
/// How an out-of-line-capable function is declared: `inline` when header-only.
#define TYPEFLOW_DECL inline
/// Whether this translation unit compiles the bodies of those functions.
#define TYPEFLOW_BODIES 1
// clang-format off
/// A TYPEFLOW_DECL free function instantiated only where a program calls it.
#define TYPEFLOW_DECL_DEFERRED template <class = void> inline
/// An inline free function instantiated only where a program calls it.
#define TYPEFLOW_INLINE_DEFERRED template <class = void> inline
// clang-format on
#endif
