#!/usr/bin/env bash
# Runs what needs a GPU on a lent GPU machine (issue 20), from binaries built elsewhere with
# scripts/gpu_pack.sh (the machine has the CUDA toolkit but no Debian packages):
#   bash scripts/gpu_session.sh [tests] [examples] [sanitize] [bench] [baselines] [mainjob]
# With no argument: tests, examples and bench; they run in the order named. Logs go to $OUT (or ./gpu-out), a summary to
# stdout. Reads .gpu/bin (the binaries) and .gpu/data (Fashion-MNIST's four .gz files).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BIN=$PWD/.gpu/bin
DATA=$PWD/.gpu/data
what=${*:-tests examples bench}
# (sanitize, baselines and mainjob take minutes each: name them. MAINJOB_PLACEMENTS picks the
# main job's placements, default both; MAINJOB_PRECISIONS its precisions, default float32.)

# Shared libraries the binaries need that the machine keeps outside the loader's path (cuBLAS,
# NCCL in Python wheels): found by name, added to LD_LIBRARY_PATH.
for lib in $(ldd "$BIN"/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
  dir=$(find / -xdev -name "$lib" -not -path '*/proc/*' 2>/dev/null | head -1 | xargs -r dirname)
  [ -n "$dir" ] && export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -1
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  ldd "$BIN"/* | grep -E 'not found' || echo "all libraries found"
} 2>&1 | tee "$OUT/env.txt"

summary=()
# DEADLINE (seconds from the start, default 1500): a step gets at most the time left before it,
# and none when under 15 s are left, so that the summary and the logs always come back.
deadline=${DEADLINE:-1500}
run() { # name, timeout, command...
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if ((left < 15)); then
    summary+=("$(printf '%-40s skipped: the deadline' "$name")")
    return
  fi
  ((limit > left)) && limit=$left
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-40s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" \
    "$(grep -E 'FAIL|skipped|test cases|accuracy' "$OUT/$name.log" | tail -1 | cut -c1-90)")")
}

small=(--data-dir "$DATA" --train-limit 512 --epochs 1 --batch-size 64 --log-every 4 --threads 2)
graph_tests=(fused session layout replicate) # test_cuda_graph's, run by name
do_tests() {
  for t in "$BIN"/test_cuda_*; do
    [ "$(basename "$t")" = test_cuda_graph ] && continue
    run "$(basename "$t")" 300 "$t"
  done
  for g in "${graph_tests[@]}"; do
    run "test_cuda_graph.$g" 300 "$BIN/test_cuda_graph" "$g"
  done
}
do_examples() {
  for p in gpu variables-on-cpu; do # (cpu: the CI runs example.mnist_cuda.cpu)
    run "mnist_cuda.$p" 300 "$BIN/mnist_cuda" "${small[@]}" --placement "$p"
  done
  run mnist_cuda.replicas2 120 "$BIN/mnist_cuda" "${small[@]}" --placement variables-on-cpu \
    --replicas 2
}
do_sanitize() { # SANITIZE_TOOLS and SANITIZE_TESTS narrow it (default: all of them);
  # SANITIZE_MNIST=0 leaves out the main job's short run
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    # (a test_cuda_graph test by its name: "graph.fused"; a file of test_cuda_units: "units.runtime")
    for t in ${SANITIZE_TESTS:-graph.fused graph.session test_cuda_ops graph.layout \
      units.runtime}; do
      local cmd=("$BIN/$t")
      [[ $t == graph.* ]] && cmd=("$BIN/test_cuda_graph" "${t#graph.}")
      [[ $t == units.* ]] && cmd=("$BIN/test_cuda_units" "--source-file=*test_cuda_${t#units.}.cu")
      run "sanitizer.$tool.$t" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "${cmd[@]}"
    done
    [ "${SANITIZE_MNIST:-1}" = 0 ] && continue
    run "sanitizer.$tool.mnist_gpu" 300 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$BIN/mnist_cuda" --data-dir "$DATA" --train-limit 256 --epochs 1 --batch-size 64 \
      --log-every 4 --threads 2 --placement gpu
  done
}
do_bench() {
  run gpu_bench 400 "$BIN/gpu_bench" "$OUT/gpu_bench.json"
  cp "$OUT/gpu_bench.log" "$OUT/gpu_bench.txt"
  CUDA_LAUNCH_BLOCKING=1 run gpu_profile 120 "$BIN/gpu_bench" --profile
  cp "$OUT/gpu_profile.log" "$OUT/gpu_profile.txt"
}
do_baselines() {
  XLA_PYTHON_CLIENT_PREALLOCATE=false run gpu_baselines 500 python3 bench/gpu_baselines.py \
    --out "$OUT/gpu_baselines.json"
}
do_mainjob() { # MAINJOB_PRECISIONS: the --precision values, default float32 (float16 is the
  # g++ build's, on the CPU: mnist_cuda rejects it)
  for p in ${MAINJOB_PLACEMENTS:-gpu variables-on-cpu}; do
    for q in ${MAINJOB_PRECISIONS:-float32}; do
      run "mainjob.$p.$q" 590 "$BIN/mnist_cuda" --data-dir "$DATA" --epochs 10 --threads 8 \
        --placement "$p" --precision "$q"
    done
  done
}
for step in $what; do
  case $step in
  tests | examples | sanitize | bench | baselines | mainjob) "do_$step" ;;
  *) summary+=("unknown step '$step'") ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
# At most 8 files come back from the machine: the logs travel as one archive.
(cd "$OUT" && tar czf logs.tar.gz --remove-files ./*.log 2>/dev/null)
