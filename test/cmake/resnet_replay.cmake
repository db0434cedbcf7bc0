# example.resnet_replay: examples/resnet trains 50 steps with --replay, and
# examples/resnet/replay_torch.py replays them in PyTorch from its initial variables and batches;
# the losses must agree within float32 noise, and the moving averages after the 50 steps within
# 1e-3 (the script's rules). Without Debian's python3-torch the test says so and CTest counts it
# as skipped (SKIP_REGULAR_EXPRESSION), after checking that resnet wrote the replay files.
# Usage: cmake -DEXE=<resnet> -DDATA=<fashion-mnist dir> -DSCRIPT=<replay_torch.py> -DDIR=<scratch>
#        -P resnet_replay.cmake
if(NOT EXISTS "${DATA}/train-images-idx3-ubyte.gz" AND NOT EXISTS "${DATA}/train-images-idx3-ubyte")
  message("skipped: no Fashion-MNIST at ${DATA}")
  return()
endif()
file(REMOVE_RECURSE "${DIR}")
execute_process(COMMAND "${EXE}" --data-dir "${DATA}" --train-limit 1600 --test-limit 500
                        --batch-size 32 --epochs 1 --log-every 50 --threads 2 --replay "${DIR}"
                        --checkpoint "${DIR}/final.safetensors"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "resnet --replay exited with ${rc}:\n${out}\n${err}")
endif()
foreach(f initial.safetensors images.bin labels.bin losses.txt final.safetensors)
  if(NOT EXISTS "${DIR}/${f}")
    message(FATAL_ERROR "resnet --replay wrote no ${f}")
  endif()
endforeach()
file(STRINGS "${DIR}/losses.txt" losses)
list(LENGTH losses n)
file(SIZE "${DIR}/labels.bin" bytes)
math(EXPR expected "50 * 32 * 4") # steps, batch, int32
if(NOT n EQUAL 50 OR NOT bytes EQUAL expected)
  message(FATAL_ERROR "resnet --replay wrote ${n} losses and ${bytes} bytes of labels, "
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
