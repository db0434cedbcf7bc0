#!/usr/bin/env bash
# The main job: installs what is missing (Fashion-MNIST included, from Debian's
# dataset-fashion-mnist), builds examples/mnist and trains the seed's model on Fashion-MNIST.
# Usage: bash scripts/mnist.sh [flags for examples/mnist, e.g. --epochs 2 --threads 2]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${TYPEFLOW_BUILD_DIR:-build}"
JOBS="${TYPEFLOW_JOBS:-2}"

# Only what the main job needs (scripts/test.sh installs the rest), and no test targets.
bash scripts/install-deps.sh --main

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTYPEFLOW_BUILD_TESTS=OFF
cmake --build "$BUILD_DIR" -j"$JOBS" --target mnist
"$BUILD_DIR/examples/mnist" --data-dir /usr/share/datasets/fashion-mnist \
  --checkpoint-dir "$BUILD_DIR/mnist-checkpoint" "$@"
