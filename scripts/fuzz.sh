#!/usr/bin/env bash
# Builds typeflow's libFuzzer targets (fuzz/*.cpp) with clang++-19 under ASan + UBSan and runs
# each from its seed corpus (fuzz/corpus/<target>) for a bounded time.
# Usage: bash scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]
#   a longer run:  bash scripts/fuzz.sh 3600
# Findings (crash-*, leak-*, timeout-* files) are written to build-fuzz/findings/<target>/, and
# the script fails. New inputs the fuzzer finds go to build-fuzz/corpus/<target>/, not to the
# committed seeds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=(idx safetensors safetensors_header tfrecord)
fi
CXX="${TYPEFLOW_FUZZ_CXX:-clang++-19}"
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "fuzz: $CXX not found (Debian: clang-19 and libclang-rt-19-dev)" >&2
  exit 1
fi
OUT="${TYPEFLOW_FUZZ_DIR:-build-fuzz}"
mkdir -p "$OUT"

status=0
for t in "${TARGETS[@]}"; do
  exe="$OUT/fuzz_$t"
  if [[ ! -x "$exe" || "fuzz/fuzz_$t.cpp" -nt "$exe" || -n "$(find include/typeflow/io include/typeflow/core fuzz -newer "$exe" -name '*.hpp' 2>/dev/null | head -1)" ]]; then
    echo "fuzz: building $exe"
    "$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
      -DTYPEFLOW_HAS_ZLIB=1 -Iinclude "fuzz/fuzz_$t.cpp" -o "$exe" -lz
  fi
  mkdir -p "$OUT/corpus/$t" "$OUT/findings/$t"
  echo "fuzz: running $t for $SECONDS_PER_TARGET s"
  log="$OUT/fuzz_$t.log"
  # -rss_limit_mb: a reader must never allocate what a corrupt length claims.
  if ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
     "$exe" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$OUT/findings/$t/" -print_final_stats=1 \
       "$OUT/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    runs="$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')"
    echo "fuzz: $t: no findings in $runs executions"
  else
    echo "fuzz: $t FAILED (see $log and $OUT/findings/$t/):" >&2
    tail -40 "$log" >&2
    status=1
  fi
done
exit $status
