#!/usr/bin/env bash
# Packs what scripts/gpu_session.sh runs on a GPU machine into .gpu/ (git-ignored): the CUDA
# tests, the CUDA main job and the GPU benchmark built for sm_90 without the Debian-only CPU
# libraries (portable GEMM, no oneDNN, no -march=native), stripped; and Fashion-MNIST.
#   bash scripts/gpu_pack.sh [build-dir]   (default build-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTYPEFLOW_USE_BLAS=OFF \
    -DTYPEFLOW_USE_ONEDNN=OFF -DTYPEFLOW_NATIVE=OFF -DTYPEFLOW_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTYPEFLOW_BUILD_BENCH=ON
fi
targets=(test_cuda_graph test_cuda_ops test_cuda_units mnist_cuda gpu_bench gpu_cudnn_probe)
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
mkdir -p .gpu/bin .gpu/data
for t in "${targets[@]}"; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  cp "$f" .gpu/bin/ && strip --strip-debug .gpu/bin/"$t"
done
cp /usr/share/datasets/fashion-mnist/*.gz .gpu/data/
du -sh .gpu
