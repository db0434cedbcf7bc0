# mpi.hang_before_first_run: rank 0 of 2 hangs before its first run, so rank 1 waits in the
# initial variable broadcast from rank 0. The job must stop with a clear error within the collective
# timeout (3 s) plus start-up, not hang until this script's 120 s limit.
# Usage: cmake -DMPIEXEC=<mpiexec> -DEXE=<test_mpi_replicate> -P mpi_hang_first.cmake
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
string(TIMESTAMP t0 "%s")
execute_process(COMMAND "${MPIEXEC}" -n 2 --oversubscribe "${EXE}" --hang-first
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
if(rc EQUAL 0 OR rc MATCHES "timeout")
  message(FATAL_ERROR "the job should stop with an error when a rank hangs before the first run; got '${rc}':\n${out}\n${err}")
endif()
if(NOT "${out}" MATCHES "initial variable broadcast \\(MPI_Ibcast\\) on rank 1 did not complete within 3")
  message(FATAL_ERROR "no clear error naming the broadcast:\n${out}\n${err}")
endif()
if(seconds GREATER 60)
  message(FATAL_ERROR "the job took ${seconds} s to stop")
endif()
message(STATUS "a rank hung before the first run: the job stopped in ${seconds} s")
