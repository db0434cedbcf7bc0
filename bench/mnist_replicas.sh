#!/usr/bin/env bash
# The README's replication figure: examples/mnist with 1 and 2 CPU towers, alternating, in one
# run; prints each run's mean of the per-step examples/sec (steps 0..55, batch 128, 2 threads)
# and the ratio of the 2-tower mean to the 1-tower mean.
# Usage: bash bench/mnist_replicas.sh [build dir] (default: build; mnist must be built)
set -euo pipefail
EXE="${1:-build}/examples/mnist"
declare -A sum=([1]=0 [2]=0)
for run in 1 2; do
  for r in 1 2; do
    mean=$("$EXE" --train-limit 7680 --epochs 1 --threads 2 --replicas "$r" --log-every 5 |
      awk '/step [0-9]+, loss/ {gsub(/\(/, "", $8); s += $8; n++} END {printf "%.1f", s / n}')
    echo "replicas $r, run $run: $mean examples/sec"
    sum[$r]=$(awk -v a="${sum[$r]}" -v b="$mean" 'BEGIN {print a + b}')
  done
done
awk -v a="${sum[1]}" -v b="${sum[2]}" 'BEGIN {printf "ratio 2 towers / 1: %.2f\n", b / a}'
