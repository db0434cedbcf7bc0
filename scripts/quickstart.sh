#!/usr/bin/env bash
# Builds and runs the quickstart example.
# Usage: bash scripts/quickstart.sh  (from any directory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${TYPEFLOW_BUILD_DIR:-build}"
JOBS="${TYPEFLOW_JOBS:-2}"

bash scripts/install-deps.sh

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j"$JOBS" --target quickstart
"$BUILD_DIR/examples/quickstart" "$@"
