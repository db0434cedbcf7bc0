# compile_fail.cmake - driver for typeflow's negative ("must not compile") tests.
#
#   cmake -DCXX=<c++ compiler> -DFLAGS_FILE=<file with one compiler argument per line>
#         -DSOURCE=<test/compile_fail/x.cpp> -DMODE=<fail|control|build>
#         [-DEXTRA_FLAGS="<more flags>"] [-DMAX_LINES=<n, default 10>] -P compile_fail.cmake
#
# The first line of SOURCE must be
#     // expect: <CMake regex>
# The regex is read from the source at test time, so editing it needs no re-configure.
# Compiler output is produced with LC_ALL=C (plain ASCII quotes) and without colours.
#
# MODE=fail (CTest test `compile_fail.<name>`, registered with PASS_REGULAR_EXPRESSION
#   "failed as expected:"; CMake may wrap the line after the colon)
#   The GOOD outcome (the compile failed and the diagnostic meets the rules below) is reported
#   with message(FATAL_ERROR "failed as expected: ..."): CMake scripts cannot choose their exit
#   code except "0" or "1 via FATAL_ERROR", and a FATAL_ERROR from anything else (a CMake error
#   in this script, a bad argument) exits 1 as well, so the test passes on that line alone, never
#   on the exit status. Every BAD outcome (the misuse compiled, the error does not match the
#   regex, the script was called wrongly) prints the details without that line: FAILED.

# MODE=control (CTest test `compile_fail.<name>.control`, a normal test)
#   Compiles the same file with -DTYPEFLOW_COMPILE_FAIL_CONTROL (the sources put the
#   misuse inside `#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL`). It must compile: success
#   exits 0 (pass), failure is a FATAL_ERROR (fail). This proves the failure above
#   comes from the misuse line and not from a broken test file.
#
# MODE=build (CTest test `build_clang.<name>`, a normal test)
#   Compiles SOURCE as it is (no `// expect:` line, no define): it must compile.
#
# Optional: -DPCH=<precompiled typeflow.hpp> -DPCH_KIND=<gcc|clang>
#   A speed-up only (compile_fail_pch.cmake built it with this test's flags). It is used when
#   SOURCE's first preprocessor directive is `#include <typeflow/typeflow.hpp>` and the header
#   is newer than the compiler, the flags file and every file it read (its PCH.d, which names
#   typeflow's headers and the system's); otherwise the test compiles without it and says why.
#   g++ finds <dir>/typeflow/typeflow.hpp.gch through a first -I <dir>; clang takes it as
#   -include-pch, and its "In file included from" then names line 1 of SOURCE.

if(NOT DEFINED MODE)
  set(MODE fail)
endif()
if(NOT MODE STREQUAL "fail" AND NOT MODE STREQUAL "control" AND NOT MODE STREQUAL "build")
  message(FATAL_ERROR
    "compile_fail.cmake: MODE must be 'fail', 'control' or 'build', got '${MODE}'")
endif()

# --- argument checks. In fail mode a problem must exit 0 (=> test FAILS). ---
set(_problem "")
foreach(_var IN ITEMS CXX FLAGS_FILE SOURCE)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    string(APPEND _problem "compile_fail.cmake: -D${_var}=... is required\n")
  endif()
endforeach()
if(_problem STREQUAL "" AND NOT EXISTS "${SOURCE}")
  string(APPEND _problem "compile_fail.cmake: source '${SOURCE}' does not exist\n")
endif()
if(_problem STREQUAL "" AND NOT EXISTS "${FLAGS_FILE}")
  string(APPEND _problem "compile_fail.cmake: flags file '${FLAGS_FILE}' does not exist\n")
endif()

set(_expect "")
if(_problem STREQUAL "" AND NOT MODE STREQUAL "build")
  file(STRINGS "${SOURCE}" _first_line LIMIT_COUNT 1)
  if(_first_line MATCHES "^[ \t]*//[ \t]*expect:[ \t]*(.*[^ \t\r])[ \t\r]*$")
    set(_expect "${CMAKE_MATCH_1}")
  else()
    string(APPEND _problem
      "compile_fail.cmake: first line of ${SOURCE} must be '// expect: <regex>', got: '${_first_line}'\n")
  endif()
endif()

if(NOT _problem STREQUAL "")
  if(MODE STREQUAL "fail")
    message("${_problem}(reported as a test failure)")
    return() # no "failed as expected" line -> FAILED
  else()
    message(FATAL_ERROR "${_problem}")
  endif()
endif()

file(STRINGS "${FLAGS_FILE}" _flags)
list(FILTER _flags EXCLUDE REGEX "^[ \t]*$")

set(_extra "")
if(MODE STREQUAL "control")
  set(_extra "-DTYPEFLOW_COMPILE_FAIL_CONTROL")
endif()

set(ENV{LC_ALL} C)
set(ENV{LANG} C)
set(ENV{GCC_COLORS} "")
if(DEFINED EXTRA_FLAGS AND NOT EXTRA_FLAGS STREQUAL "")
  separate_arguments(_more UNIX_COMMAND "${EXTRA_FLAGS}")
  list(APPEND _extra ${_more})
