#!/usr/bin/env bash
# Builds typeflow's libFuzzer targets (fuzz/*.cpp) with clang++-19 under ASan + UBSan and runs
# each from its seed corpus (fuzz/corpus/<target>) for a bounded time, TYPEFLOW_JOBS (2) at a time.
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

JOBS="${TYPEFLOW_JOBS:-2}"

# One target: build it (when its sources are newer), then run it. Targets run JOBS at a time
# (each fuzzer is one process on one core); a target's report is printed whole when it ends.
fuzz_one() {
  local t="$1" exe="$OUT/fuzz_$1" log="$OUT/fuzz_$1.log" report=""
  if [[ ! -x "$exe" || "fuzz/fuzz_$t.cpp" -nt "$exe" || -n "$(find include/typeflow/io include/typeflow/core fuzz -newer "$exe" -name '*.hpp' 2>/dev/null | head -1)" ]]; then
    echo "fuzz: building $exe"
    "$CXX" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
      -DTYPEFLOW_HAS_ZLIB=1 -Iinclude "fuzz/fuzz_$t.cpp" -o "$exe" -lz || return 1
  fi
  mkdir -p "$OUT/corpus/$t" "$OUT/findings/$t"
  echo "fuzz: running $t for $SECONDS_PER_TARGET s"
  # -rss_limit_mb: a reader must never allocate what a corrupt length claims.
  if ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
     "$exe" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$OUT/findings/$t/" -print_final_stats=1 \
       "$OUT/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    local runs
    runs="$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')"
    echo "fuzz: $t: no findings in $runs executions"
  else
    report="$(printf 'fuzz: %s FAILED (see %s and %s/findings/%s/):\n' "$t" "$log" "$OUT" "$t"; tail -40 "$log")"
    echo "$report" >&2
    return 1
  fi
}
export -f fuzz_one
export OUT CXX SECONDS_PER_TARGET

# xargs exits nonzero when any target failed (to build, or with a finding).
printf '%s\n' "${TARGETS[@]}" | xargs -P "$JOBS" -I{} bash -c 'fuzz_one "$1"' _ {}
