#!/usr/bin/env bash
# Installs the CPU peers of the training-step comparison, each into its own virtual environment
# under .deps/ (git-ignored), from PyPI with pinned versions:
#   .deps/venv-torch  torch (PyTorch eager and torch.compile)
#   .deps/venv-jax    jax[cpu] (jax.jit)
#   .deps/venv-tf     tensorflow-cpu (tf.function, with and without jit_compile=True)
# Usage: bench/peers/setup.sh [torch] [jax] [tf]   (default: all three)
# An environment whose pinned version already imports is left alone (a `+cpu`-style local
# version suffix is accepted). PyPI's torch wheel for
# Linux pulls in NVIDIA's CUDA libraries (several GB); the scripts use the CPU only.
# bench/run calls this only when given --setup-peers. PYTHON picks the interpreter
# (default /usr/bin/python3, Debian's; python3-venv is installed with apt-get if missing).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEPS="$ROOT/.deps"
PYTHON=${PYTHON:-/usr/bin/python3}

declare -A PINS=(
  [torch]="torch==2.15.0 numpy==2.4.6"
  [jax]="jax[cpu]==0.10.2"
  [tf]="tensorflow-cpu==2.21.0"
)
declare -A MODULE=([torch]=torch [jax]=jax [tf]=tensorflow)

peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=(torch jax tf)

if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "[peers] installing python3-venv" >&2
  apt-get update -q && apt-get install -y -q python3-venv
fi

mkdir -p "$DEPS"
for peer in "${peers[@]}"; do
  pin=${PINS[$peer]:?"unknown peer '$peer' (torch, jax or tf)"}
  venv="$DEPS/venv-$peer"
  want=${pin%% *}
  want=${want##*==}
  version="import ${MODULE[$peer]} as m; print(m.__version__)"
  if [[ $("$venv/bin/python" -c "$version" 2>/dev/null) == "$want"* ]]; then
    echo "[peers] $peer $want already in $venv" >&2
    continue
  fi
  echo "[peers] installing $pin into $venv" >&2
  "$PYTHON" -m venv "$venv"
  nice -n 10 "$venv/bin/python" -m pip install -q --upgrade pip
  nice -n 10 "$venv/bin/python" -m pip install -q $pin
  echo "[peers] $peer $("$venv/bin/python" -c "$version")" >&2
done
