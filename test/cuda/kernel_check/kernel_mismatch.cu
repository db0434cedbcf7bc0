// A translation unit whose two nvcc passes disagree on purpose: the host pass launches k<2>,
// which the device pass (__CUDA_ARCH__ defined) never instantiates. It compiles and links, and
// would fail only at run time; scripts/check_kernels.py must report it
// (cuda.kernel_agreement.detects_mismatch).
template <int K>
__global__ void k(int* p) {
  p[0] = K;
}
template <int K>
void launch(int* p) {
  k<K><<<1, 1>>>(p);
}
void run(int* p) {
#ifdef __CUDA_ARCH__
  launch<1>(p);
#else
  launch<2>(p);
#endif
}
