# example.gpt, example.lstm: a character-level example (examples/text_main.hpp) trains briefly on
# a text corpus: the main job's log line, a loss that falls (the validation loss at least 1.0 nat
# under the first step's, about ln 128 = 4.85), a generated sample; and clear errors for a missing
# corpus, a --replay directory that cannot be created and a bad flag.
# Usage: cmake -DEXE=<gpt|lstm> -DNAME=<gpt|lstm> -DDATA=<corpus dir or file> [-DSTEPS=150]
#        -P text_smoke.cmake
if(NOT DEFINED STEPS)
  set(STEPS 150)
endif()
execute_process(COMMAND "${EXE}" --data "${DATA}" --steps ${STEPS} --log-every 50 --batch-size 16
                        --threads 2 --sample 120
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} exited with ${rc}:\n${out}\n${err}")
endif()
if(NOT out MATCHES "step 1, loss = ([0-9]+\\.[0-9]+) \\([0-9]+\\.[0-9] examples/sec; [0-9]+\\.[0-9][0-9][0-9] sec/batch\\)\n")
  message(FATAL_ERROR "no log line for step 1 in:\n${out}")
endif()
set(first "${CMAKE_MATCH_1}")
if(NOT out MATCHES "step ${STEPS}, loss = ")
  message(FATAL_ERROR "no log line for the last step in:\n${out}")
endif()
if(NOT out MATCHES "validation loss = ([0-9]+\\.[0-9]+)\n")
  message(FATAL_ERROR "no validation loss in:\n${out}")
endif()
set(valid "${CMAKE_MATCH_1}")
string(REGEX REPLACE "\\." "" first_digits "${first}")
string(REGEX REPLACE "\\." "" valid_digits "${valid}")
math(EXPR margin "${first_digits} - ${valid_digits}")
if(margin LESS 10000) # four decimals: 1.0 nat = 10000
  message(FATAL_ERROR "the loss did not fall by 1.0: step 1 ${first}, validation ${valid}\n${out}")
endif()
if(NOT out MATCHES "sample:\n[^\n]")
  message(FATAL_ERROR "no generated sample in:\n${out}")
endif()
string(REGEX REPLACE ".*sample:\n" "" sample "${out}")
string(LENGTH "${sample}" n)
if(n LESS 100)
  message(FATAL_ERROR "the sample has ${n} bytes, not 120:\n${out}")
endif()
message(STATUS "${NAME}: step 1 loss ${first}, validation loss ${valid}")

execute_process(COMMAND "${EXE}" --data /nonexistent/corpus --steps 1
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "${NAME}: typeflow: cannot read /nonexistent/corpus")
  message(FATAL_ERROR "a missing corpus: exit ${rc}, stderr:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --data "${DATA}" --steps 1 --sample 0 --replay /proc/no-such/dir
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "${NAME}: typeflow: cannot create the replay directory /proc/no-such/dir")
  message(FATAL_ERROR "an unwritable --replay directory: exit ${rc}, stderr:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --steps 0 OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "${NAME}: --steps: must be positive, got 0")
  message(FATAL_ERROR "--steps 0 should fail naming the flag; got ${rc}:\n${err}")
endif()
