# example.mnist: the main job's program on a small slice of Fashion-MNIST (--train-limit,
# --test-limit): the seed's log line,
# the machine line first, the per-epoch test accuracy, a checkpoint that --resume continues from, and clear errors for a
# missing data directory and bad flags (exit 2), --help (exit 0), and --graph, --trace, --profile
# and --log-device-placement.
# Usage: cmake -DEXE=<mnist> -DDATA=<dir> -DWORK=<scratch dir> -P mnist_smoke.cmake
if(NOT EXISTS "${DATA}/train-labels-idx1-ubyte.gz" AND NOT EXISTS "${DATA}/train-labels-idx1-ubyte")
  message(STATUS "skipped: no Fashion-MNIST in ${DATA} (apt-get install dataset-fashion-mnist)")
  return()
endif()
file(REMOVE_RECURSE "${WORK}")

function(run_mnist out_var)
  execute_process(COMMAND "${EXE}" ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mnist ${ARGN} exited with ${rc}:\n${out}\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

set(common --data-dir "${DATA}" --train-limit 1024 --test-limit 1000 --batch-size 64 --log-every 4 --threads 2
           --checkpoint-dir "${WORK}")
run_mnist(out ${common} --epochs 1)
string(REGEX MATCH "final loss = [0-9.]+, test accuracy = [0-9.]+" one_tower "${out}")
set(date "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\\.[0-9]+")
if(NOT out MATCHES "${date}: step 0, loss = [0-9]+\\.[0-9][0-9] \\([0-9]+\\.[0-9] examples/sec; [0-9]+\\.[0-9][0-9][0-9] sec/batch\\)\n")
  message(FATAL_ERROR "no seed-format log line for step 0 in:\n${out}")
endif()
if(NOT out MATCHES "^${date}: machine: [^\n]+; fused loops: [^\n]+; convolutions and float32 matmul: ")
  message(FATAL_ERROR "the first log line does not describe the machine:\n${out}")
endif()
if(NOT out MATCHES "data: 1024 training and 1000 test images from ")
  message(FATAL_ERROR "--train-limit 1024 --test-limit 1000 should give 1024 and 1000 images:\n${out}")
endif()
if(NOT out MATCHES "step 12, loss = ")
  message(FATAL_ERROR "no log line every 4 steps in:\n${out}")
endif()
if(NOT out MATCHES "epoch 1 done, step 16, test accuracy = 0\\.[0-9][0-9][0-9][0-9]")
  message(FATAL_ERROR "no end-of-epoch test accuracy in:\n${out}")
endif()
if(NOT EXISTS "${WORK}/model.safetensors")
  message(FATAL_ERROR "no checkpoint written to ${WORK}")
endif()

# The same data as TFRecord (mnist_to_tfrecord, the seed's Example layout): the checkpoint just
# written, evaluated on test.tfrecord, gives the IDX run's test accuracy exactly (the same
# pixels and labels through the other path); then a fresh epoch trains through the input queue.
if(CONVERT)
  execute_process(COMMAND "${CONVERT}" --data-dir "${DATA}" --out-dir "${WORK}/tfrecord"
                  --limit 1024 --shards 2 OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "wrote 512 records to [^\n]*train-00001-of-00002.tfrecord")
    message(FATAL_ERROR "mnist_to_tfrecord failed (${rc}):\n${out}\n${err}")
  endif()
  run_mnist(out --data-format tfrecord --test-limit 1000 --data-dir "${WORK}/tfrecord" --batch-size 64 --threads 2
            --checkpoint-dir "${WORK}" --resume --epochs 1)
  string(REGEX MATCH "test accuracy = [0-9.]+" tf_accuracy "${out}")
  string(REGEX MATCH "test accuracy = [0-9.]+" idx_accuracy "${one_tower}")
  if(NOT out MATCHES "1024 training and 1000 test images [^\n]*\(tfrecord\)" OR
     NOT tf_accuracy STREQUAL idx_accuracy)
    message(FATAL_ERROR "the IDX checkpoint on test.tfrecord should give ${idx_accuracy}:\n${out}")
  endif()
  run_mnist(out --data-format tfrecord --test-limit 1000 --data-dir "${WORK}/tfrecord" --batch-size 64 --threads 2
            --log-every 4 --epochs 2)
  if(NOT out MATCHES "step 28, loss = " OR NOT out MATCHES "epoch 2 done, step 32, test accuracy = 0\\.[0-9]+")
    message(FATAL_ERROR "training from TFRecord did not run 2 epochs of 16 steps:\n${out}")
  endif()
endif()

# --resume continues from global_step 16: the second epoch starts at step 16.
run_mnist(out ${common} --epochs 2 --resume)
if(NOT out MATCHES "resumed from [^\n]* at step 16\n" OR NOT out MATCHES "step 16, loss = "
   OR out MATCHES "step 0, loss = " OR NOT out MATCHES "epoch 2 done, step 32, test accuracy")
  message(FATAL_ERROR "--resume did not continue at step 16:\n${out}")
endif()
if(NOT out MATCHES "done: 2 epochs, 32 steps, final loss = [0-9.]+, test accuracy = 0\\.[0-9]+")
  message(FATAL_ERROR "no summary line in:\n${out}")
endif()

# Two CPU towers on half a batch each train as one tower on the whole batch.
run_mnist(out --data-dir "${DATA}" --train-limit 1024 --test-limit 1000 --batch-size 64 --log-every 4 --threads 2
          --epochs 1 --replicas 2)
string(REGEX MATCH "final loss = [0-9.]+, test accuracy = [0-9.]+" two_towers "${out}")
if(NOT out MATCHES "2 replicas" OR NOT one_tower OR NOT two_towers STREQUAL one_tower)
  message(FATAL_ERROR "--replicas 2 should match one tower (${one_tower}):\n${out}")
endif()

# Two ranks under mpirun, one tower each, end with one tower's test accuracy.
if(EXE_MPI AND MPIEXEC)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
  execute_process(COMMAND "${MPIEXEC}" -n 2 --oversubscribe "${EXE_MPI}" --data-dir "${DATA}"
                  --train-limit 1024 --test-limit 1000 --batch-size 64 --log-every 4 --threads 1 --epochs 1
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 240)
  string(REGEX MATCH "test accuracy = [0-9.]+" mpi_accuracy "${out}")
  string(REGEX MATCH "test accuracy = [0-9.]+" one_accuracy "${one_tower}")
  if(NOT rc EQUAL 0 OR NOT mpi_accuracy STREQUAL one_accuracy OR NOT out MATCHES "step 12, loss")
    message(FATAL_ERROR "mnist_mpi on 2 ranks should match one tower (${one_accuracy}); got ${rc}:\n${out}\n${err}")
  endif()
endif()

# Seeing the graph and the run: --graph draws the training graph through Graphviz, --trace and
# --profile record steps 1 and 2 (the trace checked by scripts/check_trace.py), and
# --log-device-placement prints each node's device once per plan.
execute_process(COMMAND "${EXE}" --data-dir "${DATA}" --train-limit 256 --test-limit 1000 --batch-size 64 --threads 2
                --epochs 1 --graph "${WORK}/train.svg" --trace "${WORK}/trace.json" --profile
                --trace-first 1 --trace-steps 2 --log-device-placement
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "the training graph written to [^\n]*train.svg"
   OR NOT out MATCHES "where the time goes: 2 runs" OR NOT out MATCHES "conv2d_backprop_filter"
   OR NOT out MATCHES "trace of 2 steps written to")
  message(FATAL_ERROR "--graph, --trace and --profile: got ${rc}:\n${out}\n${err}")
endif()
string(REGEX MATCHALL "[^\n]*\\(conv2d\\): /job:localhost/replica:0/task:0/device:CPU:0\n" convs "${err}")
list(LENGTH convs n_convs)
# Two plans run (the training step, and the test-set evaluation), each logged on its first run
# only: the two conv2d twice, not once per step.
if(NOT n_convs EQUAL 4)
  message(FATAL_ERROR "--log-device-placement should place the two conv2d once per plan:\n${err}")
endif()
file(READ "${WORK}/train.svg" svg LIMIT 4096)
if(NOT svg MATCHES "<svg")
  message(FATAL_ERROR "${WORK}/train.svg is not an SVG picture")
endif()
find_program(PYTHON3 python3)
if(PYTHON3)
  execute_process(COMMAND "${PYTHON3}" "${CMAKE_CURRENT_LIST_DIR}/../../scripts/check_trace.py"
                  "${WORK}/trace.json" --runs 2 --min-steps 40
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the main job's trace is not valid trace-event JSON:\n${out}\n${err}")
  endif()
endif()

# --precision bfloat16: the session line says what the products compute in (bfloat16 where the
# CPU runs it natively, else float32, said so), and the step trains.
execute_process(COMMAND "${EXE}" --data-dir "${DATA}" --train-limit 256 --test-limit 1000 --batch-size 64 --threads 2
                --epochs 1 --precision bfloat16
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES
   "CPU products in (bfloat16 \\(float32 accumulation\\)|float32 \\(no native bfloat16 on this CPU\\))"
   OR NOT out MATCHES "epoch 1 done, step 4, test accuracy = 0\\.[0-9]+")
  message(FATAL_ERROR "--precision bfloat16: got ${rc}:\n${out}\n${err}")
endif()
# --precision float16: float16-rounded products (emulated) under dynamic loss scaling, whose
# scale each epoch logs.
execute_process(COMMAND "${EXE}" --data-dir "${DATA}" --train-limit 256 --test-limit 1000 --batch-size 64 --threads 2
                --epochs 1 --precision float16
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES
   "CPU products in (float16 \\(emulated, float32 accumulation; loss scaling\\)|float32 \\(no oneDNN in this build; loss scaling\\))"
   OR NOT out MATCHES "epoch 1 done, step 4, test accuracy = 0\\.[0-9]+"
   OR NOT out MATCHES "loss scale = [0-9]+")
  message(FATAL_ERROR "--precision float16: got ${rc}:\n${out}\n${err}")
endif()
execute_process(COMMAND "${EXE}" --precision float16 --replicas 2 OUTPUT_VARIABLE out
                ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "float16 trains with --placement cpu and one replica")
  message(FATAL_ERROR "--precision float16 --replicas 2 should fail saying why; got ${rc}:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --precision float8 OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--precision: float8 not in {float32,bfloat16,float16}")
  message(FATAL_ERROR "an unknown precision should fail naming the choices; got ${rc}:\n${err}")
endif()

execute_process(COMMAND "${EXE}" --data-dir "${WORK}/no-such-dir" OUTPUT_VARIABLE out
                ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "no-such-dir")
  message(FATAL_ERROR "a missing data directory should fail naming it; got ${rc}:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --epochs banana OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--epochs: expects a number, got \"banana\"")
  message(FATAL_ERROR "a bad flag value should fail naming it; got ${rc}:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --placement tpu OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--placement: tpu not in {cpu,gpu,variables-on-cpu}")
  message(FATAL_ERROR "an unknown placement should fail naming the choices; got ${rc}:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --resume OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--resume requires --checkpoint-dir")
  message(FATAL_ERROR "--resume without --checkpoint-dir should fail; got ${rc}:\n${err}")
endif()
execute_process(COMMAND "${EXE}" --help OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "Usage: mnist \\[OPTIONS\\]"
   OR NOT out MATCHES "--placement TEXT:{cpu,gpu,variables-on-cpu}=cpu"
   OR NOT out MATCHES "--epochs INT:POSITIVE=10")
  message(FATAL_ERROR "--help should print the usage and the defaults and exit 0; got ${rc}:\n${out}${err}")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "mnist example: log format, accuracy, checkpoint and resume OK")
