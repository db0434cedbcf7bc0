# package_test.cmake - drives one typeflow packaging test as a single CTest test.
#
#   cmake -DCONFIG=<build>/test/package_test_config.cmake
#         -DMODE=<find_package|add_subdirectory|fetchcontent> -P package_test.cmake
#
# find_package     : `cmake --install <build> --prefix <build>/pkgtest/prefix`, then
#                    configure/build/run test/package (find_package(typeflow CONFIG))
#                    with -DCMAKE_PREFIX_PATH=<prefix>.
# add_subdirectory : configure/build/run test/package_subdir
#                    (add_subdirectory(<typeflow source> typeflow_build)).
# fetchcontent     : configure/build/run test/package_fetchcontent
#                    (FetchContent_Declare(typeflow SOURCE_DIR <typeflow source>)).
#
# Consumers are built at -O0; each mode works in <build>/pkgtest/<mode>/ (fresh each run).

if(NOT DEFINED CONFIG OR NOT EXISTS "${CONFIG}")
  message(FATAL_ERROR "package_test.cmake: -DCONFIG=<package_test_config.cmake> is required")
endif()
include("${CONFIG}")

if(MODE STREQUAL "find_package")
  set(_consumer_src "${TYPEFLOW_SOURCE_ROOT}/test/package")
elseif(MODE STREQUAL "add_subdirectory")
  set(_consumer_src "${TYPEFLOW_SOURCE_ROOT}/test/package_subdir")
elseif(MODE STREQUAL "fetchcontent")
  set(_consumer_src "${TYPEFLOW_SOURCE_ROOT}/test/package_fetchcontent")
else()
  message(FATAL_ERROR "package_test.cmake: unknown MODE '${MODE}'")
endif()

set(_work "${PKGTEST_DIR}/${MODE}")
set(_build "${_work}/build")
set(_prefix "${PKGTEST_DIR}/prefix")

function(run_step what)
  message(STATUS "[package.${MODE}] ${what}")
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "[package.${MODE}] ${what} FAILED (exit ${rc})\ncommand: ${cmd}\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${_work}")
file(MAKE_DIRECTORY "${_work}")

set(_args
  -S "${_consumer_src}"
  -B "${_build}"
  -G "${PKG_GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${PKG_CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE="
  "-DCMAKE_CXX_FLAGS=-O0"
  "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF")
if(PKG_MAKE_PROGRAM)
  list(APPEND _args "-DCMAKE_MAKE_PROGRAM=${PKG_MAKE_PROGRAM}")
endif()
if(PKG_BLA_VENDOR)
  list(APPEND _args "-DBLA_VENDOR=${PKG_BLA_VENDOR}")
endif()
if(PKG_CUDA AND PKG_CUDA_ROOT)
  list(APPEND _args "-DCUDAToolkit_ROOT=${PKG_CUDA_ROOT}")
endif()

# Prefix paths the main build was configured with go through the environment
# (":"-separated), so that no ";" list has to survive a command line.
if(PKG_PREFIX_PATH)
  if(DEFINED ENV{CMAKE_PREFIX_PATH} AND NOT "$ENV{CMAKE_PREFIX_PATH}" STREQUAL "")
    list(APPEND PKG_PREFIX_PATH "$ENV{CMAKE_PREFIX_PATH}")
  endif()
  string(REPLACE ";" ":" _env_pp "${PKG_PREFIX_PATH}")
  set(ENV{CMAKE_PREFIX_PATH} "${_env_pp}")
endif()

if(MODE STREQUAL "find_package")
  file(REMOVE_RECURSE "${_prefix}")
  run_step("install typeflow into ${_prefix}"
    "${CMAKE_COMMAND}" --install "${TYPEFLOW_BINARY_DIR}" --prefix "${_prefix}")
  if(NOT EXISTS "${_prefix}/include/typeflow")
    message(FATAL_ERROR "[package.${MODE}] install did not produce ${_prefix}/include/typeflow")
  endif()
  list(APPEND _args
    "-DCMAKE_PREFIX_PATH=${_prefix}"
    "-DTYPEFLOW_EXPECTED_PREFIX=${_prefix}")
else()
  # Vendored builds: mirror the options of the main build so the probes match.
  list(APPEND _args
    "-DTYPEFLOW_SOURCE_ROOT=${TYPEFLOW_SOURCE_ROOT}"
    "-DTYPEFLOW_USE_BLAS=${PKG_USE_BLAS}"
    "-DTYPEFLOW_CUDA=${PKG_CUDA}")
  if(PKG_CUDA)
    list(APPEND _args "-DCMAKE_CUDA_COMPILER=${PKG_CUDA_COMPILER}")
    # CUDAARCHS (env) initialises CMAKE_CUDA_ARCHITECTURES and may hold a ";" list.
    set(ENV{CUDAARCHS} "${PKG_CUDA_ARCHITECTURES}")
  endif()
  if(MODE STREQUAL "fetchcontent")
    list(APPEND _args "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"
                      "-DFETCHCONTENT_BASE_DIR=${_work}/_deps")
  endif()
endif()
run_step("configure consumer ${_consumer_src}" "${CMAKE_COMMAND}" ${_args})
run_step("build consumer" "${CMAKE_COMMAND}" --build "${_build}" --config Debug)

set(_exe "")
foreach(_cand IN ITEMS "${_build}/consumer" "${_build}/Debug/consumer"
                       "${_build}/consumer.exe" "${_build}/Debug/consumer.exe")
  if(EXISTS "${_cand}")
    set(_exe "${_cand}")
    break()
  endif()
endforeach()
if(NOT _exe)
  message(FATAL_ERROR "[package.${MODE}] consumer executable not found in ${_build}")
endif()

run_step("run consumer" "${_exe}")
message("${step_output}")
if(NOT step_output MATCHES "consumer ok: 42")
  message(FATAL_ERROR "[package.${MODE}] consumer output lacks 'consumer ok: 42'")
endif()
message(STATUS "[package.${MODE}] passed")
