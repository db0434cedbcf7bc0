# example.resnet: examples/resnet trains briefly on the first 2048 Fashion-MNIST images: the main
# job's log line, a loss that falls (the last step's under 0.8 of the first's), a test accuracy
# over 0.55 (chance is 0.10) from batch norm's moving averages, and a checkpoint that holds them:
# restored into a fresh process with no training, it gives the same accuracy to four digits.
# Then clear errors for a checkpoint that does not exist, a batch size of 1 and a negative
# learning rate (exit 2, naming the flag).
# Usage: cmake -DEXE=<resnet> -DDATA=<fashion-mnist dir> -DWORK=<scratch dir> -P resnet_smoke.cmake
if(NOT EXISTS "${DATA}/train-images-idx3-ubyte.gz" AND NOT EXISTS "${DATA}/train-images-idx3-ubyte")
  message("skipped: no Fashion-MNIST at ${DATA}")
  return()
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(common --data-dir "${DATA}" --train-limit 2048 --test-limit 1000 --batch-size 64 --threads 2)
execute_process(COMMAND "${EXE}" ${common} --epochs 2 --log-every 16
                        --checkpoint "${WORK}/resnet.safetensors"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "resnet exited with ${rc}:\n${out}\n${err}")
endif()
if(NOT out MATCHES "step 1, loss = ([0-9]+\\.[0-9]+) \\([0-9]+\\.[0-9] examples/sec; [0-9]+\\.[0-9][0-9][0-9] sec/batch\\)\n")
  message(FATAL_ERROR "no log line for step 1 in:\n${out}")
endif()
set(first "${CMAKE_MATCH_1}")
if(NOT out MATCHES "step 64, loss = ([0-9]+\\.[0-9]+)")
  message(FATAL_ERROR "no log line for the last step (64) in:\n${out}")
endif()
set(last "${CMAKE_MATCH_1}")
string(REGEX REPLACE "\\." "" first_digits "${first}")
string(REGEX REPLACE "\\." "" last_digits "${last}")
math(EXPR last_x10 "${last_digits} * 10")
math(EXPR first_x8 "${first_digits} * 8")
if(NOT last_x10 LESS first_x8)
  message(FATAL_ERROR "the loss did not fall under 0.8 of its first value: ${first} -> ${last}\n${out}")
endif()
if(NOT out MATCHES "test accuracy = 0\\.([0-9][0-9][0-9][0-9])\n")
  message(FATAL_ERROR "no test accuracy in:\n${out}")
endif()
set(accuracy "${CMAKE_MATCH_1}")
if(accuracy LESS 5500)
  message(FATAL_ERROR "test accuracy 0.${accuracy} after 64 steps, expected over 0.55:\n${out}")
endif()
# the safetensors header is JSON text before the binary data: its strings name the tensors
file(STRINGS "${WORK}/resnet.safetensors" header LIMIT_INPUT 65536 REGEX "moving_")
foreach(name "res2/bn1/moving_mean" "res3/shortcut_bn/moving_variance" "stem/bn/moving_mean")
  string(FIND "${header}" "\"${name}\"" at)
  if(at LESS 0)
    message(FATAL_ERROR "the checkpoint holds no ${name}")
  endif()
endforeach()

execute_process(COMMAND "${EXE}" ${common} --epochs 0 --restore "${WORK}/resnet.safetensors"
                OUTPUT_VARIABLE out2 ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out2 MATCHES "test accuracy = 0\\.${accuracy}\n")
  message(FATAL_ERROR "restored, the accuracy is not 0.${accuracy} (exit ${rc}):\n${out2}\n${err}")
endif()
message(STATUS "resnet: loss ${first} -> ${last}, test accuracy 0.${accuracy}, the same restored")

execute_process(COMMAND "${EXE}" ${common} --epochs 0 --restore "${WORK}/missing.safetensors"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "resnet: typeflow: ")
  message(FATAL_ERROR "a missing checkpoint: exit ${rc}, stderr:\n${err}")
endif()
execute_process(COMMAND "${EXE}" ${common} --batch-size 1 OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "resnet: --batch-size: ")
  message(FATAL_ERROR "--batch-size 1 should fail naming the flag; got ${rc}:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --learning-rate -1 OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "resnet: --learning-rate: must be positive, got -1")
  message(FATAL_ERROR "--learning-rate -1 should fail naming the flag; got ${rc}:\n${err}")
endif()
