# compile_fail_pch.cmake - precompiles typeflow/typeflow.hpp for the compile-fail tests.
#
#   cmake -DCXX=<compiler> -DKIND=<gcc|clang> -DFLAGS_FILE=<compile_fail_flags.txt>
#         [-DEXTRA_FLAGS="<the test's extra flags>"] -DHEADER=<header or wrapper to compile>
#         -DOUT=<output file> -P compile_fail_pch.cmake
#
# Each compile-fail test parses all of typeflow.hpp before it reaches its few lines of misuse:
# about 7 s of the 7-9 s one takes on this project's 2-core machines, 160 times in a CI run. A
# precompiled header cut one to about 2.5 s (g++ 12 and clang 19, AMD Zen 4). compile_fail.cmake
# uses it while it is newer than every file it was built from (see there); otherwise it compiles
# without one.
#
# The header is compiled with exactly the flags of the tests that will use it (the flags file,
# less -fsyntax-only, plus EXTRA_FLAGS): g++ ignores a precompiled header built with other
# options, and clang refuses one. It also writes OUT.d, every file the header read (the build's
# DEPFILE, and compile_fail.cmake's freshness check). If the compile fails (under the control
# tests' -Werror: a warning in typeflow's non-template code), no header is written and the build
# goes on: the tests then compile without one and report the warning themselves. The output is
# written to a temporary file and renamed, so an interrupted build leaves no truncated header.
foreach(_var IN ITEMS CXX KIND FLAGS_FILE HEADER OUT)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "compile_fail_pch.cmake: -D${_var}=... is required")
  endif()
endforeach()

file(STRINGS "${FLAGS_FILE}" _flags)
list(FILTER _flags EXCLUDE REGEX "^[ \t]*$")
list(REMOVE_ITEM _flags "-fsyntax-only")
set(_extra "")
if(DEFINED EXTRA_FLAGS AND NOT EXTRA_FLAGS STREQUAL "")
  separate_arguments(_extra UNIX_COMMAND "${EXTRA_FLAGS}")
endif()

# clang: the templates the header itself uses are instantiated in the header, once, not at the
# end of every unit that loads it (-fpch-instantiate-templates, what clang-cl and CMake's own
# precompiled headers pass): a test's load goes from about 4 s to 0.1 s (clang 19, AMD Zen 3).
if(KIND STREQUAL "clang")
  list(APPEND _extra -fpch-instantiate-templates)
endif()

get_filename_component(_dir "${OUT}" DIRECTORY)
file(MAKE_DIRECTORY "${_dir}")
set(_tmp "${OUT}.tmp")
file(REMOVE "${_tmp}" "${OUT}")
set(ENV{LC_ALL} C)
execute_process(
  COMMAND "${CXX}" ${_flags} ${_extra} -x c++-header "${HEADER}" -o "${_tmp}"
          -MD -MF "${OUT}.d" -MT "${OUT}"
  RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _out
  ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0)
  file(REMOVE "${_tmp}")
  message(WARNING "typeflow: precompiling ${HEADER} for the compile-fail tests (${KIND}, "
                  "${EXTRA_FLAGS}) failed; those tests compile without it:\n${_out}")
  return()
endif()
file(RENAME "${_tmp}" "${OUT}")
