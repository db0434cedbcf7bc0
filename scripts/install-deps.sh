#!/usr/bin/env bash
# Installs typeflow's build/test dependencies with apt-get, but only if some are missing.
set -euo pipefail

PACKAGES=(cmake g++ make libboost-dev doctest-dev libopenblas-dev libbenchmark-dev zlib1g-dev clang-format dataset-fashion-mnist
          libopenmpi-dev openmpi-bin libxsimd-dev libeigen3-dev nlohmann-json3-dev libcli11-dev python3 libdnnl-dev
          clang-19 libomp-19-dev libclang-rt-19-dev graphviz)

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
