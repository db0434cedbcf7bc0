#!/usr/bin/env bash
# Runs what needs a GPU on a lent GPU machine (issue 20), from binaries built elsewhere with
# scripts/gpu_pack.sh (the machine has the CUDA toolkit but no Debian packages):
#   bash scripts/gpu_session.sh [tests] [examples] [sanitize] [bench] [baselines] [mainjob]
# With no argument: tests, examples and bench. Logs go to $OUT (or ./gpu-out), a summary to
# stdout. Reads .gpu/bin (the binaries) and .gpu/data (Fashion-MNIST's four .gz files).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BIN=$PWD/.gpu/bin
DATA=$PWD/.gpu/data
what=${*:-tests examples bench}
# (sanitize, baselines and mainjob take minutes each: name them. MAINJOB_PLACEMENTS picks the
# main job's placements, default both.)
has() { [[ " $what " == *" $1 "* ]]; }

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
run() { # name, timeout, command...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-40s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" \
    "$(grep -E 'FAIL|skipped|test cases|accuracy' "$OUT/$name.log" | tail -1 | cut -c1-90)")")
}

if has tests; then
  for t in "$BIN"/test_cuda_*; do
    run "$(basename "$t")" 300 "$t"
  done
fi
small=(--data-dir "$DATA" --train-limit 512 --epochs 1 --batch-size 64 --log-every 4 --threads 2)
if has examples; then
  for p in gpu variables-on-cpu; do # (cpu: the CI runs example.mnist_cuda.cpu)
    run "mnist_cuda.$p" 300 "$BIN/mnist_cuda" "${small[@]}" --placement "$p"
  done
  run mnist_cuda.replicas2 120 "$BIN/mnist_cuda" "${small[@]}" --placement variables-on-cpu \
    --replicas 2
fi
if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    for t in test_cuda_fused test_cuda_session test_cuda_ops test_cuda_layout test_cuda_runtime; do
      run "sanitizer.$tool.$t" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BIN/$t"
    done
  done
  run sanitizer.memcheck.mnist_gpu 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$BIN/mnist_cuda" --data-dir "$DATA" --train-limit 256 --epochs 1 --batch-size 64 \
    --log-every 4 --threads 2 --placement gpu
fi
if has bench; then
  run gpu_bench 400 "$BIN/gpu_bench" "$OUT/gpu_bench.json"
  cp "$OUT/gpu_bench.log" "$OUT/gpu_bench.txt"
  CUDA_LAUNCH_BLOCKING=1 run gpu_profile 120 "$BIN/gpu_bench" --profile
  cp "$OUT/gpu_profile.log" "$OUT/gpu_profile.txt"
fi
if has baselines; then
  XLA_PYTHON_CLIENT_PREALLOCATE=false run gpu_baselines 500 python3 bench/gpu_baselines.py \
    --out "$OUT/gpu_baselines.json"
fi
if has mainjob; then
  for p in ${MAINJOB_PLACEMENTS:-gpu variables-on-cpu}; do
    run "mainjob.$p" 590 "$BIN/mnist_cuda" --data-dir "$DATA" --epochs 10 --threads 8 \
      --placement "$p"
  done
fi
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
# At most 8 files come back from the machine: the logs travel as one archive.
(cd "$OUT" && tar czf logs.tar.gz --remove-files ./*.log 2>/dev/null)
