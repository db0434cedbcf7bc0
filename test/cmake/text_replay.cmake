# example.gpt_replay, example.lstm_replay: a character-level example trains 50 steps with
# --replay, and its replay_torch.py replays them in PyTorch from its initial variables and
# batches; the losses must agree within float32 noise (the script's rule). Without Debian's
# python3-torch (scripts/install-deps.sh installs it) the test says so and CTest counts it as
# skipped (SKIP_REGULAR_EXPRESSION), after checking that the example wrote the replay files.
# Usage: cmake -DEXE=<gpt|lstm> -DNAME=<gpt|lstm> -DCONTEXT=<32|64> [-DBATCH=32] -DDATA=<corpus>
#        -DSCRIPT=<replay_torch.py> -DDIR=<scratch> -P text_replay.cmake
if(NOT DEFINED BATCH)
  set(BATCH 32)
endif()
file(REMOVE_RECURSE "${DIR}")
execute_process(COMMAND "${EXE}" --data "${DATA}" --steps 50 --log-every 50 --threads 2
                        --sample 0 --batch-size ${BATCH} --replay "${DIR}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} --replay exited with ${rc}:\n${out}\n${err}")
endif()
foreach(f initial.safetensors batches.bin losses.txt)
  if(NOT EXISTS "${DIR}/${f}")
    message(FATAL_ERROR "${NAME} --replay wrote no ${f}")
  endif()
endforeach()
file(STRINGS "${DIR}/losses.txt" losses)
list(LENGTH losses n)
file(SIZE "${DIR}/batches.bin" bytes)
# steps, tokens and targets, batch, context, int32
math(EXPR expected "50 * 2 * ${BATCH} * ${CONTEXT} * 4")
if(NOT n EQUAL 50 OR NOT bytes EQUAL expected)
  message(FATAL_ERROR "${NAME} --replay wrote ${n} losses and ${bytes} bytes of batches, "
                      "not 50 and ${expected}")
endif()
execute_process(COMMAND /usr/bin/python3 -c "import numpy, torch" RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "skipped: /usr/bin/python3 has no torch and numpy (python3-torch)")
endif()
execute_process(COMMAND /usr/bin/python3 "${SCRIPT}" "${DIR}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the PyTorch replay does not agree (exit ${rc}):\n${err}")
endif()
