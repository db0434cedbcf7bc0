#!/usr/bin/env bash
# Installs typeflow's dependencies with apt-get, but only if some are missing.
#   bash scripts/install-deps.sh          everything the tests, benchmarks and tools use
#   bash scripts/install-deps.sh --main   only what the main job (scripts/mnist.sh) needs to build
#                                         examples/mnist and train on Fashion-MNIST: no test
#                                         framework, MPI, clang or graphviz (clang-19's
#                                         libomp-19-dev replaces libomp-dev on Debian 12)
set -euo pipefail

MAIN_PACKAGES=(cmake g++ make libboost-dev zlib1g-dev dataset-fashion-mnist libxsimd-dev nlohmann-json3-dev
               libcli11-dev libdnnl-dev libopenblas-dev)
PACKAGES=("${MAIN_PACKAGES[@]}" doctest-dev libbenchmark-dev clang-format libopenmpi-dev openmpi-bin libeigen3-dev
          python3 clang-19 libomp-19-dev libclang-rt-19-dev graphviz doxygen fortunes
          python3-numpy python3-torch)
if [[ "${1:-}" == "--main" ]]; then
  PACKAGES=("${MAIN_PACKAGES[@]}")
elif [[ $# -gt 0 ]]; then
  echo "install-deps: unknown argument '$1' (expected nothing or --main)" >&2
  exit 2
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no dpkg/apt-get on this system; install these yourself: ${PACKAGES[*]}" >&2
  exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all dependencies present"
  exit 0
fi

echo "install-deps: installing missing packages: ${missing[*]}"
SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: not root and no sudo; cannot install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends "${PACKAGES[@]}"
