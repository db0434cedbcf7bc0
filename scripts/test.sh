#!/usr/bin/env bash
# typeflow's full check: deps, configure (Release, -Werror, benchmarks built too), build,
# format check, include-direction check, ctest; then the sanitizer runs (scripts/sanitize.sh:
# ASan + UBSan and TSan builds of the tests that cover the executor, the readers, checkpoints
# and the threaded parts) and every fuzz target for TYPEFLOW_FUZZ_SECONDS (default 10) each
# (scripts/fuzz.sh). TYPEFLOW_SKIP_SANITIZE=1 leaves those two out.
# Usage: bash scripts/test.sh        (from any directory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${TYPEFLOW_BUILD_DIR:-build}"
JOBS="${TYPEFLOW_JOBS:-2}"

# Each phase's wall time, printed as it ends and again at the end (CI time is a budget).
timings=()
phase_start=$SECONDS
phase_done() {
  local took=$((SECONDS - phase_start))
  timings+=("$(printf '%-10s %5d s' "$1" "$took")")
  echo "test.sh: $1 took $took s"
  phase_start=$SECONDS
}

bash scripts/install-deps.sh
phase_done deps

# The benchmarks build at -O1 here (TYPEFLOW_BENCH_OPT): CI proves they compile, bench/run builds
# its own at -O3 and times them.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTYPEFLOW_WERROR=ON -DTYPEFLOW_BUILD_BENCH=ON \
  -DTYPEFLOW_BUILD_TESTS=ON -DTYPEFLOW_BENCH_OPT=-O1 # (scripts/mnist.sh may have configured this directory without them)
cmake --build "$BUILD_DIR" -j"$JOBS"
phase_done build

# Formatting: every .hpp/.cpp/.cu/.cuh under include test examples bench that git
# tracks (or would track: untracked but not ignored).
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    files+=("$f")
  done < <(git ls-files -z --cached --others --exclude-standard -- include test examples bench fuzz |
             grep -zE '\.(hpp|cpp|cu|cuh)$' || true)
else
  while IFS= read -r -d '' f; do
    files+=("$f")
  done < <(find include test examples bench fuzz -type f \
             \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 2>/dev/null || true)
fi
existing=()
for f in "${files[@]+"${files[@]}"}"; do
  [[ -f "$f" ]] && existing+=("$f")
done
if [[ ${#existing[@]} -gt 0 ]]; then
  echo "clang-format: checking ${#existing[@]} files"
  clang-format --dry-run --Werror "${existing[@]}"
else
  echo "clang-format: no source files to check"
fi

# Include directions (docs/architecture.md): scripts/layers.txt, its exceptions only shrinking.
python3 scripts/check_layers.py
phase_done format

ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS"
phase_done ctest

if [[ "${TYPEFLOW_SKIP_SANITIZE:-0}" != 1 ]]; then
  bash scripts/sanitize.sh
  phase_done sanitize
  bash scripts/fuzz.sh "${TYPEFLOW_FUZZ_SECONDS:-10}"
  phase_done fuzz
fi
echo "test.sh: wall time by phase"
printf '  %s\n' "${timings[@]}"
