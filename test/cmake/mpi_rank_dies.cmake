# mpi.rank_dies: rank 1 of 2 dies before step 3. The job must stop within the timeout with a
# clear error (ours: the all-reduce did not complete; or mpirun's: a rank exited without
# finalizing), and rank 0's last checkpoint must restore, at step 3.
# Usage: cmake -DMPIEXEC=<mpiexec> -DEXE=<test_mpi_replicate> -DWORK=<dir> -P mpi_rank_dies.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
string(TIMESTAMP t0 "%s")
execute_process(COMMAND "${MPIEXEC}" -n 2 --oversubscribe "${EXE}" --die-after 3 "${WORK}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
if(rc EQUAL 0 OR rc MATCHES "timeout")
  message(FATAL_ERROR "the job should stop with an error when a rank dies; got '${rc}':\n${out}\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "did not complete within|exited|abort|ABORT")
  message(FATAL_ERROR "no clear error when a rank died:\n${out}\n${err}")
endif()
execute_process(COMMAND "${MPIEXEC}" -n 1 "${EXE}" --check "${WORK}/model.safetensors" 3
                OUTPUT_VARIABLE out2 ERROR_VARIABLE err2 RESULT_VARIABLE rc2 TIMEOUT 60)
if(NOT rc2 EQUAL 0)
  message(FATAL_ERROR "the last checkpoint does not restore at step 3:\n${out2}\n${err2}")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "a dead rank stopped the job in ${seconds} s; the checkpoint restored at step 3")