endif()
# A source may add its own template frames to the count (a model's block written as a function
# template, as users write them): a line `// frames: <n>` among its first five raises the limit
# by n frames of LINES_PER_FRAME lines each (1 for g++; clang prints a frame's source line and
# caret too: its tests pass 3).
file(STRINGS "${SOURCE}" _head LIMIT_COUNT 5)
set(_user_frames 0)
foreach(_l IN LISTS _head)
  if(_l MATCHES "^[ \t]*//[ \t]*frames:[ \t]*([0-9]+)")
    set(_user_frames "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT DEFINED MAX_LINES)
  set(MAX_LINES 10)
endif()
set(_pch_flags "")
if(DEFINED PCH AND NOT PCH STREQUAL "")
  set(_pch_skip "")
  file(STRINGS "${SOURCE}" _directives REGEX "^[ \t]*#")
  set(_first_directive "")
  if(_directives)
    list(GET _directives 0 _first_directive)
  endif()
  if(NOT EXISTS "${PCH}" OR NOT EXISTS "${PCH}.d")
    set(_pch_skip "${PCH} is not built")
  elseif(NOT _first_directive MATCHES "^[ \t]*#[ \t]*include[ \t]*<typeflow/typeflow\\.hpp>")
    set(_pch_skip "its first directive is not #include <typeflow/typeflow.hpp>")
  else()
    # PCH.d is a make rule, "<pch>: <file> <file> \<newline> <file> ...".
    file(READ "${PCH}.d" _deps)
    string(REGEX REPLACE "\\\\\n" " " _deps "${_deps}")
    string(REGEX REPLACE "^[^:]*: " "" _deps "${_deps}")
    separate_arguments(_deps UNIX_COMMAND "${_deps}")
    foreach(_input IN LISTS _deps CXX FLAGS_FILE) # (the lists' values: every file, then two)
      if(NOT "${PCH}" IS_NEWER_THAN "${_input}")
        set(_pch_skip "${_input} changed after ${PCH} was built")
        break()
      endif()
    endforeach()
  endif()
  if(NOT _pch_skip STREQUAL "")
    message(STATUS "compiling without the precompiled typeflow.hpp: ${_pch_skip}")
  elseif(PCH_KIND STREQUAL "gcc")
    get_filename_component(_pch_dir "${PCH}" DIRECTORY)   # <dir>/typeflow
    get_filename_component(_pch_dir "${_pch_dir}" DIRECTORY)
    set(_pch_flags "-I${_pch_dir}")
  else()
    set(_pch_flags -include-pch "${PCH}")
  endif()
endif()

execute_process(
  COMMAND "${CXX}" ${_pch_flags} ${_flags} ${_extra} -fdiagnostics-color=never "${SOURCE}"
  RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _out
  ERROR_VARIABLE _out)

string(REPLACE ";" " " _cmdline "${CXX} ${_pch_flags} ${_flags} ${_extra} ${SOURCE}")

if(MODE STREQUAL "control" OR MODE STREQUAL "build")
  if(_rc EQUAL 0)
    message(STATUS "control case compiles: ${SOURCE}")
  else()
    if(MODE STREQUAL "build")
      set(_what "source")
    else()
      set(_what "control case (-DTYPEFLOW_COMPILE_FAIL_CONTROL)")
    endif()
    message(FATAL_ERROR
      "${_what} does NOT compile: ${SOURCE}\n"
      "command: ${_cmdline}\nexit: ${_rc}\n--- compiler output ---\n${_out}")
  endif()
  return()
endif()

if(NOT DEFINED LINES_PER_FRAME)
  set(LINES_PER_FRAME 1)
endif()
math(EXPR MAX_LINES "${MAX_LINES} + ${_user_frames} * ${LINES_PER_FRAME}")
# MODE=fail -- remember: the FATAL_ERROR "failed as expected" means "test PASSED" (see header).
# The regex must match the FIRST line that says "error:", the whole output must have at most
# MAX_LINES lines: a diagnostic that fits on a screen and starts with what is wrong, and no line
# may spell a subgraph: a node's definition (expr<op, operands...>) whose operand is spelled as a
# definition again instead of a leaf or a node_ref<identity>.
string(REGEX MATCH "[^\n]*error: [^\n]*" _first_error "${_out}")
string(REGEX MATCHALL "\n" _newlines "${_out}")
list(LENGTH _newlines _lines)
string(REGEX MATCH "expr<(typeflow::)?ops::[A-Za-z_0-9:]+(<[^<>]*>)?, (typeflow::)?expr<[^\n]*"
       _spelled "${_out}")
if(NOT _rc EQUAL 0 AND _first_error MATCHES "${_expect}" AND _lines LESS_EQUAL MAX_LINES
   AND _spelled STREQUAL "")
  message(FATAL_ERROR "failed as expected: ${SOURCE}\n  first error matched: ${_expect}\n"
                      "  ${_lines} lines (at most ${MAX_LINES})")
endif()

if(_rc EQUAL 0)
  message("UNEXPECTED: ${SOURCE} compiled successfully, but it must fail with an error matching:\n  ${_expect}")
elseif(NOT _first_error MATCHES "${_expect}")
  message("UNEXPECTED: ${SOURCE} failed to compile (exit ${_rc}), but its first error does not match the regex:\n  ${_expect}\nfirst error: ${_first_error}")
elseif(NOT _spelled STREQUAL "")
  message("UNEXPECTED: ${SOURCE}: the diagnostic spells a subgraph: ${_spelled}")
else()
  message("UNEXPECTED: ${SOURCE}: the diagnostic has ${_lines} lines, more than ${MAX_LINES}")
endif()
message("command: ${_cmdline}\n--- compiler output ---\n${_out}--- end of compiler output ---")
# no "failed as expected" line -> FAILED
